"""loadtest/lighthouse/run's report (python3 -m loadtest.lib.lighthouse_report): fake Lighthouse
JSON results in, the markdown table out, as the report has always written it; the exit says
whether the median run meets the targets."""

import contextlib
import datetime
import io
import json
import tempfile
import unittest
from pathlib import Path

from loadtest.lib import lighthouse_report

HEADER = ("| run | performance | accessibility | best practices | SEO | cumulative layout shift "
          "| first contentful paint | largest contentful paint | total blocking time "
          "| speed index |")


def result(performance, cls=0.0012, fcp=1934.2, tbt=12.5):
    """A Lighthouse JSON result with only what the report reads."""
    return {
        "categories": {"performance": {"score": performance},
                       "accessibility": {"score": 1}, "best-practices": {"score": 0.96},
                       "seo": {"score": 1.0}},
        "audits": {"cumulative-layout-shift": {"numericValue": cls},
                   "first-contentful-paint": {"numericValue": fcp},
                   "largest-contentful-paint": {"numericValue": 2150.0},
                   "total-blocking-time": {"numericValue": tbt},
                   "speed-index": {"numericValue": 2549.9}},
        "lighthouseVersion": "12.8.2",
        "environment": {"hostUserAgent": "Mozilla/5.0 (X11; Linux x86_64) Chromium"},
    }


def run(results, static=""):
    """(exit status, the report's text, what was printed) for `results` as run-1.json …"""
    with tempfile.TemporaryDirectory() as tmp:
        for i, r in enumerate(results, 1):
            Path(tmp, f"run-{i}.json").write_text(json.dumps(r))
        md = Path(tmp, "lighthouse.md")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = lighthouse_report.main(
                [tmp, str(len(results)), str(md), *([static] if static else [])])
        return status, md.read_text(encoding="utf-8"), printed.getvalue()


class Report(unittest.TestCase):
    def test_a_run_is_one_row_of_the_table(self):
        status, text, printed = run([result(0.97)])
        self.assertEqual(status, 0)
        self.assertEqual(printed, text)
        lines = text.splitlines()
        self.assertEqual(lines[0], "# The teaching page under Lighthouse")
        self.assertEqual(lines[lines.index(HEADER) + 1], "|---|---|---|---|---|---|---|---|---|---|")
        self.assertEqual(lines[lines.index(HEADER) + 2],
                         "| 1 (median) | 0.97 | 1.00 | 0.96 | 1.00 | 0.001 | 1.9 s | 2.1 s "
                         "| 12 ms | 2.5 s |")
        self.assertTrue(text.endswith("\nTargets: performance ≥ 0.95 and cumulative layout "
                                      "shift ≤ 0.05 (the median run).\n"))

    def test_the_whole_report_is_as_it_was(self):
        rows = [lighthouse_report.read_run(i, r)
                for i, r in enumerate([result(0.97), result(0.91, fcp=2050), result(0.99)], 1)]
        lines = lighthouse_report.report(rows, 3, "/tmp/old-static", datetime.date(2026, 11, 27))
        self.assertEqual("\n".join(lines) + "\n", (
            "# The teaching page under Lighthouse\n"
            "\n"
            "`loadtest/lighthouse/run --runs 3 --static /tmp/old-static`, 2026-11-27: Lighthouse "
            "12.8.2, mobile defaults (a phone screen, simulated slow 4G, 4× CPU slowdown), "
            "Debian's Chromium, one release instance with the demo's products (as `scripts/demo` "
            "serves it).\n"
            "\n"
            f"{HEADER}\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
            "| 1 (median) | 0.97 | 1.00 | 0.96 | 1.00 | 0.001 | 1.9 s | 2.1 s | 12 ms | 2.5 s |\n"
            "| 2 | 0.91 | 1.00 | 0.96 | 1.00 | 0.001 | 2.0 s | 2.1 s | 12 ms | 2.5 s |\n"
            "| 3 | 0.99 | 1.00 | 0.96 | 1.00 | 0.001 | 1.9 s | 2.1 s | 12 ms | 2.5 s |\n"
            "\n"
            "Targets: performance ≥ 0.95 and cumulative layout shift ≤ 0.05 (the median run).\n"))

    def test_the_median_run_is_held_to_the_targets(self):
        self.assertEqual(run([result(0.97), result(0.90), result(0.99)])[0], 0)
        self.assertEqual(run([result(0.94), result(0.90), result(0.99)])[0], 1)
        self.assertEqual(run([result(0.97, cls=0.051)])[0], 1)
        self.assertEqual(run([result(0.95, cls=0.05)])[0], 0)

    def test_the_other_static_is_named(self):
        _, text, _ = run([result(0.97)], static="/tmp/old/static")
        self.assertIn("`loadtest/lighthouse/run --runs 1 --static /tmp/old/static`, ", text)


if __name__ == "__main__":
    unittest.main()
