"""The saturation run's report: saturation.md (the rows, the lapse, the floors and bounds,
the profiles) and saturation.svg (a bar per row: paid orders/s, and each part's CPU per paid
order, stacked)."""

from typing import Any

from .. import RESULTS
from ..common import svg as draw
from ..common.text import fmt
from .bounds import bounds
from .cpu import PARTS
from .profile import where


def ours(cpu: dict[str, float]) -> float:
    """The sale's own CPU: the service, its PostgreSQL and ZooKeeper."""
    return cpu["service"] + cpu["postgresql"] + cpu["zookeeper"]


def per_cycle_figures(x: dict[str, Any]) -> str:
    """Orders and ZooKeeper writes per lock cycle, and lock cycles per shared transaction
    (`–` where the row has no such figure: the open model, older reports, pg-atomic's
    transactions of their own)."""
    cycles = x.get("lock_cycles")
    per_tx = x.get("cycles_per_transaction")
    return " | ".join([
        fmt(x["orders_per_cycle"], 1) if cycles else "–",
        fmt(x["zk_writes"] / cycles, 2) if cycles and x["guard"] == "zk" else "–",
        fmt(per_tx, 2) if per_tx else "–",
    ])


def accepted(x: dict[str, Any]) -> str:
    """The accepted orders' p99 as a row reports it: the server's histogram bucket it falls
    under (closed loops: `≤`), or k6's own figure (the open model)."""
    p99 = x.get("accepted_p99_ms")
    if p99 is None:
        return "–"
    if x["connections"]:
        return "≤ " + (fmt(p99) if p99 != float("inf") else "∞")
    return fmt(p99, 1)


def buyers_said(r: dict[str, Any]) -> str:
    """Who the rows' orders come from, in words: a report from before buyers signed in has no
    `buyers` (every order a new buyer, named in the body)."""
    fleets = r.get("buyers")
    if not fleets:
        return "every order a new buyer"
    this = fleets.get("this") or next(iter(fleets.values()))
    how = lambda auth: ("signed in: `--buyer-auth demo`, an order carries its buyer's token, "
                        "fetched before the rows" if auth == "demo" else
                        "`--buyer-auth open`, the buyer named in the body" if auth else
                        "a build from before sign-in, the buyer named in the body")
    said = [how(this["auth"])]
    said += [f"{name}: {how(f['auth'])}" for name, f in fleets.items() if name != "this"]
    new = (", a new pool for each row's measured run (signed in after its warm-up: buyers and "
           "tokens the instances had never seen)" if this.get("new_each_row") else "")
    return (f"every order from one of {fmt(this['pool'])} buyers, round-robin{new} "
            f"({'; '.join(said)})")


def auth_compare(r: dict[str, Any]) -> list[str]:
    """The rows run with tokens (this fleet, `--buyer-auth demo`) against without (the `open`
    fleet: the same build, the buyer named in the body), row by row: the rate, and the CPU per
    paid order of the service (the bound of issue 47: at most 10 % more with tokens) and of
    the service, PostgreSQL and ZooKeeper together."""
    this = [x for x in r["rows"] if x["build"] == "this"]
    other = {(x["label"], x["hot"]): x for x in r["rows"] if x["build"] == "open"}
    pairs = [(a, other[(a["label"], a["hot"])]) for a in this if (a["label"], a["hot"]) in other]
    if not pairs:
        return []
    out = ["", "## Signed in against not (issue 47)", "",
           "Each row ran twice, side by side on fleets of their own: **this** build with "
           "`--buyer-auth demo` (every order with its buyer's token) and the same build with "
           "`--buyer-auth open` (**open**: no token, the buyer named in the body), as many "
           "buyers on each, the one to go first alternating row by row"
           + (", the other way round from a run without `--swap`." if r.get("swap") else ".")
           + " The bound: with tokens, at most 10 % more service CPU per paid order.", "",
           "| row | paid orders/s, tokens / open | service CPU µs / paid, tokens | open | "
           "× | service + PostgreSQL + ZooKeeper, tokens | open | × | within 10 % |",
           "|---|---|---|---|---|---|---|---|---|"]
    for a, b in pairs:
        ca, cb = a["cpu_us_per_paid"], b["cpu_us_per_paid"]
        service = ca["service"] / max(cb["service"], 1e-9)
        sale = ours(ca) / max(ours(cb), 1e-9)
        out.append(f"| {a['label']}, {a['hot']} hot | {fmt(a['paid_per_s'])} / "
                   f"{fmt(b['paid_per_s'])} ({a['paid_per_s'] / max(b['paid_per_s'], 1):.2f}×) | "
                   f"{fmt(ca['service'], 1)} | {fmt(cb['service'], 1)} | **{service:.2f}×** | "
                   f"{fmt(ours(ca), 1)} | {fmt(ours(cb), 1)} | {sale:.2f}× | "
                   f"{'yes' if service <= 1.10 else '**no**'} |")
    floors = r.get("floor") or {}
    refusal = {b: floors[b]["refusal"] for b in ("this", "open") if "refusal" in floors.get(b, {})}
    if len(refusal) == 2:
        cost = {b: x["user_us"] + x["system_us"] for b, x in refusal.items()}
        out += ["", f"A refusal (an order for a sold-out product, the floors below): "
                f"{fmt(cost['this'], 1)} µs of service CPU with a token against "
                f"{fmt(cost['open'], 1)} without ({cost['this'] / max(cost['open'], 1e-9):.2f}×)."]
    return out


