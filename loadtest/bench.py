"""The bench's matrix, run by loadtest/bench (which installs and starts what it needs).

Every server and load generator here talks to 127.0.0.1 only. Each k6 step is bounded in
time (duration + graceful stop), and the stepping in count (MAX_RATE).
"""

import argparse
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "loadtest" / "results"
SECKILL = ROOT / "target" / "release" / "seckill"
LOCK_BENCH = ROOT / "target" / "release" / "examples" / "lock_bench"
JARS = ["curator-recipes", "curator-framework", "curator-client", "zookeeper",
        "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop"]

GUARDS = [  # (label, guard, batch_max)
    ("pg-atomic per-request", "pg-atomic", 1),
    ("pg-atomic batched", "pg-atomic", 256),
    ("zk per-request", "zk", 1),
    ("zk batched", "zk", 256),
]
FIRST_RATE, MAX_RATE = 200, 12800
BASE_PORT = 8091
STOCK = 50_000_000


def log(msg):
    print(f"\033[1;34m[bench]\033[0m {msg}", file=sys.stderr, flush=True)


def row_done(done, total, label, figures, exact):
    """A report's row on one line, printed as the row finishes: a bench of many minutes shows
    each row's figures when they are measured, not only in the report at its end."""
    return (f"row {done}/{total} done, {label}: {', '.join(figures)}; "
            f"{'exact' if exact else 'NOT EXACT'}")


def cell_line(cell, done, total):
    """The matrix's row for `cell` (what `saturate` returns), with bench.md's figures."""
    figures = [f"saturation {cell['saturation']:.0f} paid/s",
               f"p99 there {cell['p99_at_saturation'] or 0:.0f} ms"]
    if cell["guard"] == "zk":
        figures.append(f"ZK writes/paid {cell['zk_writes_per_paid']:.3f}")
    figures.append(f"{cell['paid_201s']} 201s, {cell['units_sold']} units sold")
    return row_done(done, total, f"{cell['label']} ×{cell['instances']} hot {cell['hot']}",
                    figures, cell["exact"])


def http_json(method, url, body=None, token=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as res:
        return json.load(res)


def zk_zxid(connect):
    """ZooKeeper's last zxid: it grows by one per write to the ensemble (all clients)."""
    host, port = connect.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"srvr")
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return int(re.search(rb"Zxid: (0x[0-9a-f]+)", out).group(1), 16)


def peak_rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Instances:
    """N seckill processes on 127.0.0.1 with a database of their own, logging at `rust_log`
    to loadtest/results/{logs}-{i}.log."""

    def __init__(self, n, run_id, binary=SECKILL, base_port=BASE_PORT, rust_log="info",
                 logs="bench-server"):
        self.db = f"seckill_bench_{run_id}_{n}"
        subprocess.run(["runuser", "-u", "postgres", "--", "createdb", "-p", PG_PORT,
                        "-O", "seckill", self.db], check=True)
        self.token = secrets.token_hex(16)
        db_url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + self.db
        self.procs, self.urls = [], []
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
            deadline = time.time() + 60
            while True:
                try:
                    if http_json("GET", f"{url}/readyz")["status"] == "ok":
                        break
                except Exception:
                    pass
                if time.time() > deadline:
                    raise SystemExit(f"{url} did not get ready")
                time.sleep(0.2)

    def product(self, guard, batch_max):
        body = {"name": f"bench {guard} {batch_max}", "price_cents": 100, "stock": STOCK,
                "guard": guard, "batch_max": batch_max}
        return http_json("POST", f"{self.urls[0]}/api/products", body, self.token)["id"]

    def audit(self, product):
        return http_json("GET", f"{self.urls[0]}/api/products/{product}/audit")

    def peak_rss(self):
        return max(peak_rss_mib(p.pid) for p in self.procs)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=30)
        subprocess.run(["runuser", "-u", "postgres", "--", "dropdb", "-p", PG_PORT,
                        "--if-exists", self.db], check=False)


def k6_step(urls, products, rate, seconds, tag):
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


