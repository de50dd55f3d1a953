"""The checker: after the faults have healed and the sweep has had its window, it reads the
history, PostgreSQL and the provider's ledger, and fails on any broken promise.

One small function per invariant, each registered with its promise (`@invariant`), and
`compose` runs them all, as Jepsen's `checker/compose` does: an invariant whose check throws
(a query that failed, a row it did not expect) is `unknown`, with the error, and the others
still run. Each result's `valid` is True, False or "unknown"; the sale's (`verdict`) is False
if any invariant is broken, "unknown" if none is but one could not be checked, else True.
What the invariants read (`Books`) is read once, when one first asks for it: its rows, or the
error the read threw, which every invariant that asks for it gets (a PostgreSQL that does not
answer costs one timeout, not one per invariant)."""

import json
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from . import lapse
from .buyers import KEYLESS, should_retry
from .cluster import Cluster

# An invariant that could not be checked: neither kept nor broken.
UNKNOWN = "unknown"
# Each broken invariant's first examples, in the report.
EXAMPLES = 5

# Statuses of an order that took stock at some point (an expired or declined order gave its
# units back; `failed` and `sold_out` never had any).
TOOK_STOCK = ("reserved", "paying", "paid", "expired", "payment_failed")
# Statuses of an order that holds its units now.
HOLDS_STOCK = ("reserved", "paying", "paid")


def parse(raw: str | None) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def named_order(event: dict) -> str | None:
    """The order an answer to an order request names: a 2xx order's `id`, an error's
    `order_id`."""
    body = parse(event.get("body"))
    if not isinstance(body, dict) or not event["path"].startswith("/orders"):
        return None
    return body.get("order_id") or (body.get("id") if 200 <= event.get("status", 0) < 300 else None)


# Refusals decided before any work (at admission): they keep nothing for their key, whose
# replay is decided again (docs/api.md, "Which answers are kept for a key").
REFUSED_BEFORE_WORK = ("sold_out", "purchase_limit", "unknown_product", "unprocessable",
                       "invalid_request")


def refused_before_work(event: dict) -> bool:
    body = parse(event.get("body"))
    return (isinstance(body, dict) and 400 <= event.get("status", 0) < 500
            and body.get("error") in REFUSED_BEFORE_WORK and not named_order(event))


def told(events: list[dict]) -> str:
    """What a buyer heard, in short: the answers' statuses and codes, in order."""
    heard = [f"{e['status']} {(parse(e['body']) or {}).get('error', '')}".strip()
             for e in events if "status" in e]
    return ", ".join(heard[:4]) + (f" (+{len(heard) - 4} more)" if len(heard) > 4 else "")


def read_once(read: Callable[["Books"], Any]) -> property:
    """A property of Books read when an invariant first asks for it, and kept: its value, or
    the error the read threw, raised again for every invariant that asks (each is unknown)."""
    @wraps(read)
    def kept(books: "Books") -> Any:
        if read.__name__ not in books.reads:
            try:
                books.reads[read.__name__] = (read(books), None)
            except Exception as e:  # kept for every invariant that asks
                books.reads[read.__name__] = (None, e)
        value, error = books.reads[read.__name__]
        if error is not None:
            raise error
        return value
    return property(kept)


