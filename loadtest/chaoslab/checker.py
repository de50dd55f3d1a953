"""The checker: after the faults have healed and the sweep has had its window, it reads the
history, PostgreSQL and the provider's ledger, and fails on any broken promise."""

import json
from collections import defaultdict
from typing import Any

from . import lapse
from .buyers import KEYLESS, should_retry
from .cluster import Cluster

INVARIANTS = [
    ("stock", "units sold never exceed the stock, and the books balance"),
    ("paid_answers", "every 201/200 `paid` answer is a paid order, and every paid order has exactly one succeeded charge of its amount"),
    ("charges", "every succeeded charge belongs to a paid order"),
    ("settled", "no order left created or paying, no payment intent pending, no reservation past its expiry"),
    ("per_user", "no buyer over the per-user limit"),
    ("keys", "no key with two orders, and once a key's answer is kept, every later answer is that one (a refusal decided before any work keeps nothing)"),
    ("answers", "every answer is JSON, every error has a code, a message and `retryable`, with `Retry-After` exactly when it is true, and no 5xx but 503"),
    ("keys_answered", "every key has a final answer once the faults have healed"),
    ("told_failed_not_charged", "no buyer told failed without an order id holds or paid for that order: every order that took stock is named (`id`, `order_id`) by an answer its buyer got"),
    ("lapse", f"every reservation of the mass lapse is `expired`, its units back in stock, within {lapse.BOUND_S:.0f} s of its deadline"),
]


# Statuses of an order that took stock at some point (an expired or declined order gave its
# units back; `failed` and `sold_out` never had any).
TOOK_STOCK = ("reserved", "paying", "paid", "expired", "payment_failed")


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