def saturate(inst, label, guard, batch, hot, seconds, quick, run_id):
    """Steps the offered rate up (doubling) until paid orders/s fall behind it."""
    products = [inst.product(guard, batch) for _ in range(hot)]
    steps, rate = [], FIRST_RATE
    while rate <= MAX_RATE:
        before = zk_zxid(os.environ["SECKILL_ZK"])
        step = k6_step(inst.urls, products, rate, seconds, f"{run_id}-{len(steps)}")
        step["zk_writes"] = zk_zxid(os.environ["SECKILL_ZK"]) - before
        steps.append(step)
        log(f"{label:22} ×{len(inst.urls)} hot {hot:2}: offered {rate:5}/s → paid "
            f"{step['paid_per_s']:7.0f}/s, p99 {step['p99_ms'] or 0:7.0f} ms, "
            f"ZK writes/paid {step['zk_writes'] / max(step['paid'], 1):.3f}")
        if quick or step["paid_per_s"] < 0.85 * rate:
            break
        rate *= 2
    best = max(steps, key=lambda s: s["paid_per_s"])
    audits = [inst.audit(p) for p in products]
    paid = sum(s["paid"] for s in steps)
    sold = sum(a["sold"] for a in audits)
    # k6 waits for every answer (see bench.js), so each unit sold was answered 201.
    exact = all(a["oversold"] == 0 and a["consistent"] for a in audits) and paid == sold
    return {"label": label, "guard": guard, "batch_max": batch, "instances": len(inst.urls),
            "hot": hot, "steps": steps, "saturation": best["paid_per_s"],
            "p99_at_saturation": best["p99_ms"],
            "zk_writes_per_paid": best["zk_writes"] / max(best["paid"], 1),
            "exact": exact, "paid_201s": paid, "units_sold": sold}


def lock_bench(contenders, seconds, run_id):
    connect = os.environ["SECKILL_ZK"]
    rows = []
    for n in contenders:
        ours = subprocess.run(
            [str(LOCK_BENCH), connect, f"/seckill-bench/{run_id}-lock-ours-{n}", str(n), str(seconds)],
            capture_output=True, text=True, check=True).stdout
        classpath = ":".join(f"/usr/share/java/{j}.jar" for j in JARS)
        theirs = subprocess.run(
            ["java", "-cp", classpath, str(ROOT / "tests" / "interop" / "CuratorMutex.java"),
             connect, f"/seckill-bench/{run_id}-lock-curator-{n}/locks/stock/1", "bench",
             str(n), str(seconds)],
            capture_output=True, text=True, check=True).stdout
        rate = lambda out: (lambda h, s: h / s)(*map(float, re.findall(r"[\d.]+", out)[:2]))
        row = {"contenders": n, "ours": rate(ours), "curator": rate(theirs)}
        log(f"bare lock, {n:2} contenders: ours {row['ours']:6.0f}/s, Curator {row['curator']:6.0f}/s")
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--step-seconds", type=int, default=5)
    args = parser.parse_args()
    run_id = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    seconds = 2 if args.quick else args.step_seconds
    cells, rss, at_70 = [], {}, []
    sizes, hots = (1, 3), (1, 10)
    for n in sizes:
        inst = Instances(n, run_id)
        try:
            for hot in hots:
                for label, guard, batch in GUARDS:
                    cells.append(saturate(inst, label, guard, batch, hot, seconds, args.quick,
                                          f"{run_id}-{n}-{hot}-{guard}-{batch}"))
                    log(cell_line(cells[-1], len(cells), len(sizes) * len(hots) * len(GUARDS)))
            if n == 3:
                # Latency below saturation: every guard at 70 % of pg-atomic per-request's.
                base = next(c for c in cells if c["instances"] == 3 and c["hot"] == 1
                            and c["label"] == "pg-atomic per-request")
                rate = max(int(base["saturation"] * 0.7), 50)
                for label, guard, batch in GUARDS:
                    products = [inst.product(guard, batch)]
                    step = k6_step(inst.urls, products, rate, seconds, f"{run_id}-70-{guard}-{batch}")
                    step["label"] = label
                    at_70.append(step)
                    log(f"{label:22} at {rate}/s: p99 {step['p99_ms'] or 0:.0f} ms")
            rss[n] = inst.peak_rss()
        finally:
            inst.stop()
    locks = lock_bench([1, 4, 16, 64], 2 if args.quick else 5, run_id)
    results = {"run": run_id, "quick": args.quick, "step_seconds": seconds, "cells": cells,
               "at_70": at_70, "peak_rss_mib": rss, "lock": locks,
               "machine": {"cores": os.cpu_count()}}
    (RESULTS / "bench.json").write_text(json.dumps(results, indent=1))
    subprocess.run([sys.executable, str(ROOT / "loadtest" / "report.py"),
                    str(RESULTS / "bench.json")], check=True)
    if not all(c["exact"] for c in cells):
        raise SystemExit("a bench run was not exact: see loadtest/results/bench.md")


PG_PORT = os.environ.get("SECKILL_PG_PORT", "5433")

if __name__ == "__main__":
    main()
