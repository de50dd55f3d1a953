"""One more run of zk batched with the profilers on: a flame graph of instance 0 (perf) and
PostgreSQL's own count of every statement (pg_stat_statements) per paid order; and, for
the report, where the flame graph's samples go by part of the instance's code."""

import subprocess
from pathlib import Path
from typing import Any

from .. import RESULTS, flame
from ..fleet import Instances, log
from .load import fleet_sql, wrk


def profile(inst: Instances, seconds: int, run_id: str, hot: int,
            out: str | None = None) -> dict[str, Any]:
    """zk batched, `hot` hot products, once more with the profilers on: a flame graph of
    instance 0 (perf, software clock: this machine has no hardware counters) and PostgreSQL's
    own count of every statement (pg_stat_statements) per paid order."""
    db = inst.db
    fleet_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", db)
    products = [inst.product("zk", 256) for _ in range(hot)]
    buyers = inst.load_env()
    wrk(inst.urls, products, 100, 1, f"{run_id}-warm", buyers=buyers)
    fleet_sql("SELECT pg_stat_statements_reset()", db)
    data = RESULTS / "profile.perf.data"
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384",
         "-p", str(inst.procs[0].pid), "-o", str(data), "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts = wrk(inst.urls, products, 100, seconds, f"{run_id}-profile-{hot}", buyers=buyers)
    perf.wait(timeout=120)
    paid = max(counts["created"], 1)
    rows = fleet_sql(
        "SELECT d.datname, s.calls, s.total_exec_time, s.rows, s.wal_records, s.wal_bytes, "
        "regexp_replace(left(s.query, 160), '\\s+', ' ', 'g') FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid ORDER BY s.total_exec_time DESC LIMIT 20", db)
    statements = []
    for line in rows.splitlines():
        name, calls, total_ms, nrows, wal, wal_bytes, query = line.split("\t", 6)
        statements.append({"database": name, "calls": int(calls),
                           "calls_per_paid": int(calls) / paid,
                           "us_per_paid": float(total_ms) * 1000 / paid,
                           "rows": int(nrows), "wal_records": int(wal),
                           "wal_bytes": int(wal_bytes), "query": query})
    script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                            text=True).stdout
    name = flame_name(hot, out)
    flame.write(script.splitlines(keepends=True),
                f"seckill instance at saturation (zk batched, {hot} hot product"
                f"{'s' if hot > 1 else ''}), {run_id}",
                RESULTS / f"{name}.svg", RESULTS / f"{name}.folded")
    data.unlink(missing_ok=True)
    log(f"profile, {hot} hot: {counts['created'] / counts['seconds']:.0f} paid/s under "
        f"perf; flame graph in loadtest/results/{name}.svg")
    return {"hot": hot, "paid": counts["created"], "seconds": counts["seconds"],
            "statements": statements, "flame": f"{name}.svg"}


def flame_name(hot: int, out: str | None = None) -> str:
    """flame.svg, flame-100hot.svg; with --out=NAME, NAME-flame.svg... (a report of its own
    keeps its own flame graphs)."""
    name = "flame" if hot == 1 else f"flame-{hot}hot"
    return f"{out}-{name}" if out else name


# The instance's code by part, for the profile's summary: a sample belongs to the first part
# whose code is on its stack (a lock cycle's SQL is SQL, its HTTP call to the provider is the
# payment's).
WHERE = [
    ("payment: the charge to the provider and its record", ["orders::pay", "seckill::payment"]),
    ("SQL client (sqlx)", ["sqlx"]),
    ("ZooKeeper client", ["zookeeper_client"]),
    ("lock cycle, the rest", ["orders::cycle", "orders::batch", "seckill::lock"]),
    ("HTTP server (hyper, axum, the handlers)", ["hyper::proto::h1", "axum", "seckill::http"]),
    ("tokio's scheduler and timers", ["tokio::runtime"]),
]


def where(folded: Path) -> tuple[float, list[tuple[str, float]]]:
    """(share of samples in the kernel, [(part, share)]) of a folded flame graph."""
    total = kernel = 0
    parts: dict[str, int] = {}
    for line in folded.read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        if any(k in stack for k in ("do_syscall_64", "entry_SYSCALL", "asm_")):
            kernel += int(n)
        name = next((name for name, pats in WHERE if any(p in stack for p in pats)), "other")
        parts[name] = parts.get(name, 0) + int(n)
    total = max(total, 1)
    return kernel / total, sorted(((k, v / total) for k, v in parts.items()),
                                  key=lambda x: -x[1])
