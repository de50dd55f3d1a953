"""The report: the nemesis timeline over a chart of answers per second by kind, the longest
stall after each nemesis, the mass lapse's figures, and the checker's verdict per
invariant."""

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from ..common import svg as draw
from .buyers import SESSION, is_order
from .checker import UNKNOWN, verdict


# The sale's verdict (checker.verdict), as the report's title and the run's last line say it.
WORDS = {True: "PASS", False: "FAIL", UNKNOWN: "UNKNOWN"}


def said(result: dict[str, Any]) -> str:
    """One invariant's result in a log line: kept, broken (how often, the first example), or
    not checked (the error)."""
    if result["valid"] is True:
        return f"ok   {result['name']}: {result['promise']}"
    if result["valid"] is False:
        return (f"FAIL {result['name']}: {result['promise']} "
                f"({result['count']}: {result['examples'][0]})")
    return f"UNKNOWN {result['name']}: {result['promise']} ({result['error']})"


def count(n: int | None) -> str:
    """A figure of the sale, or `?` for one the checker could not read."""
    return "?" if n is None else f"{n:,}"


KINDS = [("2xx", "#2e7d32"), ("409", "#f9a825"), ("4xx", "#8d6e63"), ("429", "#6a1b9a"),
         ("503", "#c62828"), ("no answer", "#9e9e9e")]


def kind_of(e: dict[str, Any]) -> str:
    if "status" not in e:
        return "no answer"
    s = e["status"]
    if s < 300:
        return "2xx"
    if s in (409, 429, 503):
        return str(s)
    return "4xx"


def buying(e: dict) -> bool:
    """Whether a history event is a buyer's request (not the lapse's burst, which its own
    section reports, nor a sign-in: no order)."""
    return is_order(e) and e["op"] != "lapse"


def stalls(history: list[dict[str, Any]], timeline: list[dict[str, Any]], sale_end: float,
           tail: float = 3.0) -> list[dict[str, Any]]:
    """Per nemesis, the longest time a product sold nothing (no 2xx order or payment for
    it), from the nemesis's start to `tail` seconds after it healed (by then a lock the
    nemesis stalled has been given back): the worst product."""
    sales = defaultdict(list)
    for e in history:
        if buying(e) and e.get("status") in (200, 201) and isinstance(e.get("req"), dict) \
                and "product_id" in e["req"]:
            sales[e["req"]["product_id"]].append(e["t1"])
    out = []
    for n in timeline:
        lo, hi = n["start"], min(n["healed"] + tail, sale_end)
        longest = 0.0
        for times in sales.values():
            edges = [lo] + sorted(t for t in times if lo <= t <= hi) + [hi]
            longest = max(longest, max(b - a for a, b in zip(edges, edges[1:])))
        alongside = sorted({m["kind"] for m in timeline if m is not n
                            and m["start"] < hi and m["healed"] + tail > lo})
        out.append({**n, "stall": round(longest, 2), "alongside": alongside})
    return out


