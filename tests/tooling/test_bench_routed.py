"""The saturation bench's routed rows (loadtest/lib/saturate.py's ROWS): each product's orders go
to the one instance nginx's consistent hash sends `POST /api/products/{id}/orders` to, each
instance's wrk with its products and a share of the connections in proportion
(loadtest/lib/saturation/load.py), the route named by loadtest/wrk/orders.lua's ROUTE=product; the
uniform rows as before. Each row also reads its products' lock statistics (the longest
handover, the cycles on kept nodes), and the accepted orders' p99 counts either route."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from loadtest.lib import WRK, fleet, rush, saturate
from loadtest.lib.common.route import by_instance
from loadtest.lib.common.web import Sample
from loadtest.lib.saturation import load
from tests.tooling.fake_seckill import FakeSeckill, token_of

URLS = ["http://127.0.0.1:8091", "http://127.0.0.1:8092", "http://127.0.0.1:8093"]
SUMMARY = ('{"created":1,"refused":0,"other":0,"requests":1,"errors":0,"seconds":1.0,'
           '"p50_us":10,"p99_us":20}\n')


def started_wrks(**kwargs):
    """load.wrk's wrks as started (their command and environment), none run."""
    started = []

    class Proc:
        def __init__(self, cmd, env, **_):
            started.append((cmd, env))

        def communicate(self, timeout):
            return SUMMARY, ""

    with mock.patch.object(load.subprocess, "Popen", Proc):
        total = load.wrk(**kwargs)
    return started, total


class Connections(unittest.TestCase):
    def test_shared_in_proportion_at_least_one_each(self):
        self.assertEqual(load.proportional(300, [4, 3, 3]), [120, 90, 90])
        self.assertEqual(load.proportional(300, [1, 0, 0]), [300, 0, 0])
        self.assertEqual(load.proportional(4002, [0, 1, 0]), [0, 4002, 0])
        for total, weights in ((300, [30, 44, 26]), (300, [98, 1, 1]), (3, [1, 1, 1]),
                               (4, [5, 0, 2]), (300, [0, 0, 0])):
            with self.subTest(total=total, weights=weights):
                shares = load.proportional(total, weights)
                self.assertEqual(sum(shares), total if any(weights) else 0)
                self.assertTrue(all((s >= 1) == (w > 0) for s, w in zip(shares, weights)))
        self.assertEqual(load.proportional(100, [98, 1, 1])[1:], [1, 1])


class RoutedWrks(unittest.TestCase):
    def test_uniform_every_wrk_every_product_by_the_body(self):
        started, total = started_wrks(urls=URLS, products=[1, 2, 3], connections=100,
                                      seconds=1, tag="t")
        self.assertEqual([cmd[-1] for cmd, _ in started], URLS)
        self.assertTrue(all("-c100" in cmd for cmd, _ in started))
        self.assertEqual({env["PRODUCTS"] for _, env in started}, {"1,2,3"})
        self.assertTrue(all("ROUTE" not in env for _, env in started))
        self.assertEqual(total["created"], 3)
        self.assertEqual([w["products"] for w in total["wrks"]], [3, 3, 3])

    def test_routed_each_wrk_its_products_and_a_share_of_the_connections(self):
        products = list(range(1, 11))
        mine = by_instance(URLS, products)
        with mock.patch.dict(os.environ, {"ROUTE": "stale"}):
            started, total = started_wrks(urls=URLS, products=products, connections=100,
                                          seconds=1, tag="t", routed=True)
        self.assertEqual(len(started), sum(1 for m in mine.values() if m))
        conns = 0
        for cmd, env in started:
            url = cmd[-1]
            self.assertEqual(env["PRODUCTS"], ",".join(map(str, mine[url])))
            self.assertEqual(env["ROUTE"], "product")
            # Where in the pool: the instance's own point, as uniform.
            self.assertEqual(env["SHARE"], f"{URLS.index(url) / 3:.4f}")
            c = int(next(a for a in cmd if a.startswith("-c"))[2:])
            self.assertEqual(c, round(300 * len(mine[url]) / 10))
            conns += c
        self.assertEqual(conns, 300)
        self.assertEqual(sum(w["products"] for w in total["wrks"]), 10)

    def test_one_hot_product_routed_is_one_wrk_with_every_connection(self):
        started, total = started_wrks(urls=URLS, products=[5], connections=1334, seconds=1,
                                      tag="t", routed=True)
        self.assertEqual(len(started), 1)
        cmd, env = started[0]
        self.assertIn("-c4002", cmd)
        self.assertEqual(by_instance(URLS, [5])[cmd[-1]], [5])
        self.assertEqual(total["wrks"], [{"url": cmd[-1], "products": 1, "connections": 4002}])

    def test_a_build_without_the_product_route_is_routed_by_the_body(self):
        products = list(range(1, 11))
        started, _ = started_wrks(urls=URLS, products=products, connections=100,
                                  seconds=1, tag="t", routed=True, by_path=False)
        self.assertTrue(all("ROUTE" not in env for _, env in started))
        mine = by_instance(URLS, products)
        self.assertEqual({cmd[-1]: env["PRODUCTS"] for cmd, env in started},
                         {u: ",".join(map(str, m)) for u, m in mine.items() if m})

    def test_the_floor_is_never_routed(self):
        started, _ = started_wrks(urls=URLS, products=[], connections=100, seconds=1, tag="t",
                                  get="/healthz", routed=True)
        self.assertEqual(len(started), 3)
        self.assertTrue(all(env["GET"] == "/healthz" and "ROUTE" not in env
                            for _, env in started))