class Books:
    """What the invariants read: the history, and PostgreSQL's rows and the ledger's charges,
    each read once (`read_once`)."""

    def __init__(self, history: list[dict[str, Any]], cluster: Cluster):
        self.history = history
        self.cluster = cluster
        # What has been read: name → (value, None) or (None, the error the read threw).
        self.reads: dict[str, tuple[Any, Exception | None]] = {}
        # What an invariant found besides its verdict, for the report: `unheard`, `lapse`.
        self.found: dict[str, Any] = {}

    @read_once
    def answers(self) -> list[dict[str, Any]]:
        return [e for e in self.history if "op" in e]

    @read_once
    def by_key(self) -> dict[str, list[dict[str, Any]]]:
        by_key = defaultdict(list)
        for e in self.answers:
            if e.get("key"):
                by_key[e["key"]].append(e)
        return by_key

    @read_once
    def products(self) -> list[dict[str, Any]]:
        return self.cluster.query(
            "SELECT id, stock, stocked_total, per_user_limit FROM products ORDER BY id")

    @read_once
    def orders(self) -> list[dict[str, Any]]:
        return self.cluster.query(
            "SELECT id::text, product_id, user_id, quantity, amount_cents, status, expires_at < now() - interval '3 seconds' AS overdue FROM orders")

    @read_once
    def by_id(self) -> dict[str, dict[str, Any]]:
        return {o["id"]: o for o in self.orders}

    @read_once
    def intents(self) -> list[dict[str, Any]]:
        """Payment intents still pending."""
        return self.cluster.query(
            "SELECT order_id::text, key, outcome FROM payments WHERE outcome IS NULL")

    @read_once
    def succeeded(self) -> dict[str, list[dict[str, Any]]]:
        """The ledger's succeeded charges by their key (`seckill-ORDER_ID`)."""
        succeeded = defaultdict(list)
        for c in self.cluster.ledger_charges:
            if c["status"] == "succeeded":
                succeeded[c["key"]].append(c)
        return succeeded

    @read_once
    def key_of(self) -> dict[str, str]:
        """Each order's client key, from the key row linked to it."""
        return {r["order_id"]: r["key"] for r in self.cluster.query(
            # The stored key is scoped to its buyer (`buyer U+001F key`): the client's key is after it.
            "SELECT split_part(key, chr(31), 2) AS key, order_id::text FROM idempotency_keys WHERE order_id IS NOT NULL")}


@dataclass(frozen=True)
class Invariant:
    name: str
    promise: str
    # The broken promise's instances, one line each: none when it is kept.
    check: Callable[[Books], list[str]]


INVARIANTS: list[Invariant] = []


def invariant(name: str, promise: str) -> Callable:
    """Registers the function below as the check of invariant `name`, in report order."""
    def register(check: Callable[[Books], list[str]]) -> Callable[[Books], list[str]]:
        INVARIANTS.append(Invariant(name, promise, check))
        return check
    return register


@invariant("stock", "units sold never exceed the stock, and the books balance")
def stock(books: Books) -> list[str]:
    bad = []
    for p in books.products:
        sold = sum(o["quantity"] for o in books.orders
                   if o["product_id"] == p["id"] and o["status"] in HOLDS_STOCK)
        if sold > p["stocked_total"]:
            bad.append(f"product {p['id']}: sold {sold} > stocked {p['stocked_total']}")
        if p["stock"] + sold != p["stocked_total"]:
            bad.append(
                f"product {p['id']}: stock {p['stock']} + sold {sold} != stocked {p['stocked_total']}")
    return bad


@invariant("paid_answers", "every 201/200 `paid` answer is a paid order, and every paid order "
           "has exactly one succeeded charge of its amount")
def paid_answers(books: Books) -> list[str]:
    bad = []
    for e in books.answers:
        body = parse(e.get("body"))
        if e.get("status") in (200, 201) and isinstance(body, dict) and body.get("status") == "paid":
            row = books.by_id.get(body.get("id"))
            if row is None or row["status"] != "paid":
                bad.append(f"answered paid at t={e['t0']}, order {body.get('id')} is {row and row['status']}")
    for o in books.orders:
        if o["status"] != "paid":
            continue
        charges = books.succeeded.get(f"seckill-{o['id']}", [])
        if len(charges) != 1 or charges[0]["amount_cents"] != o["amount_cents"]:
            bad.append(
                f"paid order {o['id']}: {len(charges)} succeeded charges {[c['amount_cents'] for c in charges]} for {o['amount_cents']}")
    return bad


@invariant("charges", "every succeeded charge belongs to a paid order")
def charges(books: Books) -> list[str]:
    bad = []
    for key, charged in books.succeeded.items():
        row = books.by_id.get(key.removeprefix("seckill-"))
        if row is None or row["status"] != "paid":
            bad.append(f"charge {key} ({charged[0]['amount_cents']}): order is {row and row['status']}")
    return bad


@invariant("settled", "no order left created or paying, no payment intent pending, no "
           "reservation past its expiry")
def nothing_half_way(books: Books) -> list[str]:
    bad = []
    for o in books.orders:
        if o["status"] in ("created", "paying"):
            bad.append(f"order {o['id']} left {o['status']}")
        if o["status"] == "reserved" and o["overdue"]:
            bad.append(f"order {o['id']} still reserved past its expiry")
    bad += [f"payment intent {i['key']} of order {i['order_id']} still pending" for i in books.intents]
    return bad