# The label of the rows 1, 10 and 100 hot products are held to one another by, uniform and
# routed (a report from before routing has only the first, its rows no `routed`).
SALE_LABEL = {False: "zk batched", True: "zk batched, routed"}


def routed_cell(x: dict[str, Any]) -> str:
    """The table's `routed` cell: no, or yes and the products of each instance that got any
    (`POST /orders` to those instances where the build has no product route: a baseline's)."""
    if not x.get("routed"):
        return "no"
    split = "/".join(str(w["products"]) for w in x.get("wrks") or [])
    old = "" if x.get("by_path", True) else ", `POST /orders`"
    return f"yes ({split}{old})" if split else "yes"


def one_hot(rows: list[dict[str, Any]], routed: bool) -> dict[str, Any] | None:
    """The rows' one-hot row (zk batched, 300 connections), uniform or routed."""
    return next((x for x in rows if x["label"] == SALE_LABEL[routed] and x["hot"] == 1
                 and bool(x.get("routed")) == routed), None)


def summary(r: dict[str, Any], b: str) -> list[str]:
    """Build `b`'s lines under the table: many hot products against one, uniform and routed;
    one hot product against the run's healthz ceiling; the crowds against the one-hot row of
    their routing (their refusals' cost, RSS at 4,000 connections); the longest handover and
    the most ZooKeeper writes per paid order of any row."""
    rows = [x for x in r["rows"] if x["build"] == b]
    out = []
    ones = {routed: one_hot(rows, routed) for routed in (False, True)}
    for routed, one in ones.items():
        for x in rows if one else []:
            if x["label"] == SALE_LABEL[routed] and x["hot"] > 1 and bool(x.get("routed")) == routed:
                out.append(f"- {b}: {x['hot']} hot products at "
                           f"{x['paid_per_s'] / max(one['paid_per_s'], 1e-9):.2f}× one hot "
                           f"product's rate ({'routed' if routed else 'uniform'}, zk batched)")
    floor = (r.get("floor") or {}).get(b)
    # Reports from before the refusal floor held the healthz floor alone.
    ceiling = floor and floor.get("healthz", floor).get("requests_per_s")
    for routed, one in ones.items():
        if one and ceiling:
            out.append(f"- {b}: one hot product ({'routed' if routed else 'uniform'}) at "
                       f"{one['paid_per_s'] / ceiling:.3f}× the healthz ceiling of this run "
                       f"({fmt(one['paid_per_s'])} against {fmt(ceiling)}/s: GET /healthz, "
                       "same wrk, 100 connections per instance)")
    for over in (x for x in rows if x["connections"] >= 3000 or not x["connections"]):
        routed = bool(over.get("routed"))
        one = ones[routed] or ones[not routed]
        if not one:
            continue
        # A refusal's service CPU: what the row's service spent beyond its paid orders at
        # the 300-connection row's cost each, over the refusals.
        extra = over["cpu_us"]["service"] - over["paid"] * one["cpu_us_per_paid"]["service"]
        per_refusal = extra / over["refused"] if over["refused"] else None
        shape = (f"{fmt(over['connections'])} connections" if over["connections"]
                 else f"the open model ({fmt(over['offered_per_s'])}/s offered by k6)")
        which = "routed" if one.get("routed") else "uniform"
        out.append(f"- {b}: {shape}{', routed,' if routed else ''} at "
                   f"{over['paid_per_s'] / max(one['paid_per_s'], 1e-9):.2f}× the {which} "
                   f"300-connection rate; {fmt(over['refused_per_s'])} refusals/s"
                   + (f", {fmt(per_refusal, 1)} µs of service CPU each (beyond the paid "
                      "orders' own)" if per_refusal is not None else "")
                   + f"; p99 of the accepted orders {accepted(over)} ms")
    for x in (x for x in rows if x["connections"] >= 4000 and x.get("peak_rss_mib")):
        out.append(f"- {b}: RSS with {fmt(x['connections'])} connections open"
                   + (" (routed: one hot product, so one instance holds them all)"
                      if x.get("routed") and x["hot"] == 1 else "")
                   + f": {fmt(x['peak_rss_mib'], 1)} MiB at most per instance, every row so "
                   f"far ({'within' if x['peak_rss_mib'] <= 64 else '**over**'} 64 MiB)")
    kept = [x for x in rows if x.get("longest_handover_ms") is not None]
    if kept:
        x = max(kept, key=lambda x: x["longest_handover_ms"])
        out.append(f"- {b}: the longest a node waited behind a kept lock: "
                   f"{fmt(x['longest_handover_ms'])} ms ({x['label']}, {x['hot']} hot; "
                   f"{fmt(sum(y.get('kept_cycles') or 0 for y in kept))} lock cycles on kept "
                   "nodes in all)")
    zk = [x for x in rows if x["guard"] == "zk" and x.get("paid")]
    if zk:
        x = max(zk, key=lambda x: x["zk_writes_per_paid"])
        out.append(f"- {b}: ZooKeeper writes per paid order, at most "
                   f"{fmt(x['zk_writes_per_paid'], 3)} ({x['label']}, {x['hot']} hot)")
    return out


