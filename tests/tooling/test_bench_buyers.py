"""The bench's buyers sign in (loadtest/lib/fleet.py): a fleet's pool of tokens in a file, read by
wrk's loadtest/wrk/orders.lua (each order carries the next token, round-robin, its body no
user_id) and by k6's bench.js; a fleet in `open` mode names as many buyers in the body
instead. `--auth-compare` runs each saturation row on both and reports what signing in costs
per paid order (loadtest/lib/saturation/report.py). Where wrk is installed, orders.lua runs for a
moment against a server of the test's own (tests/tooling/fake_seckill.py)."""

import os
import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from loadtest.lib import WRK, fleet, saturate
from loadtest.lib.saturation import load, report
from tests.tooling.fake_seckill import FakeSeckill, token_of


def a_fleet(auth, tokens_file=None, run_id="r1", buyers=4):
    """An Instances as __init__ leaves it, without starting anything."""
    inst = object.__new__(fleet.Instances)
    inst.auth, inst.buyers, inst.run_id, inst.pool = auth, buyers, run_id, 0
    inst.tokens_file = tokens_file
    inst.tokens = [token_of(f"b-{run_id}-{i}") for i in range(buyers)] if auth == "demo" else []
    inst.renew_at = time.monotonic() + 3600  # signed in a moment ago
    return inst


