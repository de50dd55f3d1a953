"""The chaos sale's buyers decide whether to send a request again from the answer alone
(loadtest/lib/chaoslab/buyers.py): its `retryable`, or, with no answer to go by (none came, or
one that is not JSON), a replay of the key. They sign in first, a token per user id kept for
the sale, a sign-in retried as an order is, and recorded as a request that is no order. A
scripted sale answers them: nothing waits."""

import asyncio
import json
import random
import unittest
from unittest import mock

from loadtest.lib.chaoslab import buyers, checker, cluster, report
from loadtest.lib.chaoslab.progress import Progress


def answer(code, retryable=None, retry_after=None, **body):
    """A history event with HTTP status `code`: an error's body if `retryable` is given."""
    if retryable is not None:
        body.update(error="some_code", message="…", retryable=retryable)
    return {"status": code, "body": json.dumps(body), "retry_after": retry_after}


NO_ANSWER = {"error": "timeout"}
NOT_JSON = {"status": 502, "body": "<html>Bad Gateway</html>", "retry_after": None}
PAID = answer(201, id="o1", status="paid")


class Decision(unittest.TestCase):
    def test_the_answer_says_whether_to_retry(self):
        self.assertTrue(buyers.should_retry(answer(503, True, "1")))
        self.assertTrue(buyers.should_retry(answer(409, True, "1")))
        self.assertFalse(buyers.should_retry(answer(503, False)))
        self.assertFalse(buyers.should_retry(answer(409, False)))
        self.assertFalse(buyers.should_retry(PAID))

    def test_with_no_answer_to_go_by_a_key_is_replayed(self):
        self.assertTrue(buyers.should_retry(NO_ANSWER))
        self.assertTrue(buyers.should_retry(NOT_JSON))

    def test_the_wait_is_retry_after_up_to_two_seconds(self):
        self.assertEqual(buyers.retry_wait(answer(503, True, "1"), 0.2), 1.0)
        self.assertEqual(buyers.retry_wait(answer(503, True, "30"), 0.2), 2.0)
        self.assertEqual(buyers.retry_wait(NO_ANSWER, 0.2), 0.2)
        self.assertEqual(buyers.retry_wait(answer(503, True, "soon"), 0.5), 0.5)


class FakeHistory:
    def now(self):
        return 0.0


class ScriptedSale(buyers.Sale):
    """Answers each request with the next of `answers`, and counts them."""

    def __init__(self, answers):
        super().__init__(FakeHistory(), [1], [], "token", seed=1, client_timeout=1)
        self.answers = list(answers)
        self.sent = 0

    async def send(self, *args, **kwargs):
        self.sent += 1
        return self.answers.pop(0)


class UntilFinal(unittest.TestCase):
    def sale(self, *answers):
        sale = ScriptedSale(answers)
        # No pause between tries: what is tested is whether there is a next one.
        with mock.patch.object(buyers, "retry_wait", return_value=0.0):
            final = asyncio.run(sale.until_final("buyer-1", "order", "POST", "/orders", {},
                                                 "key-1", random.Random(1)))
        return sale.sent, final

    def test_a_retryable_answer_is_sent_again(self):
        self.assertEqual(self.sale(answer(503, True, "1"), answer(429, True, "1"), PAID), (3, PAID))

    def test_an_answer_that_is_not_retryable_is_final(self):
        final = answer(503, False)
        self.assertEqual(self.sale(final, PAID), (1, final))

    def test_no_answer_and_an_answer_that_is_not_json_are_replayed(self):
        self.assertEqual(self.sale(NO_ANSWER, NOT_JSON, PAID), (3, PAID))


def signed_in(name, expires_in=3600):
    """The demo issuer's answer to a sign-in of `name`."""
    return answer(201, token=f"tok.{name}", buyer=name, token_type="Bearer",
                  expires_in=expires_in)


class Clock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t


class SigningSale(buyers.Sale):
    """Answers each request with the next of `answers` and keeps what was sent: (op, path,
    the Authorization header or None)."""

    def __init__(self, answers, buyer_auth="demo"):
        super().__init__(Clock(), [1], [], "admin", seed=1, client_timeout=1,
                         buyer_auth=buyer_auth)
        self.answers = list(answers)
        self.calls = []

    async def send(self, who, op, method, path, body=None, key=None, rng=None, admin=False,
                   auth=None):
        self.calls.append((op, path, (auth or {}).get("Authorization")))
        return self.answers.pop(0)


def run(coroutine):
    with mock.patch.object(buyers, "retry_wait", return_value=0.0):
        return asyncio.run(coroutine)


