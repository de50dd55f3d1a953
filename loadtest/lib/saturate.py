"""Saturation with a light generator, and what each paid order costs in CPU.

Run by loadtest/bench (which installs wrk, starts PostgreSQL, ZooKeeper and a payment
provider, and builds the release binaries); `loadtest/bench --saturation-only` runs just this:
`python3 -m loadtest.lib.saturate --provider-pid PID [...]`; `--report [NAME]` only redraws
NAME.md (saturation.md) from its JSON.

A closed loop of keep-alive connections from wrk (a C generator: a few µs of CPU per request,
where k6 spends many times that), over 3 instances, one wrk per instance. A uniform row spreads
every product's orders over the 3 (`POST /orders`); a routed row sends each product's orders to
the one instance nginx's consistent hash picks (`POST /api/products/{id}/orders`, as
deploy/nginx.conf routes them: where the product's lock is kept), each instance's wrk with the
products it got and a share of the connections in proportion (ROWS). Each row
reads, from /proc, the CPU time every process of the sale spent during it — the instances,
PostgreSQL (every backend, the provider's ledger included), ZooKeeper, the provider, the
generator — and divides by the paid orders: CPU µs per paid order, per part. It also reads
ZooKeeper's zxid (writes), the instances' peak RSS, and audits every product (0 oversold,
consistent, every 201 a unit sold), and each instance's lock cycles (its /metrics), so
orders per cycle, and, for a zk row, the longest a node waited behind a kept lock and the cycles
served on kept nodes (GET /api/products/{id}/lock, every product on every instance).

Every fleet's buyers sign in (`--buyer-auth demo`): a pool of buyers, signed in before the
rows, each order carrying the next one's token (loadtest/lib/fleet.py). `--auth-compare` runs each
row a second time, side by side, on a fleet of the same build whose buyers do not
(`--buyer-auth open`: the same number of buyers, named in the body): what signing in costs
per paid order, the service's CPU above all (issue 47: at most 10 % more).

After the rows, the floor, on every fleet: `GET /healthz` in the same loop, then a flood of
orders for a sold-out product (refusals), the service's CPU per request split between user and
kernel time. The report ends with the floors and bounds that follow
from the run: per part, what every order and what every lock cycle costs (1 hot product
against many), and the best rate many hot products could reach if the per-cycle costs of
PostgreSQL, or of everything but ZooKeeper, were gone.

Everything here talks to 127.0.0.1 only; each wrk run is bounded in time (-d) and the rows
are a fixed list.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import RESULTS, rush
from .fleet import BASE_PORT, BUYERS, SECKILL, Instances, log
from .saturation import report
from .saturation.cpu import Parts
from .saturation.profile import profile
from .saturation.rows import OPEN_TIMES, floor, lapse, open_row, row, row_line, warm_up

# (label, guard, batch_max, hot products, connections per instance, routed). Uniform rows:
# every instance takes every product's orders (`POST /orders`, the product in the body).
# Routed rows: each product's orders go to the one instance nginx's consistent hash sends
# `POST /api/products/{id}/orders` to (deploy/nginx.conf; loadtest/lib/common/route.py), where
# its lock is kept, the row's connections (per instance × 3, as uniform) shared among the
# instances in proportion to their products. The indices are --rows' (0-4 as before routing).
ROWS = [
    ("pg-atomic batched", "pg-atomic", 256, 1, 100, False),  # 0
    ("zk batched", "zk", 256, 1, 100, False),  # 1: the uniform one-hot row (open model, rush)
    ("zk batched", "zk", 256, 10, 100, False),  # 2
    ("zk batched", "zk", 256, 100, 100, False),  # 3
    ("pg-atomic batched", "pg-atomic", 256, 10, 100, False),  # 4
    # A crowd 10x the connections of row 1 (3,000 in all), then far more (4,000): goodput,
    # refusals, the accepted orders' p99, and memory with every connection open. Uniform, so
    # each instance holds a third of them, as in every earlier report (routed, one hot
    # product's crowd would be one instance's alone: another memory figure than per instance
    # of a fleet).
    ("zk batched, 3,000 connections", "zk", 256, 1, 1000, False),  # 5
    ("zk batched, 4,000 connections", "zk", 256, 1, 1334, False),  # 6
    ("zk batched, routed", "zk", 256, 1, 100, True),  # 7: the routed one-hot row
    ("zk batched, routed", "zk", 256, 10, 100, True),  # 8
    ("zk batched, routed", "zk", 256, 100, 100, True),  # 9
]


def main() -> None:
    if sys.argv[1:2] == ["--report"]:  # redraw NAME.md (saturation.md) from its JSON
        name = sys.argv[2] if len(sys.argv) > 2 else "saturation"
        print(report.markdown(json.loads((RESULTS / f"{name}.json").read_text())), end="")
        return
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
    parser.add_argument("--swap", action="store_true", help="with --baseline or "
                        "--auth-compare: the other fleet goes first on every row (a second "
                        "run with it evens out the order)")
    parser.add_argument("--auth-compare", action="store_true", help="each row runs twice, "
                        "side by side: buyers with tokens (--buyer-auth demo) and this build "
                        "again without (--buyer-auth open, the body's user_id), for the cost of "
                        "signing in per paid order")
    parser.add_argument("--buyers", type=int, default=BUYERS, help="the pool of buyers each "
                        f"fleet's orders come from, round-robin (default {BUYERS})")
    parser.add_argument("--new-buyers", action="store_true", help="each row's measured run "
                        "from a new pool of buyers, never seen by the instances (signed in "
                        "after its warm-up): with --buyers above the row's orders, every token "
                        "is verified the first time")
    parser.add_argument("--rush", action="store_true", help="after everything else, the rush "
                        "row (loadtest/lib/rush.py: 10,000 units, 30,000 buyers in a line) on this "
                        "build's fleet, held to row 1; a full run (no --rows, no --quick) runs it "
                        "anyway; its report: rush.md (NAME-rush.md with --out)")
    args = parser.parse_args()
    if args.swap and not (args.baseline or args.auth_compare):
        parser.error("--swap orders two fleets: give --baseline or --auth-compare")
    seconds = 2 if args.quick else args.seconds
    run_id = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    # (name, binary, first port, how its buyers are known)
    builds = [("this", SECKILL, BASE_PORT, "demo")]
    if args.baseline:
        builds.append(("baseline", Path(args.baseline), BASE_PORT + 10, "demo"))
    if args.auth_compare:
        builds.append(("open", SECKILL, BASE_PORT + 20, "open"))
    fleets = {}
    rows = []
    try:
        for name, binary, port, auth in builds:
            fleets[name] = Instances(3, f"sat{run_id}{name[0]}", binary, port, buyer_auth=auth,
                                     buyers=args.buyers)
        warm = warm_up(fleets["this"], run_id, most=10 if args.quick else 240)
        if args.warm_only:
            return
        only = {int(i) for i in args.rows.split(",")} if args.rows else set(range(len(ROWS)))
        opens = args.open or not args.rows
        total = (len(only) + (1 if opens and 1 in only else 0)) * len(builds)
        for i, (label, guard, batch, hot, conns, routed) in enumerate(ROWS):
            if i not in only:
                continue
            # Which build goes first alternates: neither always meets a colder ZooKeeper.
            # A row's place is fixed by its index, so `--swap` runs the other order.
            for name, *_ in (builds if (i % 2 == 0) != args.swap else builds[::-1]):
                inst = fleets[name]
                result = row(inst, Parts(inst, args.provider_pid), label, guard, batch, hot,
                             conns, seconds, f"{run_id}-{i}{name[0]}", args.new_buyers,
                             routed=routed)
                result["build"] = name
                rows.append(result)
                log(row_line(result, len(rows), total))
        # The open model offers each build 5x this build's saturation (row 1, uniform), the
        # same load, spread as row 1's.
        one = next((x for x in rows if x["build"] == "this" and x["label"] == "zk batched"
                    and x["hot"] == 1 and not x.get("routed")), None)
        if one and opens:
            rate = int(OPEN_TIMES * one["paid_per_s"])
            for name, inst in fleets.items():
                result = open_row(inst, Parts(inst, args.provider_pid), rate, seconds,
                                  f"{run_id}-open{name[0]}")
                result["build"] = name
                rows.append(result)
                log(row_line(result, len(rows), total))
        lapse_s = args.lapse if args.lapse is not None else (0 if args.rows else min(seconds, 4))
        lapses = {name: lapse(inst, lapse_s, f"{run_id}{name[0]}")
                  for name, inst in fleets.items()} if lapse_s else {}
        rss = {name: inst.peak_rss() for name, inst in fleets.items()}
        floors = {name: floor(inst, seconds, f"{run_id}{name[0]}")
                  for name, inst in fleets.items()}
        hots = args.profile or ("" if args.quick or args.rows else "1,100")
        prof = [profile(fleets["this"], seconds, run_id, int(h), args.out)
                for h in hots.split(",") if h]
        # Last: 30,000 buyers' tokens and a line must not count in the rows' memory.
        if one and (args.rush or not (args.rows or args.quick)):
            rush.write(rush.run(fleets["this"], one, rush.Crowd(), run_id),
                       f"{args.out}-rush" if args.out else "rush")
    finally:
        for inst in fleets.values():
            inst.stop()
    results = {"run": run_id, "quick": args.quick, "seconds": seconds, "rows": rows,
               "lapse": lapses,
               "peak_rss_mib": rss, "floor": floors, "profile": prof, "baseline": args.baseline,
               "swap": args.swap, "warm_up_jit_ms": warm, "auth_compare": args.auth_compare,
               "buyers": {name: {"auth": inst.auth, "pool": inst.buyers,
                                 "new_each_row": args.new_buyers}
                          for name, inst in fleets.items()},
               "machine": {"cores": os.cpu_count()}}
    name = args.out or ("saturation-partial" if args.rows else "saturation")
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    (RESULTS / f"{name}.svg").write_text(report.svg(results))
    (RESULTS / f"{name}.md").write_text(report.markdown(results, chart=f"{name}.svg"))
    print(report.markdown(results))
    if not all(r["exact"] for r in rows) or not all(x["exact"] for x in lapses.values()):
        raise SystemExit(f"a saturation row was not exact: see {RESULTS / name}.md")


if __name__ == "__main__":
    main()
