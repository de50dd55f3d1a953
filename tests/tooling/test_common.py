"""The helpers every load and chaos script shares (loadtest/lib/common/): a report's figures,
SVG text escaping, waiting on a fake clock, a ZooKeeper four-letter word, an HTTP call and
the wrappers' commands against servers of the test's own on 127.0.0.1 (port 0: any free
one), and the psql command line (psql itself not run)."""

import asyncio
import contextlib
import http.server
import io
import json
import os
import socketserver
import subprocess
import threading
import unittest
from unittest import mock

from loadtest.lib.common import cli, pg, svg, web, zk
from loadtest.lib.common.text import fmt
from loadtest.lib.common.wait import WaitTimeout, wait_for, wait_for_async
from tests.tooling.fake_seckill import FakeSeckill, token_of


class Figures(unittest.TestCase):
    def test_thousands_apart_and_a_dash_for_none(self):
        self.assertEqual(fmt(1234567.891), "1 234 568")
        self.assertEqual(fmt(1234.5, 1), "1 234.5")
        self.assertEqual(fmt(0.0123, 3), "0.012")
        self.assertEqual(fmt(None), "–")
        self.assertEqual(fmt(1234.5, 1, group=""), "1234.5")


class Svg(unittest.TestCase):
    def test_text_and_attributes_are_escaped(self):
        self.assertEqual(svg.esc('<a & "b">'), "&lt;a &amp; &quot;b&quot;&gt;")
        self.assertEqual(svg.text(1, 2.5, "Vec<T> & co", font_size=10),
                         '<text x="1" y="2.5" font-size="10">Vec&lt;T&gt; &amp; co</text>')
        self.assertEqual(svg.rect(0, 0, 3.14159, 2, "#fff", class_='a"b'),
                         '<rect x="0" y="0" width="3.14" height="2" fill="#fff" class="a&quot;b"/>')

    def test_a_document_is_one_svg_with_its_background_and_body(self):
        doc = svg.document(100, 50, [svg.line(0, 0, 1, 1)], font="monospace", size=11)
        lines = doc.splitlines()
        self.assertEqual(lines[0], '<svg xmlns="http://www.w3.org/2000/svg" width="100" '
                                   'height="50" font-family="monospace" font-size="11">')
        self.assertEqual(lines[1], '<rect width="100%" height="100%" fill="white"/>')
        self.assertEqual(lines[-1], "</svg>")
        self.assertTrue(doc.endswith("\n"))

    def test_a_legend_has_a_swatch_and_a_label_per_item(self):
        items = svg.legend([("a<b", "#000"), ("c", "#111")], 10, 20, 100)
        self.assertEqual(len(items), 4)
        self.assertIn('x="110"', items[2])
        self.assertIn(">a&lt;b</text>", items[1])


class FakeClock:
    """A clock that moves only when slept on: waiting costs the test no time."""

    def __init__(self):
        self.now = 0.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


class Waiting(unittest.TestCase):
    def test_it_returns_once_the_condition_holds(self):
        clock, answers = FakeClock(), iter([False, False, True])
        wait_for("it", lambda: next(answers), limit=5, every=0.5, sleep=clock.sleep, clock=clock)
        self.assertEqual(clock.slept, [0.5, 0.5])

    def test_it_gives_up_after_the_limit_naming_what_it_waited_for(self):
        clock = FakeClock()
        with self.assertRaises(WaitTimeout) as caught:
            wait_for("the server", lambda: False, limit=1, every=0.3, sleep=clock.sleep,
                     clock=clock)
        self.assertEqual(str(caught.exception), "the server did not happen within 1 s")
        self.assertEqual(len(clock.slept), 4)  # at 0.3, 0.6, 0.9 and 1.2 s; then past 1 s
        self.assertIsInstance(caught.exception, RuntimeError)  # the chaos sale's "run broke"

    def test_the_async_wait_checks_a_coroutine(self):
        clock, answers = FakeClock(), iter([False, True])

        async def check():
            return next(answers)

        async def sleep(seconds):
            clock.sleep(seconds)

        asyncio.run(wait_for_async("it", check, limit=5, every=0.2, sleep=sleep, clock=clock))
        self.assertEqual(clock.slept, [0.2])


