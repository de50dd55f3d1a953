"""Every k6 script in loadtest/ bounds its latency (a p99 threshold on http_req_duration) and
says which statuses are normal answers (http.setResponseCallback(http.expectedStatuses(...)))
so that http_req_failed counts only the others, with a threshold on it."""

import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {p.name: p.read_text() for p in sorted((ROOT / "loadtest").glob("*.js"))
           if "k6/http" in p.read_text()}
# The answers each script must take as normal: refusals are part of a sale.
EXPECTED = {"seckill.js": {201, 409, 429, 503}, "bench.js": {201, 429, 503}, "views.js": {200}}


def object_after(text, key):
    """The `{...}` that follows `key:` in `text`, braces inside strings skipped (a threshold's
    name may carry a tag filter, `http_req_duration{name:POST /orders}`)."""
    match = re.search(rf"\b{key}\s*:\s*{{", text)
    if not match:
        return None
    depth, quote = 0, None
    for i in range(match.end() - 1, len(text)):
        c = text[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"`":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[match.end() - 1:i + 1]
    return None


def expected_statuses(text):
    calls = re.findall(r"http\.setResponseCallback\(\s*http\.expectedStatuses\(([^)]*)\)\s*\)",
                       text)
    return [{int(s) for s in re.findall(r"\d+", args)} for args in calls]


class K6Scripts(unittest.TestCase):
    def test_the_known_scripts_are_found(self):
        self.assertLessEqual(set(EXPECTED), set(SCRIPTS))

    def test_each_bounds_its_p99_latency(self):
        for name, text in SCRIPTS.items():
            with self.subTest(script=name):
                thresholds = object_after(text, "thresholds")
                self.assertIsNotNone(thresholds, "no thresholds")
                self.assertRegex(thresholds, r"http_req_duration(\{[^}]*\})?['\"]?\s*:\s*\[[^\]]*"
                                             r"p\(99\)\s*<\s*(\d+|\$\{)")

    def test_each_bounds_its_failed_requests(self):
        for name, text in SCRIPTS.items():
            with self.subTest(script=name):
                self.assertRegex(object_after(text, "thresholds") or "",
                                 r"http_req_failed['\"]?\s*:\s*\['rate\s*(==|<)")

    def test_each_names_its_normal_answers(self):
        for name, text in SCRIPTS.items():
            with self.subTest(script=name):
                calls = expected_statuses(text)
                self.assertEqual(len(calls), 1, "one setResponseCallback(expectedStatuses(...))")
                self.assertLessEqual(EXPECTED.get(name, set()), calls[0])
                # A server error is a failure, but for 503: the service's "retry later".
                self.assertFalse({s for s in calls[0] if s >= 500 and s != 503})


if __name__ == "__main__":
    unittest.main()
