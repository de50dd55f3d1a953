"""The rush's report (loadtest/lib/rush.py writes it): NAME.md, the targets, the rush beside the
one-hot row and the sale without a line, the memory step; NAME.svg, the units paid against the
time from the opening. `python3 -m loadtest.lib.rushreport NAME` redraws both from NAME.json."""

import json
import sys
from typing import Any

from . import RESULTS
from .common import svg as draw
from .common.text import fmt
from .rushcheck import targets

COLOURS = {"line": "#d64545", "crowd_sale": "#3e4c59", "one_hot": "#9aa5b1"}


def cores(x: dict[str, Any], key: str) -> str:
    return fmt(x[key] / x["wall_s"], 2) if x.get("wall_s") else "–"


def markdown(r: dict[str, Any], chart: str | None = None) -> str:
    c, one, s = r["crowd"], r["one_hot"], r["line"]
    crowd = r.get("crowd_sale")
    per_vu = -(-(c["buyers"] + c["late"]) // max(c["vus"], 1))
    out = [f"# The rush: a sale that opens at its second ({r['run']}"
           f"{', quick: not for figures' if r.get('quick') else ''})", ""]
    out += [
        f"{r['machine']['cores']} cores; 3 instances (`--buyer-auth {r.get('buyer_auth')}`), "
        "PostgreSQL, ZooKeeper, the payment provider and k6 on one machine. One run: the one-hot "
        f"row first ({one['label']}, 1 hot product, wrk's closed loop of {fmt(one['connections'])} "
        f"connections for {fmt(one['seconds'], 1)} s), then on the same instances the rush: "
        f"{fmt(c['units'])} units opening at a second set when the product is made, "
        f"{fmt(c['buyers'])} buyers (signed in beforehand; tokens the instances had not seen) "
        f"joining its line at random moments of the {fmt(c['join_window'])} s before the "
        f"opening and {fmt(c['late'])} more in the 2 s after; each looks again when its "
        "`next_look_ms` says (never sooner) and, once admitted, orders once with its pass "
        "(an answer that says to retry is sent again with the same pass and Idempotency-Key, "
        "5 tries at most)."
        + (f" Without a line: the same {fmt(c['buyers'])} buyers, a product of "
           f"{fmt(c['units'])} units and no line, each ordering at a random moment of the "
           "opening second (`not_open` sent again at the opening, a retryable answer after "
           "its Retry-After, 20 tries at most, one Idempotency-Key)." if crowd else ""), "",
        f"The client: k6, {c['vus']} VUs each driving {per_vu} buyers as async tasks, each with "
        f"its own state and timers (at most {c['inflight']} requests in flight per VU, 3× as "
        "many without a line), not a VU per buyer: on 2 cores 30,000 VUs would spend more CPU "
        f"than the sale. From the opening to the last buyer's end ({fmt(s['wall_s'], 1)} s) k6 "
        f"used {cores(s, 'client_cpu_s')} cores on average, the 3 instances "
        f"{cores(s, 'service_cpu_s')} (the rest: PostgreSQL, ZooKeeper, the provider).", ""]
    out += ["## Targets", ""] + [f"- {'met' if ok else '**not met**'}: {w}"
                                 for ok, w in targets(r)] + [""]
    cols = [("rush (line)", s)] + ([("no line", crowd)] if crowd else [])
    head = "| | one-hot row | " + " | ".join(n for n, _ in cols) + " |"
    rows = [head, "|---" * (len(cols) + 2) + "|"]

    def line(label: str, first: str, f) -> None:
        rows.append(f"| {label} | {first} | " + " | ".join(f(x) for _, x in cols) + " |")

    k = lambda x, key: x["k6"].get(key)
    line("buyers", f"{fmt(one['connections'])} connections", lambda x: fmt(x["buyers"]))
    line("time to sell out (s)", f"{fmt(c['units'] / one['paid_per_s'], 2)} at its rate"
         if one["paid_per_s"] else "–", lambda x: fmt(x["sell_out_s"], 2))
    line("paid orders/s (goodput, from the opening)", fmt(one["paid_per_s"]),
         lambda x: fmt(x["goodput"]))
    line("requests sent", fmt(one.get("requests")), lambda x: fmt(k(x, "requests")))
    line("joins / looks / orders", "– / – / all",
         lambda x: f"{fmt(k(x, 'joins'))} / {fmt(k(x, 'looks'))} / {fmt(k(x, 'orders'))}")
    line("requests per buyer (most looks of one)", "–",
         lambda x: f"{fmt(x['requests_per_buyer'], 2)} ({x['looks_max']})")
    line("POST /orders p99 per request (ms)", fmt(one.get("p99_ms"), 1),
         lambda x: fmt(k(x, "order_p99_ms"), 1))
    line("order p50 / p99 end to end, retries in (ms)", "–",
         lambda x: f"{fmt(x['order_e2e_p50_ms'])} / {fmt(x['order_e2e_p99_ms'])}")
    line("GET line/me p99 (ms)", "–", lambda x: fmt(k(x, "look_p99_ms"), 1))
    line("fairness", "–", lambda x: (
        f"ρ before {fmt(x['fairness_before'], 3)}, after {fmt(x['fairness_after'], 3)}"
        if x["line"] else f"ρ(arrival, answer) {fmt(x['fairness_served'], 3)}; first "
        f"{fmt(c['units'])} arrivals served {fmt(100 * x['first_arrivals_served'], 1)} %"))
    line("client / instances' CPU, opening to sell-out (cores)", "–", lambda x: (
        f"{fmt(x['sale_cores']['client'], 2)} / {fmt(x['sale_cores']['service'], 2)}"
        if x.get("sale_cores") else "–"))
    line("client / instances' CPU, opening to the last buyer (cores)", "–",
         lambda x: f"{cores(x, 'client_cpu_s')} / {cores(x, 'service_cpu_s')}")
    line("peak RSS per instance (MiB)", fmt(one.get("peak_rss_mib"), 1),
         lambda x: fmt(x["peak_rss_mib"], 1))
    out += ["## Side by side", ""] + rows + [""]
    if chart:
        out += [f"![units paid against time]({chart})", ""]
    out += ["## What the buyers got", ""]
    for name, x in cols:
        out.append(f"- {name}: answers to the last order " + ", ".join(
            f"{w} × {fmt(n)}" for w, n in sorted(x["outcomes"].items(), key=lambda i: -i[1])))
        if x["errors"]:
            out.append(f"  - stopped early: " + ", ".join(f"{w} × {n}" for w, n in x["errors"].items()))
        if x["late_sends"]:
            out.append(f"  - {fmt(x['late_sends'])} first requests sent over 250 ms after their "
                       f"moment (the client behind; p99 {fmt(x['client_lag_p99_ms'])} ms)")
        if x["line"]:
            ls = x["queue"]
            out.append(f"  - the line: {fmt(ls.get('joined'))} joined, "
                       f"{fmt(ls.get('drawn_places'))} drawn, {fmt(ls.get('admitted'))} let in, "
                       f"measured rate {fmt(ls.get('rate'))} orders/s; {fmt(x['admitted'])} "
                       f"buyers saw their pass, {fmt(x['admitted_wait_s']['p50'], 2)} s after the "
                       f"opening at the median, {fmt(x['admitted_wait_s']['max'], 2)} s at most")
            j = x.get("join_ms", {})
            out.append(f"  - joins: p50 / p99 {fmt(j.get('before', {}).get('p50'))} / "
                       f"{fmt(j.get('before', {}).get('p99'))} ms before the opening, "
                       f"{fmt(j.get('after', {}).get('p50'))} / {fmt(j.get('after', {}).get('p99'))} "
                       "ms after; fairness after the opening by the server's `joined_at` "
                       f"{fmt(x.get('fairness_after_by_joined_at'), 3)}; the longest "
                       "`next_look_ms` a buyer was given in line: p50 "
                       f"{fmt(x.get('next_look_ms', {}).get('p50'))} ms, at most "
                       f"{fmt(x.get('next_look_ms', {}).get('max'))}")
    out.append("")
    if crowd:
        out += ["Checks of the sale without a line:", ""]
        out += [f"- {'holds' if ok else '**broken**'}: {w}" for ok, w in crowd["checks"]] + [""]
    mem = r.get("memory")
    if mem:
        out += [f"## Memory: {fmt(mem['joins'])} buyers in one line", "",
                f"3 instances of their own (`--buyer-auth open`: no token cache to count), one "
                f"product opening in an hour; {fmt(mem['joined'])} joined in "
                f"{fmt(mem['seconds'])} s ({mem['failed']} failed), spread over the instances.",
                "", "| instance | RSS before (MiB) | RSS after (MiB) | peak (MiB) |",
                "|---|---|---|---|"]
        for i, (b, a) in enumerate(zip(mem["rss_before_mib"], mem["rss_after_mib"])):
            out.append(f"| {i} | {fmt(b['rss'], 1)} | {fmt(a['rss'], 1)} | {fmt(a['hwm'], 1)} |")
        out.append("")
    return "\n".join(out) + "\n"


def svg(r: dict[str, Any]) -> str:
    """Units paid against seconds from the opening: the rush, the sale without a line, and
    the one-hot row's rate as a straight line."""
    w, h, pad = 640, 320, 56
    sales = [(k, r[k]) for k in ("line", "crowd_sale") if r.get(k) and r[k]["curve"]]
    units = r["crowd"]["units"]
    one = r["one_hot"]["paid_per_s"] or 1
    xmax = max([units / one * 1.3] + [x["curve"][-1][0] for _, x in sales]) or 1
    x = lambda t: pad + t / xmax * (w - 2 * pad)
    y = lambda n: h - pad - n / max(units, 1) * (h - 2 * pad)
    g = [draw.text(w / 2, 22, f"Units paid from the opening ({fmt(units)} in stock)",
                   text_anchor="middle", font_weight="bold"),
         draw.text(w / 2, h - 14, "seconds from the opening", text_anchor="middle"),
         draw.text(16, h / 2, "units paid", text_anchor="middle",
                   transform=f"rotate(-90 16 {h / 2})")]
    for k in range(5):
        g += [draw.line(pad, y(units * k / 4), w - pad, y(units * k / 4), "#eee"),
              draw.text(pad - 6, y(units * k / 4) + 4, fmt(units * k / 4), text_anchor="end",
                        font_size=10),
              draw.text(x(xmax * k / 4), h - pad + 14, fmt(xmax * k / 4, 1),
                        text_anchor="middle", font_size=10)]
    g += draw.axes(pad, pad, w - pad, h - pad)
    end = min(units / one, xmax)
    g.append(draw.element("polyline", points=f"{x(0):.1f},{y(0):.1f} {x(end):.1f},{y(one * end):.1f}",
                          fill="none", stroke=COLOURS["one_hot"], stroke_width=2,
                          stroke_dasharray="6 4"))
    for key, sale in sales:
        g.append(draw.polyline([(x(t), y(n)) for t, n in sale["curve"]], COLOURS[key]))
    names = {"line": "rush, line", "crowd_sale": "no line", "one_hot": "one-hot row's rate"}
    g += draw.legend([(names[k], COLOURS[k]) for k in ("line", "crowd_sale", "one_hot")
                      if k == "one_hot" or r.get(k)], pad, h + 4, 170, swatch=(14, 4))
    return draw.document(w, h + 24, g)


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "rush"
    results = json.loads((RESULTS / f"{name}.json").read_text())
    (RESULTS / f"{name}.svg").write_text(svg(results))
    (RESULTS / f"{name}.md").write_text(markdown(results, chart=f"{name}.svg"))
    print(markdown(results), end="")
