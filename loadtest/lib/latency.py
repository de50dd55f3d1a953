"""Run by loadtest/latency (which starts what it needs): where an order's time goes below
saturation, pg-atomic per-request against zk batched, read off the instances' debug lines.
`python3 -m loadtest.lib.latency [--seconds 20] [--rounds 2] [--rate R] [--report]`.

Every server and load generator here talks to 127.0.0.1 only; each k6 step is bounded in time.
"""

import argparse
import json
import os
import re
import time
from datetime import datetime
from typing import Any

from . import RESULTS
from .common.text import fmt
from .fleet import Instances, k6_step, log

GUARDS = [("pg-atomic per-request", "pg-atomic", 1), ("zk batched", "zk", 256)]
# The lines that time each stage: the lock granted, an order served by a cycle, the cycle's
# commit, the order answered, and the request's latency (tower-http's response line).
RUST_LOG = "seckill=debug,tower_http=debug,info"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A lock cycle read off the logs: (entered, committed, waited ms, instance).
Cycle = tuple[float, float, int, int]


def at(line: str) -> float:
    return datetime.fromisoformat(line[:27].replace("Z", "+00:00")).timestamp()


def field(line: str, name: str, default: int | None = None) -> int | None:
    m = re.search(rf"\b{name}=(\d+)", line)
    return int(m.group(1)) if m else default


