"""Every k6 script in loadtest/ bounds its latency (a p99 threshold on http_req_duration) and
says which statuses are normal answers (http.setResponseCallback(http.expectedStatuses(...)))
so that http_req_failed counts only the others, with a threshold on it. The sales count a
refusal as one to retry because the answer says so (`retryable`), not by its status, and
read it in one place: loadtest/answers.js, a module both import. Where k6 (or node) is
installed, the scripts load (`k6 inspect`) and the module is run on a few answers."""

import json
import re
import shutil
import subprocess
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {p.name: p.read_text() for p in sorted((ROOT / "loadtest").glob("*.js"))
           if "k6/http" in p.read_text()}
ANSWERS = ROOT / "loadtest" / "answers.js"
SALES = ("seckill.js", "bench.js")
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

    def test_the_sales_take_retries_from_the_answer(self):
        self.assertTrue(re.search(r"\.retryable\s*===\s*true", ANSWERS.read_text()),
                        "answers.js reads no `retryable`")
        self.assertIn("Retry-After", ANSWERS.read_text())
        for name in SALES:
            with self.subTest(script=name):
                text = SCRIPTS[name]
                self.assertRegex(text, r"import\s*\{\s*answer\s*\}\s*from\s*'\./answers\.js'")
                self.assertRegex(text, r"\banswer\(res\)")
                # No parse of its own, and no rule of its own: a status compared to a refusal's.
                self.assertNotIn("JSON.parse", text)
                self.assertIsNone(re.search(r"status\s*===?\s*(429|503)", text))

    def test_a_conflict_the_answer_says_to_retry_is_well_formed(self):
        # A 409 is sold out or retryable (too_many_unpaid, payment_in_progress, ...): the
        # check must not fail the run's `checks: rate==1` on the second kind.
        self.assertRegex(SCRIPTS["seckill.js"],
                         r"res\.status !== 409 \|\| body\.error === 'sold_out' \|\| "
                         r"body\.retryable === true")

    def test_every_local_import_exists(self):
        for name, text in SCRIPTS.items():
            for module in re.findall(r"from\s*'(\.[^']+)'", text):
                with self.subTest(script=name, module=module):
                    self.assertTrue((ROOT / "loadtest" / module).is_file())

    @unittest.skipUnless(shutil.which("k6"), "k6 is not installed")
    def test_k6_loads_the_sales(self):
        for name in SALES:
            with self.subTest(script=name):
                proc = subprocess.run(["k6", "inspect", str(ROOT / "loadtest" / name)],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertIn("scenarios", json.loads(proc.stdout))

    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_answers_reads_retryable_and_retry_after(self):
        # name: (body, Retry-After) -> (retryable, Retry-After agrees, a body parsed)
        cases = {
            "retryable 409": ('{"error": "too_many_unpaid", "retryable": true}', "1",
                              [True, True, True]),
            "retryable without Retry-After": ('{"retryable": true}', None, [True, False, True]),
            "final": ('{"error": "sold_out", "retryable": false}', None, [False, True, True]),
            "final with Retry-After": ('{"retryable": false}', "1", [False, False, True]),
            "not JSON": ("<html>Bad Gateway</html>", None, [False, True, False]),
            "JSON, not an object": ("[true]", None, [False, True, False]),
            "no body": (None, None, [False, True, False]),
        }
        program = (
            f"import {{ answer }} from {json.dumps(ANSWERS.as_uri())};\n"
            f"const cases = {json.dumps({k: v[:2] for k, v in cases.items()})};\n"
            "const out = {};\n"
            "for (const [name, [body, after]] of Object.entries(cases)) {\n"
            "  const a = answer({ body, headers: after === null ? {} : { 'Retry-After': after } });\n"
            "  out[name] = [a.retryable, a.retryAfterAgrees, a.body !== null];\n"
            "}\n"
            "console.log(JSON.stringify(out));\n")
        proc = subprocess.run(["node", "--input-type=module", "-e", program],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout), {k: v[2] for k, v in cases.items()})


if __name__ == "__main__":
    unittest.main()
