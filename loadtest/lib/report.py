"""Turns loadtest/results/bench.json into bench.md (tables, targets) and bench.svg (chart):

    python3 -m loadtest.lib.report loadtest/results/bench.json

Plain Python, no plotting library: the chart is a hand-drawn SVG.
"""

import json
import math
import sys
from pathlib import Path
from typing import Any

from .common import svg as draw
from .common.text import fmt

COLOURS = {
    "pg-atomic per-request": "#9aa5b1",
    "pg-atomic batched": "#3e4c59",
    "zk per-request": "#f0b429",
    "zk batched": "#d64545",
}


def cell(cells: list[dict[str, Any]], label: str, instances: int = 3,
         hot: int = 1) -> dict[str, Any]:
    return next(c for c in cells if c["label"] == label and c["instances"] == instances
                and c["hot"] == hot)


def markdown(r: dict[str, Any]) -> str:
    cells = r["cells"]
    out = [f"# seckill bench ({r['run']}{', quick: not for figures' if r['quick'] else ''})", ""]
    out += [f"{r['machine']['cores']} cores, servers, ZooKeeper, PostgreSQL and k6 all on one "
            f"machine; open-model arrival rate doubled every {r['step_seconds']} s step until "
            "paid orders/s fell below 85 % of the offered rate. Saturation = the best step."
            + (" Each product's orders go to the one instance nginx's consistent hash picks "
               "(`POST /api/products/{id}/orders`, as deploy/nginx.conf routes them): with one "
               "hot product, one instance of 3 takes them all." if any(
                   c.get("routed") for c in cells) else ""), ""]
    out += ["| instances | hot products | guard | saturation (paid orders/s) | p99 there (ms) "
            "| ZK writes / paid order | exact |", "|---|---|---|---|---|---|---|"]
    for c in cells:
        zk = fmt(c["zk_writes_per_paid"], 3) if c["guard"] == "zk" else "0"
        exact = "yes" if c["exact"] else f"**NO** ({c['paid_201s']} 201s, {c['units_sold']} sold)"
        out.append(f"| {c['instances']} | {c['hot']} | {c['label']} | {fmt(c['saturation'])} | "
                   f"{fmt(c['p99_at_saturation'])} | {zk} | {exact} |")
    out.append("")
    if r["at_70"]:
        rate = r["at_70"][0]["offered"]
        out += [f"At {rate} orders/s (70 % of pg-atomic per-request's saturation; 3 instances, "
                "1 hot product):", "", "| guard | paid orders/s | p50 (ms) | p99 (ms) |",
                "|---|---|---|---|"]
        for s in r["at_70"]:
            out.append(f"| {s['label']} | {fmt(s['paid_per_s'])} | {fmt(s['p50_ms'], 1)} | "
                       f"{fmt(s['p99_ms'], 1)} |")
        out.append("")
    out += ["Bare lock (one product's lock, contenders on one session, acquire and release in a "
            "loop):", "", "| contenders | ours (handoffs/s) | Curator InterProcessMutex | ours / "
            "Curator |", "|---|---|---|---|"]
    for row in r["lock"]:
        out.append(f"| {row['contenders']} | {fmt(row['ours'])} | {fmt(row['curator'])} | "
                   f"{row['ours'] / row['curator']:.2f} |")
    out += ["", "Peak RSS per instance: " + ", ".join(
        f"{fmt(v, 1)} MiB with {n} instance(s)" for n, v in r["peak_rss_mib"].items()), ""]
    out += ["## Targets (3 instances, 1 hot product)", ""] + [
        f"- {'met' if ok else '**not met**'}: {text}" for ok, text in targets(r)]
    return "\n".join(out) + "\n"