def worst_alone(rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """Per kind, the longest stall among the nemeses that struck with no other in their
    window (so the stall is theirs), and over all of its strikes."""
    alone, anyhow = defaultdict(float), defaultdict(float)
    for n in rows:
        anyhow[n["kind"]] = max(anyhow[n["kind"]], n["stall"])
        if not n["alongside"]:
            alone[n["kind"]] = max(alone[n["kind"]], n["stall"])
    return alone, anyhow


def per_second(history: list[dict[str, Any]], sale_end: float) -> dict[int, Counter]:
    buckets = defaultdict(Counter)
    for e in history:
        if buying(e) and e["t1"] <= sale_end:
            buckets[int(e["t1"])][kind_of(e)] += 1
    return buckets


def svg(history: list[dict[str, Any]], timeline: list[dict[str, Any]], sale_end: float,
        title: str) -> str:
    """The nemeses' lanes over a chart of answers per second, stacked by kind."""
    buckets = per_second(history, sale_end)
    seconds = int(sale_end) + 1
    width, left, right = 1100, 100, 20
    lane_h, chart_h = 16, 260
    lanes = {k: i for i, k in enumerate(sorted({n["kind"] for n in timeline}))}
    chart_top = 40 + lane_h * len(lanes) + 20
    height = chart_top + chart_h + 60
    ymax = max([sum(c.values()) for c in buckets.values()] + [1])
    x = lambda t: left + (width - left - right) * t / max(seconds, 1)
    parts = [draw.text(left, 20, title, font_size=14)]
    for kind, i in lanes.items():
        y = 40 + i * lane_h
        parts.append(draw.text(left - 4, y + 11, kind, text_anchor="end", font_size=9))
        parts += [draw.element("rect", draw.tooltip(f"{kind} on {n['target']}: "
                                                    f"{n['start']}–{n['healed']} s"),
                               x=x(n["start"]), y=y + 2,
                               width=max(x(n["healed"]) - x(n["start"]), 2), height=lane_h - 4,
                               fill="#37474f")
                  for n in timeline if n["kind"] == kind]
    base = chart_top + chart_h
    for t in range(seconds):
        c = buckets.get(t, Counter())
        y = base
        for kind, color in KINDS:
            h = chart_h * c.get(kind, 0) / ymax
            if h > 0:
                parts.append(draw.rect(x(t), y - h, max(x(t + 1) - x(t) - 0.5, 0.5), h, color))
                y -= h
    parts.append(draw.line(left, base, width - right, base, "black"))
    parts += [draw.text(x(t), base + 14, f"{t} s", text_anchor="middle")
              for t in range(0, seconds, max(seconds // 12, 1))]
    parts.append(draw.text(left - 4, chart_top + 8, f"{ymax}/s", text_anchor="end"))
    parts += draw.legend(KINDS, left, base + 26, 110)
    return draw.document(width, height, parts, size=11)


def rerun(meta: dict[str, Any]) -> str:
    from .nemesis import KINDS
    words = ["loadtest/chaos", "--seed", str(meta["seed"])]
    if meta["quick"]:
        words.append("--quick")
    else:
        words += ["--duration", str(meta["duration"]), "--buyers", str(meta["buyers"]),
                  "--reps", str(meta["reps"])]
    if meta["label"]:
        from .mutants import MUTANTS
        words += ["--mutant" if meta["label"] in MUTANTS else "--label", meta["label"]]
    if meta["kinds"] != KINDS:
        words += ["--kinds", ",".join(meta["kinds"])]
    if meta.get("lapse", 2000) != 2000:
        words += ["--lapse", str(meta["lapse"])]
    if meta.get("stranger_for_the_whole_sale"):
        words.append("--stranger-for-the-whole-sale")
    for flag in meta["flags"]:
        words.append(f"--instance-flag={flag}")
    return " ".join(words)


def markdown(meta: dict[str, Any], verdicts: list[dict[str, Any]], facts: dict[str, Any],
             stall_rows: list[dict[str, Any]], history: list[dict[str, Any]],
             svg_name: str) -> tuple[str, bool | str, float, dict[str, float]]:
    """The report, the sale's verdict (checker.verdict), its share of 503s and the longest
    stall per nemesis kind."""
    answers = [e for e in history if is_order(e)]
    sign_ins = [e for e in history if e.get("op") == SESSION]
    by_kind = Counter(kind_of(e) for e in answers)
    total = len(answers)
    share_503 = by_kind.get("503", 0) / total if total else 0.0
    valid = verdict(verdicts)
    lines = [
        f"# Chaos sale{' (' + meta['label'] + ')' if meta['label'] else ''}, seed {meta['seed']}: {WORDS[valid]}",
        "",
        f"Rerun: `{rerun(meta)}` ({meta['started']}, commit {meta['commit']}).",
        "",
        f"3 instances, a 3-node ZooKeeper ensemble (and a standalone one for the stranger), "
        f"PostgreSQL, the payment provider (10 % of charges declined); {meta['buyers']} buyers "
        f"(one in ten without keys) for {meta['duration']} s of nemeses"
        + (f", after the {meta['nemeses_from']:.0f} s of the mass lapse" if meta.get("nemeses_from") else "")
        + f", then {meta['heal']:.0f} s for the faults to heal and the "
        f"sweep to settle. ZooKeeper session timeout {meta['session_ms']} ms, request timeout "
        f"{meta['request_ms']} ms.",
        "",
        f"![answers per second under the nemeses]({svg_name})",
        "",
        "## Answers",
        "",
        "| kind | answers | share |",
        "|---|---|---|",
    ]
    for kind, _ in KINDS:
        n = by_kind.get(kind, 0)
        lines.append(f"| {kind} | {n:,} | {100 * n / total if total else 0:.1f} % |")
    lines += [
        f"| **all** | **{total:,}** | 503s: **{100 * share_503:.1f} %** |",
        "",
        f"{count(facts['orders'])} orders, {count(facts['paid'])} paid; the provider's ledger "
        f"holds {count(facts['charges'])} charges, {count(facts['succeeded'])} succeeded. "
        f"{facts['keyless']:,} requests came from buyers without an Idempotency-Key; "
        f"{count(facts['unheard'])} orders that "
        f"took stock went to a buyer who got no answer at all (told nothing, so not held to "
        f"`told_failed_not_charged`).",
        "",
    ]
    if sign_ins:
        signed = Counter(kind_of(e) for e in sign_ins)
        lines[-1:-1] = [
            "", f"Every buyer signed in first ({len({e['req']['name'] for e in sign_ins}):,} user ids, "
            f"a token each from the instances' demo issuer): {len(sign_ins):,} sign-ins "
            f"(POST /api/session, not counted above), "
            + ", ".join(f"{n:,} {kind}" for kind, n in sorted(signed.items()))
            + "; each checked as every answer is (`answers`)."]
    lines += nemeses_section(stall_rows, history)
    if facts.get("lapse"):
        from .lapse import summary
        lines += ["", "## The mass lapse", "",
                  summary(facts["lapse"]) + " (Its burst is left out of the chart and the stalls.)"]
    lines += ["", "## The checker", "", "| invariant | promise | verdict |", "|---|---|---|"]
    cells = {True: "ok", False: "**FAIL** ({count})", UNKNOWN: "**unknown**"}
    for v in verdicts:
        cell = cells[v["valid"]].format(count=v["count"])
        lines.append(f"| {v['name']} | {v['promise']} | {cell} |")
    for v in verdicts:
        if v["valid"] is False:
            lines += ["", f"### {v['name']}: first {len(v['examples'])} of {v['count']}", ""]
            lines += [f"- `{x}`" for x in v["examples"]]
        elif v["valid"] == UNKNOWN:
            lines += ["", f"### {v['name']}: not checked", "", f"- `{v['error']}`"]
    return "\n".join(lines) + "\n", valid, share_503, worst_alone(stall_rows)[1]


def nemeses_section(stall_rows: list[dict[str, Any]],
                    history: Iterable[dict[str, Any]] = ()) -> list[str]:
    lines = [
        "## Nemeses and the longest stall after each",
        "",
        "The stall: the longest time a product sold nothing (no 201 order), from the nemesis to "
        "3 s after it healed, for the worse of the two products. A stall in a window that other "
        "nemeses share may be theirs.",
        "",
        "| start (s) | nemesis | target | healed (s) | longest stall (s) | other nemeses in its window |",
        "|---|---|---|---|---|---|",
    ]
    for n in sorted(stall_rows, key=lambda n: n["start"]):
        lines.append(f"| {n['start']:.1f} | {n['kind']} | {n['target']} | {n['healed']:.1f} | "
                     f"{n['stall']:.1f} | {', '.join(n['alongside']) or '–'} |")
    alone, worst = worst_alone(stall_rows)
    lines += ["", "Longest stall per kind, when it struck alone: "
              + (", ".join(f"{k} {v:.1f} s" for k, v in sorted(alone.items())) or "none struck alone")
              + "; with others in its window too: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(worst.items())) + "."]
    late = [e for e in history if e.get("mark") in ("late_commit", "late_commit_delivered")]
    if late:
        lines += ["", "Late COMMITs: " + "; ".join(
            (f"held on instance {e['target']} at {e['t']:.1f} s"
             + ("" if e.get("keyless", True) else " (no lock cycle with a keyless order came: the next COMMIT)")
             if e["held"] else f"none came on instance {e['target']} by {e['t']:.1f} s")
            if e["mark"] == "late_commit" else
            f"delivered {e['after_s']} s later, PostgreSQL: {e['outcome']}" if e["after_s"] is not None
            else f"never delivered: {e['outcome']}"
            for e in late) + "."]
    return lines


def timeline_of(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nemeses as the history's marks record them."""
    open_ = {}
    out = []
    for e in history:
        if e.get("mark") == "nemesis":
            open_[(e["kind"], str(e["target"]))] = e["t"]
        elif e.get("mark") == "healed":
            start = open_.pop((e["kind"], str(e["target"])), None)
            if start is not None:
                out.append({"kind": e["kind"], "target": e["target"], "start": start, "healed": e["t"]})
    return out


def main() -> None:
    """From a run's history: `python3 -m loadtest.lib.chaoslab.report HISTORY SVG` draws its
    chart again, `... HISTORY --md REPORT.md` its nemeses section, and `... HISTORY` prints its figures
    (stalls, answers, 503s) as JSON."""
    import json
    import sys
    history = [json.loads(line) for line in open(sys.argv[1])]
    end = next((e["t"] for e in history if e.get("mark") == "sale_end"), None)
    seed = next((e.get("seed") for e in history if e.get("mark") == "sale"), "?")
    timeline = timeline_of(history)
    if len(sys.argv) > 3 and sys.argv[2] == "--md":
        # The nemeses section of a report, drawn again from the history (what it measures
        # changed since the report was written).
        text = open(sys.argv[3]).read()
        head, rest = text.split("## Nemeses and the longest stall after each", 1)
        tail = rest[rest.index("## The checker"):]
        section = "\n".join(nemeses_section(stalls(history, timeline, end), history))
        with open(sys.argv[3], "w") as out:
            out.write(head + section + "\n\n" + tail)
        return
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as out:
            out.write(svg(history, timeline, end, f"chaos sale, seed {seed}: answers per second"))
        return
    rows = stalls(history, timeline, end)
    alone, worst = worst_alone(rows)
    answers = [e for e in history if is_order(e)]
    kinds = Counter(kind_of(e) for e in answers)
    print(json.dumps({"seed": seed, "answers": len(answers), "kinds": kinds,
                      "share_503": round(kinds.get("503", 0) / len(answers), 4),
                      "strikes": Counter(n["kind"] for n in timeline),
                      "alone": alone, "any": worst}, indent=1))


if __name__ == "__main__":
    main()
