"""The rows of the saturation run: ZooKeeper warmed up first, then each row a closed loop
of wrk (or an open model from k6) with what every part spent per paid order; the lapse row
(reservations that lapse together while a sale goes on) and the floors (what any request,
and a refusal, costs the service)."""

import concurrent.futures
import os
import resource
import time
from typing import Any

from ..common.web import http_json
from ..common.zk import zxid
from ..fleet import PER_USER_LIMIT, STOCK, Instances, k6_step, log, row_done
from .cpu import TICK, Parts, jit_ticks, spent_us, user_sys_ticks, zookeeper_pids
from .load import accepted_buckets, accepted_p99_ms, fleet_sql, lock_cycles, lock_stats, wrk

# The open model's offered rate: this many times the build's own saturation (row 1).
OPEN_TIMES = 5


def warm_up(inst: Instances, run_id: str, chunk: int = 5,
            most: int = 240) -> list[float]:
    """Sells ten hot products, zk batched, in `chunk`-second runs until ZooKeeper's JIT
    compiler is done: its threads spent under 1 % of a core in each of the last two runs
    (`most` seconds at most). A ZooKeeper just started runs its request path interpreted
    while the JVM's JIT compiles it, for a minute or more under a sale, and the compiler's
    CPU counts as ZooKeeper's: on a fresh one the first rows measured ZooKeeper at 2-4x the
    CPU per paid order of a warm one, and ten hot products at 0.50-0.61x one product's rate
    against 0.68x. (20 s of the bare lock's loop first did not change that, nor did 15 s of
    this sale: the compiler's share only fell later.) Returns the compiler's ms, run by run."""
    zookeeper = zookeeper_pids()
    products = [inst.product("zk", 256) for _ in range(10)]
    seen = []
    started = time.monotonic()
    while time.monotonic() - started < most:
        before = jit_ticks(zookeeper)
        wrk(inst.urls, products, 30, chunk, f"{run_id}-jit{len(seen)}",
            buyers=inst.load_env())
        seen.append((jit_ticks(zookeeper) - before) / TICK * 1000)
        # Two quiet runs in a row: the compiler works in waves (a quiet run, then 1 s of
        # compiling in the next was seen).
        if len(seen) >= 2 and max(seen[-2:]) < chunk * 1000 * 0.01:
            break
    log(f"warm-up, {time.monotonic() - started:.0f} s: ZooKeeper's JIT compiler, ms per "
        f"{chunk}-s run: " + ", ".join(f"{ms:.0f}" for ms in seen))
    return seen