class Fleet(unittest.TestCase):
    def test_a_signed_in_fleet_hands_out_its_tokens_file(self):
        inst = a_fleet("demo", Path("/tmp/x/tokens"))
        self.assertEqual(inst.load_env(), {"TOKENS_FILE": "/tmp/x/tokens"})

    def test_an_open_fleet_and_an_older_build_name_as_many_buyers_in_the_body(self):
        for auth in ("open", None):
            with self.subTest(auth=auth):
                self.assertEqual(a_fleet(auth, run_id="sat1o", buyers=2000).load_env(),
                                 {"BUYERS": "2000", "BUYER_PREFIX": "b-sat1o-"})

    def test_the_pool_signs_in_again_before_its_tokens_expire(self):
        with FakeSeckill("demo") as fake, tempfile.TemporaryDirectory() as tmp:
            inst = a_fleet("demo", Path(tmp, "tokens"), buyers=3)
            inst.urls, inst.renew_at = [fake.url], 0.0
            with mock.patch.object(fleet, "log"):
                env = inst.load_env()
            self.assertEqual(Path(env["TOKENS_FILE"]).read_text().split(),
                             [token_of(f"b-r1-{i}") for i in range(3)])
            # An hour's tokens: renewed RENEW_S before their end, not at the next row.
            self.assertAlmostEqual(inst.renew_at - time.monotonic(), 3600 - fleet.RENEW_S,
                                   delta=5)
            inst.load_env()
        self.assertEqual(len(fake.sign_ins), 3)

    def test_a_new_pool_is_buyers_never_seen(self):
        with FakeSeckill("demo") as fake, tempfile.TemporaryDirectory() as tmp:
            inst = a_fleet("demo", Path(tmp, "tokens"), buyers=2)
            inst.urls = [fake.url]
            with mock.patch.object(fleet, "log"):
                inst.new_pool()
            self.assertEqual(Path(inst.load_env()["TOKENS_FILE"]).read_text().split(),
                             [token_of("b-r1-p1-0"), token_of("b-r1-p1-1")])
        self.assertEqual([s["name"] for s in fake.sign_ins], ["b-r1-p1-0", "b-r1-p1-1"])
        opened = a_fleet("open", buyers=2)
        opened.new_pool()
        self.assertEqual(opened.load_env()["BUYER_PREFIX"], "b-r1-p1-")

    def test_a_binary_says_whether_it_takes_a_buyer_mode(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, usage, takes in (("new", "--buyer-auth <MODE>  how buyers ...", True),
                                       ("old", "--admin-token <TOKEN>", False)):
                binary = Path(tmp, name)
                binary.write_text(f"#!/bin/sh\necho '{usage}'\n")
                binary.chmod(0o755)
                self.assertIs(fleet.supports_buyer_auth(binary), takes, name)
            self.assertFalse(fleet.supports_buyer_auth(Path(tmp, "missing")))

    def test_bench_products_let_a_pool_buy_many_units_each(self):
        inst = a_fleet("demo")
        inst.urls, inst.token = ["http://127.0.0.1:1"], "admin"
        with mock.patch.object(fleet, "http_json", return_value={"id": 5}) as call:
            self.assertEqual(inst.product("zk", 256), 5)
        self.assertEqual(call.call_args.args[2]["per_user_limit"], fleet.PER_USER_LIMIT)


class WrkStarts(unittest.TestCase):
    def test_each_wrk_gets_the_buyers_and_its_own_point_in_the_pool(self):
        started = []

        class Proc:
            def __init__(self, cmd, env, **_):
                started.append(env)

            def communicate(self, timeout):
                return ('{"created":1,"refused":0,"other":0,"requests":1,"errors":0,'
                        '"seconds":1.0,"p50_us":10,"p99_us":20}\n', "")

        with mock.patch.object(load.subprocess, "Popen", Proc):
            load.wrk(["http://a", "http://b", "http://c"], [1], 10, 1, "t",
                     buyers={"TOKENS_FILE": "/tokens"})
        self.assertEqual([e["TOKENS_FILE"] for e in started], ["/tokens"] * 3)
        self.assertEqual([e["SHARE"] for e in started], ["0.0000", "0.3333", "0.6667"])


@unittest.skipUnless(shutil.which("wrk"), "wrk is not installed")
class OrdersLua(unittest.TestCase):
    """loadtest/wrk/orders.lua under wrk for half a second, against the fake."""

    def wrk(self, mode, **env):
        with FakeSeckill(mode) as fake:
            proc = subprocess.run(
                ["wrk", "-t1", "-c2", "-d1s", "-s", str(WRK / "orders.lua"),
                 fake.url],
                env={"PATH": os.environ["PATH"], "PRODUCTS": "3,4", "RUN": "t", **env},
                capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.strip().splitlines()[-1].startswith('{"created":'))
        self.assertGreater(len(fake.requests), 6)
        return fake.requests

    def test_signed_in_buyers_send_their_tokens_round_robin(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp, "tokens")
            tokens.write_text("".join(f"{token_of(n)}\n" for n in "abc") + "\n")
            sent = self.wrk("demo", TOKENS_FILE=str(tokens), SHARE="0.34")
        auths = [r["auth"] for r in sent]
        self.assertEqual(set(auths), {f"Bearer {token_of(n)}" for n in "abc"})
        # Round-robin from a third of the way in: b, c, a, b, ... per connection's turn.
        counts = [auths.count(f"Bearer {token_of(n)}") for n in "abc"]
        self.assertLessEqual(max(counts) - min(counts), 2)
        self.assertTrue(all(set(r["body"]) == {"product_id"} for r in sent))
        self.assertEqual({r["body"]["product_id"] for r in sent}, {3, 4})

    def test_without_sign_in_a_pool_is_named_in_the_body(self):
        sent = self.wrk("open", BUYERS="3", BUYER_PREFIX="p-")
        self.assertEqual({r["body"]["user_id"] for r in sent}, {"p-0", "p-1", "p-2"})
        self.assertTrue(all(r["auth"] is None for r in sent))

    def test_with_neither_every_order_is_a_new_buyer(self):
        sent = self.wrk("open")
        users = [r["body"]["user_id"] for r in sent]
        self.assertEqual(len(set(users)), len(users))
        self.assertTrue(all(u.startswith("w-t-1-") for u in users))

    def test_reservations_and_tokens_go_together(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp, "tokens")
            tokens.write_text(f"{token_of('a')}\n")
            sent = self.wrk("demo", TOKENS_FILE=str(tokens), PAY="false")
        self.assertTrue(all(r["body"] == {"product_id": r["body"]["product_id"], "pay": False}
                            for r in sent))


def row(build, service, paid_per_s, label="zk batched", hot=1):
    cpu = {"service": service, "postgresql": 100.0, "zookeeper": 20.0, "provider": 30.0,
           "ledger": 10.0, "generator": 5.0}
    return {"label": label, "guard": "zk", "batch_max": 256, "hot": hot, "connections": 300,
            "seconds": 10.0, "paid": int(paid_per_s * 10), "paid_per_s": paid_per_s,
            "refused": 0, "other": 0, "errors": 0, "requests": int(paid_per_s * 10),
            "p50_ms": 10.0, "p99_ms": 40.0, "zk_writes": 10, "zk_writes_per_paid": 0.001,
            "lock_cycles": 100, "orders_per_cycle": 200.0, "cycles_per_transaction": None,
            "cpu_us": {k: v * paid_per_s * 10 for k, v in cpu.items()}, "cpu_us_per_paid": cpu,
            "units_sold": int(paid_per_s * 10), "exact": True, "zk_jit_ms": 0.0, "build": build,
            "accepted_p99_ms": 50.0}


def results(*rows, floor=None):
    return {"run": "r", "quick": False, "seconds": 10, "rows": list(rows), "lapse": {},
            "peak_rss_mib": {"this": 90.0, "open": 88.0}, "floor": floor or {}, "profile": [],
            "baseline": None, "swap": False, "auth_compare": True,
            "buyers": {"this": {"auth": "demo", "pool": 2000},
                       "open": {"auth": "open", "pool": 2000}},
            "machine": {"cores": 2}}


class AuthCompareReport(unittest.TestCase):
    def test_the_cost_of_signing_in_row_by_row(self):
        text = report.markdown(results(row("this", 330.0, 1900.0), row("open", 300.0, 2000.0)))
        self.assertIn("## Signed in against not (issue 47)", text)
        line = next(ln for ln in text.splitlines() if ln.startswith("| zk batched, 1 hot |"))
        for figure in ("1 900 / 2 000 (0.95×)", "| 330.0 | 300.0 | **1.10×** |",
                       "| 450.0 | 420.0 | 1.07× |", "| yes |"):
            self.assertIn(figure, line)
        self.assertIn("every order from one of 2 000 buyers, round-robin (signed in", text)
        fresh = results(row("this", 330.0, 1900.0), row("open", 300.0, 2000.0))
        fresh["buyers"]["this"]["new_each_row"] = True
        self.assertIn("round-robin, a new pool for each row's measured run",
                      report.markdown(fresh))
        self.assertIn("open: `--buyer-auth open`, the buyer named in the body", text)

    def test_over_ten_percent_more_is_said(self):
        text = report.markdown(results(row("this", 340.0, 1900.0), row("open", 300.0, 2000.0)))
        self.assertIn("**1.13×**", text)
        self.assertIn("| **no** |", text)

    def test_a_refusal_with_and_without_a_token(self):
        cost = lambda user: {"requests_per_s": 9000.0, "user_us": user, "system_us": 10.0,
                             "generator_us": 2.0}
        floor = {b: {"healthz": cost(5.0), "refusal": cost(u)}
                 for b, u in (("this", 40.0), ("open", 20.0))}
        text = report.markdown(results(row("this", 330.0, 1900.0), row("open", 300.0, 2000.0),
                                       floor=floor))
        self.assertIn("50.0 µs of service CPU with a token against 30.0 without (1.67×)", text)

    def test_no_comparison_without_the_open_fleet_and_old_reports_read_as_before(self):
        old = results(row("this", 330.0, 1900.0))
        del old["buyers"]
        text = report.markdown(old)
        self.assertNotIn("Signed in against not", text)
        self.assertIn("every order a new buyer", text)

    def test_the_comparison_needs_no_baseline_and_swap_goes_with_either(self):
        argv = ["saturate", "--provider-pid", "1", "--swap"]
        with mock.patch("sys.argv", argv), self.assertRaises(SystemExit) as caught, \
                mock.patch("sys.stderr"):
            saturate.main()
        self.assertEqual(caught.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
