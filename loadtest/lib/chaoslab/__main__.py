"""loadtest/chaos: a sale over three instances while nemeses strike on a seeded schedule,
then a checker over the history, PostgreSQL and the provider's ledger. Exits 1 when any
invariant fails (the report says which, with examples), 2 when one could not be checked (the
report says why) or the run itself broke."""

import argparse
import asyncio
import datetime
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import ROOT
from ..common.wait import wait_for_async
from . import checker, lapse, log, nemesis, report
from .buyers import Sale, buyer, restocker
from .client import History, call_json
from .cluster import Cluster
from .progress import Progress


def options() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="loadtest/chaos", description=__doc__)
    p.add_argument("--seed", type=int, default=None, help="the schedule's seed (printed; replays a run)")
    p.add_argument("--duration", type=int, default=600, help="seconds of sale under nemeses")
    p.add_argument("--buyers", type=int, default=300)
    p.add_argument("--reps", type=int, default=None, help="times each nemesis kind strikes")
    p.add_argument("--quick", action="store_true", help="CI-sized: 60 s, 100 buyers, each kind once")
    p.add_argument("--out", type=Path, default=None, help="where the report goes")
    p.add_argument("--bin-dir", type=Path, default=ROOT / "target" / "release")
    p.add_argument("--pg-port", type=int, default=5434, help="the cluster the run restarts")
    p.add_argument("--pg-cluster", default=os.environ.get("FAULTS_PG_CLUSTER", "15/seckill_faults"))
    p.add_argument("--ledger-pg-port", type=int, default=5433)
    p.add_argument("--session-ms", type=int, default=4000)
    p.add_argument("--request-ms", type=int, default=6000)
    p.add_argument("--kinds", default=",".join(nemesis.KINDS),
                   help="the nemesis kinds to use, comma-separated (all by default)")
    p.add_argument("--instance-flag", action="append", default=[], dest="instance_flags",
                   help="one more flag for every instance (repeat it)")
    p.add_argument("--keep", action="store_true",
                   help="keep the sale's databases (printed) for a look after the run")
    p.add_argument("--label", default="", help="a word for the report's title (a mutant's name)")
    p.add_argument("--lapse", type=int, default=2000, metavar="N",
                   help="reservations placed at once near the sale's start and left to lapse (0: none)")
    p.add_argument("--stranger-for-the-whole-sale", action="store_true",
                   help="the stranger instance (another ZooKeeper, the same database) runs from the "
                        "sale's start to its end, instead of striking now and then")
    o = p.parse_args()
    o.kinds = [k for k in o.kinds.split(",") if k]
    if o.lapse < 0:
        p.error("--lapse takes a number of reservations, 0 for none")
    unknown = [k for k in o.kinds if k not in nemesis.KINDS]
    if unknown:
        p.error(f"unknown nemesis kinds {unknown}; the kinds: {','.join(nemesis.KINDS)}")
    if o.quick:
        o.duration, o.buyers = 60, 100
        o.reps = o.reps or 1
    o.reps = o.reps or max(3, o.duration // (15 * len(o.kinds)))
    # The whole-sale stranger is the `stranger` kind's one strike.
    o.scheduled = [k for k in o.kinds if not (o.stranger_for_the_whole_sale and k == "stranger")]
    if o.seed is None:
        o.seed = random.SystemRandom().randrange(1, 10**6)
    o.out = o.out or (ROOT / ".run" / "chaos" if o.quick else ROOT / "loadtest" / "results")
    o.admin_token = f"chaos-{random.SystemRandom().getrandbits(64):x}"
    o.payment_api_key = f"{random.SystemRandom().getrandbits(128):032x}"
    return o


async def admin_post(port: int, token: str, path: str, body: dict[str, Any]) -> Any:
    return await call_json(port, "POST", path, body, {"Authorization": f"Bearer {token}"})


async def heal(cluster: Cluster, history: History) -> None:
    """Whatever a nemesis left (none should): every instance running and resumed, every link
    open, the provider up with no faults, every ZooKeeper server up."""
    for inst in cluster.instances:
        inst.signal(signal.SIGCONT)
        if not inst.running():
            inst.start()
    for links in cluster.links:
        links["pg"].restore()
        links["pg"].drop_next_commits(0)
        links["pg"].keep_commits()
        for z in links["zk"]:
            z.restore()
    if cluster.provider.poll() is not None:
        cluster.start_provider()
    await cluster.wait_provider()
    await cluster.provider_settings({"slow_rate": 0.0, "error_rate": 0.0, "lose_rate": 0.0})
    for i, proc in enumerate(cluster.ensemble.procs):
        if proc.poll() is not None:
            cluster.ensemble.start(i)
    for inst in cluster.instances:
        await inst.wait_healthy()

    async def all_ready():
        return all([(await inst.ready())[0] for inst in cluster.instances])

    await wait_for_async("every instance to be ready again", all_ready, limit=90)
    history.note("healed_all")


async def run(o: argparse.Namespace) -> int:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "?"
    run_dir = ROOT / ".run" / f"chaos-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    o.out.mkdir(parents=True, exist_ok=True)
    # The lapse opens its N connections at once, on top of the buyers' and the proxies'.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * o.lapse + 8192
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY
                                                    else min(wanted, hard), hard))
    plan = nemesis.schedule(o.seed, o.duration, o.reps, o.scheduled)
    log(f"seed {o.seed}: {o.duration} s, {o.buyers} buyers, {len(plan)} nemeses "
        f"({o.reps} of each of {len(o.scheduled)} kinds"
        + (", and a stranger for the whole sale" if o.scheduled != o.kinds else "")
        + f"); a lapse of {o.lapse} reservations; logs in {run_dir.relative_to(ROOT)}")
    cluster = Cluster(o, run_dir)
    history = None
    sale = None
    tasks = []
    try:
        await cluster.start()
        first = cluster.instances[0].port

        async def ready0():
            return (await cluster.instances[0].ready())[0]

        await wait_for_async("the first instance to be ready", ready0)
        products = []
        # Enough stock that the sale goes on under every nemesis (the restocks add more):
        # a stall is then the service's, not the sale's end.
        for name, stock, limit, batch in (("hot", o.buyers * o.duration // 2, 2, 256),
                                          ("per-request", o.buyers * o.duration // 8, 1, 1)):
            products.append(await admin_post(first, o.admin_token, "/api/products", {
                "name": f"chaos {name}", "price_cents": 1999 if batch > 1 else 2999, "stock": stock,
                "guard": "zk", "max_per_order": 2, "per_user_limit": limit,
                "reservation_ttl_s": 3, "batch_max": batch}))
        # The lapse's product is its own: no buyer, no restock.
        lapsing = (await admin_post(first, o.admin_token, "/api/products",
                                    lapse.product(o.lapse, o.instance_flags)) if o.lapse else None)
        history = History(run_dir / "history.jsonl", time.monotonic())
        sale = Sale(history, [inst.port for inst in cluster.instances], products,
                    o.admin_token, o.seed, client_timeout=o.request_ms / 1000 + 4,
                    buyer_auth=cluster.buyer_auth)
        chaos = nemesis.Nemesis(cluster, sale, history, o.seed, o.session_ms)
        history.note("sale", seed=o.seed)
        buyers = [asyncio.create_task(buyer(sale, n)) for n in range(o.buyers)]
        operator = asyncio.create_task(restocker(sale))
        over = asyncio.Event()
        whole = ([asyncio.create_task(chaos.for_the_whole_sale("stranger", over))]
                 if o.stranger_for_the_whole_sale else [])
        # A line every 10 s until every buyer is done (the heal and the replays included).
        progress = Progress(history.events, history.now, chaos.striking_now, log)
        ticker = asyncio.create_task(progress.run())
        tasks = [*buyers, operator, *whole, ticker]
        # The lapse's reservations not made in its time, if any, are made while the sale
        # goes on, and awaited as the buyers are.
        stragglers = []
        if lapsing:
            # The sale's first phase, before any nemesis: what it measures is the returns.
            stragglers.append(await lapse.run(sale, cluster, lapsing["id"], o.lapse, o.seed))
            tasks += stragglers
            log(f"lapse over at {history.now():.0f} s; the nemeses start")
        nemeses_from = history.now()
        strikes = asyncio.create_task(chaos.run(plan, nemeses_from))
        tasks.append(strikes)
        await asyncio.sleep(o.duration)
        sale.stopping = True
        sale_end = history.now()
        history.note("sale_end")
        over.set()
        log(f"sale over at {sale_end:.0f} s; waiting for the last nemeses to heal")
        await asyncio.wait_for(asyncio.gather(strikes, *whole), timeout=120)
        await operator
        await heal(cluster, history)
        # Buyers still holding a key without a final answer replay it, for a while.
        sale.hard_end = history.now() + 60
        await asyncio.gather(*buyers, *stragglers)
        ticker.cancel()
        log(progress.line())
        log("every buyer done; waiting for the sweep to settle what is left")
        # The sweep's window: the last reservations' expiry, and an abandoned payment
        # attempt's (the request timeout and its margin), past the sale's last request.
        window = max(3 + 3, o.request_ms / 1000 + 4)
        last = max((e["t1"] for e in history.events if "op" in e), default=0.0)
        await asyncio.sleep(max(0.0, last + window - history.now()))
        settle_deadline = time.monotonic() + 90
        while True:
            done, left = checker.settled(cluster)
            if done or time.monotonic() > settle_deadline:
                break
            await asyncio.sleep(0.5)
        history.note("checked", left=left)
        heal_s = history.now() - sale_end
        cluster.ledger_charges = (await cluster.ledger())["charges"]
        events = history.events
        verdicts, facts = checker.check(events, cluster)
        rows = report.stalls(events, chaos.timeline, sale_end)
        name = f"chaos-{o.label + '-' if o.label else ''}{o.seed}"
        meta = {"label": o.label, "flags": o.instance_flags, "kinds": o.kinds, "seed": o.seed, "duration": o.duration, "quick": o.quick, "started": stamp,
                "commit": commit, "buyers": o.buyers, "reps": o.reps, "heal": heal_s, "session_ms": o.session_ms,
                "request_ms": o.request_ms, "lapse": o.lapse, "nemeses_from": nemeses_from,
                "stranger_for_the_whole_sale": o.stranger_for_the_whole_sale}
        text, valid, share_503, worst = report.markdown(meta, verdicts, facts, rows, events, f"{name}.svg")
        (o.out / f"{name}.md").write_text(text)
        (o.out / f"{name}.svg").write_text(
            report.svg(events, chaos.timeline, sale_end, f"chaos sale, seed {o.seed}: answers per second"))
        counted = {}
        for n in chaos.timeline:
            counted[n["kind"]] = counted.get(n["kind"], 0) + 1
        missing = [k for k in o.kinds if counted.get(k, 0) < (o.reps if k in o.scheduled else 1)]
        for v in verdicts:
            log(report.said(v))
        for mark in (e for e in events if e.get("mark") == "late_commit_delivered"):
            log(f"late COMMIT on instance {mark['target']} at t={mark['t']:.1f} s: {mark['outcome']}")
        if facts["lapse"]:
            log(f"lapse: {lapse.summary(facts['lapse'])}")
        where = o.out / name
        log(f"{len(events)} events; 503s {100 * share_503:.1f} %; longest stall "
            f"{max(worst.values(), default=0):.1f} s; report "
            f"{where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}.md")
        if missing:
            log(f"FAIL: nemesis kinds that did not strike {o.reps} times: {missing}")
            return 1
        log(f"seed {o.seed}: {report.WORDS[valid]}")
        # Not checked is no pass either: 2, as for a run that broke (nothing proven either way).
        return {True: 0, False: 1, checker.UNKNOWN: 2}[valid]
    finally:
        if sale:
            # Every loop ends on its own too: a cancellation can be lost (asyncio.wait_for in
            # Python 3.11 may swallow one), and a buyer that missed it would buy forever.
            sale.stopping = True
            sale.hard_end = float("-inf")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if history:
            history.close()
        await cluster.stop()
        if o.keep:
            log(f"kept the databases {cluster.db} (port {o.pg_port}) and {cluster.ledger_db} "
                f"(port {o.ledger_pg_port})")
        else:
            cluster.drop_databases()
        cluster.clean()


def main() -> None:
    o = options()
    try:
        sys.exit(asyncio.run(run(o)))
    except RuntimeError as e:
        log(f"the run broke: {e}")
        sys.exit(2)


if __name__ == "__main__":
    main()