class Server:
    """A server of the test's own on 127.0.0.1, any free port, in a thread."""

    def __init__(self, server: socketserver.BaseServer):
        self.server = server
        self.port = server.server_address[1]
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class ZooKeeperWord(socketserver.StreamRequestHandler):
    """Answers `srvr` as ZooKeeper does (the lines, then the connection closed)."""

    def handle(self):
        word = self.rfile.read(4)
        self.wfile.write(b"Zookeeper version: 3.8.0-abc, built on 2022-02-25 08:49 UTC\n"
                         b"Latency min/avg/max: 0/0.1/4\nZxid: 0x1a2b\nMode: follower\n"
                         if word == b"srvr" else b"")


class ZooKeeperProbes(unittest.TestCase):
    def test_srvr_and_the_zxid(self):
        with Server(socketserver.TCPServer(("127.0.0.1", 0), ZooKeeperWord)) as zoo:
            stats = zk.srvr("127.0.0.1", zoo.port)
            self.assertEqual(stats["Mode"], "follower")
            self.assertEqual(stats["Zookeeper version"], "3.8.0-abc, built on 2022-02-25 08:49 UTC")
            self.assertEqual(zk.zxid(f"127.0.0.1:{zoo.port},127.0.0.1:1"), 0x1a2b)
            self.assertEqual(zk.four_letters("127.0.0.1", zoo.port, "ruok"), "")

    def test_no_server_is_an_os_error(self):
        with socketserver.TCPServer(("127.0.0.1", 0), ZooKeeperWord) as closed:
            port = closed.server_address[1]
        with self.assertRaises(OSError):
            zk.srvr("127.0.0.1", port, timeout=1)


PROBLEM = {"type": "/problems/lock_timeout", "title": "Lock timeout", "status": 503,
           "error": "lock_timeout", "message": "try later", "retryable": True}


class Seckill(http.server.BaseHTTPRequestHandler):
    """/busy: a problem+json 503 with `retryable` and Retry-After; /sold: a final 409;
    /ok: 201 with the request's body echoed; /metrics: a Prometheus page."""

    def do_GET(self):
        if self.path == "/busy":
            self.answer(503, "application/problem+json", json.dumps(PROBLEM), {"Retry-After": "2"})
        elif self.path == "/sold":
            body = dict(PROBLEM, status=409, error="sold_out", retryable=False)
            self.answer(409, "application/problem+json", json.dumps(body))
        elif self.path == "/metrics":
            self.answer(200, "text/plain", '# HELP x\nseckill_orders_total{outcome="paid",'
                                           'guard="zk"} 7\nseckill_up 1\n')
        else:
            self.answer(404, "text/plain", "no such page")

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        echo = {"got": json.loads(body), "auth": self.headers["Authorization"]}
        self.answer(201, "application/json", json.dumps(echo))

    def answer(self, status, kind, text, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *_):
        pass


class Http(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Seckill)).__enter__()
        cls.url = f"http://127.0.0.1:{cls.server.port}"

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__()

    def test_a_problem_says_whether_to_retry_and_when(self):
        answer = web.request("GET", f"{self.url}/busy")
        self.assertEqual(answer.status, 503)
        self.assertIs(answer.retryable, True)
        self.assertEqual(answer.retry_after, 2.0)
        self.assertEqual(answer.json()["error"], "lock_timeout")
        sold = web.request("GET", f"{self.url}/sold")
        self.assertEqual((sold.status, sold.retryable, sold.retry_after), (409, False, None))

    def test_an_answer_that_is_not_json_says_nothing(self):
        answer = web.request("GET", f"{self.url}/nowhere")
        self.assertEqual((answer.status, answer.retryable, answer.json()), (404, None, None))

    def test_a_call_that_must_succeed(self):
        self.assertEqual(web.http_json("POST", f"{self.url}/ok", {"a": 1}, token="t"),
                         {"got": {"a": 1}, "auth": "Bearer t"})
        with self.assertRaises(web.HttpError) as caught:
            web.http_json("GET", f"{self.url}/busy")
        self.assertEqual(caught.exception.answer.status, 503)

    def test_metrics(self):
        samples = web.metrics(self.url)
        self.assertEqual([(s.name, dict(s.labels), s.value) for s in samples],
                         [("seckill_orders_total", {"outcome": "paid", "guard": "zk"}, 7.0),
                          ("seckill_up", {}, 1.0)])

    def test_no_server_is_an_os_error(self):
        with socketserver.TCPServer(("127.0.0.1", 0), ZooKeeperWord) as closed:
            port = closed.server_address[1]
        with self.assertRaises(OSError):
            web.request("GET", f"http://127.0.0.1:{port}/", timeout=2)


