"""loadtest/lighthouse/run's report: the runs' Lighthouse JSON results (`run-1.json` … in OUT)
as a markdown table, the median run by performance marked, written to MD and printed. Run by
the wrapper, from the repository's root:

    python3 -m loadtest.lib.lighthouse_report OUT RUNS MD [STATIC]

Exits non-zero if the median's performance is under 0.95 or its cumulative layout shift over
0.05.
"""

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

# The median run's bounds.
MIN_PERFORMANCE = 0.95
MAX_LAYOUT_SHIFT = 0.05


def read_run(run: int, report: dict[str, Any]) -> dict[str, Any]:
    """One run's figures from its Lighthouse JSON result."""
    cat = report["categories"]
    audit = report["audits"]
    return {
        "run": run,
        "performance": cat["performance"]["score"],
        "accessibility": cat["accessibility"]["score"],
        "best-practices": cat["best-practices"]["score"],
        "seo": cat["seo"]["score"],
        "cls": audit["cumulative-layout-shift"]["numericValue"],
        "fcp": audit["first-contentful-paint"]["numericValue"],
        "lcp": audit["largest-contentful-paint"]["numericValue"],
        "tbt": audit["total-blocking-time"]["numericValue"],
        "si": audit["speed-index"]["numericValue"],
        "version": report["lighthouseVersion"],
        "chrome": report["environment"]["hostUserAgent"],
    }


def median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run by performance (the later of the two middle ones for an even count)."""
    return sorted(rows, key=lambda r: r["performance"])[len(rows) // 2]


def row(r: dict[str, Any], is_median: bool) -> str:
    """A run's line of the table."""
    mark = " (median)" if is_median else ""
    return (
        f"| {r['run']}{mark} | {r['performance']:.2f} | {r['accessibility']:.2f} | {r['best-practices']:.2f} | {r['seo']:.2f} | "
        f"{r['cls']:.3f} | {r['fcp'] / 1000:.1f} s | {r['lcp'] / 1000:.1f} s | {r['tbt']:.0f} ms | {r['si'] / 1000:.1f} s |"
    )


def report(rows: list[dict[str, Any]], runs: int, static: str, today: datetime.date) -> list[str]:
    """The report's lines: the command and setting, a row per run, the targets."""
    mid = median(rows)
    lines = [
        "# The teaching page under Lighthouse",
        "",
        f"`loadtest/lighthouse/run --runs {runs}{' --static ' + static if static else ''}`, {today}: Lighthouse {mid['version']}, mobile defaults (a phone screen, simulated slow 4G, 4× CPU slowdown), Debian's Chromium, one release instance with the demo's products (as `scripts/demo` serves it).",
        "",
        "| run | performance | accessibility | best practices | SEO | cumulative layout shift | first contentful paint | largest contentful paint | total blocking time | speed index |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r, r is mid) for r in rows]
    lines += ["", "Targets: performance ≥ 0.95 and cumulative layout shift ≤ 0.05 (the median run)."]
    return lines


def passes(rows: list[dict[str, Any]]) -> bool:
    """Whether the median run meets the targets."""
    mid = median(rows)
    return mid["performance"] >= MIN_PERFORMANCE and mid["cls"] <= MAX_LAYOUT_SHIFT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m loadtest.lib.lighthouse_report",
        description="Lighthouse's JSON results as loadtest/results/lighthouse.md.")
    parser.add_argument("out", type=Path, help="the folder of run-1.json … run-RUNS.json")
    parser.add_argument("runs", type=int, help="how many runs")
    parser.add_argument("md", type=Path, help="the markdown report to write")
    parser.add_argument("static", nargs="?", default="",
                        help="the other static/ served (--static), if any")
    args = parser.parse_args(argv)
    rows = [read_run(run, json.loads((args.out / f"run-{run}.json").read_text(encoding="utf-8")))
            for run in range(1, args.runs + 1)]
    text = "\n".join(report(rows, args.runs, args.static, datetime.date.today()))
    args.md.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if passes(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
