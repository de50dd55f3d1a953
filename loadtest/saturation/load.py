"""What drives a row and what it reads besides /proc: wrk's closed loops over the fleet,
the instances' own counters (/metrics), and PostgreSQL (psql as its superuser)."""

import json
import os
import subprocess
from typing import Any

from .. import ROOT
from ..common.pg import psql
from ..common.web import metrics
from ..fleet import PG_PORT


def wrk(urls: list[str], products: list[int], connections: int, seconds: int, tag: str,
        get: str | None = None, pay: bool = True,
        buyers: dict[str, str] | None = None) -> dict[str, Any]:
    """One wrk per instance, side by side; returns their summed counts and worst latencies.
    With `get`, a closed loop of GETs of that path instead of orders (its 200s count as
    `created`); with `pay=False`, reservations without payment. `buyers`: the fleet's
    `load_env()`, whose orders these are (its pool's tokens, TOKENS_FILE, or how many buyers
    the body names, BUYERS); each wrk starts at another point of the pool (SHARE: that
    fraction of it in), so the instances do not take the same buyer's orders in step."""
    env = {**os.environ, "PRODUCTS": ",".join(map(str, products)), **(buyers or {})}
    if get:
        env["GET"] = get
    if not pay:
        env["PAY"] = "false"
    procs = []
    for i, url in enumerate(urls):
        procs.append(subprocess.Popen(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s",
             "-s", os.environ.get("LUA", str(ROOT / "loadtest" / "orders.lua")), url],
            env={**env, "RUN": f"{tag}-{i}", "SHARE": f"{i / len(urls):.4f}"},
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
    return total


# The histograms of orders per lock cycle and of cycles per shared transaction.
CYCLES = ("seckill_lock_cycle_orders_count", "seckill_lock_cycle_orders_sum",
          "seckill_shared_cycle_products_count", "seckill_shared_cycle_products_sum")


def lock_cycles(urls: list[str]) -> tuple[float, ...]:
    """Lock cycles run and orders they served, and the transactions shared by many products'
    cycles and the cycles they served, summed over the instances (their /metrics)."""
    samples = [s for url in urls for s in metrics(url)]
    return tuple(sum(s.value for s in samples if s.name == name) for name in CYCLES)


def accepted_buckets(urls: list[str]) -> dict[str, float]:
    """The instances' histogram of 201 answers to POST /orders, summed: {le: count}."""
    buckets: dict[str, float] = {}
    for url in urls:
        for s in metrics(url):
            if (s.name == "seckill_http_request_duration_seconds_bucket"
                    and s.labels.get("route") == "/orders" and s.labels.get("status") == "201"
                    and s.labels.get("method") == "POST"):
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


def fleet_sql(sql: str, db: str = "postgres") -> str:
    """`sql` on the fleet's cluster as its superuser (an extension, every database's
    statement counts), fields split by tabs."""
    return psql(sql, port=PG_PORT, db=db, superuser=True, separator="\t")