def quantile(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def stages(n: int) -> tuple[list[dict[str, Any]], list[Cycle]]:
    """Per paid order: lock wait, lock cycle, payment (ms); per lock cycle: (entered, committed,
    waited, instance); read off the instances' logs."""
    orders, cycles = [], []
    for i in range(n):
        entered, committed, served, answered = {}, {}, {}, {}
        for line in open(RESULTS / f"latency-server-{i}.log", errors="replace"):
            line = ANSI.sub("", line)
            rid = re.search(r'request_id="([^"]+)"', line)
            if "lock granted" in line:
                entered[field(line, "cycle")] = (at(line), field(line, "waited_ms", 0))
            elif "stock written and committed" in line:
                committed[field(line, "cycle")] = at(line)
            elif rid and "served by a lock cycle" in line:
                served[rid.group(1)] = field(line, "cycle")
                # pg-atomic takes no lock before its cycle: the cycle starts with its first order.
                entered.setdefault(field(line, "cycle"), (at(line), 0))
            elif rid and "order answered" in line and 'outcome="paid"' in line:
                answered[rid.group(1)] = (at(line), field(line, "lock_wait_ms", 0))
        for cycle, (t, waited) in entered.items():
            if cycle in committed:
                cycles.append((t, committed[cycle], waited, i))
        for rid, (t, lock_wait) in answered.items():
            cycle = served.get(rid)
            if cycle in entered and cycle in committed:
                orders.append({"lock_wait": lock_wait,
                               "cycle": (committed[cycle] - entered[cycle][0]) * 1000,
                               "payment": (t - committed[cycle]) * 1000})
    return orders, sorted(cycles)


def handoffs(cycles: list[Cycle]) -> tuple[list[float], float | None]:
    """Commit → next grant (ms), where the next cycle is another instance's that was already
    waiting when the lock was let go; and the share of the time the lock was held."""
    gaps = []
    for (_, c0, _, i0), (g1, _, w1, i1) in zip(cycles, cycles[1:]):
        if i1 != i0 and g1 - w1 / 1000 < c0:
            gaps.append((g1 - c0) * 1000)
    span = cycles[-1][1] - cycles[0][0] if cycles else 0
    held = sum(c - g for g, c, _, _ in cycles)
    return gaps, (held / span if span else None)


def run(label: str, guard: str, batch: int, rate: int, seconds: int,
        tag: str) -> dict[str, Any]:
    inst = Instances(3, tag, base_port=8391, rust_log=RUST_LOG, logs="latency-server")
    try:
        product = inst.product(guard, batch)
        buyers = inst.load_env()
        # Spread over the 3 instances (POST /orders), as these rows always were: the lock's
        # handoffs between instances are part of what they read.
        k6_step(inst.urls, [product], rate, 5, f"{tag}-warm", buyers=buyers, routed=False)
        for i in range(3):  # only the measured step's lines
            (RESULTS / f"latency-server-{i}.log").write_text("")
        step = k6_step(inst.urls, [product], rate, seconds, tag, buyers=buyers, routed=False)
        audit = inst.audit(product)
    finally:
        inst.stop()
    orders, cycles = stages(3)
    # Only a ZooKeeper lock is held by one instance at a time: pg-atomic's transactions
    # overlap, each waiting for the row inside its own cycle.
    gaps, busy = handoffs(cycles) if guard == "zk" else ([], None)
    row = {"label": label, "guard": guard, "rate": rate, "paid_per_s": step["paid_per_s"],
           "k6_p50_ms": step["p50_ms"], "k6_p99_ms": step["p99_ms"], "orders": len(orders),
           "orders_per_cycle": len(orders) / max(len(cycles), 1), "lock_busy": busy,
           "handoffs": len(gaps) if guard == "zk" else None, "exact": audit["oversold"] == 0 and audit["consistent"]}
    for name in ("lock_wait", "cycle", "payment"):
        values = [o[name] for o in orders]
        row[f"{name}_p50_ms"], row[f"{name}_p99_ms"] = quantile(values, .5), quantile(values, .99)
    row["handoff_p50_ms"], row["handoff_p99_ms"] = quantile(gaps, .5), quantile(gaps, .99)
    log(f"{label:22} at {rate}/s: k6 p50 {ms(row['k6_p50_ms'])} p99 {ms(row['k6_p99_ms'])} ms; "
        f"lock wait p99 {ms(row['lock_wait_p99_ms'], 0)}, cycle p99 {ms(row['cycle_p99_ms'])}, "
        f"payment p99 {ms(row['payment_p99_ms'])}, handoff p50 {ms(row['handoff_p50_ms'])} ms")
    return row


def ms(v: float | None, digits: int = 1) -> str:
    """A figure of latency.md, written as it always was: no thousands separator."""
    return fmt(v, digits, group="")


def report(results: dict[str, Any]) -> None:
    lines = [
        "# Where an order's time goes below saturation",
        "",
        f"`loadtest/latency`, run {results['run']}: 3 instances on this {results['cores']}-core "
        "machine with PostgreSQL, ZooKeeper, the provider and k6; one hot product; an "
        f"open-model k6 step of {results['seconds']} s per row at **{results['rate']} orders/s**, "
        f"70 % of pg-atomic per-request's saturation ({ms(results['saturation'], 0)}/s, a k6 step "
        "at 200/s in the same run). Instances log at debug (the lines that time each stage), "
        "both guards alike. Milliseconds.",
        "",
        "| round | guard | paid/s | k6 p50 | k6 p99 | lock wait p50 / p99 | lock cycle p50 / p99 "
        "| payment p50 / p99 | orders per cycle | lock held (%) | handoffs | handoff p50 / p99 | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['round']} | {r['label']} | {r['paid_per_s']:.0f} | {ms(r['k6_p50_ms'])} | "
            f"**{ms(r['k6_p99_ms'])}** | {ms(r['lock_wait_p50_ms'], 0)} / {ms(r['lock_wait_p99_ms'], 0)} | "
            f"{ms(r['cycle_p50_ms'])} / {ms(r['cycle_p99_ms'])} | "
            f"{ms(r['payment_p50_ms'])} / {ms(r['payment_p99_ms'])} | {r['orders_per_cycle']:.2f} | "
            f"{ms(r['lock_busy'] and r['lock_busy'] * 100, 0)} | {ms(r['handoffs'], 0)} | "
            f"{ms(r['handoff_p50_ms'])} / {ms(r['handoff_p99_ms'])} | {'yes' if r['exact'] else '**no**'} |")
    lines += [
        "",
        "- **lock wait**: placed → the guard entered (pg-atomic takes its row lock inside the "
        "cycle: 0 here). **lock cycle**: entered → committed (zk: the fence claim's commit, then "
        "the transaction; pg-atomic: the transaction). **payment**: committed → answered (the "
        "charge at the provider and its answer written). Each stage's quantiles are taken "
        "apart, so they do not add up to k6's.",
        "- **lock held**: the share of the step's time some instance held the product's lock "
        "(entered → committed). **handoff**: one instance's commit → the grant to another "
        "instance that was waiting (its release's delete, ZooKeeper's watch event, its grant); "
        "pg-atomic's waiters queue on the row lock inside PostgreSQL and are not timed here.",
    ]
    (RESULTS / "latency.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--report", action="store_true",
                        help="only redraw latency.md from latency.json")
    parser.add_argument("--rate", type=int, help="offered orders/s (default: 70 %% of "
                        "pg-atomic per-request's saturation, measured first)")
    args = parser.parse_args()
    if args.report:
        return report(json.loads((RESULTS / "latency.json").read_text()))
    run_id = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    saturation = None
    rate = args.rate
    if rate is None:
        inst = Instances(3, f"lat{run_id}", base_port=8391, logs="latency-server")
        try:
            step = k6_step(inst.urls, [inst.product("pg-atomic", 1)], 200, 5, f"lat{run_id}-sat",
                           buyers=inst.load_env(), routed=False)
        finally:
            inst.stop()
        saturation = step["paid_per_s"]
        rate = max(int(saturation * 0.7), 20)
        log(f"pg-atomic per-request at 200/s offered: {saturation:.0f} paid/s; rows at {rate}/s")
    rows = []
    for n in range(1, args.rounds + 1):
        # The guard that goes first alternates round by round.
        for label, guard, batch in (GUARDS if n % 2 else GUARDS[::-1]):
            row = run(label, guard, batch, rate, args.seconds, f"lat{run_id}-{n}-{guard}-{batch}")
            row["round"] = n
            rows.append(row)
    results = {"run": run_id, "rate": rate, "saturation": saturation, "seconds": args.seconds,
               "cores": os.cpu_count(), "rows": rows}
    (RESULTS / "latency.json").write_text(json.dumps(results, indent=1))
    report(results)
    if not all(r["exact"] for r in rows):
        raise SystemExit("a row was not exact: see loadtest/results/latency.md")


if __name__ == "__main__":
    main()