class Rows(unittest.TestCase):
    def test_the_rows_and_their_indices(self):
        self.assertTrue(all(len(r) == 6 for r in saturate.ROWS))
        for label, guard, batch, hot, conns, routed in saturate.ROWS:
            self.assertEqual("routed" in label, routed, label)
        # Row 1: the uniform one-hot row the rush and the open model are held to.
        self.assertEqual(saturate.ROWS[1], (*rush.ONE_HOT, False))
        self.assertEqual(saturate.ROWS[7], ("zk batched, routed", "zk", 256, 1, 100, True))
        self.assertEqual([r[3] for r in saturate.ROWS[1:4]], [1, 10, 100])
        self.assertEqual([r[3] for r in saturate.ROWS[7:10]], [1, 10, 100])
        # The crowds, uniform: a third of the connections on each instance (memory per
        # instance, as in every earlier report).
        self.assertEqual([(r[3], r[4] * 3 // 1000 * 1000, r[5]) for r in saturate.ROWS[5:7]],
                         [(1, 3000, False), (1, 4000, False)])


class LockStats(unittest.TestCase):
    def test_the_longest_handover_and_the_kept_cycles_over_products_and_instances(self):
        with FakeSeckill("demo") as one, FakeSeckill("demo") as two:
            one.lock_stats = {1: {"kept_cycles": 5, "longest_handover_ms": 12}}
            two.lock_stats = {1: {"kept_cycles": 2, "longest_handover_ms": 48},
                              2: {"kept_cycles": 1, "longest_handover_ms": 7}}
            self.assertEqual(load.lock_stats([one.url, two.url], [1, 2]),
                             {"longest_handover_ms": 48, "kept_cycles": 8})

    def test_none_where_no_instance_says(self):
        with FakeSeckill("demo") as fake:
            url = fake.url
        self.assertIsNone(load.lock_stats([url], [1]))  # nobody there any more


class AcceptedBuckets(unittest.TestCase):
    def test_either_route_counts(self):
        sample = lambda route, le, v, status="201": Sample(
            "seckill_http_request_duration_seconds_bucket",
            {"route": route, "status": status, "method": "POST", "le": le}, v)
        samples = [sample("/orders", "0.1", 3), sample("/api/products/{id}/orders", "0.1", 4),
                   sample("/api/products/{id}/orders", "0.1", 9, status="503"),
                   sample("/api/products/{id}/line", "0.1", 5)]
        with mock.patch.object(load, "metrics", return_value=samples):
            self.assertEqual(load.accepted_buckets(["http://a", "http://b"]), {"0.1": 14})


class K6Step(unittest.TestCase):
    def step(self, **kwargs):
        seen = {}

        def run(cmd, env, **_):
            seen.update(env)
            Path(env["RESULTS"]).write_text(json.dumps({"metrics": {}}))
            return subprocess.CompletedProcess(cmd, 0)

        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(fleet, "RESULTS", Path(tmp)), \
                mock.patch.object(fleet.subprocess, "run", run):
            fleet.k6_step(URLS, [1, 2, 3], 100, 1, "t", **kwargs)
        return seen

    def test_routed_by_default_with_the_mapping(self):
        env = self.step()
        self.assertEqual(env["ROUTE"], "product")
        mapping = json.loads(env["ROUTES"])
        self.assertEqual(mapping, {str(p): u for u, mine in by_instance(URLS, [1, 2, 3]).items()
                                   for p in mine})

    def test_spread_when_asked(self):
        with mock.patch.dict(os.environ, {"ROUTES": "{}"}):
            env = self.step(routed=False)
        self.assertEqual(env["ROUTE"], "spread")
        self.assertNotIn("ROUTES", env)


@unittest.skipUnless(shutil.which("wrk"), "wrk is not installed")
class OrdersLuaRouted(unittest.TestCase):
    """loadtest/wrk/orders.lua with ROUTE=product under wrk, against the fake."""

    def wrk(self, mode, **env):
        with FakeSeckill(mode) as fake:
            proc = subprocess.run(
                ["wrk", "-t1", "-c2", "-d1s", "-s", str(WRK / "orders.lua"),
                 fake.url],
                env={"PATH": os.environ["PATH"], "PRODUCTS": "3,4", "RUN": "t",
                     "ROUTE": "product", **env},
                capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        self.assertEqual(summary["other"], 0)  # no 400: the body names no product
        self.assertGreater(len(fake.requests), 6)
        self.assertEqual({r["path"] for r in fake.requests},
                         {"/api/products/3/orders", "/api/products/4/orders"})
        return fake.requests

    def test_a_token_and_an_empty_body(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp, "tokens")
            tokens.write_text(f"{token_of('a')}\n")
            sent = self.wrk("demo", TOKENS_FILE=str(tokens))
        self.assertTrue(all(r["body"] == {} for r in sent))

    def test_a_reservation_with_a_token(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp, "tokens")
            tokens.write_text(f"{token_of('a')}\n")
            sent = self.wrk("demo", TOKENS_FILE=str(tokens), PAY="false")
        self.assertTrue(all(r["body"] == {"pay": False} for r in sent))

    def test_buyers_named_in_the_body(self):
        sent = self.wrk("open", BUYERS="2", BUYER_PREFIX="p-", PAY="false")
        self.assertEqual({tuple(sorted(r["body"])) for r in sent}, {("pay", "user_id")})
        self.assertEqual({r["body"]["user_id"] for r in sent}, {"p-0", "p-1"})

    def test_an_unknown_route_stops_wrk(self):
        proc = subprocess.run(
            ["wrk", "-t1", "-c1", "-d1s", "-s", str(WRK / "orders.lua"),
             "http://127.0.0.1:9"],
            env={"PATH": os.environ["PATH"], "ROUTE": "nginx"}, capture_output=True, text=True,
            timeout=60)
        self.assertIn("ROUTE is product or unset", proc.stdout + proc.stderr)


if __name__ == "__main__":
    unittest.main()
