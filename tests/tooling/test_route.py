"""The bench routes orders as nginx does (deploy/nginx.conf: `hash $seckill_product
consistent` over the instances): loadtest/lib/common/route.py, a port of nginx's consistent hash,
and loadtest/k6/route.js, the same for k6. Each product goes to exactly one instance, the same
every time; a hundred products spread over 3 instances leave none empty; an instance added
takes a part of the products and moves no other. Where nginx is installed, a real one routes
as the port says; where node is, the JavaScript agrees with the Python."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

from loadtest.lib.common.route import Ring, by_instance, routes, server_name

ROOT = Path(__file__).resolve().parents[2]
ROUTE_JS = ROOT / "loadtest" / "k6" / "route.js"
URLS = [f"http://127.0.0.1:{port}" for port in (8091, 8092, 8093)]
# What nginx 1.22.1 answered for these products with the upstream servers 127.0.0.1:8091,
# 127.0.0.1:8092 and 127.0.0.1:8093, in that order (`hash $key consistent`, the key the id).
NGINX_SAID = {1: 8093, 2: 8092, 3: 8091, 4: 8092, 5: 8092, 6: 8091, 7: 8093, 8: 8092, 9: 8092,
              10: 8093, 11: 8093, 12: 8092, 100: 8093, 1000: 8093, 123456: 8091}


class ConsistentHash(unittest.TestCase):
    def test_nginx_s_own_answers(self):
        self.assertEqual(routes(URLS, NGINX_SAID), {p: f"http://127.0.0.1:{port}"
                                                    for p, port in NGINX_SAID.items()})

    def test_every_product_goes_to_exactly_one_instance(self):
        products = list(range(1, 301))
        split = by_instance(URLS, products)
        self.assertEqual(list(split), URLS)
        self.assertEqual(sorted(p for mine in split.values() for p in mine), products)
        for url, mine in split.items():
            self.assertTrue(all(routes(URLS, mine)[p] == url for p in mine))

    def test_the_same_every_time_whatever_the_order_asked(self):
        products = list(range(1, 101))
        first = routes(URLS, products)
        self.assertEqual(routes(list(URLS), reversed(products)), first)
        self.assertEqual({p: Ring(URLS).url(p) for p in products}, first)
        # The key is the id as the path writes it: a number or its text, the same.
        self.assertEqual(Ring(URLS).url("42"), Ring(URLS).url(42))

    def test_a_hundred_products_leave_no_instance_empty(self):
        counts = [len(mine) for mine in by_instance(URLS, range(1, 101)).values()]
        self.assertEqual(sum(counts), 100)
        self.assertTrue(all(n >= 10 for n in counts), counts)

    def test_an_instance_added_takes_a_part_and_moves_no_other(self):
        products = range(1, 1001)
        before = routes(URLS, products)
        more = URLS + ["http://127.0.0.1:8094"]
        after = routes(more, products)
        moved = [p for p in products if after[p] != before[p]]
        # Only to the new instance, and about its share (a quarter), not a reshuffle.
        self.assertTrue(all(after[p] == more[-1] for p in moved))
        self.assertGreater(len(moved), 100)
        self.assertLess(len(moved), 450)
        # And taken away again, every product goes back where it was.
        self.assertEqual(routes(URLS, products), before)

    def test_an_instance_removed_gives_away_only_its_own(self):
        products = range(1, 1001)
        before = routes(URLS, products)
        after = routes(URLS[:2], products)
        self.assertTrue(all(after[p] == before[p] for p in products if before[p] != URLS[2]))

    def test_the_name_hashed_is_the_address(self):
        self.assertEqual(server_name("http://127.0.0.1:8091/"), "127.0.0.1:8091")
        self.assertEqual(server_name("127.0.0.1:8091"), "127.0.0.1:8091")
        self.assertEqual(Ring(["http://127.0.0.1:8091/"]).url(1), "http://127.0.0.1:8091/")
        with self.assertRaises(ValueError):
            Ring([])


def free_ports(n):
    """`n` ports nothing listens on right now (the kernel's choice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@unittest.skipUnless(shutil.which("nginx"), "nginx is not installed")
class RealNginx(unittest.TestCase):
    """nginx itself, `hash $seckill_product consistent` as deploy/nginx.conf keys it, over
    three servers of its own that answer their port."""

    def test_nginx_routes_as_the_port_says(self):
        front, *backs = free_ports(4)
        with tempfile.TemporaryDirectory() as tmp:
            temps = " ".join(f"{k}_temp_path {tmp}/{k};" for k in
                             ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            servers = "".join(f"server 127.0.0.1:{p};" for p in backs)
            answer = "".join(f'server {{ listen 127.0.0.1:{p}; location / {{ return 200 "{p}"; }} }}\n'
                             for p in backs)
            Path(tmp, "nginx.conf").write_text(f"""
daemon off; master_process off; worker_processes 1; pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off; {temps}
  map $uri $seckill_product {{ ~^/api/products/(?<id>[0-9]+)/orders$ $id; default ""; }}
  upstream by_product {{ hash $seckill_product consistent; {servers} }}
  {answer}
  server {{ listen 127.0.0.1:{front}; location / {{ proxy_pass http://by_product; }} }}
}}
""")
            proc = subprocess.Popen(["nginx", "-e", f"{tmp}/error.log", "-p", tmp, "-c",
                                     f"{tmp}/nginx.conf"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)

            def ask(product):
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{front}/api/products/{product}/orders",
                        timeout=5) as answer:
                    return answer.read()

            try:
                deadline = time.monotonic() + 10
                while True:
                    try:
                        ask(1)
                        break
                    except OSError:
                        if proc.poll() is not None or time.monotonic() > deadline:
                            log = Path(tmp, "error.log")
                            self.fail("nginx did not start: "
                                      + (log.read_text(errors="replace") if log.exists() else ""))
                        time.sleep(0.05)
                urls = [f"http://127.0.0.1:{p}" for p in backs]
                expected = routes(urls, range(1, 201))
                said = {p: f"http://127.0.0.1:{ask(p).decode()}" for p in range(1, 201)}
            finally:
                proc.terminate()
                proc.wait(timeout=10)
        self.assertEqual(said, expected)


@unittest.skipUnless(shutil.which("node"), "node is not installed")
class JavaScript(unittest.TestCase):
    def run_js(self, body):
        program = f"import {{ ring, productUrl, routesFrom }} from {json.dumps(ROUTE_JS.as_uri())};\n{body}"
        proc = subprocess.run(["node", "--input-type=module", "-e", program],
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": os.environ["PATH"]})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout)

    def test_route_js_agrees_with_the_python(self):
        for urls in (URLS, URLS[:1], URLS + ["http://127.0.0.1:8094/"]):
            with self.subTest(instances=len(urls)):
                said = self.run_js(
                    f"const r = ring({json.dumps(urls)}); const out = {{}};\n"
                    "for (let p = 1; p <= 500; p++) out[p] = r(p);\n"
                    "out[123456] = r(123456);\n"
                    "console.log(JSON.stringify(out));")
                expected = routes(urls, [*range(1, 501), 123456])
                self.assertEqual({int(k): v for k, v in said.items()}, expected)

    def test_routes_given_come_first_and_the_path_names_the_product(self):
        said = self.run_js(
            f"const r = routesFrom('{{\"7\": \"http://127.0.0.1:9/\"}}', {json.dumps(URLS)});\n"
            "console.log(JSON.stringify([r(7), r(1), productUrl(r(7), 7)]));")
        self.assertEqual(said, ["http://127.0.0.1:9", routes(URLS, [1])[1],
                                "http://127.0.0.1:9/api/products/7/orders"])


if __name__ == "__main__":
    unittest.main()
