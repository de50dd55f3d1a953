"""Saturation with a light generator, and what each paid order costs in CPU.

Run by loadtest/bench (which installs wrk, starts PostgreSQL, ZooKeeper and a payment
provider, and builds the release binaries); `loadtest/bench --saturation-only` runs just this.

A closed loop of keep-alive connections from wrk (a C generator: a few µs of CPU per request,
where k6 spends many times that), spread over 3 instances, one wrk per instance. Each row
reads, from /proc, the CPU time every process of the sale spent during it — the instances,
PostgreSQL (every backend, the provider's ledger included), ZooKeeper, the provider, the
generator — and divides by the paid orders: CPU µs per paid order, per part. It also reads
ZooKeeper's zxid (writes), the instances' peak RSS, and audits every product (0 oversold,
consistent, every 201 a unit sold), and each instance's lock cycles (its /metrics), so
orders per cycle.

After the rows, the floor, on every fleet: `GET /healthz` in the same loop, then a flood of
orders for a sold-out product (refusals), the service's CPU per request split between user and
kernel time. The report ends with the floors and bounds that follow
from the run: per part, what every order and what every lock cycle costs (1 hot product
against many), and the best rate many hot products could reach if the per-cycle costs of
PostgreSQL, or of everything but ZooKeeper, were gone.

Everything here talks to 127.0.0.1 only; each wrk run is bounded in time (-d) and the rows
are a fixed list.
"""

import concurrent.futures
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (its Instances and helpers)
import report  # noqa: E402  (the chart)

ROOT = bench.ROOT
RESULTS = bench.RESULTS
TICK = os.sysconf("SC_CLK_TCK")

# (label, guard, batch_max, hot products, connections per instance)
ROWS = [
    ("pg-atomic batched", "pg-atomic", 256, 1, 100),
    ("zk batched", "zk", 256, 1, 100),
    ("zk batched", "zk", 256, 10, 100),
    ("zk batched", "zk", 256, 100, 100),
    ("pg-atomic batched", "pg-atomic", 256, 10, 100),
    # A crowd 10x the connections of row 1 (3,000 in all), then far more (4,000): goodput,
    # refusals, the accepted orders' p99, and memory with every connection open.
    ("zk batched, 3,000 connections", "zk", 256, 1, 1000),
    ("zk batched, 4,000 connections", "zk", 256, 1, 1334),
]

# The open model's offered rate: this many times the build's own saturation (row 1).
OPEN_TIMES = 5


def pids_matching(pattern):
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def zookeeper_pids():
    return pids_matching(r"QuorumPeerMain|ZooKeeperServerMain")


def stat_fields(path):
    """A stat(5) file's fields after the command's closing parenthesis (field 3 on), or
    None if the process or thread is gone."""
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_ticks(pids):
    """utime + stime (+ reaped children's) of every pid still alive, by pid."""
    ticks = {}
    for pid in pids:
        if (fields := stat_fields(f"/proc/{pid}/stat")) is None:
            continue
        # Fields 14-17 of stat(5), counted after the command's closing parenthesis.
        ticks[pid] = sum(int(f) for f in fields[11:15])
    return ticks


class Parts:
    """The processes whose CPU a row reads: pids found anew each time (PostgreSQL starts a
    backend per new connection)."""

    def __init__(self, instances, provider_pid):
        self.instances = [p.pid for p in instances.procs]
        self.provider = [provider_pid]

    def snapshot(self):
        # A backend's title names its database: the provider's ledger (a database whose name
        # says so) is the provider's cost, as a real gateway's database would be its own.
        postgres, ledger = [], []
        for pid in pids_matching(r"^postgres|postgres: "):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_text()
            except OSError:
                continue
            (ledger if "ledger" in title else postgres).append(pid)
        zookeeper = zookeeper_pids()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {
            "service": cpu_ticks(self.instances),
            "postgresql": cpu_ticks(postgres),
            "zookeeper": cpu_ticks(zookeeper),
            "provider": cpu_ticks(self.provider),
            "ledger": cpu_ticks(ledger),
            "generator": (children.ru_utime + children.ru_stime) * TICK,
        }


def user_sys_ticks(pids):
    """(utime, stime) of every pid still alive, summed: where a request's CPU goes, in our
    code or in the kernel (syscalls, TCP)."""
    user = system = 0
    for pid in pids:
        if (fields := stat_fields(f"/proc/{pid}/stat")) is None:
            continue
        user, system = user + int(fields[11]), system + int(fields[12])
    return user, system


def lock_cycles(urls):
    """Lock cycles run and orders they served, and the transactions shared by many products'
    cycles and the cycles they served, summed over the instances (their /metrics: the
    histograms of orders per lock cycle and of cycles per shared transaction)."""
    sums = {"seckill_lock_cycle_orders_count": 0.0, "seckill_lock_cycle_orders_sum": 0.0,
            "seckill_shared_cycle_products_count": 0.0, "seckill_shared_cycle_products_sum": 0.0}
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as res:
            for line in res.read().decode().splitlines():
                name = line.split(" ", 1)[0].split("{", 1)[0]
                if name in sums:
                    sums[name] += float(line.rsplit(" ", 1)[1])
    return tuple(sums.values())


def accepted_buckets(urls):
    """The instances' histogram of 201 answers to POST /orders, summed: {le: count}."""
    buckets = {}
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as res:
            for line in res.read().decode().splitlines():
                if (line.startswith("seckill_http_request_duration_seconds_bucket{")
                        and 'route="/orders"' in line and 'status="201"' in line
                        and 'method="POST"' in line):
                    le = line.split('le="', 1)[1].split('"', 1)[0]
                    buckets[le] = buckets.get(le, 0) + float(line.rsplit(" ", 1)[1])
    return buckets