def markdown(r: dict[str, Any], chart: str | None = None) -> str:
    """saturation.md: the rows, the lapse, the floors and bounds, the profiles."""
    builds = sorted({x["build"] for x in r["rows"]}, key=lambda b: b != "this")
    out = [f"# seckill saturation ({r['run']}{', quick: not for figures' if r['quick'] else ''})",
           "", f"{r['machine']['cores']} cores; 3 instances, PostgreSQL, ZooKeeper, the payment "
           f"provider and wrk on one machine; a closed loop of keep-alive connections "
           f"(`loadtest/wrk/orders.lua`), {r['seconds']} s per row, {buyers_said(r)}, paid "
           "through the provider. CPU from /proc, per paid order; PostgreSQL's backends for the "
           "provider's ledger are counted apart (a real gateway's database is not ours)."]
    if r.get("warm_up_jit_ms"):
        out += ["", "ZooKeeper was warmed up first: ten hot products sold in 5-s runs until its "
                "JIT compiler's threads spent under 1 % of a core in two in a row (their ms per "
                "run: " + " → ".join(f"{ms:.0f}" for ms in r["warm_up_jit_ms"]) + ")."]
    if r.get("baseline"):
        out += ["", "Each row ran twice, side by side: **this** build and the **baseline** "
                f"(`{r['baseline']}`, an older commit's build) on a fleet of its own, the one to "
                "go first alternating row by row"
                + (", the other way round from a run without `--swap`." if r.get("swap") else ".")]
    if any(x.get("routed") for x in r["rows"]):
        out += ["", "**Routed** rows send each product's orders to the one instance nginx's "
                "consistent hash picks (`POST /api/products/{id}/orders`, as deploy/nginx.conf "
                "routes them: where the product's lock is kept), the row's connections shared "
                "among the instances in proportion to their products (in brackets: the products "
                "of each instance that got any); the others spread every product's orders over "
                "the 3 (`POST /orders`). **Longest handover**: the longest a lock node waited "
                "behind a kept lock before its holder gave it up, over the row's products and "
                "instances (`GET /api/products/{id}/lock`, its warm-up second included)."]
    out += ["", "| build | guard | hot products | connections | routed | paid orders/s | "
            "p50 (ms) | p99 (ms) | p99 of the accepted (ms) | refused / s | CPU µs / paid: "
            "service | PostgreSQL | ZooKeeper | service + PostgreSQL + ZooKeeper | provider | "
            "its ledger | generator | ZK writes / paid | orders / lock cycle | ZK writes / lock "
            "cycle | lock cycles / transaction | longest handover (ms) | peak RSS so far (MiB) | "
            "exact |", "|" + "---|" * 24]
    for x in r["rows"]:
        c = x["cpu_us_per_paid"]
        out.append(
            f"| {x['build']} | {x['label']} | {x['hot']} | "
            f"{fmt(x['connections']) if x['connections'] else 'k6, ' + fmt(x['offered_per_s']) + '/s offered'} | "
            f"{routed_cell(x)} | "
            f"{fmt(x['paid_per_s'])} | {fmt(x['p50_ms'], 1)} | {fmt(x['p99_ms'], 1)} | "
            f"{accepted(x)} | "
            f"{fmt(x.get('refused_per_s', x['refused'] / x['seconds']))} | {fmt(c['service'], 1)} | {fmt(c['postgresql'], 1)} | "
            f"{fmt(c['zookeeper'], 1)} | **{fmt(ours(c), 1)}** | {fmt(c['provider'], 1)} | "
            f"{fmt(c['ledger'], 1)} | {fmt(c['generator'], 1)} | {fmt(x['zk_writes_per_paid'], 3)} | "
            f"{per_cycle_figures(x)} | "
            f"{fmt(x['longest_handover_ms']) if x.get('longest_handover_ms') is not None else '–'} | "
            f"{fmt(x['peak_rss_mib'], 1) if x.get('peak_rss_mib') else '–'} | "
            f"{'yes' if x['exact'] else '**NO**'} |")
    if r.get("lapse"):
        out += ["", "**Lapse**: reservations without payment made in a closed loop for "
                "`--lapse` s (each lasting `ttl`), then, while another product sells, every one "
                "must be back on sale within the bound of its deadline (from the rows: `expired` "
                "`updated_at` against `expires_at`).", "",
                "| build | reservations | made / s | returned | returned / s | lag p50 (s) | "
                "lag max (s) | still reserved | the sale meanwhile, paid / s | within bound | exact |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, x in r["lapse"].items():
            out.append(
                f"| {name} | {fmt(x['made'])} | {fmt(x['made_per_s'])} | {fmt(x['returned'])} | "
                f"{fmt(x['returned_per_s'])} | {fmt(x['lag_p50_s'], 2)} | {fmt(x['lag_max_s'], 2)} "
                f"| {fmt(x['still_reserved'])} | {fmt(x['sale_paid_per_s'])} | "
                f"{'yes' if x['within_bound'] else '**NO**'} (≤ {x['bound_s']} s) | "
                f"{'yes' if x['exact'] else '**NO**'} |")
    if chart:
        out += ["", f"![paid orders/s and CPU per paid order by part, row by row]({chart})"]
    busy = [x for x in r["rows"] if x.get("zk_jit_ms", 0) >= x["seconds"] * 10]
    if busy:
        out += ["", "ZooKeeper's JIT compiler was still at work in "
                + ", ".join(f"{x['build']} {x['label']} ({x['hot']} hot): {x['zk_jit_ms']:.0f} ms, "
                            f"{x['zk_jit_ms'] * 1000 / max(x['paid'], 1):.1f} µs per paid order"
                            for x in busy)
                + " (over 1 % of a core; counted in ZooKeeper's CPU above)."]
    out += ["", "Peak RSS per instance (after every row): " + ", ".join(
        f"{b} {fmt(v, 1)} MiB" for b, v in r["peak_rss_mib"].items()), ""]
    for b in builds:
        out += summary(r, b)
    if "baseline" in builds:
        out += ["", "This build against the baseline, row by row (paid orders/s; CPU per paid "
                "order of the service, PostgreSQL and ZooKeeper):", ""]
        this = [x for x in r["rows"] if x["build"] == "this"]
        base = {(x["label"], x["hot"]): x for x in r["rows"] if x["build"] == "baseline"}
        for a, b in ((a, base[(a["label"], a["hot"])]) for a in this
                     if (a["label"], a["hot"]) in base):
            out.append(f"- {a['label']}, {a['hot']} hot: {a['paid_per_s'] / max(b['paid_per_s'], 1):.2f}× "
                       f"the rate, {ours(a['cpu_us_per_paid']) / max(ours(b['cpu_us_per_paid']), 1):.2f}× "
                       "the CPU per paid order")
    out += auth_compare(r)
    out += bounds(r)
    for prof in r.get("profile") or []:
        hot = prof["hot"]
        out += ["", f"## Profile (this build, zk batched, {hot} hot product"
                f"{'s' if hot > 1 else ''}, one more run with the profilers on)", "",
                f"Flame graph of instance 0: [{prof['flame']}]({prof['flame']}) (perf, "
                "software clock). PostgreSQL's statements per paid order (pg_stat_statements, "
                "the ledger's too; "
                "execution time is wall time, queueing for the CPU included; rows are what "
                "each statement returned or changed, WAL records what it wrote to the log: a "
                "row, an index entry, a commit):", "",
                "| database | calls / paid | exec µs / paid | rows / paid | WAL records / paid "
                "| WAL bytes / paid | statement |", "|---|---|---|---|---|---|---|"]
        paid = max(prof["paid"], 1)
        for st in prof["statements"]:
            q = st["query"].replace("|", "\\|")
            wal = (f"{st['wal_records'] / paid:.1f} | {st['wal_bytes'] / paid:,.0f}"
                   if "wal_records" in st else " | ")
            out.append(f"| {st['database']} | {st['calls_per_paid']:.3f} | "
                       f"{st['us_per_paid']:.1f} | {st['rows'] / paid:.2f} | {wal} | `{q}` |")
        folded = RESULTS / prof["flame"].replace(".svg", ".folded")
        if folded.exists():
            kernel, shares = where(folded)
            out += ["", f"Where the instance's samples go (a sample counts once, in the first "
                    f"part below whose code is on its stack; {kernel:.0%} of all samples are in "
                    "the kernel, syscalls and interrupts, whatever part made them):", "",
                    "| part | samples |", "|---|---|"]
            out += [f"| {name} | {share:.1%} |" for name, share in shares]
    return "\n".join(out) + "\n"


def svg(r: dict[str, Any]) -> str:
    """The saturation run, a bar per row: paid orders/s, and the CPU µs each part spent per
    paid order, stacked."""
    rows = r["rows"]
    two = len({x["build"] for x in rows}) > 1
    w, pad, bar, label_w = 460, 40, 22, 190
    h = pad + len(rows) * (bar + 6) + 30

    def name(x):
        n = f"{x['label']}, {x['hot']} hot"
        return f"{n} ({x['build']})" if two else n

    def panel(ox, title, segments, top):
        # A bar past `top` (the overload row's CPU, mostly refusals) is cut at the edge.
        room = w - label_w - 50
        scale = room / top
        g = [draw.text(w / 2, 20, title, text_anchor="middle", font_weight="bold")]
        for i, x in enumerate(rows):
            y = pad + i * (bar + 6)
            g.append(draw.text(label_w - 6, y + bar / 2 + 4, name(x), text_anchor="end",
                               font_size=11))
            at, end = label_w, label_w + room
            for value, colour in segments(x):
                width = max(min(value * scale, end - at), 0)
                g.append(draw.rect(at, y, width, bar, colour))
                at += width
            total = sum(v for v, _ in segments(x))
            cut = "›" if total * scale > room + 0.5 else ""
            g.append(draw.text(at + 4, y + bar / 2 + 4, f"{cut}{fmt(total)}", font_size=11))
        return draw.group(g, transform=f"translate({ox},0)")

    cpu = lambda x: [(x["cpu_us_per_paid"][k], colour) for k, (_, colour) in PARTS.items()]
    totals = sorted(sum(v for v, _ in cpu(x)) for x in rows)
    body = [
        panel(0, "Paid orders/s (wrk, 3 instances)", lambda x: [(x["paid_per_s"], "#d64545")],
              max(x["paid_per_s"] for x in rows)),
        panel(w, "CPU µs per paid order, by part", cpu,
              min(totals[-1], 4 * totals[len(totals) // 2])),
        *draw.legend(PARTS.values(), w + 20, h - 18, 75, font_size=10),
    ]
    return draw.document(2 * w, h, body)
