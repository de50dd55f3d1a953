"""The mass lapse, the sale's first phase (its buyers already buying, no nemesis yet): N
reservations of one product (`"pay": false`, N users) sent at once, then every one's
deadline moved to the same instant, `LAPSE_IN_S` ahead, so that all N lapse together. (A
debug build on two cores takes 50 to 200 reservations a second: with deadlines of their own
they would lapse as slowly as they were made, and no return path would be put to the test.)
While they lapse, PostgreSQL is polled on its own clock for reservations still held past
the bound and for the product's stock; the checker then holds every one to it: `expired`,
its units back in stock, within `BOUND_S` of its deadline."""

import asyncio
import math
import statistics

from ..common.wait import WaitTimeout, wait_for_async
from .buyers import Sale, lapse_user, reserve_at_once, should_retry
from .cluster import Cluster

# A lapsed reservation is expired, its units back on sale, this long after its deadline.
BOUND_S = 10.0
# The deadline every reservation is given once they are all made, from then.
LAPSE_IN_S = 2.0
# Their own reservation time: longer than making them takes, so none lapses before.
TTL_S = 600
# How long making them may take: the rest are made (or not) while the sale goes on.
MAKING_S = 120.0
POLL_S = 0.25
# A poll that PostgreSQL has not answered by then is given up: the next one, or the checker's.
POLL_TIMEOUT_S = 5.0
# How long past the bound the polls go on for a reservation still held.
MARGIN_S = 5.0
# Reservations in flight at once. All 2,000 sent in one go (a debug build, 2 cores, 12
# database connections per instance) time out in admission faster than they are served,
# and the fleet stays flooded by their retries.
IN_FLIGHT = 256
# The service's default --max-unpaid-share (src/config.rs): the share of a product's stock
# that unpaid reservations may hold.
DEFAULT_UNPAID_SHARE = 0.5


def unpaid_share(instance_flags: list[str]) -> float:
    """The --max-unpaid-share the instances run with."""
    share = DEFAULT_UNPAID_SHARE
    for flag in instance_flags:
        name, _, value = flag.partition("=")
        if name == "--max-unpaid-share" and value:
            share = float(value)
    return share


def product(n: int, instance_flags: list[str]) -> dict:
    """The lapse's product: stock enough that `n` unpaid reservations fit under the cap on
    unpaid reservations, one unit each."""
    return {"name": "chaos lapse", "price_cents": 999,
            "stock": math.ceil(n / unpaid_share(instance_flags)), "guard": "zk",
            "max_per_order": 1, "per_user_limit": 1, "reservation_ttl_s": TTL_S, "batch_max": 256}


def _poll_sql(product_id: int) -> str:
    return f"""
        SELECT extract(epoch FROM clock_timestamp())::float8 AS at,
               p.stock, p.stocked_total AS total,
               count(o.id) FILTER (WHERE o.status = 'reserved') AS held,
               count(o.id) FILTER (WHERE o.status = 'reserved' AND o.expires_at
                                   < clock_timestamp() - make_interval(secs => {BOUND_S})) AS overdue
        FROM products p LEFT JOIN orders o ON o.product_id = p.id
        WHERE p.id = {product_id} GROUP BY p.id"""


async def run(sale: Sale, cluster: Cluster, product_id: int, n: int, seed: int) -> asyncio.Task:
    """The phase: `n` reservations at once (for `MAKING_S` at most), their deadlines moved
    to one instant, then PostgreSQL polled every `POLL_S` until every one is returned or the
    bound has passed. Everything goes into the history. Returns the task still making the
    reservations not made in time (done, normally). Its users sign in first, `IN_FLIGHT` at
    a time: the burst is of reservations, not of sign-ins, and its figures are timed from its
    start (the `lapse` mark) after them."""
    await sale.sign_in_all("lapse", (lapse_user(i) for i in range(n)), IN_FLIGHT)
    sale.history.note("lapse", product=product_id, n=n, bound_s=BOUND_S, in_flight=IN_FLIGHT)
    making = asyncio.create_task(reserve_at_once(sale, product_id, n, seed, IN_FLIGHT))
    await asyncio.wait({making}, timeout=MAKING_S)
    moved = await asyncio.to_thread(cluster.execute, f"""
        WITH moved AS (
            UPDATE orders SET expires_at = statement_timestamp() + make_interval(secs => {LAPSE_IN_S})
            WHERE product_id = {product_id} AND status = 'reserved' RETURNING expires_at)
        SELECT count(*), extract(epoch FROM max(expires_at))::float8 FROM moved""")
    lapsing, _, at = moved.strip().partition("|")
    deadline = float(at) if at else None
    sale.history.note("lapse_deadline", lapsing=int(lapsing), deadline=deadline)
    if deadline is not None:
        await watch(sale, cluster, product_id, deadline)
    return making