def accepted_p99_ms(before, after):
    """The 99th percentile of the accepted orders' time in the service between two scrapes,
    as the bucket bound it falls under (the server's own clock: a closed loop's refusals,
    answered at once, would hide the accepted orders' wait in the generator's p99)."""
    diff = {le: after.get(le, 0) - before.get(le, 0) for le in after}
    total = diff.get("+Inf", 0)
    if not total:
        return None
    for le in sorted((le for le in diff if le != "+Inf"), key=float):
        if diff[le] >= 0.99 * total:
            return float(le) * 1000
    return float("inf")


def spent_us(before, after):
    """CPU µs per part between two snapshots (a process new since `before` counts whole)."""
    out = {}
    for part, now in after.items():
        if part == "generator":
            out[part] = (now - before[part]) / TICK * 1e6
        else:
            then = before[part]
            out[part] = sum(t - then.get(pid, 0) for pid, t in now.items()) / TICK * 1e6
    return out


def wrk(urls, products, connections, seconds, tag, get=None, pay=True):
    """One wrk per instance, side by side; returns their summed counts and worst latencies.
    With `get`, a closed loop of GETs of that path instead of orders (its 200s count as
    `created`); with `pay=False`, reservations without payment."""
    env = {**os.environ, "PRODUCTS": ",".join(map(str, products))}
    if get:
        env["GET"] = get
    if not pay:
        env["PAY"] = "false"
    procs = []
    for i, url in enumerate(urls):
        procs.append(subprocess.Popen(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s",
             "-s", os.environ.get("LUA", str(ROOT / "loadtest" / "orders.lua")), url],
            env={**env, "RUN": f"{tag}-{i}"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=seconds + 120)
        line = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not line:
            raise SystemExit(f"wrk printed no summary: {out}\n{err}")
        runs.append(json.loads(line[-1]))
    total = {k: sum(r[k] for r in runs) for k in ("created", "refused", "other", "requests",
                                                   "errors")}
    total["seconds"] = max(r["seconds"] for r in runs)
    total["p50_ms"] = max(r["p50_us"] for r in runs) / 1000
    total["p99_ms"] = max(r["p99_us"] for r in runs) / 1000
    return total


def jit_ticks(pids):
    """CPU ticks the JVM's JIT compiler threads of `pids` have spent."""
    ticks = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                compiler = (task / "comm").read_text().startswith(("C1 Compiler", "C2 Compiler"))
            except OSError:
                continue
            if compiler and (fields := stat_fields(task / "stat")) is not None:
                ticks += int(fields[11]) + int(fields[12])
    return ticks


def warm_up(inst, run_id, chunk=5, most=240):
    """Sells ten hot products, zk batched, in `chunk`-second runs until ZooKeeper's JIT
    compiler is done: its threads spent under 1 % of a core in each of the last two runs
    (`most` seconds at most). A ZooKeeper just started runs its request path interpreted
    while the JVM's JIT compiles it, for a minute or more under a sale, and the compiler's
    CPU counts as ZooKeeper's: on a fresh one the first rows measured ZooKeeper at 2-4x the
    CPU per paid order of a warm one, and ten hot products at 0.50-0.61x one product's rate
    against 0.68x. (20 s of the bare lock's loop first did not change that, nor did 15 s of
    this sale: the compiler's share only fell later.) Returns the compiler's ms, run by run."""
    zookeeper = zookeeper_pids()
    products = [inst.product("zk", 256) for _ in range(10)]
    seen = []
    started = time.monotonic()
    while time.monotonic() - started < most:
        before = jit_ticks(zookeeper)
        wrk(inst.urls, products, 30, chunk, f"{run_id}-jit{len(seen)}")
        seen.append((jit_ticks(zookeeper) - before) / TICK * 1000)
        # Two quiet runs in a row: the compiler works in waves (a quiet run, then 1 s of
        # compiling in the next was seen).
        if len(seen) >= 2 and max(seen[-2:]) < chunk * 1000 * 0.01:
            break
    bench.log(f"warm-up, {time.monotonic() - started:.0f} s: ZooKeeper's JIT compiler, ms per "
              f"{chunk}-s run: " + ", ".join(f"{ms:.0f}" for ms in seen))
    return seen


def row(inst, parts, label, guard, batch, hot, connections, seconds, run_id):
    products = [inst.product(guard, batch) for _ in range(hot)]
    # A short warm-up: pools filled, lock nodes' parents made, caches loaded.
    warm = wrk(inst.urls, products, min(connections, 100), 1, f"{run_id}-warm")
    zk_before = bench.zk_zxid(os.environ["SECKILL_ZK"])
    cycles_before = lock_cycles(inst.urls)
    zookeeper = zookeeper_pids()
    jit_before = jit_ticks(zookeeper)
    accepted_before = accepted_buckets(inst.urls)
    before = parts.snapshot()
    counts = wrk(inst.urls, products, connections, seconds, run_id)
    after = parts.snapshot()
    accepted_p99 = accepted_p99_ms(accepted_before, accepted_buckets(inst.urls))
    # Part of ZooKeeper's CPU, if its JIT compiler was still at work (see `warm_up`).
    jit_ms = (jit_ticks(zookeeper) - jit_before) / TICK * 1000
    zk_writes = bench.zk_zxid(os.environ["SECKILL_ZK"]) - zk_before
    cycles, served, shared, shared_cycles = (
        a - b for a, b in zip(lock_cycles(inst.urls), cycles_before))
    audits = [inst.audit(p) for p in products]
    sold = sum(a["sold"] for a in audits)
    paid = counts["created"]
    cpu = spent_us(before, after)
    per_paid = {part: us / max(paid, 1) for part, us in cpu.items()}
    # wrk stops at its deadline with requests in flight: those may have sold a unit whose
    # 201 nobody read (at most one per connection, warm-up's and run's). Every 201 read is a
    # unit sold, and no more units sold than that allows.
    in_flight = connections * len(inst.urls)
    answered = paid + warm["created"]
    unread = in_flight + min(connections, 100) * len(inst.urls)
    exact = (all(a["oversold"] == 0 and a["consistent"] for a in audits)
             and answered <= sold <= answered + unread)
    result = {
        "label": label, "guard": guard, "batch_max": batch, "hot": hot,
        "connections": in_flight, "seconds": counts["seconds"], "paid": paid,
        "paid_per_s": paid / counts["seconds"], "refused": counts["refused"],
        "other": counts["other"], "errors": counts["errors"], "requests": counts["requests"],
        "p50_ms": counts["p50_ms"], "p99_ms": counts["p99_ms"],
        "zk_writes": zk_writes, "zk_writes_per_paid": zk_writes / max(paid, 1),
        "lock_cycles": cycles, "orders_per_cycle": served / max(cycles, 1),
        "cycles_per_transaction": shared_cycles / shared if shared else None,
        "cpu_us": cpu, "cpu_us_per_paid": per_paid, "units_sold": sold, "exact": exact,
        "peak_rss_mib": inst.peak_rss(), "zk_jit_ms": jit_ms,
        "refused_per_s": counts["refused"] / counts["seconds"], "accepted_p99_ms": accepted_p99,
    }
    return result


def open_row(inst, parts, rate, seconds, run_id):
    """An open model from k6 (loadtest/bench.js): orders arrive at `rate` per second whatever
    the answers, for one hot product (zk batched). k6 waits for every answer, so every unit
    sold was answered 201. Its CPU is the generator's, like wrk's in the other rows (k6
    spends many times wrk's per request)."""
    products = [inst.product("zk", 256)]
    wrk(inst.urls, products, 100, 1, f"{run_id}-warm")
    warm_sold = inst.audit(products[0])["sold"]
    zk_before = bench.zk_zxid(os.environ["SECKILL_ZK"])
    before = parts.snapshot()
    step = bench.k6_step(inst.urls, products, rate, seconds, run_id)
    after = parts.snapshot()
    zk_writes = bench.zk_zxid(os.environ["SECKILL_ZK"]) - zk_before
    audit = inst.audit(products[0])
    paid = step["paid"]
    cpu = spent_us(before, after)
    # wrk's warm-up stopped with requests in flight (as in `row`): those may have sold a unit
    # after it was read, at most one per connection; k6's own are all answered.
    sold = audit["sold"] - warm_sold
    unread = 100 * len(inst.urls)
    result = {
        "label": f"zk batched, open model {OPEN_TIMES}×", "guard": "zk", "batch_max": 256,
        "hot": 1, "connections": 0, "offered_per_s": rate, "seconds": seconds, "paid": paid,
        "paid_per_s": paid / seconds, "refused": step["retry"],
        "refused_per_s": step["retry"] / seconds, "other": step["other"], "errors": 0,
        "requests": paid + step["retry"] + step["other"], "dropped": step["dropped"],
        "p50_ms": step["p50_ms"] or 0, "p99_ms": step["p99_ms"] or 0,
        "accepted_p99_ms": step["paid_p99_ms"],
        "zk_writes": zk_writes, "zk_writes_per_paid": zk_writes / max(paid, 1),
        "cpu_us": cpu, "cpu_us_per_paid": {k: v / max(paid, 1) for k, v in cpu.items()},
        "units_sold": sold,
        "exact": audit["oversold"] == 0 and audit["consistent"] and paid <= sold <= paid + unread,
        "peak_rss_mib": inst.peak_rss(),
    }
    return result


def row_line(x, done, total):
    """A row's line as it finishes (what `row` or `open_row` returned, with its build)."""
    if "offered_per_s" in x:  # the open model
        figures = [f"offered {x['offered_per_s']}/s → {x['paid_per_s']:.0f} paid/s",
                   f"{x['refused_per_s']:.0f} refused/s", f"{x['dropped']} dropped by k6",
                   f"p99 of the accepted {x['accepted_p99_ms'] or 0:.0f} ms"]
    else:
        figures = [f"{x['paid_per_s']:.0f} paid/s", f"p99 {x['p99_ms']:.1f} ms",
                   "CPU µs/paid " + " ".join(f"{k} {v:.1f}"
                                             for k, v in x["cpu_us_per_paid"].items()),
                   f"ZK writes/paid {x['zk_writes_per_paid']:.3f}", f"refused {x['refused']}",
                   f"orders/cycle {x['orders_per_cycle']:.1f}",
                   f"cycles/transaction {x['cycles_per_transaction'] or 0:.2f}",
                   f"ZooKeeper's JIT {x['zk_jit_ms']:.0f} ms"]
    label = f"{x['label']} hot {x['hot']}" + (f" ({x['build']})" if x.get("build") else "")
    return bench.row_done(done, total, label, figures, x["exact"])


def lapse(inst, seconds, run_id, ttl=5, bound=10):
    """Reservations that lapse together while a sale goes on: `seconds` of reservations without
    payment (`pay: false`, a closed loop as in the rows) for a product whose reservations last
    `ttl` s; then, while another product sells, every one must be back on sale within `bound`
    s of its deadline. From the orders' own rows: when each went back (`updated_at` of its
    `expired` row) against its deadline (`expires_at`), so the rate of returns and their lag
    need no polling precision. Both products audited."""
    body = {"name": "bench lapse", "price_cents": 100, "stock": bench.STOCK, "guard": "zk",
            "batch_max": 256, "reservation_ttl_s": ttl}
    lapsing = bench.http_json("POST", f"{inst.urls[0]}/api/products", body, inst.token)["id"]
    selling = inst.product("zk", 256)
    made = wrk(inst.urls, [lapsing], 100, seconds, f"{run_id}-reserve", pay=False)
    left = lambda: int(psql(f"SELECT count(*) FROM orders WHERE product_id = {lapsing} "
                            "AND status = 'reserved'", db=inst.db).strip())
    # The sale goes on until the last deadline plus the bound, at most; the returns are
    # watched meanwhile (a poll of the count, bounded in time), then read from the rows.
    sale_s = ttl + bound + 2
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sale = pool.submit(wrk, inst.urls, [selling], 100, sale_s, f"{run_id}-sale")
        deadline = time.monotonic() + sale_s + 30
        while left() and time.monotonic() < deadline:
            time.sleep(0.5)
        sold = sale.result()
    # Every reservation made, from the rows: wrk stops with requests in flight whose 201
    # nobody read, and those reservations lapse too.
    total = int(psql(f"SELECT count(*) FROM orders WHERE product_id = {lapsing}",
                     db=inst.db).strip())
    row = psql(
        "SELECT count(*), "
        "COALESCE(extract(epoch FROM max(updated_at - expires_at)), 0), "
        "COALESCE(percentile_cont(0.5) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM updated_at - expires_at)), 0), "
        "COALESCE(extract(epoch FROM max(updated_at) - min(expires_at)), 0), "
        "COALESCE(extract(epoch FROM max(created_at) - min(created_at)), 0) "
        f"FROM orders WHERE product_id = {lapsing} AND status = 'expired'", db=inst.db)
    returned, lag_max, lag_p50, return_span, made_span = row.strip().split("\t")
    returned, lag_max, lag_p50 = int(returned), float(lag_max), float(lag_p50)
    still = left()
    audits = [inst.audit(p) for p in (lapsing, selling)]
    result = {
        "seconds": seconds, "ttl_s": ttl, "bound_s": bound, "made": total,
        "answered_201": made["created"], "made_per_s": total / max(float(made_span), 1e-3),
        "returned": returned, "still_reserved": still,
        "returned_per_s": returned / max(float(return_span), 1e-3),
        "lag_p50_s": lag_p50, "lag_max_s": lag_max,
        "sale_paid_per_s": sold["created"] / sold["seconds"],
        "within_bound": still == 0 and returned == total and lag_max <= bound,
        "exact": all(a["oversold"] == 0 and a["consistent"] for a in audits),
    }
    bench.log(f"lapse: {result['made']} reservations at {result['made_per_s']:.0f}/s, returned "
              f"{returned} at {result['returned_per_s']:.0f}/s, lag p50 {lag_p50:.2f} s, max "
              f"{lag_max:.2f} s (bound {bound} s), {still} still reserved; the sale meanwhile "
              f"{result['sale_paid_per_s']:.0f} paid/s")
    return result


def floor(inst, seconds, run_id):
    """What any request costs these instances, whatever it asks, and what a refusal costs: in
    the same closed loop, 100 connections per instance, `GET /healthz` (no database, no lock,
    a fixed body), then orders for a sold-out product (answered 409 by the sold-out flag, before
    any lock or write: the flood after a sale). The service's CPU per request, split between
    our code (user) and the kernel (system: the socket's syscalls and loopback TCP)."""
    pids = [p.pid for p in inst.procs]
    gone = bench.http_json("POST", f"{inst.urls[0]}/api/products",
                           {"name": "sold out", "price_cents": 100, "stock": 1, "guard": "zk"},
                           inst.token)["id"]
    bench.http_json("POST", f"{inst.urls[0]}/orders", {"product_id": gone, "user_id": "first"})
    out = {}
    for name, get, products in (("healthz", "/healthz", []), ("refusal", None, [gone])):
        gen_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        before = user_sys_ticks(pids)
        counts = wrk(inst.urls, products, 100, seconds, f"{run_id}-{name}", get=get)
        after = user_sys_ticks(pids)
        gen_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        n = max(counts["created"] if get else counts["other"], 1)
        user, system = ((a - b) / TICK * 1e6 / n for a, b in zip(after, before))
        generator = ((gen_after.ru_utime + gen_after.ru_stime)
                     - (gen_before.ru_utime + gen_before.ru_stime)) * 1e6 / n
        out[name] = {"requests_per_s": n / counts["seconds"], "user_us": user,
                     "system_us": system, "generator_us": generator}
        bench.log(f"floor, {name}: {n / counts['seconds']:.0f}/s, service CPU µs per request: "
                  f"user {user:.1f}, system {system:.1f}; wrk {generator:.1f}")
    return out


def psql(sql, db="postgres"):
    return subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-p", bench.PG_PORT, "-d",
                           db, "-tAF", "\t", "-c", sql], capture_output=True, text=True,
                          check=True).stdout


