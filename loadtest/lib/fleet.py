"""The bench's fleet: seckill instances on 127.0.0.1 with a database of their own, their
buyers, and a k6 step against them (loadtest/k6/bench.js). Shared by the bench's matrix
(bench.py), the saturation rows (saturate.py) and the latency rows (latency.py).

The buyers sign in, as a deployment's do: a fleet runs `--buyer-auth demo` and signs a pool of
BUYERS buyers in at its demo issuer once, before anything is measured (their tokens in a file
the load generators read: TOKENS_FILE, one JWT a line; every order then carries
`Authorization: Bearer`, round-robin over the pool, its body no user_id). A fleet in `open`
mode (the auth comparison's other side) names the same number of buyers in the body instead;
so does a build from before buyers signed in (a `--baseline`), which knows no such flag.
`new_pool()` replaces the pool by buyers the instances have never seen (new names, new
tokens): an instance that remembers the tokens it verified then verifies each anew.

Every server and load generator here talks to 127.0.0.1 only; each k6 step is bounded in
time (its duration and graceful stop)."""

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from . import K6, RESULTS, ROOT
from .common.route import routes
from .common.text import logger
from .common.wait import WaitTimeout, wait_for
from .common.web import http_json, sign_in, sign_in_many

SECKILL = ROOT / "target" / "release" / "seckill"
LOCK_BENCH = ROOT / "target" / "release" / "examples" / "lock_bench"
BASE_PORT = 8091
STOCK = 50_000_000
PG_PORT = os.environ.get("SECKILL_PG_PORT", "5433")
# The pool of buyers a fleet's orders come from, round-robin: a row of 10 s sells ~20,000
# units, so each buyer holds a few dozen of a product at most, under PER_USER_LIMIT.
BUYERS = 2000
# Every bench product's per-buyer limit: the most the API allows (src/inventory/product.rs,
# MAX_PER_USER), so that a pool of buyers is never refused `purchase_limit`.
PER_USER_LIMIT = 1_000_000
# A pool's tokens are signed in again when less than this is left of their lifetime
# (`expires_in`, an hour by default): a bench runs for many minutes.
RENEW_S = 600

log = logger("bench")


def row_done(done: int, total: int, label: str, figures: list[str], exact: bool) -> str:
    """A report's row on one line, printed as the row finishes: a bench of many minutes shows
    each row's figures when they are measured, not only in the report at its end."""
    return (f"row {done}/{total} done, {label}: {', '.join(figures)}; "
            f"{'exact' if exact else 'NOT EXACT'}")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def supports_buyer_auth(binary: Path) -> bool:
    """Whether `binary` takes `--buyer-auth` (its --help names it): a build from before
    buyers signed in (an older commit's, for `--baseline`) does not."""
    try:
        out = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--buyer-auth" in out


def supports_product_route(url: str) -> bool:
    """Whether the instance at `url` takes orders on `POST /api/products/{id}/orders` (its
    OpenAPI document names the route): a build from before it (an older `--baseline`) does
    not, and its routed rows send `POST /orders` to the same instances instead."""
    try:
        paths = http_json("GET", f"{url}/openapi.json").get("paths", {})
    except Exception:
        return False
    return "/api/products/{id}/orders" in paths


def ready(url: str) -> bool:
    """Whether the instance at `url` says it is ready (anything else, an error too: not yet)."""
    try:
        return http_json("GET", f"{url}/readyz")["status"] == "ok"
    except Exception:
        return False


