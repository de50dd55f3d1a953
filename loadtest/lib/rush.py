"""The rush row (issue 48): a sale of UNITS units that opens at its second, BUYERS buyers
joining its line in the JOIN_WINDOW s before the opening (and LATE more in the 2 s after),
side by side with the one-hot row (saturate's zk batched, 1 hot product, wrk's closed loop) on
the same 3 instances in one run; then, if asked, the same buyers without a line (the crowd at
the opening second), and the memory a line costs (100,000 buyers joined; a fleet of its own).

Run by loadtest/bench: `loadtest/bench --rush-only [--out=NAME]` runs the warm-up, the one-hot
row and this (`python3 -m loadtest.lib.rush --provider-pid PID ...`); a full bench runs it after
the saturation rows (saturate.py calls `run`). The figures and checks are loadtest/lib/rushcheck.py's;
the report goes to loadtest/results/NAME.{md,json,svg} (rush by default).

The client is k6 (loadtest/k6/rush.js): VUS VUs, each driving BUYERS ÷ VUS buyers as async tasks
with their own state and timers (30,000 VUs would cost a 2-core machine's client more CPU
than the sale); its CPU is read from this process's children and reported beside the
service's. Every server talks on 127.0.0.1 only; every k6 run is bounded in time (the opening
+ SALE_S + a margin) and every loop in it in count."""

import argparse
import concurrent.futures
import json
import os
import resource
import subprocess
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from . import K6, RESULTS
from .common.web import http_json, sign_in
from .fleet import BASE_PORT, Instances, log
from .rushcheck import epoch, judge, rss_mib
from .rushreport import markdown, svg
from .saturation.cpu import TICK, Parts, cpu_ticks

# The one-hot row the rush is held to: saturate.py's ROWS[1] (label, guard, batch, hot, conns;
# uniform, as rush.js spreads its orders unless told ROUTE=product).
ONE_HOT = ("zk batched", "zk", 256, 1, 100)
# From the product's creation to the join window: k6 starting its VUs and setup().
START_S = 20
SALE_S = 120


@dataclass
class Crowd:
    units: int = 10_000
    buyers: int = 30_000  # join in the window before the opening
    late: int = 3_000  # join in the 2 s after it
    join_window: float = 10.0
    vus: int = 300
    inflight: int = 16  # requests in flight per VU at most
    memory_joins: int = 100_000  # the memory step's buyers (0: none)
    compare: bool = True  # the same buyers without a line
    sale_s: float = SALE_S  # every buyer stops this long after the opening at the latest


def sign_in_pool(inst: Instances, count: int, run_id: str) -> Path:
    """`count` new buyers signed in at the fleet's demo issuers (r-RUN-i, each instance a
    third: they share the issuer's key), their tokens one a line in a file of the fleet's own
    (gone with it)."""
    started = time.monotonic()
    urls = inst.urls
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        tokens = list(pool.map(lambda i: sign_in(urls[i % len(urls)], f"r-{run_id}-{i}")["token"],
                               range(count)))
    path = inst.secrets / f"rush-tokens-{run_id}"
    path.write_text("\n".join(tokens) + "\n")
    log(f"rush: {count} buyers signed in in {time.monotonic() - started:.1f} s")
    return path


def new_sale(inst: Instances, units: int, opens_in: float, line: bool, tag: str) -> dict[str, Any]:
    """A product on sale from `opens_in` s from now (RFC 3339, ms), with or without a line."""
    opens = datetime.now(timezone.utc) + timedelta(seconds=opens_in)
    body = {"name": f"rush {tag}", "price_cents": 100, "stock": units, "guard": ONE_HOT[1],
            "batch_max": ONE_HOT[2], "opens_at": opens.isoformat(timespec="milliseconds"),
            "line": line}
    product = http_json("POST", f"{inst.urls[0]}/api/products", body, inst.token)
    for field in ("opens_at", "line"):
        if field not in product:
            raise SystemExit(f"POST /api/products answered no `{field}`: {product}")
    return product