def profile(inst, seconds, run_id, hot, out=None):
    """zk batched, `hot` hot products, once more with the profilers on: a flame graph of
    instance 0 (perf, software clock: this machine has no hardware counters) and PostgreSQL's
    own count of every statement (pg_stat_statements) per paid order."""
    db = inst.db
    psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", db)
    products = [inst.product("zk", 256) for _ in range(hot)]
    wrk(inst.urls, products, 100, 1, f"{run_id}-warm")
    psql("SELECT pg_stat_statements_reset()", db)
    data = RESULTS / "profile.perf.data"
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384",
         "-p", str(inst.procs[0].pid), "-o", str(data), "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts = wrk(inst.urls, products, 100, seconds, f"{run_id}-profile-{hot}")
    perf.wait(timeout=120)
    paid = max(counts["created"], 1)
    rows = psql(
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
    subprocess.run([sys.executable, str(ROOT / "loadtest" / "flame.py"),
                    f"seckill instance at saturation (zk batched, {hot} hot product"
                    f"{'s' if hot > 1 else ''}), {run_id}",
                    str(RESULTS / f"{name}.svg"), str(RESULTS / f"{name}.folded")],
                   input=script, text=True, check=True)
    data.unlink(missing_ok=True)
    bench.log(f"profile, {hot} hot: {counts['created'] / counts['seconds']:.0f} paid/s under "
              f"perf; flame graph in loadtest/results/{name}.svg")
    return {"hot": hot, "paid": counts["created"], "seconds": counts["seconds"],
            "statements": statements, "flame": f"{name}.svg"}


def flame_name(hot, out=None):
    """flame.svg, flame-100hot.svg; with --out=NAME, NAME-flame.svg... (a report of its own
    keeps its own flame graphs)."""
    name = "flame" if hot == 1 else f"flame-{hot}hot"
    return f"{out}-{name}" if out else name


def main():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 s rows: checks the bench")
    parser.add_argument("--provider-pid", type=int, required=True)
    parser.add_argument("--rows", help="only these rows (0-based, comma-separated), for a "
                        "quick comparison; the profile is skipped")
    parser.add_argument("--profile", help="hot product counts to profile after the rows "
                        "(comma-separated; a full run profiles 1,100; none with --rows unless "
                        "given)")
    parser.add_argument("--out", help="the report's name under loadtest/results/ (default: "
                        "saturation, or saturation-partial with --rows)")
    parser.add_argument("--baseline", help="another seckill binary (an older commit's): each "
                        "row runs on it too, right after ours, for ratios from one run")
    parser.add_argument("--warm-only", action="store_true", help="only warm ZooKeeper up "
                        "(before the k6 matrix, when the saturation rows do not run)")
    parser.add_argument("--lapse", type=int, help="seconds of reservations for the lapse row "
                        "(returns against reservations; default: the row seconds, or none "
                        "with --rows); 0: no lapse row")
    parser.add_argument("--open", action="store_true", help="with --rows: the open-model "
                        "row too (k6 at 5x row 1's rate; row 1 must be among the rows)")
    parser.add_argument("--swap", action="store_true", help="with --baseline: the other build "
                        "goes first on every row (a second run with it evens out the order)")
    args = parser.parse_args()
    if args.swap and not args.baseline:
        parser.error("--swap orders two builds: give --baseline")
    seconds = 2 if args.quick else args.seconds
    run_id = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    builds = [("this", bench.SECKILL, bench.BASE_PORT)]
    if args.baseline:
        builds.append(("baseline", Path(args.baseline), bench.BASE_PORT + 10))
    fleets = {}
    rows = []
    try:
        for name, binary, port in builds:
            fleets[name] = bench.Instances(3, f"sat{run_id}{name[0]}", binary, port)
        warm = warm_up(fleets["this"], run_id, most=10 if args.quick else 240)
        if args.warm_only:
            return
        only = {int(i) for i in args.rows.split(",")} if args.rows else set(range(len(ROWS)))
        opens = args.open or not args.rows
        total = (len(only) + (1 if opens and 1 in only else 0)) * len(builds)
        for i, (label, guard, batch, hot, conns) in enumerate(ROWS):
            if i not in only:
                continue
            # Which build goes first alternates: neither always meets a colder ZooKeeper.
            # A row's place is fixed by its index, so `--swap` runs the other order.
            for name, _, _ in (builds if (i % 2 == 0) != args.swap else builds[::-1]):
                inst = fleets[name]
                result = row(inst, Parts(inst, args.provider_pid), label, guard, batch, hot,
                             conns, seconds, f"{run_id}-{i}{name[0]}")
                result["build"] = name
                rows.append(result)
                bench.log(row_line(result, len(rows), total))
        # The open model offers each build 5x this build's saturation (row 1), the same load.
        one = next((x for x in rows if x["build"] == "this" and x["label"] == "zk batched"
                    and x["hot"] == 1), None)
        if one and opens:
            rate = int(OPEN_TIMES * one["paid_per_s"])
            for name, inst in fleets.items():
                result = open_row(inst, Parts(inst, args.provider_pid), rate, seconds,
                                  f"{run_id}-open{name[0]}")
                result["build"] = name
                rows.append(result)
                bench.log(row_line(result, len(rows), total))
        lapse_s = args.lapse if args.lapse is not None else (0 if args.rows else min(seconds, 4))
        lapses = {name: lapse(inst, lapse_s, f"{run_id}{name[0]}")
                  for name, inst in fleets.items()} if lapse_s else {}
        rss = {name: inst.peak_rss() for name, inst in fleets.items()}
        floors = {name: floor(inst, seconds, f"{run_id}{name[0]}")
                  for name, inst in fleets.items()}
        hots = args.profile or ("" if args.quick or args.rows else "1,100")
        prof = [profile(fleets["this"], seconds, run_id, int(h), args.out)
                for h in hots.split(",") if h]
    finally:
        for inst in fleets.values():
            inst.stop()
    results = {"run": run_id, "quick": args.quick, "seconds": seconds, "rows": rows,
               "lapse": lapses,
               "peak_rss_mib": rss, "floor": floors, "profile": prof, "baseline": args.baseline,
               "swap": args.swap, "warm_up_jit_ms": warm,
               "machine": {"cores": os.cpu_count()}}
    name = args.out or ("saturation-partial" if args.rows else "saturation")
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    (RESULTS / f"{name}.svg").write_text(report.saturation_svg(results))
    (RESULTS / f"{name}.md").write_text(markdown(results, chart=f"{name}.svg"))
    print(markdown(results))
    if not all(r["exact"] for r in rows) or not all(x["exact"] for x in lapses.values()):
        raise SystemExit("a saturation row was not exact: see loadtest/results/saturation.md")


def ours(cpu):
    """The sale's own CPU: the service, its PostgreSQL and ZooKeeper."""
    return cpu["service"] + cpu["postgresql"] + cpu["zookeeper"]


def per_cycle_figures(x):
    """Orders and ZooKeeper writes per lock cycle, and lock cycles per shared transaction
    (`–` where the row has no such figure: the open model, older reports, pg-atomic's
    transactions of their own)."""
    fmt = lambda v, d: f"{v:,.{d}f}".replace(",", " ")
    cycles = x.get("lock_cycles")
    per_tx = x.get("cycles_per_transaction")
    return " | ".join([
        fmt(x["orders_per_cycle"], 1) if cycles else "–",
        fmt(x["zk_writes"] / cycles, 2) if cycles and x["guard"] == "zk" else "–",
        fmt(per_tx, 2) if per_tx else "–",
    ])


def accepted(x):
    """The accepted orders' p99 as a row reports it: the server's histogram bucket it falls
    under (closed loops: `≤`), or k6's own figure (the open model)."""
    p99 = x.get("accepted_p99_ms")
    if p99 is None:
        return "–"
    if x["connections"]:
        return "≤ " + (f"{p99:,.0f}".replace(",", " ") if p99 != float("inf") else "∞")
    return f"{p99:,.1f}".replace(",", " ")


def markdown(r, chart=None):
    fmt = lambda x, d=0: f"{x:,.{d}f}".replace(",", " ")
    builds = sorted({x["build"] for x in r["rows"]}, key=lambda b: b != "this")
    out = [f"# seckill saturation ({r['run']}{', quick: not for figures' if r['quick'] else ''})",
           "", f"{r['machine']['cores']} cores; 3 instances, PostgreSQL, ZooKeeper, the payment "
           f"provider and wrk on one machine; a closed loop of keep-alive connections "
           f"(`loadtest/orders.lua`), {r['seconds']} s per row, every order a new buyer, paid "
           "through the provider. CPU from /proc, per paid order; PostgreSQL's backends for the "
           "provider's ledger are counted apart (a real gateway's database is not ours)."]
    if r.get("warm_up_jit_ms"):
        out += ["", "ZooKeeper was warmed up first: ten hot products sold in 5-s runs until its "
                "JIT compiler's threads spent under 1 % of a core in two in a row (their ms per "
                "run: " + " → ".join(f"{ms:.0f}" for ms in r["warm_up_jit_ms"]) + ")."]
    if r.get("baseline"):
        out += ["", "Each row ran twice, side by side: **this** build and the **baseline** "
                f"(`{r['baseline']}`, an older commit's build) on a fleet of its own, the one to "
                "go first alternating row by row"
                + (", the other way round from a run without `--swap`." if r.get("swap") else ".")]
    out += ["", "| build | guard | hot products | connections | paid orders/s | p50 (ms) | "
            "p99 (ms) | p99 of the accepted (ms) | refused / s | CPU µs / paid: service | "
            "PostgreSQL | ZooKeeper | service + PostgreSQL + ZooKeeper | provider | its ledger | "
            "generator | ZK writes / paid | orders / lock cycle | ZK writes / lock cycle | "
            "lock cycles / transaction | peak RSS so far (MiB) | exact |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        c = x["cpu_us_per_paid"]
        out.append(
            f"| {x['build']} | {x['label']} | {x['hot']} | "
            f"{fmt(x['connections']) if x['connections'] else 'k6, ' + fmt(x['offered_per_s']) + '/s offered'} | "
            f"{fmt(x['paid_per_s'])} | {fmt(x['p50_ms'], 1)} | {fmt(x['p99_ms'], 1)} | "
            f"{accepted(x)} | "
            f"{fmt(x.get('refused_per_s', x['refused'] / x['seconds']))} | {fmt(c['service'], 1)} | {fmt(c['postgresql'], 1)} | "
            f"{fmt(c['zookeeper'], 1)} | **{fmt(ours(c), 1)}** | {fmt(c['provider'], 1)} | "
            f"{fmt(c['ledger'], 1)} | {fmt(c['generator'], 1)} | {fmt(x['zk_writes_per_paid'], 3)} | "
            f"{per_cycle_figures(x)} | "
            f"{fmt(x['peak_rss_mib'], 1) if x.get('peak_rss_mib') else '–'} | "
            f"{'yes' if x['exact'] else '**NO**'} |")
    if r.get("lapse"):
        out += ["", "**Lapse**: reservations without payment made in a closed loop for "
                "`--lapse` s (each lasting `ttl`), then, while another product sells, every one "
                "must be back on sale within the bound of its deadline (from the rows: `expired` "
                "`updated_at` against `expires_at`).", "",
                "| build | reservations | made / s | returned | returned / s | lag p50 (s) | "
                "lag max (s) | still reserved | the sale meanwhile, paid / s | within bound | exact |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, x in r["lapse"].items():
            out.append(
                f"| {name} | {fmt(x['made'])} | {fmt(x['made_per_s'])} | {fmt(x['returned'])} | "
                f"{fmt(x['returned_per_s'])} | {fmt(x['lag_p50_s'], 2)} | {fmt(x['lag_max_s'], 2)} "
                f"| {fmt(x['still_reserved'])} | {fmt(x['sale_paid_per_s'])} | "
                f"{'yes' if x['within_bound'] else '**NO**'} (≤ {x['bound_s']} s) | "
                f"{'yes' if x['exact'] else '**NO**'} |")
    if chart:
        out += ["", f"![paid orders/s and CPU per paid order by part, row by row]({chart})"]
    busy = [x for x in r["rows"] if x.get("zk_jit_ms", 0) >= x["seconds"] * 10]
    if busy:
        out += ["", "ZooKeeper's JIT compiler was still at work in "
                + ", ".join(f"{x['build']} {x['label']} ({x['hot']} hot): {x['zk_jit_ms']:.0f} ms, "
                            f"{x['zk_jit_ms'] * 1000 / max(x['paid'], 1):.1f} µs per paid order"
                            for x in busy)
                + " (over 1 % of a core; counted in ZooKeeper's CPU above)."]
    out += ["", "Peak RSS per instance (after every row): " + ", ".join(
        f"{b} {fmt(v, 1)} MiB" for b, v in r["peak_rss_mib"].items()), ""]
    for b in builds:
        rows = [x for x in r["rows"] if x["build"] == b]
        one = next((x for x in rows if x["label"] == "zk batched" and x["hot"] == 1), None)
        for x in rows if one else []:
            if x["label"] == "zk batched" and x["hot"] > 1:
                out.append(f"- {b}: {x['hot']} hot products at {x['paid_per_s'] / one['paid_per_s']:.0%} "
                           "of one hot product's rate (zk batched)")
        for over in (x for x in rows if one and (x["connections"] >= 3000 or not x["connections"])):
            # A refusal's service CPU: what the row's service spent beyond its paid orders at
            # the 300-connection row's cost each, over the refusals.
            extra = over["cpu_us"]["service"] - over["paid"] * one["cpu_us_per_paid"]["service"]
            per_refusal = extra / over["refused"] if over["refused"] else None
            shape = (f"{fmt(over['connections'])} connections" if over["connections"]
                     else f"the open model ({fmt(over['offered_per_s'])}/s offered by k6)")
            out.append(f"- {b}: {shape} at {over['paid_per_s'] / one['paid_per_s']:.2f}× the "
                       f"300-connection rate; {fmt(over['refused_per_s'])} refusals/s"
                       + (f", {fmt(per_refusal, 1)} µs of service CPU each (beyond the paid "
                          "orders' own)" if per_refusal is not None else "")
                       + f"; p99 of the accepted orders {accepted(over)} ms")
    if len(builds) == 2:
        out += ["", "This build against the baseline, row by row (paid orders/s; CPU per paid "
                "order of the service, PostgreSQL and ZooKeeper):", ""]
        this = [x for x in r["rows"] if x["build"] == "this"]
        base = {(x["label"], x["hot"]): x for x in r["rows"] if x["build"] == "baseline"}
        for a, b in ((a, base[(a["label"], a["hot"])]) for a in this):
            out.append(f"- {a['label']}, {a['hot']} hot: {a['paid_per_s'] / max(b['paid_per_s'], 1):.2f}× "
                       f"the rate, {ours(a['cpu_us_per_paid']) / max(ours(b['cpu_us_per_paid']), 1):.2f}× "
                       "the CPU per paid order")
    out += bounds(r)
    for prof in r.get("profile") or []:
        hot = prof["hot"]
        out += ["", f"## Profile (this build, zk batched, {hot} hot product"
                f"{'s' if hot > 1 else ''}, one more run with the profilers on)", "",
                f"Flame graph of instance 0: [{prof['flame']}]({prof['flame']}) (perf, "
                "software clock). PostgreSQL's statements per paid order (pg_stat_statements, "
                "the ledger's too; "
                "execution time is wall time, queueing for the CPU included; rows are what "
                "each statement returned or changed, WAL records what it wrote to the log: a "
                "row, an index entry, a commit):", "",
                "| database | calls / paid | exec µs / paid | rows / paid | WAL records / paid "
                "| WAL bytes / paid | statement |", "|---|---|---|---|---|---|---|"]
        paid = max(prof["paid"], 1)
        for st in prof["statements"]:
            q = st["query"].replace("|", "\\|")
            wal = (f"{st['wal_records'] / paid:.1f} | {st['wal_bytes'] / paid:,.0f}"
                   if "wal_records" in st else " | ")
            out.append(f"| {st['database']} | {st['calls_per_paid']:.3f} | "
                       f"{st['us_per_paid']:.1f} | {st['rows'] / paid:.2f} | {wal} | `{q}` |")
        folded = RESULTS / prof["flame"].replace(".svg", ".folded")
        if folded.exists():
            kernel, shares = where(folded)
            out += ["", f"Where the instance's samples go (a sample counts once, in the first "
                    f"part below whose code is on its stack; {kernel:.0%} of all samples are in "
                    "the kernel, syscalls and interrupts, whatever part made them):", "",
                    "| part | samples |", "|---|---|"]
            out += [f"| {name} | {share:.1%} |" for name, share in shares]
    return "\n".join(out) + "\n"


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


def where(folded):
    """(share of samples in the kernel, [(part, share)]) of a folded flame graph."""
    total = kernel = 0
    parts = {}
    for line in folded.read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        n = int(n)
        total += n
        if any(k in stack for k in ("do_syscall_64", "entry_SYSCALL", "asm_")):
            kernel += n
        name = next((name for name, pats in WHERE if any(p in stack for p in pats)), "other")
        parts[name] = parts.get(name, 0) + n
    total = max(total, 1)
    return kernel / total, sorted(((k, v / total) for k, v in parts.items()),
                                  key=lambda x: -x[1])


PARTS = ("service", "postgresql", "zookeeper", "provider", "ledger", "generator")
NAMES = {"service": "service", "postgresql": "PostgreSQL", "zookeeper": "ZooKeeper",
         "provider": "provider", "ledger": "its ledger", "generator": "wrk"}


def per_cycle(one, many):
    """Splits CPU per paid order into what every order costs and what every lock cycle costs,
    from two rows that differ in orders per cycle (1 hot product against many): per part,
    cost per order = a + b / (orders per cycle). Returns ({part: a}, {part: b}) or None."""
    o1, on = one["orders_per_cycle"], many["orders_per_cycle"]
    d = 1 / max(on, 1e-9) - 1 / max(o1, 1e-9)
    if d <= 0:
        return None
    c1, cn = one["cpu_us_per_paid"], many["cpu_us_per_paid"]
    b = {k: (cn[k] - c1[k]) / d for k in PARTS}
    a = {k: c1[k] - b[k] / o1 for k in PARTS}
    return a, b


def ratio(a, b, o1, on, kept):
    """The rate at `on` orders per cycle over the rate at `o1`, CPU-bound, counting only the
    per-cycle costs of the parts in `kept`."""
    cost = lambda o: sum(a.values()) + sum(b[k] for k in kept) / o
    return cost(o1) / cost(on)


def bounds(r):
    """The floors under the targets, from this run's own rows: what any request costs, and
    what a lock cycle costs per part, so what more hot products can reach at best."""
    fmt = lambda x, d=0: f"{x:,.{d}f}".replace(",", " ")
    # Reports from before the bench read orders per cycle have no bounds.
    rows = [x for x in r["rows"] if x["build"] == "this" and x["label"] == "zk batched"
            and "orders_per_cycle" in x]
    one = next((x for x in rows if x["hot"] == 1), None)
    floor = (r.get("floor") or {}).get("this")
    out = []
    if not one and not floor:
        return out
    out += ["", "## Floors and bounds (this build, from the rows above)", ""]
    # Reports from before the refusal floor held the healthz floor alone.
    floor = floor and floor.get("healthz", floor)
    if floor:
        out.append(f"- **Any request**: `GET /healthz` in the same closed loop answers "
                   f"{fmt(floor['requests_per_s'])}/s; service CPU per request "
                   f"{fmt(floor['user_us'] + floor['system_us'], 1)} µs ({fmt(floor['user_us'], 1)} "
                   f"in our code and its libraries, {fmt(floor['system_us'], 1)} in the kernel), "
                   f"wrk {fmt(floor['generator_us'], 1)} µs. A paid order is two such "
                   "exchanges for the service (the buyer's request, and its charge to the "
                   "provider) before any SQL; a refusal is one.")
    for b, f in (r.get("floor") or {}).items():
        if "refusal" in f:
            x = f["refusal"]
            out.append(f"- **A refusal** ({b}): orders for a sold-out product, answered 409 "
                       f"by the sold-out flag, {fmt(x['requests_per_s'])}/s; service CPU per "
                       f"refusal {fmt(x['user_us'] + x['system_us'], 1)} µs "
                       f"({fmt(x['user_us'], 1)} user, {fmt(x['system_us'], 1)} kernel).")
    if one:
        total = sum(one["cpu_us_per_paid"][k] for k in PARTS)
        cores = r["machine"]["cores"]
        out.append(f"- **One hot product**: {fmt(one['orders_per_cycle'], 1)} orders per lock "
                   f"cycle; {fmt(total, 1)} µs of CPU per paid order on this machine, every part "
                   f"counted (the generator and the provider too): {cores} cores give at most "
                   f"{fmt(cores * 1e6 / total)} paid orders/s at that cost.")
    refusal = floor and (r.get("floor") or {}).get("this", {}).get("refusal")
    if one and refusal:
        # Offered 5x the rate S the CPU allows (S = cores / total): x S paid and (5 - x) S
        # refused must fit in cores, so x <= (total - 5 R) / (total - R); x >= 0.9 needs
        # R <= total / 41. PostgreSQL and ZooKeeper do nothing for a flag's refusal.
        cost = refusal["user_us"] + refusal["system_us"] + refusal["generator_us"]
        share = max(0.0, (total - 5 * cost) / (total - cost))
        out.append(f"- **Goodput at 5× the offered load** (an open model, every core busy): "
                   f"a refusal costs {fmt(cost, 1)} µs all-in (service "
                   f"{fmt(refusal['user_us'] + refusal['system_us'], 1)}, wrk "
                   f"{fmt(refusal['generator_us'], 1)}) against {fmt(total, 1)} for a paid "
                   f"order, so paid orders keep at most {share:.0%} of the rate the CPU allows "
                   f"(paid share ≤ (P − 5R) / (P − R)); 90 % needs a refusal of at most "
                   f"{fmt(total / 41, 1)} µs all-in, "
                   f"{total / 41 / (floor['user_us'] + floor['system_us'] + floor['generator_us']):.0%}"
                   " of what one `GET /healthz` costs.")
    for many in (x for x in rows if one and x["hot"] > 1):
        split = per_cycle(one, many)
        if not split:
            continue
        a, b = split
        o1, on = one["orders_per_cycle"], many["orders_per_cycle"]
        zk_write = many["cpu_us"]["zookeeper"] / max(many["zk_writes"], 1)
        measured = many["paid_per_s"] / one["paid_per_s"]
        out.append(
            f"- **{many['hot']} hot products**: {fmt(on, 2)} orders per lock cycle (a closed loop "
            f"of {fmt(many['connections'] // 3)} connections per instance keeps "
            f"{fmt(many['connections'] / 3 / many['hot'], 1)} orders of a product in flight on it, "
            "on average). "
            "A lock cycle costs, in CPU µs: " + ", ".join(
                f"{NAMES[k]} {fmt(b[k])}" for k in PARTS) +
            f" (ZooKeeper: {fmt(zk_write)} µs per write). At {fmt(measured, 2)}× one hot "
            f"product's rate (measured; {fmt(ratio(a, b, o1, on, PARTS), 2)}× from this split). "
            "With no PostgreSQL cost per cycle at all (more than one instance-wide transaction "
            f"could save): at most {fmt(ratio(a, b, o1, on, set(PARTS) - {'postgresql'}), 2)}×; "
            f"with only ZooKeeper's own per cycle left (the lock's two writes): at most "
            f"{fmt(ratio(a, b, o1, on, {'zookeeper'}), 2)}×.")
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:  # redraw NAME.md (saturation.md) from its JSON
        name = sys.argv[2] if len(sys.argv) > 2 else "saturation"
        print(markdown(json.loads((RESULTS / f"{name}.json").read_text())), end="")
    else:
        main()