def targets(r: dict[str, Any]) -> list[tuple[bool, str]]:
    cells = r["cells"]
    zb, zr = cell(cells, "zk batched"), cell(cells, "zk per-request")
    pr, pb = cell(cells, "pg-atomic per-request"), cell(cells, "pg-atomic batched")
    ratio = lambda a, b: a["saturation"] / b["saturation"] if b["saturation"] else math.inf
    checks = [
        (ratio(zb, pr) >= 4, f"zk batched ≥ 4× pg-atomic per-request: {ratio(zb, pr):.2f}×"),
        (ratio(zb, pb) >= 0.8, f"zk batched ≥ 0.8× pg-atomic batched: {ratio(zb, pb):.2f}×"),
        (ratio(zb, zr) >= 10, f"zk batched ≥ 10× zk per-request: {ratio(zb, zr):.2f}×"),
        (zb["zk_writes_per_paid"] <= 0.1,
         f"≤ 0.1 ZooKeeper writes per paid order at saturation: {zb['zk_writes_per_paid']:.3f}"),
    ]
    if r["at_70"]:
        p99 = {s["label"]: s["p99_ms"] for s in r["at_70"]}
        base = p99["pg-atomic per-request"]
        checks.append((p99["zk batched"] <= base,
                       f"p99 at 70 % of pg-atomic per-request's saturation: zk batched "
                       f"{fmt(p99['zk batched'], 1)} ms vs {fmt(base, 1)} ms"))
    # The targets' setting: 3 instances, k6 opening up to 4,000 connections among them (one
    # instance alone may hold all 4,000: its figure is printed above, not held to this).
    three = r["peak_rss_mib"].get("3", r["peak_rss_mib"].get(3))
    if three is not None:
        checks.append((three <= 64, "RSS ≤ 64 MiB per instance (3 instances, up to 4,000 "
                       f"connections in all): {three:.1f} MiB at most"))
    lows = [row["ours"] / row["curator"] for row in r["lock"]]
    checks.append((min(lows) >= 1.0,
                   f"bare lock ≥ 1.0× Curator at every contender count: {min(lows):.2f}× at worst"))
    checks.append((all(c["exact"] for c in cells),
                   "every run exact: 0 oversold, consistent, 201s == units sold"))
    return checks


def svg(r: dict[str, Any]) -> str:
    """Paid orders/s and p99 against the offered rate, 3 instances, 1 hot product."""
    w, h, pad = 460, 300, 50
    series = [(label, cell(r["cells"], label)["steps"]) for label in COLOURS]
    rates = sorted({step["offered"] for _, steps in series for step in steps})
    xmin, xmax = math.log2(rates[0]), math.log2(max(rates[-1], rates[0] * 2))
    x = lambda rate: pad + (math.log2(rate) - xmin) / (xmax - xmin) * (w - 2 * pad)

    def panel(ox, title, value, ymax, ylog, ylabel):
        if ylog:
            y = lambda v: h - pad - (math.log10(max(v, 1.0)) / math.log10(ymax)) * (h - 2 * pad)
            ticks = [10 ** k for k in range(0, int(math.log10(ymax)) + 1)]
        else:
            y = lambda v: h - pad - v / ymax * (h - 2 * pad)
            ticks = [ymax * k / 4 for k in range(5)]
        g = [draw.text(w / 2, 20, title, text_anchor="middle", font_weight="bold"),
             draw.text(w / 2, h - 10, "offered orders/s", text_anchor="middle"),
             draw.text(14, h / 2, ylabel, text_anchor="middle",
                       transform=f"rotate(-90 14 {h / 2})")]
        for t in ticks:
            g += [draw.line(pad - 4, y(t), w - pad, y(t), "#eee"),
                  draw.text(pad - 6, y(t) + 4, fmt(t), text_anchor="end", font_size=10)]
        g += draw.axes(pad, pad, w - pad, h - pad)
        g += [draw.text(x(rate), h - pad + 14, rate, text_anchor="middle", font_size=10)
              for rate in rates]
        for label, steps in series:
            points = [(x(step["offered"]), y(value(step) or 0)) for step in steps]
            g.append(draw.polyline(points, COLOURS[label]))
            g += [draw.circle(px, py, 3, COLOURS[label]) for px, py in points]
        return draw.group(g, transform=f"translate({ox},0)")

    top = max(step["paid_per_s"] for _, steps in series for step in steps)
    worst = max((step["p99_ms"] or 1) for _, steps in series for step in steps)
    body = [
        panel(0, "Paid orders/s (3 instances, 1 hot product)", lambda st: st["paid_per_s"],
              max(top * 1.1, 10), False, "paid orders/s"),
        panel(w, "p99 of POST /orders", lambda st: st["p99_ms"],
              10 ** math.ceil(math.log10(worst)), True, "p99 (ms, log)"),
        *draw.legend(COLOURS.items(), 60, h + 6, 210, swatch=(14, 4)),
    ]
    return draw.document(2 * w, h + 24, body)


def write(path: Path) -> None:
    """bench.md and bench.svg beside `path` (bench.json), and the markdown on stdout."""
    r = json.loads(path.read_text())
    path.with_suffix(".md").write_text(markdown(r))
    path.with_suffix(".svg").write_text(svg(r))
    print(markdown(r))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
