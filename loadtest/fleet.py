"""The bench's fleet: seckill instances on 127.0.0.1 with a database of their own, and a k6
step against them (loadtest/bench.js). Shared by the bench's matrix (bench.py), the
saturation rows (saturate.py) and the latency rows (latency.py).

Every server and load generator here talks to 127.0.0.1 only; each k6 step is bounded in
time (its duration and graceful stop)."""

import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

from . import RESULTS, ROOT
from .common.text import logger
from .common.wait import WaitTimeout, wait_for
from .common.web import http_json

SECKILL = ROOT / "target" / "release" / "seckill"
LOCK_BENCH = ROOT / "target" / "release" / "examples" / "lock_bench"
BASE_PORT = 8091
STOCK = 50_000_000
PG_PORT = os.environ.get("SECKILL_PG_PORT", "5433")

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


def ready(url: str) -> bool:
    """Whether the instance at `url` says it is ready (anything else, an error too: not yet)."""
    try:
        return http_json("GET", f"{url}/readyz")["status"] == "ok"
    except Exception:
        return False


class Instances:
    """N seckill processes on 127.0.0.1 with a database of their own, logging at `rust_log`
    to loadtest/results/{logs}-{i}.log."""

    def __init__(self, n: int, run_id: str, binary: Path = SECKILL, base_port: int = BASE_PORT,
                 rust_log: str = "info", logs: str = "bench-server"):
        self.db = f"seckill_bench_{run_id}_{n}"
        subprocess.run(["runuser", "-u", "postgres", "--", "createdb", "-p", PG_PORT,
                        "-O", "seckill", self.db], check=True)
        self.token = secrets.token_hex(16)
        db_url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + self.db
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        for i in range(n):
            addr = f"127.0.0.1:{base_port + i}"
            self.procs.append(subprocess.Popen(
                [str(binary), "--listen", addr, "--database-url", db_url,
                 "--zk", os.environ["SECKILL_ZK"], "--zk-root", f"/seckill-bench/{run_id}-{n}",
                 "--admin-token", self.token, "--instance", f"bench-{i}",
                 # ZooKeeper closed, as deployed; every connection is the generator's, one
                 # address: the per-client cap must not refuse what the bench offers.
                 "--zk-auth", f"seckill:{self.token}",
                 "--max-connections-per-client", "8192", "--max-connections", "16384"],
                stdout=subprocess.DEVNULL, stderr=open(RESULTS / f"{logs}-{i}.log", "w"),
                # The level a deployment runs at (the default): what it costs to log is part
                # of what an order costs.
                env={**os.environ, "RUST_LOG": rust_log}))
            self.urls.append(f"http://{addr}")
        for url in self.urls:
            try:
                wait_for(f"{url} to get ready", lambda: ready(url))
            except WaitTimeout:
                raise SystemExit(f"{url} did not get ready") from None

    def product(self, guard: str, batch_max: int) -> int:
        body = {"name": f"bench {guard} {batch_max}", "price_cents": 100, "stock": STOCK,
                "guard": guard, "batch_max": batch_max}
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
        subprocess.run(["runuser", "-u", "postgres", "--", "dropdb", "-p", PG_PORT,
                        "--if-exists", self.db], check=False)


def k6_step(urls: list[str], products: list[int], rate: int, seconds: int,
            tag: str) -> dict[str, Any]:
    """One k6 step; its log and HTML report stay in loadtest/results/bench-step-TAG.*, its
    JSON summary is read and removed."""
    out = RESULTS / f"bench-step-{tag}.json"
    env = {**os.environ, "BASE_URLS": ",".join(urls), "PRODUCTS": ",".join(map(str, products)),
           "RATE": str(rate), "DURATION": f"{seconds}s", "RESULTS": str(out), "RUN": tag,
           "K6_WEB_DASHBOARD_EXPORT": str(RESULTS / f"bench-step-{tag}.html")}
    k6 = subprocess.run(["k6", "run", "--quiet", "--no-color", str(ROOT / "loadtest" / "bench.js")],
                        env=env, stdout=subprocess.DEVNULL,
                        stderr=open(RESULTS / f"bench-step-{tag}.log", "w"), check=False)
    # A step past saturation may cross bench.js's bounds; its figures count all the same.
    if k6.returncode:
        log(f"k6 step {tag} exited {k6.returncode} (99: a threshold of loadtest/bench.js "
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