def row(inst: Instances, parts: Parts, label: str, guard: str, batch: int, hot: int,
        connections: int, seconds: int, run_id: str, new_buyers: bool = False,
        routed: bool = False) -> dict[str, Any]:
    """One row; with `new_buyers`, its measured run's orders come from a pool of buyers the
    instances have never seen (signed in after the warm-up: no token of theirs verified yet).
    `routed`: each product's orders go to the one instance nginx's consistent hash sends them
    to, `POST /api/products/{id}/orders` (loadtest/lib/saturation/load.py's `wrk`); else every
    instance takes every product's, `POST /orders`."""
    products = [inst.product(guard, batch) for _ in range(hot)]
    # How the row's wrks send their orders (the warm-up's too: the locks, pools and caches
    # warmed where the row's orders will go).
    how = {"routed": routed, "by_path": inst.product_route}
    # The fleet's buyers (their tokens renewed now if need be: not while the row runs).
    buyers = inst.load_env()
    # A short warm-up: pools filled, lock nodes' parents made, caches loaded.
    warm = wrk(inst.urls, products, min(connections, 100), 1, f"{run_id}-warm", buyers=buyers,
               **how)
    if new_buyers:
        inst.new_pool()
        buyers = inst.load_env()
    # Kept lock cycles, from each instance's own count of the row's products (before: the
    # warm-up's are not the row's).
    locks = guard == "zk"
    kept_before = lock_stats(inst.urls, products) if locks else None
    zk_before = zxid(os.environ["SECKILL_ZK"])
    cycles_before = lock_cycles(inst.urls)
    zookeeper = zookeeper_pids()
    jit_before = jit_ticks(zookeeper)
    accepted_before = accepted_buckets(inst.urls)
    before = parts.snapshot()
    counts = wrk(inst.urls, products, connections, seconds, run_id, buyers=buyers, **how)
    after = parts.snapshot()
    accepted_p99 = accepted_p99_ms(accepted_before, accepted_buckets(inst.urls))
    # Part of ZooKeeper's CPU, if its JIT compiler was still at work (see `warm_up`).
    jit_ms = (jit_ticks(zookeeper) - jit_before) / TICK * 1000
    zk_writes = zxid(os.environ["SECKILL_ZK"]) - zk_before
    cycles, served, shared, shared_cycles = (
        a - b for a, b in zip(lock_cycles(inst.urls), cycles_before))
    kept = lock_stats(inst.urls, products) if locks else None
    audits = [inst.audit(p) for p in products]
    sold = sum(a["sold"] for a in audits)
    paid = counts["created"]
    cpu = spent_us(before, after)
    per_paid = {part: us / max(paid, 1) for part, us in cpu.items()}
    # wrk stops at its deadline with requests in flight: those may have sold a unit whose
    # 201 nobody read (at most one per connection, warm-up's and run's). Every 201 read is a
    # unit sold, and no more units sold than that allows.
    in_flight = connections * len(inst.urls)
    answered = paid + warm["created"]
    unread = in_flight + min(connections, 100) * len(inst.urls)
    exact = (all(a["oversold"] == 0 and a["consistent"] for a in audits)
             and answered <= sold <= answered + unread)
    result = {
        "label": label, "guard": guard, "batch_max": batch, "hot": hot,
        "connections": in_flight, "seconds": counts["seconds"], "paid": paid,
        "paid_per_s": paid / counts["seconds"], "refused": counts["refused"],
        "other": counts["other"], "errors": counts["errors"], "requests": counts["requests"],
        "p50_ms": counts["p50_ms"], "p99_ms": counts["p99_ms"],
        "zk_writes": zk_writes, "zk_writes_per_paid": zk_writes / max(paid, 1),
        "lock_cycles": cycles, "orders_per_cycle": served / max(cycles, 1),
        "cycles_per_transaction": shared_cycles / shared if shared else None,
        "cpu_us": cpu, "cpu_us_per_paid": per_paid, "units_sold": sold, "exact": exact,
        "peak_rss_mib": inst.peak_rss(), "zk_jit_ms": jit_ms,
        "refused_per_s": counts["refused"] / counts["seconds"], "accepted_p99_ms": accepted_p99,
        # Routed: which instances took the orders, how many products and connections each.
        "routed": routed, "by_path": routed and inst.product_route, "wrks": counts["wrks"],
        # The longest a node waited behind a kept lock (the warm-up's second included: a
        # maximum cannot be taken apart) and the cycles served on kept nodes during the run;
        # None for a guard with no lock, or a build from before kept locks.
        "longest_handover_ms": kept and kept["longest_handover_ms"],
        "kept_cycles": (kept["kept_cycles"] - kept_before["kept_cycles"]
                        if kept and kept_before else None),
    }
    return result


def open_row(inst: Instances, parts: Parts, rate: int, seconds: int,
             run_id: str) -> dict[str, Any]:
    """An open model from k6 (loadtest/k6/bench.js): orders arrive at `rate` per second whatever
    the answers, for one hot product (zk batched), spread over the instances (`POST /orders`,
    as row 1 whose rate it is offered 5x of). k6 waits for every answer, so every unit
    sold was answered 201. Its CPU is the generator's, like wrk's in the other rows (k6
    spends many times wrk's per request)."""
    products = [inst.product("zk", 256)]
    buyers = inst.load_env()
    wrk(inst.urls, products, 100, 1, f"{run_id}-warm", buyers=buyers)
    warm_sold = inst.audit(products[0])["sold"]
    zk_before = zxid(os.environ["SECKILL_ZK"])
    before = parts.snapshot()
    step = k6_step(inst.urls, products, rate, seconds, run_id, buyers=buyers, routed=False)
    after = parts.snapshot()
    zk_writes = zxid(os.environ["SECKILL_ZK"]) - zk_before
    audit = inst.audit(products[0])
    paid = step["paid"]
    cpu = spent_us(before, after)
    # wrk's warm-up stopped with requests in flight (as in `row`): those may have sold a unit
    # after it was read, at most one per connection; k6's own are all answered.
    sold = audit["sold"] - warm_sold
    unread = 100 * len(inst.urls)
    result = {
        "label": f"zk batched, open model {OPEN_TIMES}×", "guard": "zk", "batch_max": 256,
        "hot": 1, "connections": 0, "offered_per_s": rate, "seconds": seconds, "paid": paid,
        "paid_per_s": paid / seconds, "refused": step["retry"],
        "refused_per_s": step["retry"] / seconds, "other": step["other"], "errors": 0,
        "requests": paid + step["retry"] + step["other"], "dropped": step["dropped"],
        "p50_ms": step["p50_ms"] or 0, "p99_ms": step["p99_ms"] or 0,
        "accepted_p99_ms": step["paid_p99_ms"],
        "zk_writes": zk_writes, "zk_writes_per_paid": zk_writes / max(paid, 1),
        "cpu_us": cpu, "cpu_us_per_paid": {k: v / max(paid, 1) for k, v in cpu.items()},
        "units_sold": sold,
        "exact": audit["oversold"] == 0 and audit["consistent"] and paid <= sold <= paid + unread,
        "peak_rss_mib": inst.peak_rss(), "routed": False,
    }
    return result