def check(history: list[dict[str, Any]],
          cluster: Cluster) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    bad = defaultdict(list)
    answers = [e for e in history if "op" in e]

    # 7. every answer well-formed
    for e in answers:
        if "status" not in e:
            continue
        body = parse(e["body"])
        if body is None:
            bad["answers"].append(f"{e['status']} not JSON: {e['body'][:120]!r} ({e['method']} {e['path']})")
        elif e["status"] >= 400 and not (isinstance(body.get("error"), str) and isinstance(body.get("message"), str)
                                         and isinstance(body.get("retryable"), bool)):
            bad["answers"].append(f"{e['status']} without error, message and retryable: {e['body'][:160]}")
        elif e["status"] >= 400 and (e.get("retry_after") is not None) != body["retryable"]:
            bad["answers"].append(f"{e['status']} {body['error']}: retryable {str(body['retryable']).lower()}, "
                                  f"Retry-After {e.get('retry_after')!r} ({e['method']} {e['path']})")
        if e["status"] >= 500 and e["status"] != 503:
            bad["answers"].append(f"{e['status']} at t={e['t0']}: {e['body'][:160]}")

    # 6 and 8. keys
    by_key = defaultdict(list)
    key_orders = defaultdict(set)
    for e in answers:
        if e.get("key"):
            by_key[e["key"]].append(e)
    for key, events in by_key.items():
        finals = [e for e in events if not should_retry(e)]
        if not finals:
            last = events[-1]
            bad["keys_answered"].append(
                f"key {key} ({last['who']}): last answer {last.get('status', last.get('error'))} {str(last.get('body', ''))[:100]}")
            continue
        for e in events:
            if oid := named_order(e):
                key_orders[key].add(oid)
        kept = [e for e in finals if not refused_before_work(e)]
        if not kept:
            continue
        first = kept[0]
        for e in finals[finals.index(first) + 1:]:
            if (e["status"], e["body"]) != (first["status"], first["body"]):
                bad["keys"].append(
                    f"key {key}: first {first['status']} {first['body'][:100]} then {e['status']} {e['body'][:100]}")

    # the books
    products = cluster.query(
        "SELECT id, stock, stocked_total, per_user_limit FROM products ORDER BY id")
    orders = cluster.query(
        "SELECT id::text, product_id, user_id, quantity, amount_cents, status, expires_at < now() - interval '3 seconds' AS overdue FROM orders")
    intents = cluster.query(
        "SELECT order_id::text, key, outcome FROM payments WHERE outcome IS NULL")
    ledger = cluster.ledger_charges
    by_id = {o["id"]: o for o in orders}

    # 6. no key with two orders that took stock (an order that ended `failed`, after a lost
    # lock or an outage, changed nothing and freed its key for the retry)
    for key, oids in key_orders.items():
        took = sorted(o for o in oids if by_id.get(o, {}).get("status") in TOOK_STOCK)
        if len(took) > 1:
            bad["keys"].append(f"key {key}: {len(took)} orders took stock: {took}")

    # 1. stock
    for p in products:
        sold = sum(o["quantity"] for o in orders
                   if o["product_id"] == p["id"] and o["status"] in ("reserved", "paying", "paid"))
        if sold > p["stocked_total"]:
            bad["stock"].append(f"product {p['id']}: sold {sold} > stocked {p['stocked_total']}")
        if p["stock"] + sold != p["stocked_total"]:
            bad["stock"].append(
                f"product {p['id']}: stock {p['stock']} + sold {sold} != stocked {p['stocked_total']}")

    # 2. paid answers and paid orders
    succeeded = defaultdict(list)
    for c in ledger:
        if c["status"] == "succeeded":
            succeeded[c["key"]].append(c)
    for e in answers:
        body = parse(e.get("body"))
        if e.get("status") in (200, 201) and isinstance(body, dict) and body.get("status") == "paid":
            row = by_id.get(body.get("id"))
            if row is None or row["status"] != "paid":
                bad["paid_answers"].append(
                    f"answered paid at t={e['t0']}, order {body.get('id')} is {row and row['status']}")
    for o in orders:
        if o["status"] != "paid":
            continue
        charges = succeeded.get(f"seckill-{o['id']}", [])
        if len(charges) != 1 or charges[0]["amount_cents"] != o["amount_cents"]:
            bad["paid_answers"].append(
                f"paid order {o['id']}: {len(charges)} succeeded charges {[c['amount_cents'] for c in charges]} for {o['amount_cents']}")

    # 3. every succeeded charge is a paid order's
    for key, charges in succeeded.items():
        oid = key.removeprefix("seckill-")
        row = by_id.get(oid)
        if row is None or row["status"] != "paid":
            bad["charges"].append(f"charge {key} ({charges[0]['amount_cents']}): order is {row and row['status']}")

    # 4. nothing left half way
    for o in orders:
        if o["status"] in ("created", "paying"):
            bad["settled"].append(f"order {o['id']} left {o['status']}")
        if o["status"] == "reserved" and o["overdue"]:
            bad["settled"].append(f"order {o['id']} still reserved past its expiry")
    for i in intents:
        bad["settled"].append(f"payment intent {i['key']} of order {i['order_id']} still pending")

    # 5. per-user limit
    limits = {p["id"]: p["per_user_limit"] for p in products}
    held = defaultdict(int)
    for o in orders:
        if o["status"] in ("reserved", "paying", "paid"):
            held[(o["product_id"], o["user_id"])] += o["quantity"]
    for (pid, user), units in held.items():
        if units > limits[pid]:
            bad["per_user"].append(f"{user} holds {units} of product {pid} (limit {limits[pid]})")

    # 9. told failed, yet holding or paying: an order that took stock (units or money) is
    # named by an answer its buyer got: a 201's id, an error's order_id (503 `outcome_pending`
    # carries one), a replay's. Its buyer is the key linked to it (idempotency_keys.order_id),
    # which is told for good by its final answer (a key without one is `keys_answered`'s),
    # or, for a buyer without a key, the one request under the order's user id: any answer
    # to it is all that buyer will know (none at all told it nothing).
    named = {oid for e in answers if (oid := named_order(e))}
    key_of = {r["order_id"]: r["key"] for r in cluster.query(
        # The stored key is scoped to its buyer (`buyer U+001F key`): the client's key is after it.
        "SELECT split_part(key, chr(31), 2) AS key, order_id::text FROM idempotency_keys WHERE order_id IS NOT NULL")}
    keyless = defaultdict(list)
    for e in answers:
        if e["op"] == "keyless":
            keyless[e["req"]["user_id"]].append(e)
    unheard = 0
    for o in orders:
        if o["status"] not in TOOK_STOCK or o["id"] in named:
            continue
        key = key_of.get(o["id"])
        events = by_key.get(key, []) if key else keyless.get(o["user_id"], [])
        if not events:
            bad["told_failed_not_charged"].append(
                f"order {o['id']} ({o['status']}, {o['user_id']}): no request of the history is tied to it"
                + ("" if o["user_id"].startswith(KEYLESS) else " (no key names it)"))
        elif any(("status" in e) if not key else not should_retry(e) for e in events):
            bad["told_failed_not_charged"].append(
                f"order {o['id']} is {o['status']}; its buyer ({'key ' + key if key else o['user_id']}, "
                f"from t={events[0]['t0']}) was told {told(events)}, never the order")
        else:
            unheard += 1

    # 10. the mass lapse
    bad["lapse"], lapsed = lapse.check(history, cluster)

    return [{"name": name, "promise": promise, "ok": not bad[name], "count": len(bad[name]),
             "examples": bad[name][:5]} for name, promise in INVARIANTS], {
        "orders": len(orders), "paid": sum(o["status"] == "paid" for o in orders),
        "charges": len(ledger), "succeeded": sum(len(v) for v in succeeded.values()),
        "products": products, "lapse": lapsed, "unheard": unheard,
        "keyless": sum(e["op"] == "keyless" for e in answers)}


def settled(cluster: Cluster) -> tuple[bool, dict[str, Any]]:
    """True once nothing is left for the sweep to do: no order created or paying, no
    pending intent, no reservation past its expiry."""
    rows = cluster.query(
        "SELECT (SELECT count(*) FROM orders WHERE status IN ('created', 'paying')) AS busy,"
        " (SELECT count(*) FROM payments WHERE outcome IS NULL) AS pending,"
        " (SELECT count(*) FROM orders WHERE status = 'reserved' AND expires_at < now() - interval '3 seconds') AS overdue")
    r = rows[0]
    return r["busy"] == 0 and r["pending"] == 0 and r["overdue"] == 0, r
