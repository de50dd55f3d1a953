"""Every k6 script in loadtest/k6/ bounds its latency (a p99 threshold on http_req_duration) and
says which statuses are normal answers (http.setResponseCallback(http.expectedStatuses(...)))
so that http_req_failed counts only the others, with a threshold on it. The sales count a
refusal as one to retry because the answer says so (`retryable`), not by its status, and
read it in one place: loadtest/k6/answers.js, a module both import. Their buyers sign in
(loadtest/k6/buyers.js, a module both import): setup() gets the tokens, or TOKENS_FILE holds
them, and each order carries its buyer's. The sales route each product's orders as nginx
does (loadtest/k6/route.js: `POST /api/products/{id}/orders` on the product's instance) unless
told to spread them (ROUTE=spread). Where k6 (or node) is installed, the scripts load
(`k6 inspect`), the module is run on a few answers, and each sale runs for a moment against a
server of the test's own (tests/tooling/fake_seckill.py)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from tests.tooling.fake_seckill import FakeSeckill

ROOT = Path(__file__).resolve().parents[2]
K6 = ROOT / "loadtest" / "k6"
# The scripts k6 runs (their `options`); the modules they import are not.
SCRIPTS = {p.name: p.read_text() for p in sorted(K6.glob("*.js"))
           if "k6/http" in p.read_text() and "export const options" in p.read_text()}
ANSWERS = K6 / "answers.js"
BUYERS = K6 / "buyers.js"
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
                    self.assertTrue((K6 / module).is_file())

    def test_the_sales_route_by_product_as_nginx_does(self):
        for name in SALES:
            with self.subTest(script=name):
                text = SCRIPTS[name]
                self.assertRegex(text, r"import\s*\{[^}]*\broutesFrom\b[^}]*\}\s*from\s*'\./route\.js'")
                self.assertIn("routesFrom(__ENV.ROUTES, BASE_URLS)", text)
                self.assertIn("productUrl(", text)

    def test_the_sales_sign_their_buyers_in(self):
        for name in SALES:
            with self.subTest(script=name):
                text = SCRIPTS[name]
                self.assertRegex(text, r"import\s*\{[^}]*\bsignIn\b[^}]*\}\s*from\s*'\./buyers\.js'")
                self.assertRegex(text, r"fileTokens\(__ENV\.TOKENS_FILE\)")
                setup = text[text.index("export function setup"):]
                self.assertIn("signIn(", setup[:setup.index("\n}\n")])
                self.assertIn("headers: orderHeaders(token)", text)
                # With a token the body names no buyer: the token's sub is the buyer.
                self.assertRegex(text, r"if \(!token\) order\.user_id = ")
                # The tokens are counted in the summary, not written out.
                self.assertIn("withoutTokens(data.setup_data)", text)

    def test_sign_ins_are_not_orders_and_their_retries_are_the_answers(self):
        text = BUYERS.read_text()
        self.assertIn("name: 'POST /api/session'", text)
        self.assertNotIn("name: 'POST /orders'", text)
        self.assertRegex(text, r"import\s*\{\s*answer\s*\}\s*from\s*'\./answers\.js'")
        self.assertNotIn("JSON.parse", text)
        self.assertIsNone(re.search(r"status\s*===?\s*(429|503)", text))
        self.assertIn("Authorization = `Bearer ${token}`", text)

    @unittest.skipUnless(shutil.which("k6"), "k6 is not installed")
    def test_k6_loads_the_sales(self):
        for name in SALES:
            with self.subTest(script=name):
                proc = subprocess.run(["k6", "inspect", str(K6 / name)],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertIn("scenarios", json.loads(proc.stdout))

    @unittest.skipUnless(shutil.which("k6"), "k6 is not installed")
    def test_a_missing_tokens_file_stops_the_sale_before_it_starts(self):
        for name in SALES:
            with self.subTest(script=name):
                proc = subprocess.run(["k6", "inspect", "-e", "TOKENS_FILE=/nonexistent/tokens",
                                       str(K6 / name)],
                                      capture_output=True, text=True, timeout=60)
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn("/nonexistent/tokens", proc.stdout + proc.stderr)

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


def k6_run(script, env):
    """Runs loadtest/k6/`script` under k6 with `env` (as -e flags, nothing from this process's
    environment): (exit code, its JSON summary or None, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "summary.json")
        flags = [f"-e{k}={v}" for k, v in {**env, "RESULTS": results}.items()]
        proc = subprocess.run(["k6", "run", "--quiet", "--no-color", "--include-system-env-vars=false",
                               *flags, str(K6 / script)],
                              capture_output=True, text=True, timeout=120, cwd=tmp)
        summary = json.loads(Path(results).read_text()) if os.path.exists(results) else None
    return proc.returncode, summary, proc.stderr