class Instances:
    """N seckill processes on 127.0.0.1 with a database of their own, logging at `rust_log`
    to loadtest/results/{logs}-{i}.log, knowing their buyers by `buyer_auth`: `demo` (the
    pool signs in, see the module's doc) or `open` (no tokens: the body names the buyer).
    A binary that takes no `--buyer-auth` runs without it, as `open` would (`self.auth`:
    None). `product_route`: whether they take `POST /api/products/{id}/orders`."""

    product_route = True

    def __init__(self, n: int, run_id: str, binary: Path = SECKILL, base_port: int = BASE_PORT,
                 rust_log: str = "info", logs: str = "bench-server", buyer_auth: str = "demo",
                 buyers: int = BUYERS):
        if buyer_auth not in ("demo", "open"):
            raise ValueError(f"a fleet's buyers sign in (demo) or not (open), not {buyer_auth}")
        self.auth = buyer_auth if supports_buyer_auth(binary) else None
        self.buyers = buyers
        self.pool = 0  # which pool: new_pool() makes the next
        self.run_id = run_id
        self.db = f"seckill_bench_{run_id}_{n}"
        subprocess.run(["runuser", "-u", "postgres", "--", "createdb", "-p", PG_PORT,
                        "-O", "seckill", self.db], check=True)
        self.token = secrets.token_hex(16)
        db_url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + self.db
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        # The pool's tokens, a file the generators read (a directory of this fleet's own,
        # gone with it: they are credentials, if short-lived ones).
        self.secrets = Path(tempfile.mkdtemp(prefix="seckill-bench-"))
        self.tokens_file = self.secrets / "tokens"
        self.tokens: list[str] = []
        self.renew_at = 0.0
        mode = ["--buyer-auth", self.auth] if self.auth else []
        for i in range(n):
            addr = f"127.0.0.1:{base_port + i}"
            self.procs.append(subprocess.Popen(
                [str(binary), "--listen", addr, "--database-url", db_url,
                 "--zk", os.environ["SECKILL_ZK"], "--zk-root", f"/seckill-bench/{run_id}-{n}",
                 "--admin-token", self.token, "--instance", f"bench-{i}",
                 # ZooKeeper closed, as deployed; every connection is the generator's, one
                 # address: the per-client cap must not refuse what the bench offers.
                 "--zk-auth", f"seckill:{self.token}",
                 "--max-connections-per-client", "8192", "--max-connections", "16384",
                 # Every instance of the fleet shares the database, so the demo issuer's key
                 # (kept there): each accepts the tokens any of them issued.
                 *mode],
                stdout=subprocess.DEVNULL, stderr=open(RESULTS / f"{logs}-{i}.log", "w"),
                # The level a deployment runs at (the default): what it costs to log is part
                # of what an order costs.
                # The provider spoken to as `--payment-protocol` says by default (HTTP/1.1
                # over http); SECKILL_PAYMENT_PROTOCOL=http2 in the bench's environment
                # measures HTTP/2 (an environment variable: a baseline build that has no
                # such setting ignores it).
                env={**os.environ, "RUST_LOG": rust_log}))
            self.urls.append(f"http://{addr}")
        for url in self.urls:
            try:
                wait_for(f"{url} to get ready", lambda: ready(url))
            except WaitTimeout:
                raise SystemExit(f"{url} did not get ready") from None
        self.product_route = supports_product_route(self.urls[0])
        self.sign_in()

    @property
    def signs_in(self) -> bool:
        return self.auth == "demo"

    def sign_in(self) -> None:
        """The pool's tokens, signed in anew if they are to expire within RENEW_S (none for a
        fleet whose buyers do not sign in). Called between rows, never while one is measured:
        the sign-ins are not orders, and their CPU must not count as theirs."""
        if not self.signs_in or time.monotonic() < self.renew_at:
            return
        started = time.monotonic()
        first = sign_in(self.urls[0], self.buyer(0))
        self.tokens = [first["token"], *sign_in_many(
            self.urls[0], (self.buyer(i) for i in range(1, self.buyers)))]
        self.renew_at = started + max(float(first.get("expires_in", 3600)) - RENEW_S, 0.0)
        self.tokens_file.write_text("\n".join(self.tokens) + "\n")
        log(f"{self.buyers} buyers signed in at {self.urls[0]}'s demo issuer in "
            f"{time.monotonic() - started:.1f} s")

    def buyer(self, i: int | str) -> str:
        """The pool's buyer `i` (its name: the token's sub, or the body's user_id)."""
        return f"b-{self.run_id}-{i}" if not self.pool else f"b-{self.run_id}-p{self.pool}-{i}"

    def new_pool(self) -> None:
        """Buyers never seen before take the place of the pool's (signed in now, if they
        sign in): their first orders are their first requests."""
        self.pool += 1
        self.renew_at = 0.0
        self.sign_in()

    def load_env(self) -> dict[str, str]:
        """What a generator (loadtest/wrk/orders.lua, loadtest/k6/bench.js) is told of the buyers:
        the tokens' file (TOKENS_FILE), or, with no sign-in, how many buyers to name in the
        body and their names' prefix (BUYERS, BUYER_PREFIX)."""
        if self.signs_in:
            self.sign_in()
            return {"TOKENS_FILE": str(self.tokens_file)}
        return {"BUYERS": str(self.buyers), "BUYER_PREFIX": self.buyer("")}

    def order(self, body: dict[str, Any]) -> Any:
        """One order from the pool's first buyer (its token, or its name in the body): its
        answer's JSON, which must be a success."""
        if self.signs_in:
            return http_json("POST", f"{self.urls[0]}/orders", body, self.tokens[0])
        return http_json("POST", f"{self.urls[0]}/orders", {**body, "user_id": self.buyer(0)})

    def product(self, guard: str, batch_max: int) -> int:
        body = {"name": f"bench {guard} {batch_max}", "price_cents": 100, "stock": STOCK,
                "guard": guard, "batch_max": batch_max, "per_user_limit": PER_USER_LIMIT}
        return http_json("POST", f"{self.urls[0]}/api/products", body, self.token)["id"]

    def audit(self, product: int) -> dict[str, Any]:
        return http_json("GET", f"{self.urls[0]}/api/products/{product}/audit")

    def peak_rss(self) -> float:
        return max(peak_rss_mib(p.pid) for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=30)
        shutil.rmtree(self.secrets, ignore_errors=True)
        subprocess.run(["runuser", "-u", "postgres", "--", "dropdb", "-p", PG_PORT,
                        "--if-exists", self.db], check=False)