@invariant("per_user", "no buyer over the per-user limit")
def per_user(books: Books) -> list[str]:
    limits = {p["id"]: p["per_user_limit"] for p in books.products}
    held = defaultdict(int)
    for o in books.orders:
        if o["status"] in HOLDS_STOCK:
            held[(o["product_id"], o["user_id"])] += o["quantity"]
    return [f"{user} holds {units} of product {pid} (limit {limits[pid]})"
            for (pid, user), units in held.items() if units > limits[pid]]


@invariant("keys", "no key with two orders, and once a key's answer is kept, every later answer "
           "is that one (a refusal decided before any work keeps nothing)")
def keys(books: Books) -> list[str]:
    bad = []
    orders_of = {}
    for key, events in books.by_key.items():
        finals = [e for e in events if not should_retry(e)]
        if not finals:
            continue  # keys_answered's
        orders_of[key] = {oid for e in events if (oid := named_order(e))}
        kept = [e for e in finals if not refused_before_work(e)]
        if not kept:
            continue
        first = kept[0]
        bad += [f"key {key}: first {first['status']} {first['body'][:100]} then {e['status']} {e['body'][:100]}"
                for e in finals[finals.index(first) + 1:]
                if (e["status"], e["body"]) != (first["status"], first["body"])]
    # No key with two orders that took stock (an order that ended `failed`, after a lost lock
    # or an outage, changed nothing and freed its key for the retry).
    for key, oids in orders_of.items():
        took = sorted(o for o in oids if books.by_id.get(o, {}).get("status") in TOOK_STOCK)
        if len(took) > 1:
            bad.append(f"key {key}: {len(took)} orders took stock: {took}")
    return bad


@invariant("answers", "every answer is JSON, every error has a code, a message and `retryable`, "
           "with `Retry-After` exactly when it is true, and no 5xx but 503")
def answers(books: Books) -> list[str]:
    bad = []
    for e in books.answers:
        if "status" not in e:
            continue
        body = parse(e["body"])
        if body is None:
            bad.append(f"{e['status']} not JSON: {e['body'][:120]!r} ({e['method']} {e['path']})")
        elif e["status"] >= 400 and not (isinstance(body.get("error"), str) and isinstance(body.get("message"), str)
                                         and isinstance(body.get("retryable"), bool)):
            bad.append(f"{e['status']} without error, message and retryable: {e['body'][:160]}")
        elif e["status"] >= 400 and (e.get("retry_after") is not None) != body["retryable"]:
            bad.append(f"{e['status']} {body['error']}: retryable {str(body['retryable']).lower()}, "
                       f"Retry-After {e.get('retry_after')!r} ({e['method']} {e['path']})")
        if e["status"] >= 500 and e["status"] != 503:
            bad.append(f"{e['status']} at t={e['t0']}: {e['body'][:160]}")
    return bad


@invariant("keys_answered", "every key has a final answer once the faults have healed")
def keys_answered(books: Books) -> list[str]:
    bad = []
    for key, events in books.by_key.items():
        if all(should_retry(e) for e in events):
            last = events[-1]
            bad.append(
                f"key {key} ({last['who']}): last answer {last.get('status', last.get('error'))} {str(last.get('body', ''))[:100]}")
    return bad


@invariant("told_failed_not_charged", "no buyer told failed without an order id holds or paid "
           "for that order: every order that took stock is named (`id`, `order_id`) by an answer "
           "its buyer got")