@unittest.skipUnless(shutil.which("k6"), "k6 is not installed")
class SalesAgainstAServer(unittest.TestCase):
    """Each sale for a moment against a server of the test's own: who signs in, what each
    order carries, what the summary keeps."""

    def test_a_burst_signs_one_buyer_in_per_vu(self):
        with FakeSeckill("demo", busy=2) as fake:
            code, summary, err = k6_run("seckill.js", {
                "BASE_URLS": fake.url, "ADMIN_TOKEN": "admin-token-for-tests", "VUS": "6",
                "SCENARIO": "burst", "STOCK": "100"})
        self.assertEqual(code, 0, err)
        # The two sign-ins answered 503 (retryable) were sent again: 6 buyers, 8 sign-ins.
        self.assertEqual(len(fake.sign_ins), 8)
        names = {s["name"] for s in fake.sign_ins}
        self.assertEqual(len(names), 6)
        auths = [r["auth"] for r in fake.requests]
        self.assertEqual(sorted(auths), sorted(f"Bearer tok.{n}" for n in names))
        self.assertTrue(all("user_id" not in r["body"] for r in fake.requests))
        self.assertEqual(fake.products[0]["per_user_limit"], 1)
        m = summary["metrics"]
        self.assertEqual(m["orders_paid"]["values"]["count"], 6)
        # Setup's sign-ins are requests, not orders: the order latency counts 6.
        self.assertEqual(summary["setup_data"]["buyers"], 6)
        self.assertNotIn("tokens", summary["setup_data"])
        self.assertEqual(summary["setup_data"]["buyer_auth"], "demo")

    def test_an_open_server_gets_a_new_buyer_per_order_in_the_body(self):
        with FakeSeckill("open") as fake:
            code, summary, err = k6_run("seckill.js", {
                "BASE_URLS": fake.url, "ADMIN_TOKEN": "admin-token-for-tests", "VUS": "4",
                "SCENARIO": "burst"})
        self.assertEqual(code, 0, err)
        self.assertEqual(fake.sign_ins, [])
        self.assertTrue(all(r["auth"] is None for r in fake.requests))
        self.assertEqual(len({r["body"]["user_id"] for r in fake.requests}), 4)
        self.assertNotIn("per_user_limit", fake.products[0])
        self.assertEqual(summary["setup_data"]["buyer_auth"], "open")

    def test_a_rate_scenario_shares_a_bounded_pool_round_robin(self):
        with FakeSeckill("demo") as fake:
            code, _, err = k6_run("seckill.js", {
                "BASE_URLS": fake.url, "ADMIN_TOKEN": "admin-token-for-tests",
                "SCENARIO": "rate", "RATE": "20", "DURATION": "1s", "BUYERS": "5"})
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.sign_ins), 5)
        self.assertEqual(len({r["auth"] for r in fake.requests}), 5)
        # 20 orders among 5 buyers: 4 each, one more for an arrival too many.
        self.assertEqual(fake.products[0]["per_user_limit"], 5)

    def test_the_bench_reads_its_tokens_from_a_file(self):
        with FakeSeckill("demo") as fake, tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp, "tokens")
            tokens.write_text("tok.a\n\ntok.b\ntok.c\n")
            code, summary, err = k6_run("bench.js", {
                "BASE_URLS": fake.url, "PRODUCTS": "7", "RATE": "12", "DURATION": "1s",
                "TOKENS_FILE": str(tokens), "ROUTE": "spread"})
        self.assertEqual(code, 0, err)
        self.assertEqual(fake.sign_ins, [])  # the file's tokens: no sign-in
        auths = [r["auth"] for r in fake.requests]
        # RATE × DURATION arrivals, give or take the one at the step's last instant.
        self.assertIn(len(auths), (12, 13))
        counts = {a: auths.count(a) for a in set(auths)}
        self.assertEqual(set(counts), {"Bearer tok.a", "Bearer tok.b", "Bearer tok.c"})
        self.assertLessEqual(max(counts.values()) - min(counts.values()), 1)  # round-robin
        self.assertTrue(all(r["body"] == {"product_id": 7} for r in fake.requests))
        self.assertTrue(all(r["path"] == "/orders" for r in fake.requests))
        self.assertEqual(summary["metrics"]["orders_paid"]["values"]["count"], len(auths))

    def test_the_bench_routes_each_product_to_the_instance_named(self):
        # Two fakes; ROUTES sends product 7 to the second, product 8 to the first: each
        # order on its product's own route there, the body naming no product.
        with FakeSeckill("demo") as one, FakeSeckill("demo") as two, \
                tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp, "tokens")
            tokens.write_text("tok.a\ntok.b\n")
            code, summary, err = k6_run("bench.js", {
                "BASE_URLS": f"{one.url},{two.url}", "PRODUCTS": "7,8", "RATE": "12",
                "DURATION": "1s", "TOKENS_FILE": str(tokens),
                "ROUTES": json.dumps({"7": two.url, "8": one.url})})
        self.assertEqual(code, 0, err)
        self.assertEqual({r["path"] for r in two.requests}, {"/api/products/7/orders"})
        self.assertEqual({r["path"] for r in one.requests}, {"/api/products/8/orders"})
        self.assertTrue(all(r["body"] == {} for r in one.requests + two.requests))
        self.assertLessEqual(abs(len(one.requests) - len(two.requests)), 1)
        paid = summary["metrics"]["orders_paid"]["values"]["count"]
        self.assertEqual(paid, len(one.requests) + len(two.requests))

    def test_without_routes_the_bench_hashes_as_nginx_does(self):
        with FakeSeckill("open") as fake:
            code, _, err = k6_run("bench.js", {
                "BASE_URLS": fake.url, "PRODUCTS": "7", "RATE": "10", "DURATION": "1s",
                "BUYERS": "3", "BUYER_PREFIX": "p-"})
        self.assertEqual(code, 0, err)
        self.assertEqual({r["path"] for r in fake.requests}, {"/api/products/7/orders"})
        self.assertEqual({tuple(r["body"]) for r in fake.requests}, {("user_id",)})

    def test_a_sale_routes_its_product_and_can_spread_it(self):
        for route, path, body in (("product", "/api/products/1/orders", {"quantity"}),
                                  ("spread", "/orders", {"quantity", "product_id"})):
            with self.subTest(route=route), FakeSeckill("demo") as fake:
                code, summary, err = k6_run("seckill.js", {
                    "BASE_URLS": fake.url, "ADMIN_TOKEN": "admin-token-for-tests", "VUS": "3",
                    "SCENARIO": "burst", "ROUTE": route})
                self.assertEqual(code, 0, err)
                self.assertEqual({r["path"] for r in fake.requests}, {path})
                self.assertEqual({frozenset(r["body"]) for r in fake.requests}, {frozenset(body)})
                self.assertEqual(summary["metrics"]["orders_paid"]["values"]["count"], 3)

    def test_the_bench_names_a_pool_of_buyers_on_an_open_server(self):
        with FakeSeckill("open") as fake:
            code, _, err = k6_run("bench.js", {
                "BASE_URLS": fake.url, "PRODUCTS": "7", "RATE": "10", "DURATION": "1s",
                "BUYERS": "3", "BUYER_PREFIX": "p-"})
        self.assertEqual(code, 0, err)
        self.assertEqual({r["body"]["user_id"] for r in fake.requests}, {"p-0", "p-1", "p-2"})
        self.assertTrue(all(r["auth"] is None for r in fake.requests))


if __name__ == "__main__":
    unittest.main()
