"""What drives a row and what it reads besides /proc: wrk's closed loops over the fleet
(uniform, or routed by product as nginx routes), the instances' own counters (/metrics, and
each product's lock statistics), and PostgreSQL (psql as its superuser)."""

import concurrent.futures
import json
import os
import subprocess
from typing import Any

from .. import WRK
from ..common.pg import psql
from ..common.route import by_instance
from ..common.web import metrics, request
from ..fleet import PG_PORT


def split(urls: list[str], products: list[int], connections: int,
          routed: bool) -> list[tuple[int, list[int], int]]:
    """The wrks a row starts: (the instance's index in `urls`, the products its orders name,
    its connections). Uniform: one per instance, every product, `connections` each. Routed:
    each instance's wrk only the products nginx's consistent hash sends it
    (loadtest/lib/common/route.py), the row's connections (`connections` × the instances, as
    uniform) shared in proportion to its products, at least 1; no wrk for an instance that got
    no product."""
    if not routed:
        return [(i, products, connections) for i in range(len(urls))]
    mine = by_instance(urls, products)
    counts = [len(mine[url]) for url in urls]
    shares = proportional(connections * len(urls), counts)
    return [(i, mine[url], shares[i]) for i, url in enumerate(urls) if counts[i]]


def proportional(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders first, ties to the first),
    at least 1 for every weight above 0 (taken from the largest shares), 0 for a weight of 0."""
    whole = sum(weights)
    if not whole:
        return [0] * len(weights)
    exact = [total * w / whole for w in weights]
    shares = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: (shares[i] - exact[i], i))[
            :total - sum(shares)]:
        shares[i] += 1
    for i, w in enumerate(weights):
        if w and not shares[i]:
            shares[max(range(len(shares)), key=lambda j: shares[j])] -= 1
            shares[i] = 1
    return shares


def wrk(urls: list[str], products: list[int], connections: int, seconds: int, tag: str,
        get: str | None = None, pay: bool = True,
        buyers: dict[str, str] | None = None, routed: bool = False,
        by_path: bool = True) -> dict[str, Any]:
    """wrks against the instances, side by side; returns their summed counts and worst
    latencies. Uniform (not `routed`): one wrk per instance, `connections` each, every
    product's orders `POST /orders` with the product in the body. `routed`: as nginx routes
    `POST /api/products/{id}/orders` (deploy/nginx.conf), each product's orders to one instance
    (see `split`), on that route (ROUTE=product in loadtest/wrk/orders.lua); `by_path=False` for a
    build without that route (an older `--baseline`): the same instances, `POST /orders`.
    With `get`, a closed loop of GETs of that path instead of orders (its 200s count as
    `created`; never routed); with `pay=False`, reservations without payment. `buyers`: the
    fleet's `load_env()`, whose orders these are (its pool's tokens, TOKENS_FILE, or how many
    buyers the body names, BUYERS); each wrk starts at another point of the pool (SHARE: that
    fraction of it in), so the instances do not take the same buyer's orders in step.
    `wrks` in the answer: each wrk's instance, products and connections."""
    env = {**os.environ, **(buyers or {})}
    env.pop("ROUTE", None)
    if get:
        env["GET"] = get
    if not pay:
        env["PAY"] = "false"
    routed = routed and not get
    if routed and by_path:
        env["ROUTE"] = "product"
    plan = split(urls, products, connections, routed)
    procs = []
    for i, mine, conns in plan:
        procs.append(subprocess.Popen(
            ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "30s",
             "-s", os.environ.get("LUA", str(WRK / "orders.lua")), urls[i]],
            env={**env, "PRODUCTS": ",".join(map(str, mine)), "RUN": f"{tag}-{i}",
                 "SHARE": f"{i / len(urls):.4f}"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=seconds + 120)
        line = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not line:
            raise SystemExit(f"wrk printed no summary: {out}\n{err}")
        runs.append(json.loads(line[-1]))
    total = {k: sum(r[k] for r in runs) for k in ("created", "refused", "other", "requests",
                                                   "errors")}
    total["seconds"] = max(r["seconds"] for r in runs)
    total["p50_ms"] = max(r["p50_us"] for r in runs) / 1000
    total["p99_ms"] = max(r["p99_us"] for r in runs) / 1000
    total["wrks"] = [{"url": urls[i], "products": len(mine), "connections": conns}
                     for i, mine, conns in plan]
    return total


# The histograms of orders per lock cycle and of cycles per shared transaction.
CYCLES = ("seckill_lock_cycle_orders_count", "seckill_lock_cycle_orders_sum",
          "seckill_shared_cycle_products_count", "seckill_shared_cycle_products_sum")


def lock_cycles(urls: list[str]) -> tuple[float, ...]:
    """Lock cycles run and orders they served, and the transactions shared by many products'
    cycles and the cycles they served, summed over the instances (their /metrics)."""
    samples = [s for url in urls for s in metrics(url)]
    return tuple(sum(s.value for s in samples if s.name == name) for name in CYCLES)


# The routes an order comes by, as the metrics' `route` label names them (the route's
# template): the product in the body, or in the path (where nginx routes by product).
ORDER_ROUTES = ("/orders", "/api/products/{id}/orders")


def accepted_buckets(urls: list[str]) -> dict[str, float]:
    """The instances' histogram of 201 answers to orders (either route), summed: {le: count}."""
    buckets: dict[str, float] = {}
    for url in urls:
        for s in metrics(url):
            if (s.name == "seckill_http_request_duration_seconds_bucket"
                    and s.labels.get("route") in ORDER_ROUTES
                    and s.labels.get("status") == "201" and s.labels.get("method") == "POST"):
                buckets[s.labels["le"]] = buckets.get(s.labels["le"], 0) + s.value
    return buckets


def accepted_p99_ms(before: dict[str, float], after: dict[str, float]) -> float | None:
    """The 99th percentile of the accepted orders' time in the service between two scrapes,
    as the bucket bound it falls under (the server's own clock: a closed loop's refusals,
    answered at once, would hide the accepted orders' wait in the generator's p99)."""
    diff = {le: after.get(le, 0) - before.get(le, 0) for le in after}
    total = diff.get("+Inf", 0)
    if not total:
        return None
    for le in sorted((le for le in diff if le != "+Inf"), key=float):
        if diff[le] >= 0.99 * total:
            return float(le) * 1000
    return float("inf")


def lock_stats(urls: list[str], products: list[int]) -> dict[str, int] | None:
    """What the instances counted of the products' locks (GET /api/products/{id}/lock, no
    sign-in needed: its `stats`, this instance's own figures), over every product and every
    instance: the longest a node waited behind a kept lock before its holder gave it up
    (`longest_handover_ms`, the most of any) and the lock cycles served on kept nodes
    (`kept_cycles`, summed). None if no instance says (a build from before kept locks; a guard
    with no lock answers 404)."""
    def stats(url_product: tuple[str, int]) -> dict[str, Any] | None:
        url, product = url_product
        try:
            answer = request("GET", f"{url}/api/products/{product}/lock")
        except OSError:
            return None
        body = answer.json() if answer.ok else None
        found = body.get("stats") if isinstance(body, dict) else None
        return found if isinstance(found, dict) and "kept_cycles" in found else None

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        seen = [x for x in pool.map(stats, [(u, p) for u in urls for p in products]) if x]
    if not seen:
        return None
    return {"longest_handover_ms": max(x.get("longest_handover_ms") or 0 for x in seen),
            "kept_cycles": sum(x["kept_cycles"] for x in seen)}


def fleet_sql(sql: str, db: str = "postgres") -> str:
    """`sql` on the fleet's cluster as its superuser (an extension, every database's
    statement counts), fields split by tabs."""
    return psql(sql, port=PG_PORT, db=db, superuser=True, separator="\t")