async def watch(sale: Sale, cluster: Cluster, product_id: int, deadline: float) -> None:
    """PostgreSQL polled every `POLL_S`, each sample into the history, until no reservation
    of the product is held or `LAPSE_IN_S + BOUND_S + MARGIN_S` have passed on this machine's
    clock, whether PostgreSQL answers or not (each poll waits `POLL_TIMEOUT_S` at most)."""
    sql = _poll_sql(product_id)

    async def returned() -> bool:
        try:
            sample = (await asyncio.to_thread(cluster.query, sql, POLL_TIMEOUT_S))[0]
        except RuntimeError:
            return False  # PostgreSQL did not answer: the next sample, or the checker's read
        sale.history.note("lapse_poll", **sample)
        if sample["held"]:
            return False
        sale.history.note("lapse_returned", at=sample["at"], deadline=deadline)
        return True

    try:
        await wait_for_async("the lapsed reservations' return", returned,
                             LAPSE_IN_S + BOUND_S + MARGIN_S, every=POLL_S)
    except WaitTimeout:
        pass  # the checker reads what is still held from the orders' rows


def check(history: list[dict], cluster: Cluster) -> tuple[list[str], dict | None]:
    """The lapse's broken promises (reservations not made, not expired, expired late, held
    past the bound while polled, units not back), and its figures: how fast the
    reservations were made and returned. None for a sale without a lapse."""
    mark = next((e for e in history if e.get("mark") == "lapse"), None)
    moved = next((e for e in history if e.get("mark") == "lapse_deadline"), None)
    if mark is None or moved is None:
        return [], None
    pid, n, bound, deadline = mark["product"], mark["n"], mark["bound_s"], moved["deadline"]
    bad = []
    finals = {}
    for e in history:
        if e.get("op") == "lapse" and not should_retry(e):
            finals.setdefault(e["key"], e)
    bad += [f"reservation of {e['req']['user_id']} answered {e['status']} {e['body'][:100]}"
            for e in finals.values() if e["status"] != 201]
    if moved["lapsing"] < n:
        bad.append(f"only {moved['lapsing']} of {n} reservations made within {MAKING_S:.0f} s")
    rows = cluster.query(
        f"SELECT id::text, status, extract(epoch FROM created_at)::float8 AS created,"
        f" extract(epoch FROM updated_at)::float8 AS updated,"
        f" abs(extract(epoch FROM expires_at)::float8 - {deadline or 0}) < 0.001 AS lapsing"
        f" FROM orders WHERE product_id = {pid} AND status NOT IN ('sold_out', 'failed')")
    lapsing = [o for o in rows if o["lapsing"]]
    for o in lapsing:
        if o["status"] != "expired":
            bad.append(f"reservation {o['id']} is {o['status']}, not expired")
        elif o["updated"] - deadline > bound:
            bad.append(f"reservation {o['id']} expired {o['updated'] - deadline:.1f} s after its deadline")
    polls = [e for e in history if e.get("mark") == "lapse_poll"]
    for p in polls:
        if p["stock"] + p["held"] != p["total"]:
            bad.append(f"polled at t={p['t']}: stock {p['stock']} + {p['held']} reserved != stocked {p['total']}")
        if p["overdue"]:
            bad.append(f"polled at t={p['t']}: {p['overdue']} reservations still held over {bound:.0f} s past their deadline")
    expired = [o for o in lapsing if o["status"] == "expired"]
    lags = sorted(o["updated"] - deadline for o in expired)
    made = [e["t1"] for e in finals.values() if e["status"] == 201]
    made_s = max(made) - mark["t"] if made else 0.0
    returned_s = max(o["updated"] for o in expired) - deadline if expired else 0.0
    back = next((e for e in history if e.get("mark") == "lapse_returned"), None)
    facts = {
        "n": n, "made": len(made), "lapsing": len(lapsing), "expired": len(expired),
        "bound_s": bound, "started": mark["t"], "made_s": made_s,
        "made_per_s": len(made) / made_s if made_s else None,
        "returned_s": returned_s, "returned_per_s": len(expired) / returned_s if returned_s > 0 else None,
        "lag_median": statistics.median(lags) if lags else None, "lag_max": lags[-1] if lags else None,
        "polls": len(polls), "all_back_s": back["at"] - back["deadline"] if back else None,
    }
    return bad, facts


def summary(facts: dict) -> str:
    """The lapse's figures in a sentence."""
    rate = lambda r: f"{r:,.0f}/s" if r else "–"
    text = (f"{facts['made']:,} of {facts['n']:,} reservations made in {facts['made_s']:.1f} s "
            f"({rate(facts['made_per_s'])}) from t={facts['started']:.1f} s, {IN_FLIGHT} in flight; "
            f"all {facts['lapsing']:,} given one deadline, {LAPSE_IN_S:.0f} s ahead; "
            f"{facts['expired']:,} returned within {facts['returned_s']:.1f} s of it "
            f"({rate(facts['returned_per_s'])})")
    if facts["lag_max"] is not None:
        text += (f", each expired at most {facts['lag_max']:.1f} s after the deadline "
                 f"(median {facts['lag_median']:.1f} s; bound {facts['bound_s']:.0f} s)")
    if facts["all_back_s"] is not None:
        text += (f"; every unit back in stock {facts['all_back_s']:.1f} s after the deadline "
                 f"(PostgreSQL polled every {POLL_S} s, {facts['polls']} polls)")
    return text + "."