def k6_step(urls: list[str], products: list[int], rate: int, seconds: int,
            tag: str, buyers: dict[str, str] | None = None,
            routed: bool = True) -> dict[str, Any]:
    """One k6 step; its log and HTML report stay in loadtest/results/bench-step-TAG.*, its
    JSON summary is read and removed. `buyers`: the fleet's `load_env()` (TOKENS_FILE, or
    BUYERS and BUYER_PREFIX); without it, bench.js asks the instances itself (setup()).
    `routed` (the default, as nginx routes): each product's orders to the instance the
    consistent hash picks, `POST /api/products/{id}/orders` (ROUTES: that mapping, computed
    here by loadtest/lib/common/route.py); else round-robin over every instance, `POST /orders`
    (ROUTE=spread)."""
    out = RESULTS / f"bench-step-{tag}.json"
    env = {**os.environ, "BASE_URLS": ",".join(urls), "PRODUCTS": ",".join(map(str, products)),
           "RATE": str(rate), "DURATION": f"{seconds}s", "RESULTS": str(out), "RUN": tag,
           "K6_WEB_DASHBOARD_EXPORT": str(RESULTS / f"bench-step-{tag}.html"), **(buyers or {})}
    if routed:
        env["ROUTE"] = "product"
        env["ROUTES"] = json.dumps({str(p): url for p, url in routes(urls, products).items()})
    else:
        env["ROUTE"] = "spread"
        env.pop("ROUTES", None)
    with open(RESULTS / f"bench-step-{tag}.log", "w") as k6_log:
        k6 = subprocess.run(["k6", "run", "--quiet", "--no-color",
                             str(K6 / "bench.js")],
                            env=env, stdout=subprocess.DEVNULL, stderr=k6_log, check=False)
    # A step past saturation may cross bench.js's bounds; its figures count all the same.
    if k6.returncode:
        log(f"k6 step {tag} exited {k6.returncode} (99: a threshold of loadtest/k6/bench.js "
            f"crossed; see loadtest/results/bench-step-{tag}.log)")
    data = json.loads(out.read_text())
    out.unlink()
    m = data["metrics"]
    count = lambda n: int(m[n]["values"]["count"]) if n in m else 0
    lat = m.get("http_req_duration{name:POST /orders}", {}).get("values", {})
    paid_lat = m.get("orders_paid_duration", {}).get("values", {})
    return {"offered": rate, "paid": count("orders_paid"), "retry": count("orders_retry"),
            "other": count("orders_other"), "paid_per_s": count("orders_paid") / seconds,
            "p50_ms": lat.get("med"), "p99_ms": lat.get("p(99)"),
            "paid_p50_ms": paid_lat.get("med"), "paid_p99_ms": paid_lat.get("p(99)"),
            "dropped": count("dropped_iterations")}
