"""loadtest/run's verdict on one k6 scenario: the audit, ZooKeeper's cost from the instances'
/metrics, which of seckill.js's thresholds failed; prints the summary and exits 1 on any
problem. Run by loadtest/run, from the repository's root:

    python3 -m loadtest.lib.verdict RESULTS BASE_URLS K6_STATUS EXPECT_OVERSELL SCENARIO SNAPSHOT REPORT

RESULTS is k6's JSON summary, BASE_URLS the instances (comma-separated), EXPECT_OVERSELL 1
for an unguarded sale that must oversell or lose updates, SNAPSHOT where the counters of the
previous scenario are kept (they add up over a run), REPORT k6's HTML report.
"""

import json
import os
import sys
from typing import Any

from .common.text import fmt
from .common.web import http_json, metrics


def totals(urls: list[str]) -> dict[str, float]:
    """ZooKeeper's cost so far, over every instance: writes (creates and deletes: what a
    quorum fsyncs), paid orders, zk lock cycles and the orders they served."""
    t = {"zk_writes": 0.0, "paid": 0.0, "cycles": 0.0, "cycle_orders": 0.0}
    for s in (s for url in urls for s in metrics(url)):
        zk_cycle = s.labels.get("guard", "").startswith("zk")
        if s.name == "seckill_zk_operations_total" and s.labels.get("op") in ("create", "delete"):
            t["zk_writes"] += s.value
        elif s.name == "seckill_orders_total" and s.labels.get("outcome") == "paid":
            t["paid"] += s.value
        elif s.name == "seckill_lock_cycle_orders_count" and zk_cycle:
            t["cycles"] += s.value
        elif s.name == "seckill_lock_cycle_orders_sum" and zk_cycle:
            t["cycle_orders"] += s.value
    return t


def unsafety(audit: dict[str, Any]) -> list[str]:
    """What the audit shows went wrong, in words. An unguarded sale with stock to spare
    cannot oversell, but its read-then-write still loses decrements: stock + sold >
    stocked_total."""
    unsafe = []
    if audit["oversold"] > 0:
        unsafe.append(f"OVERSOLD by {fmt(audit['oversold'])}")
    if not audit["consistent"]:
        off = audit["stock"] + audit["sold"] - audit["stocked_total"]
        # Negative: units left stock that no order holds (a failed order that kept its units).
        what = "LOST UPDATES" if off > 0 else "LEAKED STOCK"
        unsafe.append(f"{what}: books off by {fmt(abs(off))} (stock says {fmt(audit['stock'])} "
                      f"left, orders hold {fmt(audit['sold'])} of {fmt(audit['stocked_total'])})")
    return unsafe


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    results, urls, k6_status, expect_oversell, scenario, snapshot, report = (
        argv[0], argv[1].split(","), int(argv[2]), argv[3] == "1", argv[4], argv[5], argv[6])
    now = totals(urls)
    before = json.load(open(snapshot)) if os.path.exists(snapshot) else {k: 0.0 for k in now}
    json.dump(now, open(snapshot, "w"))
    delta = {k: now[k] - before[k] for k in now}
    zk_line = (f"{delta['zk_writes']:.0f} writes, {delta['zk_writes'] / delta['paid']:.3f} per paid order"
               if delta["paid"] else f"{delta['zk_writes']:.0f} writes, no paid order")
    if delta["cycles"]:
        zk_line += f"; {delta['cycle_orders'] / delta['cycles']:.1f} orders per lock cycle"
    data = json.load(open(results))
    product = data["setup_data"]["product"]
    audit = http_json("GET", f"{urls[0]}/api/products/{product}/audit")
    m = data["metrics"]
    count = lambda name: int(m[name]["values"]["count"]) if name in m else 0
    paid, sold = count("orders_paid"), audit["sold"]
    lat = m.get("http_req_duration{name:POST /orders}", {}).get("values", {})
    seconds = data["state"]["testRunDurationMs"] / 1000
    requests = sum(count(n) for n in ("orders_paid", "orders_sold_out", "orders_retry", "orders_unexpected"))
    unsafe = unsafety(audit)
    problems = []
    if expect_oversell:
        if not unsafe:
            problems.append("expected the unguarded sale to oversell or lose updates, and the books balance")
    else:
        problems += unsafe
        if paid != sold:
            problems.append(f"{paid} buyers got 201 but {sold} units are sold")
    # Which of seckill.js's thresholds failed, from the summary (k6 exits 99 for any).
    crossed = [f"{name} {bound}" for name, metric in m.items()
               for bound, outcome in metric.get("thresholds", {}).items() if not outcome["ok"]]
    if crossed:
        problems.append("k6 thresholds crossed: " + "; ".join(crossed))
    elif k6_status != 0:
        problems.append(f"k6 exited {k6_status} (see the -k6.log)")
    verdict = "PASS" if not problems else "FAIL"
    if expect_oversell and unsafe:
        verdict += " (unsafety demonstrated: " + "; ".join(unsafe) + ")"
    print(f"""
  ── {scenario} · {data['setup_data']['guard']} · {len(data['setup_data']['base_urls'])} instance(s) · product {product} ──
  stock        {audit['stocked_total']} stocked, {audit['stock']} left
  paid         {paid}   (201s; units sold per audit: {sold})
  sold out     {count('orders_sold_out')}
  retries      {count('orders_retry')}   (retryable answers)
  unexpected   {count('orders_unexpected')}
  oversold     {audit['oversold']}
  consistent   {str(audit['consistent']).lower()}
  orders/s     {requests / seconds:.0f}   ({requests} requests in {seconds:.1f} s)
  POST /orders p50 {lat.get('med', 0):.1f} ms · p95 {lat.get('p(95)', 0):.1f} ms · p99 {lat.get('p(99)', 0):.1f} ms
  zookeeper    {zk_line}   (from /metrics)
  verdict      {verdict}{''.join(chr(10) + '               ' + p for p in problems)}
  results      {results}
  report       {report if os.path.exists(report) else "none (k6 writes none for a run this short)"}
""")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