class Service(Seckill):
    """POST /api/products as an instance (201 and an id, with the admin token; 401 without),
    GET /v1/charges as the payment provider (with its key)."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/api/products" or self.headers["Authorization"] != "Bearer admin":
            return self.json(401, {"error": "unauthorized", "retryable": False})
        self.server.made.append(body)
        self.json(201, {"id": 42, **body})

    def do_GET(self):
        if self.path != "/v1/charges" or self.headers["Authorization"] != "Bearer key":
            return self.json(401, {"error": "unauthorized", "retryable": False})
        self.json(200, {"charges": [{"status": s} for s in
                                    ("succeeded", "declined", "succeeded", "pending")]})

    def json(self, status, body):
        self.answer(status, "application/json", json.dumps(body))


class WrapperCommands(unittest.TestCase):
    """python3 -m loadtest.lib.common.cli: what loadtest/views, flood and run ask of a server."""

    def setUp(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Service)
        server.made = []
        self.server = Server(server).__enter__()
        self.addCleanup(self.server.__exit__)
        self.url = f"http://127.0.0.1:{self.server.port}"

    def main(self, *argv, **env):
        out = io.StringIO()
        with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out):
            cli.main(list(argv))
        return out.getvalue()

    def test_a_product_is_made_and_its_id_printed(self):
        self.assertEqual(self.main("product", self.url, "--name", "views", "--stock", "5",
                                   ADMIN_TOKEN="admin"), "42\n")
        self.assertEqual(self.server.server.made,
                         [{"name": "views", "price_cents": 100, "stock": 5}])

    def test_a_refused_product_is_an_exit_with_the_answer(self):
        with self.assertRaises(SystemExit) as caught:
            self.main("product", self.url, "--name", "x", "--stock", "1", ADMIN_TOKEN="wrong")
        self.assertIn("401", str(caught.exception.code))

    def test_the_succeeded_charges_are_counted(self):
        self.assertEqual(self.main("succeeded-charges", self.url, SECKILL_PAYMENT_API_KEY="key"),
                         "2\n")


class SigningIn(unittest.TestCase):
    """A buyer's sign-in at the demo issuer (web.sign_in), many at once, and the wrappers'
    `tokens` command, against a server of the test's own (tests/tooling/fake_seckill.py)."""

    def test_a_sign_in_is_sent_again_while_the_answer_says_so(self):
        waits = []
        with FakeSeckill("demo", busy=2) as fake:
            session = web.sign_in(fake.url, "alice", sleep=waits.append)
        self.assertEqual(session["token"], token_of("alice"))
        self.assertEqual(len(fake.sign_ins), 3)
        self.assertEqual(waits, [0.5, 0.5])  # Retry-After 0: the least wait, 0.5 s

    def test_a_server_that_issues_no_tokens_refuses_for_good(self):
        with FakeSeckill("open") as fake:
            with self.assertRaises(web.HttpError) as caught:
                web.sign_in(fake.url, "alice", sleep=lambda _: None)
        self.assertEqual(caught.exception.answer.status, 403)
        self.assertEqual(len(fake.sign_ins), 1)

    def test_too_many_retryable_answers_give_up(self):
        with FakeSeckill("demo", busy=9) as fake:
            with self.assertRaises(web.HttpError):
                web.sign_in(fake.url, "alice", tries=3, sleep=lambda _: None)
        self.assertEqual(len(fake.sign_ins), 3)

    def test_many_tokens_come_in_the_names_order(self):
        names = [f"b{i}" for i in range(40)]
        with FakeSeckill("demo") as fake:
            self.assertEqual(web.sign_in_many(fake.url, names, workers=8),
                             [token_of(n) for n in names])

    def test_the_mode_is_the_servers_and_an_older_build_has_none(self):
        for mode in ("demo", "open"):
            with FakeSeckill(mode) as fake:
                self.assertEqual(web.buyer_auth(fake.url), mode)
        with FakeSeckill("none") as fake:
            self.assertIsNone(web.buyer_auth(fake.url))

    def test_the_tokens_command_prints_one_a_line(self):
        out = io.StringIO()
        with FakeSeckill("demo") as fake, contextlib.redirect_stdout(out):
            cli.main(["tokens", fake.url, "winner", "--prefix", "late-", "--count", "3"])
        self.assertEqual(out.getvalue().splitlines(),
                         [token_of(n) for n in ("winner", "late-0", "late-1", "late-2")])
        with FakeSeckill("open") as fake, self.assertRaises(SystemExit) as caught:
            cli.main(["tokens", fake.url, "alice"])
        self.assertIn("403", str(caught.exception.code))


