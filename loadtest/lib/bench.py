"""The bench's matrix, run by loadtest/bench (which installs and starts what it needs):
`python3 -m loadtest.lib.bench [--quick] [--step-seconds 5]`.

Every server and load generator here talks to 127.0.0.1 only. Each k6 step is bounded in
time (duration + graceful stop), and the stepping in count (MAX_RATE).
"""

import argparse
import json
import os
import re
import subprocess
import time
from typing import Any

from . import RESULTS, ROOT, report
from .common.zk import zxid
from .fleet import LOCK_BENCH, Instances, k6_step, log, row_done

JARS = ["curator-recipes", "curator-framework", "curator-client", "zookeeper",
        "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop"]

GUARDS = [  # (label, guard, batch_max)
    ("pg-atomic per-request", "pg-atomic", 1),
    ("pg-atomic batched", "pg-atomic", 256),
    ("zk per-request", "zk", 1),
    ("zk batched", "zk", 256),
]
FIRST_RATE, MAX_RATE = 200, 12800


def cell_line(cell: dict[str, Any], done: int, total: int) -> str:
    """The matrix's row for `cell` (what `saturate` returns), with bench.md's figures."""
    figures = [f"saturation {cell['saturation']:.0f} paid/s",
               f"p99 there {cell['p99_at_saturation'] or 0:.0f} ms"]
    if cell["guard"] == "zk":
        figures.append(f"ZK writes/paid {cell['zk_writes_per_paid']:.3f}")
    figures.append(f"{cell['paid_201s']} 201s, {cell['units_sold']} units sold")
    return row_done(done, total, f"{cell['label']} ×{cell['instances']} hot {cell['hot']}",
                    figures, cell["exact"])


def saturate(inst: Instances, label: str, guard: str, batch: int, hot: int, seconds: int,
             quick: bool, run_id: str) -> dict[str, Any]:
    """Steps the offered rate up (doubling) until paid orders/s fall behind it. The orders are
    routed by product, as nginx routes them (`POST /api/products/{id}/orders` to the instance
    its consistent hash picks: fleet.k6_step)."""
    products = [inst.product(guard, batch) for _ in range(hot)]
    steps, rate = [], FIRST_RATE
    while rate <= MAX_RATE:
        before = zxid(os.environ["SECKILL_ZK"])
        step = k6_step(inst.urls, products, rate, seconds, f"{run_id}-{len(steps)}",
                       buyers=inst.load_env())
        step["zk_writes"] = zxid(os.environ["SECKILL_ZK"]) - before
        steps.append(step)
        log(f"{label:22} ×{len(inst.urls)} hot {hot:2}: offered {rate:5}/s → paid "
            f"{step['paid_per_s']:7.0f}/s, p99 {step['p99_ms'] or 0:7.0f} ms, "
            f"ZK writes/paid {step['zk_writes'] / max(step['paid'], 1):.3f}")
        if quick or step["paid_per_s"] < 0.85 * rate:
            break
        rate *= 2
    best = max(steps, key=lambda s: s["paid_per_s"])
    audits = [inst.audit(p) for p in products]
    paid = sum(s["paid"] for s in steps)
    sold = sum(a["sold"] for a in audits)
    # k6 waits for every answer (see bench.js), so each unit sold was answered 201.
    exact = all(a["oversold"] == 0 and a["consistent"] for a in audits) and paid == sold
    return {"label": label, "guard": guard, "batch_max": batch, "instances": len(inst.urls),
            "hot": hot, "steps": steps, "saturation": best["paid_per_s"],
            "p99_at_saturation": best["p99_ms"],
            "zk_writes_per_paid": best["zk_writes"] / max(best["paid"], 1),
            "exact": exact, "paid_201s": paid, "units_sold": sold,
            # k6_step's default: each product's orders to its instance, as nginx routes them.
            "routed": True}


def lock_bench(contenders: list[int], seconds: int,
               run_id: str) -> list[dict[str, Any]]:
    connect = os.environ["SECKILL_ZK"]
    rows = []
    for n in contenders:
        ours = subprocess.run(
            [str(LOCK_BENCH), connect, f"/seckill-bench/{run_id}-lock-ours-{n}", str(n), str(seconds)],
            capture_output=True, text=True, check=True).stdout
        classpath = ":".join(f"/usr/share/java/{j}.jar" for j in JARS)
        theirs = subprocess.run(
            ["java", "-cp", classpath, str(ROOT / "tests" / "interop" / "CuratorMutex.java"),
             connect, f"/seckill-bench/{run_id}-lock-curator-{n}/locks/stock/1", "bench",
             str(n), str(seconds)],
            capture_output=True, text=True, check=True).stdout
        rate = lambda out: (lambda h, s: h / s)(*map(float, re.findall(r"[\d.]+", out)[:2]))
        row = {"contenders": n, "ours": rate(ours), "curator": rate(theirs)}
        log(f"bare lock, {n:2} contenders: ours {row['ours']:6.0f}/s, Curator {row['curator']:6.0f}/s")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--step-seconds", type=int, default=5)
    args = parser.parse_args()
    run_id = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    seconds = 2 if args.quick else args.step_seconds
    cells, rss, at_70 = [], {}, []
    sizes, hots = (1, 3), (1, 10)
    for n in sizes:
        inst = Instances(n, run_id)
        try:
            for hot in hots:
                for label, guard, batch in GUARDS:
                    cells.append(saturate(inst, label, guard, batch, hot, seconds, args.quick,
                                          f"{run_id}-{n}-{hot}-{guard}-{batch}"))
                    log(cell_line(cells[-1], len(cells), len(sizes) * len(hots) * len(GUARDS)))
            if n == 3:
                # Latency below saturation: every guard at 70 % of pg-atomic per-request's.
                base = next(c for c in cells if c["instances"] == 3 and c["hot"] == 1
                            and c["label"] == "pg-atomic per-request")
                rate = max(int(base["saturation"] * 0.7), 50)
                for label, guard, batch in GUARDS:
                    products = [inst.product(guard, batch)]
                    step = k6_step(inst.urls, products, rate, seconds,
                                   f"{run_id}-70-{guard}-{batch}", buyers=inst.load_env())
                    step["label"] = label
                    at_70.append(step)
                    log(f"{label:22} at {rate}/s: p99 {step['p99_ms'] or 0:.0f} ms")
            rss[n] = inst.peak_rss()
        finally:
            inst.stop()
    locks = lock_bench([1, 4, 16, 64], 2 if args.quick else 5, run_id)
    results = {"run": run_id, "quick": args.quick, "step_seconds": seconds, "cells": cells,
               "at_70": at_70, "peak_rss_mib": rss, "lock": locks,
               "machine": {"cores": os.cpu_count()}}
    (RESULTS / "bench.json").write_text(json.dumps(results, indent=1))
    report.write(RESULTS / "bench.json")
    if not all(c["exact"] for c in cells):
        raise SystemExit("a bench run was not exact: see loadtest/results/bench.md")


if __name__ == "__main__":
    main()