def spread(x: dict[str, Any]) -> str:
    """Where a row's orders went: each wrk's instance (its port), products and connections."""
    return ", ".join(f"{w['products']} on :{w['url'].rsplit(':', 1)[-1]} "
                     f"({w['connections']} connections)" for w in x.get("wrks") or [])


def row_line(x: dict[str, Any], done: int, total: int) -> str:
    """A row's line as it finishes (what `row` or `open_row` returned, with its build)."""
    if "offered_per_s" in x:  # the open model
        figures = [f"offered {x['offered_per_s']}/s → {x['paid_per_s']:.0f} paid/s",
                   f"{x['refused_per_s']:.0f} refused/s", f"{x['dropped']} dropped by k6",
                   f"p99 of the accepted {x['accepted_p99_ms'] or 0:.0f} ms"]
    else:
        figures = [f"{x['paid_per_s']:.0f} paid/s", f"p99 {x['p99_ms']:.1f} ms",
                   "CPU µs/paid " + " ".join(f"{k} {v:.1f}"
                                             for k, v in x["cpu_us_per_paid"].items()),
                   f"ZK writes/paid {x['zk_writes_per_paid']:.3f}", f"refused {x['refused']}",
                   f"orders/cycle {x['orders_per_cycle']:.1f}",
                   f"cycles/transaction {x['cycles_per_transaction'] or 0:.2f}",
                   f"ZooKeeper's JIT {x['zk_jit_ms']:.0f} ms"]
        if x.get("longest_handover_ms") is not None:
            figures.append(f"longest handover {x['longest_handover_ms']} ms, kept cycles "
                           f"{x['kept_cycles'] if x.get('kept_cycles') is not None else '–'}")
        if x.get("routed"):
            figures.append("routed: " + spread(x))
    label = f"{x['label']} hot {x['hot']}" + (f" ({x['build']})" if x.get("build") else "")
    return row_done(done, total, label, figures, x["exact"])