def k6_rush(inst: Instances, env: dict[str, str], tag: str, bound_s: float) -> dict[str, Any]:
    """One k6 run of loadtest/k6/rush.js: the buyers' records, its summary, and the CPU the
    client (k6) and the instances spent from the opening (OPENS_AT) to the run's end."""
    records = RESULTS / f"rush-{tag}-records.jsonl"
    summary = RESULTS / f"rush-{tag}-summary.json"
    records.unlink(missing_ok=True)
    full = {**os.environ, "BASE_URLS": ",".join(inst.urls), "RUN": tag, "RESULTS": str(summary),
            # The client's CPU is the sale's bound on this machine: no dashboard to feed.
            "K6_WEB_DASHBOARD": "false", "K6_NO_USAGE_REPORT": "true", **env}
    pids = [p.pid for p in inst.procs]
    opens = epoch(env["OPENS_AT"])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    at_open = None  # (monotonic, k6's ticks, the instances' ticks)
    samples = []  # from the opening: (epoch s, k6's ticks, the instances' ticks), every 0.25 s
    with open(RESULTS / f"rush-{tag}-k6.log", "w") as err:
        k6 = subprocess.Popen(["k6", "run", "--quiet", "--no-color", "--log-format", "raw",
                               "--console-output", str(records),
                               str(K6 / "rush.js")],
                              env=full, stdout=subprocess.DEVNULL, stderr=err)
        while k6.poll() is None:
            if at_open is None and time.time() >= opens:
                at_open = (time.monotonic(), cpu_ticks([k6.pid]).get(k6.pid, 0), cpu_ticks(pids))
            if at_open and (not samples or time.time() - samples[-1][0] >= 0.25):
                samples.append((time.time(), cpu_ticks([k6.pid]).get(k6.pid, 0),
                                sum(cpu_ticks(pids).values())))
            if time.monotonic() - started > bound_s + 120:
                k6.kill()
            time.sleep(0.02)
    ended = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if at_open is None:
        at_open = (ended, client_s * TICK, cpu_ticks(pids))
    service = cpu_ticks(pids)
    if k6.returncode:
        log(f"rush: k6 {tag} exited {k6.returncode} (see {RESULTS}/rush-{tag}-k6.log)")
    buyers = []
    if records.exists():
        for line in records.read_text().splitlines():
            if line.startswith("RUSH "):
                buyers += json.loads(line[5:])
    data = json.loads(summary.read_text()) if summary.exists() else {"metrics": {}}
    return {"records": buyers, "summary": data, "k6_status": k6.returncode,
            "wall_s": ended - at_open[0], "client_cpu_s": client_s - at_open[1] / TICK,
            "service_cpu_s": sum(t - at_open[2].get(pid, 0) for pid, t in service.items()) / TICK,
            "start_s": at_open[0] - started, "samples": samples}


def sale_cores(samples: list[tuple[float, int, int]], opens: float,
               sell_out_s: float | None) -> dict[str, float] | None:
    """Cores the client and the instances used on average from the opening to the sell-out."""
    if not samples or not sell_out_s:
        return None
    end = next((x for x in samples if x[0] >= opens + sell_out_s), samples[-1])
    first = samples[0]
    span = end[0] - first[0]
    if span <= 0:
        return None
    return {"client": (end[1] - first[1]) / TICK / span,
            "service": (end[2] - first[2]) / TICK / span, "seconds": span}


def sale(inst: Instances, crowd: Crowd, line: bool, tokens: Path | None,
         run_id: str) -> dict[str, Any]:
    """One sale to its end: the product, the crowd (k6), the checks (rushcheck.judge)."""
    tag = f"{run_id}-{'line' if line else 'crowd'}"
    lead = START_S + crowd.join_window
    product = new_sale(inst, crowd.units, lead, line, tag)
    env = {"PRODUCT": str(product["id"]), "OPENS_AT": product["opens_at"],
           "LINE": "1" if line else "0", "BUYERS": str(crowd.buyers),
           "LATE": str(crowd.late if line else 0), "JOIN_WINDOW": str(crowd.join_window),
           "VUS": str(crowd.vus), "INFLIGHT": str(crowd.inflight), "SALE_S": str(crowd.sale_s)}
    if tokens:
        env["TOKENS_FILE"] = str(tokens)
    log(f"rush ({'line' if line else 'no line'}): product {product['id']}, {crowd.units} units, "
        f"opens at {product['opens_at']}, {crowd.buyers} buyers"
        + (f" + {crowd.late} late" if line and crowd.late else "") + f", {crowd.vus} VUs")
    ran = k6_rush(inst, env, tag, lead + crowd.sale_s + 30)
    result = judge(inst, product["id"], line, ran, crowd.units)
    result["sale_cores"] = sale_cores(ran["samples"], epoch(product["opens_at"]),
                                      result["sell_out_s"])
    result.update({"product": product["id"], "line": line, "k6_status": ran["k6_status"],
                   "wall_s": ran["wall_s"], "client_cpu_s": ran["client_cpu_s"],
                   "service_cpu_s": ran["service_cpu_s"], "peak_rss_mib": inst.peak_rss(),
                   "rss_mib": [rss_mib(p.pid) for p in inst.procs]})
    log("rush: " + result["line_summary"])
    return result