class Psql(unittest.TestCase):
    """The command line and environment psql is given (subprocess.run replaced)."""

    def run_psql(self, returncode=0, **kwargs):
        done = subprocess.CompletedProcess([], returncode, stdout="1|2\n", stderr="boom\n")
        with mock.patch.object(pg.subprocess, "run", return_value=done) as run:
            out = pg.psql("SELECT 1, 2", **kwargs)
        return out, run.call_args

    def test_as_the_role_seckill_over_tcp(self):
        out, call = self.run_psql(port=5434, db="sale")
        self.assertEqual(out, "1|2\n")
        cmd = call.args[0]
        self.assertEqual(cmd[0], "psql")
        self.assertEqual(cmd[cmd.index("-p") + 1], "5434")
        self.assertEqual(cmd[cmd.index("-d") + 1], "sale")
        self.assertEqual(cmd[cmd.index("-h") + 1], "127.0.0.1")
        self.assertEqual(cmd[cmd.index("-U") + 1], "seckill")
        self.assertEqual(cmd[cmd.index("-c") + 1], "SELECT 1, 2")
        self.assertEqual(cmd[cmd.index("-F") + 1], "|")
        self.assertIn("ON_ERROR_STOP=1", cmd)
        self.assertEqual(call.kwargs["env"]["PGPASSWORD"], "seckill")

    def test_as_the_superuser_over_the_socket(self):
        _, call = self.run_psql(port="5433", superuser=True, separator="\t")
        cmd = call.args[0]
        self.assertIn(cmd[:4], (["runuser", "-u", "postgres", "--"],
                                ["sudo", "-u", "postgres", "psql"]))
        self.assertNotIn("-h", cmd)
        self.assertEqual(cmd[cmd.index("-F") + 1], "\t")
        self.assertIsNone(call.kwargs["env"])

    def test_a_failure_or_no_answer_is_a_psql_error(self):
        with self.assertRaises(pg.PsqlError) as caught:
            self.run_psql(returncode=1, port=5433)
        self.assertEqual(str(caught.exception), "psql failed: boom")
        self.assertIsInstance(caught.exception, RuntimeError)  # the chaos sale's "run broke"
        late = subprocess.TimeoutExpired(["psql"], 5)
        with mock.patch.object(pg.subprocess, "run", side_effect=late):
            with self.assertRaises(pg.PsqlError):
                pg.psql("SELECT pg_sleep(10)", port=5433, timeout=5)


class Retryable(unittest.TestCase):
    def test_the_body_alone_decides(self):
        self.assertIs(web.retryable(json.dumps(PROBLEM)), True)
        self.assertIs(web.retryable('{"error": "sold_out", "retryable": false}'), False)
        self.assertIs(web.retryable('{"id": "x", "status": "paid"}'), False)  # a success
        self.assertIsNone(web.retryable("<html>502 Bad Gateway</html>"))
        self.assertIsNone(web.retryable(""))
        self.assertIsNone(web.retryable("[1]"))


if __name__ == "__main__":
    unittest.main()
