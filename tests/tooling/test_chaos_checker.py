"""The chaos sale's checker (loadtest/lib/chaoslab/checker.py): one function per invariant,
composed as Jepsen's checker/compose is. Each invariant is broken here by a small history
(and the rows PostgreSQL and the ledger would hold); an invariant whose check throws is
`unknown` with its error while the others still run; and the sale's verdict is False if any
invariant is broken, "unknown" if none is but one could not be checked, True otherwise."""

import json
import unittest
from collections import Counter

from loadtest.lib.chaoslab import checker, report
from loadtest.lib.chaoslab.checker import UNKNOWN, Invariant
from loadtest.lib.common.pg import PsqlError

PRODUCT = {"id": 1, "stock": 8, "stocked_total": 10, "per_user_limit": 2}


class Books:
    """A cluster as the checker reads it: products, orders, pending intents, key rows, the
    ledger's charges; `broken` names a table whose query fails."""

    def __init__(self, products=(PRODUCT,), orders=(), intents=(), keys=(), charges=(),
                 broken=None):
        self.tables = {"FROM products": list(products), "FROM orders": list(orders),
                       "FROM payments": list(intents), "FROM idempotency_keys": list(keys)}
        self.ledger_charges = list(charges)
        self.broken = broken
        self.asked = Counter()

    def query(self, sql):
        table = next(table for table in self.tables if table in sql)
        self.asked[table] += 1
        if self.broken and table == f"FROM {self.broken}":
            raise PsqlError("psql failed: connection refused")
        return self.tables[table]


def order(oid, status="paid", user="u1", quantity=1, amount=100, overdue=False):
    return {"id": oid, "product_id": 1, "user_id": user, "quantity": quantity,
            "amount_cents": amount, "status": status, "overdue": overdue}


def charge(oid, amount=100, status="succeeded"):
    return {"key": f"seckill-{oid}", "status": status, "amount_cents": amount}


def answer(code, key="k1", op="order", t=0.0, retry_after=None, **body):
    """A history event: the answer `code` with `body` to buyer-1's order under `key`."""
    return {"op": op, "who": "buyer-1", "key": key, "method": "POST", "path": "/orders",
            "req": {"product_id": 1, "user_id": "u1"}, "t0": t, "t1": t + 0.1,
            "status": code, "body": json.dumps(body), "retry_after": retry_after}


def refusal(code, error, retryable, **kw):
    return answer(code, retry_after="1" if retryable else None, error=error, message="…",
                  retryable=retryable, **kw)


PAID = answer(201, id="o1", status="paid")
# A sale where every promise is kept: one order, paid once, answered, charged once.
KEPT = ([PAID], dict(orders=[order("o1")], charges=[charge("o1")],
                     keys=[{"key": "k1", "order_id": "o1"}],
                     products=[dict(PRODUCT, stock=9)]))


def results(history, books):
    verdicts, _ = checker.check(history, books)
    return {v["name"]: v for v in verdicts}


class EachInvariant(unittest.TestCase):
    def broken(self, name, history, books, example):
        """Invariant `name` is broken on this history and these books, and says `example`."""
        found = results(history, books)[name]
        self.assertIs(found["valid"], False, found)
        self.assertTrue(any(example in x for x in found["examples"]), found["examples"])
        return found

    def test_a_kept_sale_keeps_every_promise(self):
        found = results(KEPT[0], Books(**KEPT[1]))
        self.assertEqual({n: v["valid"] for n, v in found.items()},
                         {inv.name: True for inv in checker.INVARIANTS})

    def test_stock(self):
        self.broken("stock", [], Books(products=[dict(PRODUCT, stock=0, stocked_total=1)],
                                       orders=[order("o1"), order("o2", user="u2")]),
                    "product 1: sold 2 > stocked 1")

    def test_paid_answers(self):
        self.broken("paid_answers", [PAID], Books(orders=[order("o1", "reserved")]),
                    "order o1 is reserved")
        self.broken("paid_answers", [], Books(orders=[order("o1")], charges=[charge("o1", 99)]),
                    "paid order o1: 1 succeeded charges [99] for 100")

    def test_charges(self):
        self.broken("charges", [], Books(charges=[charge("o9")]), "charge seckill-o9 (100)")

    def test_settled(self):
        found = self.broken("settled", [], Books(
            orders=[order("o1", "paying"), order("o2", "reserved", overdue=True)],
            intents=[{"order_id": "o3", "key": "i3", "outcome": None}]), "order o1 left paying")
        self.assertEqual(found["count"], 3)

    def test_per_user(self):
        self.broken("per_user", [], Books(orders=[order("o1", quantity=2), order("o2")]),
                    "u1 holds 3 of product 1 (limit 2)")

    def test_keys_a_replay_answered_otherwise(self):
        later = refusal(409, "too_many_unpaid", False, t=1.0)
        self.broken("keys", [PAID, later], Books(orders=[order("o1")], charges=[charge("o1")]),
                    "key k1: first 201")

    def test_keys_two_orders_for_one_key(self):
        again = answer(201, t=1.0, id="o2", status="paid")
        self.broken("keys", [PAID, again], Books(orders=[order("o1"), order("o2")]),
                    "key k1: 2 orders took stock: ['o1', 'o2']")

    def test_answers(self):
        self.broken("answers", [answer(500, error="boom", message="…", retryable=False)],
                    Books(), "500 at t=0.0")

    def test_keys_answered(self):
        self.broken("keys_answered", [refusal(503, "busy", True), refusal(503, "busy", True)],
                    Books(), "key k1 (buyer-1): last answer 503")

    def test_told_failed_not_charged(self):
        self.broken("told_failed_not_charged", [refusal(409, "sold_out", False)],
                    Books(orders=[order("o1")], charges=[charge("o1")],
                          keys=[{"key": "k1", "order_id": "o1"}]),
                    "was told 409 sold_out, never the order")

    def test_lapse(self):
        history = [{"mark": "lapse", "t": 1.0, "product": 1, "n": 2, "bound_s": 10.0},
                   {"mark": "lapse_deadline", "t": 2.0, "lapsing": 1, "deadline": 5.0}]
        self.broken("lapse", history, Books(), "only 1 of 2 reservations made")