def memory(run_id: str, joins: int) -> dict[str, Any]:
    """RSS of each of 3 instances (a fleet of their own, `open` mode: no token cache to
    count) before and after `joins` buyers joined one product's line (opening in an hour: all
    of them waiting)."""
    inst = Instances(3, f"mem{run_id}", base_port=BASE_PORT + 30, logs="rush-memory-server",
                     buyer_auth="open", buyers=1)
    try:
        product = new_sale(inst, 1000, 3600, True, f"{run_id}-memory")
        before = [rss_mib(p.pid) for p in inst.procs]
        env = {**os.environ, "BASE_URLS": ",".join(inst.urls), "SCENARIO": "fill",
               "PRODUCT": str(product["id"]), "FILL": str(joins), "RUN": f"{run_id}m",
               "BUYER_PREFIX": f"m-{run_id}-", "RESULTS": str(RESULTS / f"rush-{run_id}-fill.json"),
               "K6_WEB_DASHBOARD": "false", "K6_NO_USAGE_REPORT": "true"}
        started = time.monotonic()
        with open(RESULTS / f"rush-{run_id}-fill-k6.log", "w") as err:
            subprocess.run(["k6", "run", "--quiet", "--no-color", str(K6 / "rush.js")],
                           env=env, stdout=subprocess.DEVNULL, stderr=err, check=False, timeout=720)
        took = time.monotonic() - started
        line = http_json("GET", f"{inst.urls[0]}/api/products/{product['id']}/line")
        m = json.loads((RESULTS / f"rush-{run_id}-fill.json").read_text())["metrics"]
        failed = int(m.get("fill_failed", {}).get("values", {}).get("count", 0))
        after = [rss_mib(p.pid) for p in inst.procs]
        result = {"joins": joins, "joined": line.get("joined"), "failed": failed,
                  "seconds": took, "rss_before_mib": before, "rss_after_mib": after}
        log(f"rush memory: {line.get('joined')} joined in {took:.0f} s ({failed} failed); RSS "
            "per instance " + ", ".join(f"{b['rss']:.1f} → {a['rss']:.1f} MiB"
                                        for b, a in zip(before, after)))
        return result
    finally:
        inst.stop()


def run(inst: Instances, one_hot: dict[str, Any], crowd: Crowd, run_id: str) -> dict[str, Any]:
    """The rush on `inst` (the one-hot row's fleet), the no-line comparison, the memory step."""
    total = crowd.buyers + crowd.late
    tokens = sign_in_pool(inst, total, run_id) if inst.signs_in else None
    results: dict[str, Any] = {"run": run_id, "crowd": asdict(crowd), "sale_s": crowd.sale_s,
                               "one_hot": {k: one_hot.get(k) for k in (
                                   "label", "paid_per_s", "p99_ms", "requests", "accepted_p99_ms",
                                   "connections", "seconds", "exact", "peak_rss_mib")},
                               "machine": {"cores": os.cpu_count()}, "buyer_auth": inst.auth}
    results["line"] = sale(inst, crowd, True, tokens, run_id)
    if crowd.compare:
        results["crowd_sale"] = sale(inst, crowd, False, tokens, run_id)
    if crowd.memory_joins:
        results["memory"] = memory(run_id, crowd.memory_joins)
    return results


def write(results: dict[str, Any], name: str) -> None:
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    (RESULTS / f"{name}.svg").write_text(svg(results))
    report = markdown(results, chart=f"{name}.svg")
    (RESULTS / f"{name}.md").write_text(report)
    print(report)


def main() -> None:
    from .saturation.rows import row, row_line, warm_up

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider-pid", type=int, required=True)
    parser.add_argument("--quick", action="store_true", help="a short warm-up and one-hot row")
    parser.add_argument("--seconds", type=int, default=10, help="the one-hot row's seconds")
    parser.add_argument("--units", type=int, default=Crowd.units)
    parser.add_argument("--buyers", type=int, default=Crowd.buyers)
    parser.add_argument("--late", type=int, help="buyers joining after the opening "
                        "(default: a tenth of --buyers)")
    parser.add_argument("--join-window", type=float, default=Crowd.join_window)
    parser.add_argument("--vus", type=int, default=Crowd.vus)
    parser.add_argument("--inflight", type=int, default=Crowd.inflight)
    parser.add_argument("--memory-joins", type=int, default=Crowd.memory_joins)
    parser.add_argument("--no-compare", action="store_true", help="no sale without a line")
    parser.add_argument("--sale-s", type=float, default=SALE_S, help="every buyer stops this "
                        "long after the opening at the latest")
    parser.add_argument("--out", default="rush")
    args = parser.parse_args()
    crowd = Crowd(args.units, args.buyers, args.buyers // 10 if args.late is None else args.late,
                  args.join_window, min(args.vus, args.buyers), args.inflight,
                  args.memory_joins, not args.no_compare, args.sale_s)
    run_id = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    inst = Instances(3, f"rush{run_id}")
    try:
        warm_up(inst, run_id, most=10 if args.quick else 240)
        seconds = 2 if args.quick else args.seconds
        label, guard, batch, hot, conns = ONE_HOT
        one = row(inst, Parts(inst, args.provider_pid), label, guard, batch, hot, conns, seconds,
                  f"{run_id}-onehot")
        log(row_line(one, 1, 2))
        results = run(inst, one, crowd, run_id)
    finally:
        inst.stop()
    results["quick"] = args.quick
    write(results, args.out)
    if not all(ok for ok, _ in results["line"]["checks"]):
        raise SystemExit(f"the rush failed a check: see {RESULTS / args.out}.md")


if __name__ == "__main__":
    main()