class SigningIn(unittest.TestCase):
    def test_a_user_signs_in_once_and_sends_its_token_with_every_try(self):
        sale = SigningSale([signed_in("u1"), answer(503, True, "1"), PAID, PAID])
        rng = random.Random(1)
        final = run(sale.until_final("buyer-1", "order", "POST", "/orders", {"user_id": "u1"},
                                     "k1", rng, buyer="u1"))
        self.assertEqual(final, PAID)
        again = run(sale.until_final("buyer-1", "pay", "POST", "/orders/o1/pay", None, None,
                                     rng, buyer="u1"))
        self.assertEqual(again, PAID)
        self.assertEqual(sale.calls, [("session", "/api/session", None),
                                      ("order", "/orders", "Bearer tok.u1"),
                                      ("order", "/orders", "Bearer tok.u1"),
                                      ("pay", "/orders/o1/pay", "Bearer tok.u1")])

    def test_a_sign_in_is_retried_as_an_order_is(self):
        sale = SigningSale([NO_ANSWER, answer(503, True, "1"), NOT_JSON, signed_in("u1")])
        auth = run(sale.credentials("buyer-1", "u1", random.Random(1)))
        self.assertEqual(auth, {"Authorization": "Bearer tok.u1"})
        self.assertEqual(len(sale.calls), 4)

    def test_a_final_refusal_breaks_the_run(self):
        sale = SigningSale([answer(403, False)])
        with self.assertRaises(RuntimeError) as caught:
            run(sale.credentials("buyer-1", "u1", random.Random(1)))
        self.assertIn("u1 could not sign in: 403", str(caught.exception))

    def test_after_the_hard_end_no_request_goes_without_its_token(self):
        sale = SigningSale([answer(503, True, "1")])
        sale.hard_end = -1.0
        final = run(sale.until_final("buyer-1", "order", "POST", "/orders", {}, "k1",
                                     random.Random(1), buyer="u1"))
        self.assertIsNone(final)
        self.assertEqual([c[0] for c in sale.calls], ["session"])

    def test_a_token_is_signed_in_again_before_it_expires(self):
        sale = SigningSale([signed_in("u1", expires_in=600), signed_in("u1")])
        rng = random.Random(1)
        run(sale.credentials("buyer-1", "u1", rng))
        sale.history.t = 600 - buyers.RENEW_S - 1
        run(sale.credentials("buyer-1", "u1", rng))
        self.assertEqual(len(sale.calls), 1)
        sale.history.t = 600 - buyers.RENEW_S + 1
        run(sale.credentials("buyer-1", "u1", rng))
        self.assertEqual(len(sale.calls), 2)

    def test_in_open_mode_nobody_signs_in(self):
        sale = SigningSale([PAID], buyer_auth="open")
        run(sale.until_final("buyer-1", "order", "POST", "/orders", {"user_id": "u1"}, "k1",
                             random.Random(1), buyer="u1"))
        self.assertEqual(sale.calls, [("order", "/orders", None)])

    def test_the_history_keeps_no_token(self):
        kept = buyers.redacted(signed_in("u1")["body"])
        self.assertEqual(json.loads(kept)["token"], "(redacted)")
        self.assertEqual(json.loads(kept)["buyer"], "u1")
        self.assertEqual(buyers.redacted("<html>"), "<html>")

    def test_the_cluster_signs_in_unless_told_otherwise(self):
        self.assertEqual(cluster.buyer_auth([]), ("demo", ["--buyer-auth", "demo"]))
        self.assertEqual(cluster.buyer_auth(["--max-unpaid-share=0.9", "--buyer-auth=open"]),
                         ("open", []))


SIGN_IN = dict(signed_in("u1"), op="session", who="buyer-1", key=None, method="POST",
               path="/api/session", req={"name": "u1"}, t0=0.0, t1=0.1)
ORDER = dict(PAID, op="order", who="buyer-1", key="k1", method="POST", path="/orders",
             req={"product_id": 1, "user_id": "u1"}, t0=0.2, t1=0.3)


class SignInsAreNoOrders(unittest.TestCase):
    def test_the_report_and_the_progress_count_orders_alone(self):
        history = [SIGN_IN, ORDER, dict(SIGN_IN, status=503, body=answer(503, True)["body"])]
        self.assertEqual([report.buying(e) for e in history], [False, True, False])
        self.assertEqual(sum(report.per_second(history, 10.0)[0].values()), 1)
        progress = Progress(history, lambda: 10.0, lambda: [], print)
        self.assertEqual(progress.line(), "at 10 s: 1 answers (201×1 503×0), 0 unanswered, "
                                          "2 sign-ins; striking: none")

    def test_a_sign_ins_answer_is_checked_as_every_answer_is(self):
        bare = dict(SIGN_IN, status=503, body=json.dumps({"error": "x", "message": "y"}),
                    retry_after="1")
        verdicts, _ = checker.check([SIGN_IN, ORDER, bare], EmptyBooks())
        answers = next(v for v in verdicts if v["name"] == "answers")
        self.assertEqual(answers["count"], 1, answers["examples"])
        self.assertIs(next(v for v in verdicts if v["name"] == "keys_answered")["valid"], True)


class EmptyBooks:
    """A cluster whose database and ledger hold nothing: only the history is checked."""

    ledger_charges = []

    def query(self, sql):
        return []


class AnswersChecked(unittest.TestCase):
    def verdict(self, *answers):
        history = [dict(a, op="order", who="buyer-1", key=None, method="POST", path="/orders",
                        t0=0.0, t1=0.1) for a in answers]
        verdicts, _ = checker.check(history, EmptyBooks())
        return next(v for v in verdicts if v["name"] == "answers")

    def test_retry_after_comes_exactly_with_retryable(self):
        self.assertIs(self.verdict(answer(503, True, "1"), answer(409, False), PAID)["valid"], True)
        late = self.verdict(answer(503, True), answer(409, False, "1"))
        self.assertEqual(late["count"], 2, late["examples"])

    def test_an_error_without_retryable_is_a_broken_answer(self):
        bare = {"status": 503, "body": json.dumps({"error": "x", "message": "y"}),
                "retry_after": "1"}
        self.assertIs(self.verdict(bare)["valid"], False)


if __name__ == "__main__":
    unittest.main()