def lapse(inst: Instances, seconds: int, run_id: str, ttl: int = 5,
          bound: int = 10) -> dict[str, Any]:
    """Reservations that lapse together while a sale goes on: `seconds` of reservations without
    payment (`pay: false`, a closed loop as in the rows) for a product whose reservations last
    `ttl` s; then, while another product sells, every one must be back on sale within `bound`
    s of its deadline. From the orders' own rows: when each went back (`updated_at` of its
    `expired` row) against its deadline (`expires_at`), so the rate of returns and their lag
    need no polling precision. Both products audited."""
    body = {"name": "bench lapse", "price_cents": 100, "stock": STOCK, "guard": "zk",
            "batch_max": 256, "reservation_ttl_s": ttl, "per_user_limit": PER_USER_LIMIT}
    lapsing = http_json("POST", f"{inst.urls[0]}/api/products", body, inst.token)["id"]
    selling = inst.product("zk", 256)
    buyers = inst.load_env()
    made = wrk(inst.urls, [lapsing], 100, seconds, f"{run_id}-reserve", pay=False,
               buyers=buyers)
    left = lambda: int(fleet_sql(f"SELECT count(*) FROM orders WHERE product_id = {lapsing} "
                                 "AND status = 'reserved'", db=inst.db).strip())
    # The sale goes on until the last deadline plus the bound, at most; the returns are
    # watched meanwhile (a poll of the count, bounded in time), then read from the rows.
    sale_s = ttl + bound + 2
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sale = pool.submit(wrk, inst.urls, [selling], 100, sale_s, f"{run_id}-sale",
                           buyers=buyers)
        deadline = time.monotonic() + sale_s + 30
        while left() and time.monotonic() < deadline:
            time.sleep(0.5)
        sold = sale.result()
    # Every reservation made, from the rows: wrk stops with requests in flight whose 201
    # nobody read, and those reservations lapse too.
    total = int(fleet_sql(f"SELECT count(*) FROM orders WHERE product_id = {lapsing}",
                          db=inst.db).strip())
    row = fleet_sql(
        "SELECT count(*), "
        "COALESCE(extract(epoch FROM max(updated_at - expires_at)), 0), "
        "COALESCE(percentile_cont(0.5) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM updated_at - expires_at)), 0), "
        "COALESCE(extract(epoch FROM max(updated_at) - min(expires_at)), 0), "
        "COALESCE(extract(epoch FROM max(created_at) - min(created_at)), 0) "
        f"FROM orders WHERE product_id = {lapsing} AND status = 'expired'", db=inst.db)
    returned, lag_max, lag_p50, return_span, made_span = row.strip().split("\t")
    returned, lag_max, lag_p50 = int(returned), float(lag_max), float(lag_p50)
    still = left()
    audits = [inst.audit(p) for p in (lapsing, selling)]
    result = {
        "seconds": seconds, "ttl_s": ttl, "bound_s": bound, "made": total,
        "answered_201": made["created"], "made_per_s": total / max(float(made_span), 1e-3),
        "returned": returned, "still_reserved": still,
        "returned_per_s": returned / max(float(return_span), 1e-3),
        "lag_p50_s": lag_p50, "lag_max_s": lag_max,
        "sale_paid_per_s": sold["created"] / sold["seconds"],
        "within_bound": still == 0 and returned == total and lag_max <= bound,
        "exact": all(a["oversold"] == 0 and a["consistent"] for a in audits),
    }
    log(f"lapse: {result['made']} reservations at {result['made_per_s']:.0f}/s, returned "
        f"{returned} at {result['returned_per_s']:.0f}/s, lag p50 {lag_p50:.2f} s, max "
        f"{lag_max:.2f} s (bound {bound} s), {still} still reserved; the sale meanwhile "
        f"{result['sale_paid_per_s']:.0f} paid/s")
    return result


def floor(inst: Instances, seconds: int, run_id: str) -> dict[str, dict[str, float]]:
    """What any request costs these instances, whatever it asks, and what a refusal costs: in
    the same closed loop, 100 connections per instance, `GET /healthz` (no database, no lock,
    a fixed body), then orders for a sold-out product (answered 409 by the sold-out flag, before
    any lock or write: the flood after a sale). The service's CPU per request, split between
    our code (user) and the kernel (system: the socket's syscalls and loopback TCP)."""
    pids = [p.pid for p in inst.procs]
    gone = http_json("POST", f"{inst.urls[0]}/api/products",
                     {"name": "sold out", "price_cents": 100, "stock": 1, "guard": "zk"},
                     inst.token)["id"]
    inst.order({"product_id": gone})
    buyers = inst.load_env()
    out = {}
    for name, get, products in (("healthz", "/healthz", []), ("refusal", None, [gone])):
        gen_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        before = user_sys_ticks(pids)
        counts = wrk(inst.urls, products, 100, seconds, f"{run_id}-{name}", get=get,
                     buyers=buyers)
        after = user_sys_ticks(pids)
        gen_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        n = max(counts["created"] if get else counts["other"], 1)
        user, system = ((a - b) / TICK * 1e6 / n for a, b in zip(after, before))
        generator = ((gen_after.ru_utime + gen_after.ru_stime)
                     - (gen_before.ru_utime + gen_before.ru_stime)) * 1e6 / n
        out[name] = {"requests_per_s": n / counts["seconds"], "user_us": user,
                     "system_us": system, "generator_us": generator}
        log(f"floor, {name}: {n / counts['seconds']:.0f}/s, service CPU µs per request: "
            f"user {user:.1f}, system {system:.1f}; wrk {generator:.1f}")
    return out