def told_failed_not_charged(books: Books) -> list[str]:
    """An order that took stock (units or money) is named by an answer its buyer got: a 201's
    id, an error's order_id (503 `outcome_pending` carries one), a replay's. Its buyer is the
    key linked to it (idempotency_keys.order_id), which is told for good by its final answer
    (a key without one is `keys_answered`'s), or, for a buyer without a key, the one request
    under the order's user id: any answer to it is all that buyer will know (none at all told
    it nothing: counted as `unheard`)."""
    named = {oid for e in books.answers if (oid := named_order(e))}
    keyless = defaultdict(list)
    for e in books.answers:
        if e["op"] == "keyless":
            keyless[e["req"]["user_id"]].append(e)
    bad, unheard = [], 0
    for o in books.orders:
        if o["status"] not in TOOK_STOCK or o["id"] in named:
            continue
        key = books.key_of.get(o["id"])
        events = books.by_key.get(key, []) if key else keyless.get(o["user_id"], [])
        if not events:
            bad.append(
                f"order {o['id']} ({o['status']}, {o['user_id']}): no request of the history is tied to it"
                + ("" if o["user_id"].startswith(KEYLESS) else " (no key names it)"))
        elif any(("status" in e) if not key else not should_retry(e) for e in events):
            bad.append(
                f"order {o['id']} is {o['status']}; its buyer ({'key ' + key if key else o['user_id']}, "
                f"from t={events[0]['t0']}) was told {told(events)}, never the order")
        else:
            unheard += 1
    books.found["unheard"] = unheard
    return bad


@invariant("lapse", "every reservation of the mass lapse is `expired`, its units back in stock, "
           f"within {lapse.BOUND_S:.0f} s of its deadline")
def mass_lapse(books: Books) -> list[str]:
    bad, books.found["lapse"] = lapse.check(books.history, books.cluster)
    return bad


def run_one(inv: Invariant, books: Books) -> dict[str, Any]:
    """One invariant's result: `valid` True or False with the broken instances' count and
    first examples, or "unknown" with the error its check threw."""
    result = {"name": inv.name, "promise": inv.promise}
    try:
        bad = inv.check(books)
    except Exception as e:  # whatever it was: the other invariants still run
        where = traceback.extract_tb(e.__traceback__)[-1]
        error = f"{type(e).__name__}: {e} ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        return {**result, "valid": UNKNOWN, "count": 0, "examples": [], "error": error}
    return {**result, "valid": not bad, "count": len(bad), "examples": bad[:EXAMPLES]}


def compose(invariants: Iterable[Invariant], books: Books) -> list[dict[str, Any]]:
    """Every invariant's result, in order; one that throws does not stop the others."""
    return [run_one(inv, books) for inv in invariants]


def verdict(results: Iterable[dict[str, Any]]) -> bool | str:
    """The sale's: False if any invariant is broken, else "unknown" if any could not be
    checked, else True."""
    valids = [r["valid"] for r in results]
    if any(v is False for v in valids):
        return False
    return UNKNOWN if UNKNOWN in valids else True


def figures(books: Books) -> dict[str, Any]:
    """The sale's figures beside the verdicts (the report's); one that could not be read is
    None, as are `unheard` and `lapse` when their invariant did not finish."""
    def read(figure: Callable[[], Any]) -> Any:
        try:
            return figure()
        except Exception:  # its invariants say why, as unknown
            return None
    return {
        "orders": read(lambda: len(books.orders)),
        "paid": read(lambda: sum(o["status"] == "paid" for o in books.orders)),
        "charges": read(lambda: len(books.cluster.ledger_charges)),
        "succeeded": read(lambda: sum(len(v) for v in books.succeeded.values())),
        "products": read(lambda: books.products),
        "lapse": books.found.get("lapse"),
        "unheard": books.found.get("unheard"),
        "keyless": sum(e["op"] == "keyless" for e in books.answers)}


def check(history: list[dict[str, Any]], cluster: Cluster,
          invariants: Iterable[Invariant] = INVARIANTS,
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every invariant's result (`compose`) and the sale's figures."""
    books = Books(history, cluster)
    return compose(invariants, books), figures(books)


def settled(cluster: Cluster) -> tuple[bool, dict[str, Any]]:
    """True once nothing is left for the sweep to do: no order created or paying, no
    pending intent, no reservation past its expiry."""
    rows = cluster.query(
        "SELECT (SELECT count(*) FROM orders WHERE status IN ('created', 'paying')) AS busy,"
        " (SELECT count(*) FROM payments WHERE outcome IS NULL) AS pending,"
        " (SELECT count(*) FROM orders WHERE status = 'reserved' AND expires_at < now() - interval '3 seconds') AS overdue")
    r = rows[0]
    return r["busy"] == 0 and r["pending"] == 0 and r["overdue"] == 0, r