class Compose(unittest.TestCase):
    def test_a_check_that_throws_is_unknown_and_the_others_still_run(self):
        def throws(books):
            raise KeyError("stocked_total")
        found = checker.compose([Invariant("first", "kept", lambda books: []),
                                 Invariant("throws", "cannot tell", throws),
                                 Invariant("last", "broken", lambda books: ["one", "two"])],
                                checker.Books([], Books()))
        self.assertEqual([(r["name"], r["valid"]) for r in found],
                         [("first", True), ("throws", UNKNOWN), ("last", False)])
        self.assertIn("KeyError: 'stocked_total'", found[1]["error"])
        self.assertEqual((found[2]["count"], found[2]["examples"]), (2, ["one", "two"]))
        self.assertIs(checker.verdict(found), False)

    def test_a_failed_read_leaves_unknown_only_the_invariants_that_need_it(self):
        history, tables = KEPT
        books = Books(**tables, broken="orders")
        found = results(history, books)
        unknown = {n for n, v in found.items() if v["valid"] == UNKNOWN}
        self.assertEqual(unknown, {"stock", "paid_answers", "charges", "settled", "per_user",
                                   "keys", "told_failed_not_charged"})
        self.assertTrue(all(v["valid"] is True for n, v in found.items() if n not in unknown))
        self.assertIn("PsqlError: psql failed: connection refused", found["stock"]["error"])
        # Asked once: a PostgreSQL that does not answer costs one timeout, not seven.
        self.assertEqual(books.asked["FROM orders"], 1)
        self.assertEqual(checker.verdict(found.values()), UNKNOWN)

    def test_the_report_says_what_could_not_be_checked(self):
        history, tables = KEPT
        verdicts, figures = checker.check(history, Books(**tables, broken="orders"))
        self.assertEqual((figures["orders"], figures["paid"], figures["unheard"]), (None,) * 3)
        meta = {"label": "", "seed": 1, "quick": True, "kinds": [], "flags": [], "buyers": 1,
                "duration": 1, "heal": 1.0, "session_ms": 1, "request_ms": 1, "started": "t",
                "commit": "c"}
        text, valid, _, _ = report.markdown(meta, verdicts, figures, [], history, "x.svg")
        self.assertEqual(valid, UNKNOWN)
        self.assertTrue(text.startswith("# Chaos sale, seed 1: UNKNOWN\n"))
        self.assertIn("| stock | units sold never exceed the stock, and the books balance | "
                      "**unknown** |", text)
        self.assertIn("### stock: not checked", text)
        self.assertIn("? orders, ? paid;", text)
        stock = next(v for v in verdicts if v["name"] == "stock")
        self.assertTrue(report.said(stock).startswith("UNKNOWN stock: "), report.said(stock))


class Verdict(unittest.TestCase):
    def test_broken_over_unknown_over_kept(self):
        for valids, expected in (([], True), ([True, True], True),
                                 ([True, UNKNOWN], UNKNOWN), ([UNKNOWN, UNKNOWN], UNKNOWN),
                                 ([True, False], False), ([UNKNOWN, False, True], False)):
            with self.subTest(valids=valids):
                self.assertIs(checker.verdict([{"valid": v} for v in valids]), expected)


if __name__ == "__main__":
    unittest.main()
