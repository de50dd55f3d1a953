"""The nemeses, on a seeded schedule. Each one injects its fault, holds it, and heals it
(in a `finally`, so a heal happens even when the sale ends first). Those that need one
instance take one no other nemesis is working on; those on a shared part (the provider,
the ensemble, PostgreSQL, the stranger) wait for it to be free."""

import asyncio
import random
import signal
from collections.abc import Awaitable, Callable

from .buyers import KEYLESS, Sale
from .client import History
from .cluster import Cluster

KINDS = [
    "stranger",       # an instance started against another ZooKeeper over the same database
    "kill9",          # kill -9 an instance, restart it
    "sigterm",        # SIGTERM one (a rolling restart), restart it
    "pause",          # SIGSTOP one past its ZooKeeper session, then SIGCONT
    "zk_leader",      # kill -9 the ZooKeeper leader, restart it
    "pg_restart",     # restart PostgreSQL
    "cut_zk",         # cut one instance from ZooKeeper for a few seconds
    "cut_pg",         # cut one instance from PostgreSQL for a few seconds
    "drop_commit",    # drop the replies to one instance's next COMMITs
    "late_commit",    # one instance's next lock-cycle COMMIT: its connection dies, the COMMIT lands 3 s later
    "silence",        # one instance's path to PostgreSQL silent past the request timeout (nothing closed)
    "slow_db",        # one instance's path to PostgreSQL: every message delayed past the request timeout
    "provider_down",  # the payment provider down
    "provider_slow",  # its answers slower than the caller's timeout
    "provider_5xx",   # half its answers 500
    "provider_lose",  # it charges, and the answer is lost
]

# Which shared part each kind works on (instance kinds take a free instance instead).
SHARED = {
    "stranger": "stranger", "zk_leader": "ensemble", "pg_restart": "postgres",
    "provider_down": "provider", "provider_slow": "provider", "provider_5xx": "provider",
    "provider_lose": "provider",
}


# How long a late COMMIT takes to reach PostgreSQL after its connection died.
LATE_COMMIT_S = 3.0


def schedule(seed: int, duration: float, reps: int,
             kinds: list[str] = KINDS) -> list[tuple[float, str]]:
    """[(start second, kind)], every kind `reps` times, in a seeded order, spread evenly
    over the first 90 % of the sale with some jitter."""
    rng = random.Random(seed)
    kinds = [k for k in kinds for _ in range(reps)]
    rng.shuffle(kinds)
    slot = duration * 0.9 / len(kinds)
    return [(round(i * slot + rng.uniform(0, slot * 0.4), 2), kind) for i, kind in enumerate(kinds)]


class Nemesis:
    def __init__(self, cluster: Cluster, sale: Sale, history: History, seed: int,
                 session_ms: int):
        self.cluster = cluster
        self.sale = sale
        self.history = history
        self.rng = random.Random(f"nemesis-{seed}")
        self.session_s = session_ms / 1000
        self.busy = set()
        self.timeline = []  # {"kind", "target", "start", "healed"}
        self.striking = []  # the timeline's entries to be, while their fault holds

    def striking_now(self) -> list[str]:
        """The faults holding now: `kind@iN` on instance N, the kind alone on a shared part."""
        return [e["kind"] if e["kind"] in SHARED else f"{e['kind']}@i{e['target']}"
                for e in self.striking]

    async def take(self, kind: str) -> int | str:
        """A part to work on: a free instance, or the shared part this kind needs."""
        while True:
            if kind in SHARED:
                if SHARED[kind] not in self.busy:
                    self.busy.add(SHARED[kind])
                    return SHARED[kind]
            else:
                free = [i for i in range(3) if i not in self.busy]
                if free:
                    target = self.rng.choice(free)
                    self.busy.add(target)
                    return target
            await asyncio.sleep(0.1)

    async def run(self, plan: list[tuple[float, str]], t_start: float) -> None:
        tasks = [asyncio.create_task(self._one(at, kind, t_start)) for at, kind in plan]
        await asyncio.gather(*tasks)

    async def _one(self, at, kind, t_start):
        delay = t_start + at - self.history.now()
        if delay > 0:
            await asyncio.sleep(delay)
        await self._strike(kind, getattr(self, kind))

    async def for_the_whole_sale(self, kind: str, until: asyncio.Event) -> None:
        """One strike of `kind` from now until `until` is set (the sale's end), recorded as
        any other. Only `stranger` knows how to wait for it."""
        await self._strike(kind, lambda target: getattr(self, kind)(target, until=until))

    async def _strike(self, kind: str, act: Callable[[int | str], Awaitable[None]]) -> None:
        target = await self.take(kind)
        entry = {"kind": kind, "target": target, "start": round(self.history.now(), 3)}
        self.history.note("nemesis", kind=kind, target=target)
        self.striking.append(entry)
        try:
            await act(target)
        finally:
            entry["healed"] = round(self.history.now(), 3)
            self.history.note("healed", kind=kind, target=target)
            self.striking.remove(entry)
            self.timeline.append(entry)
            self.busy.discard(target)

    def hold(self, low: float, high: float) -> Awaitable[None]:
        return asyncio.sleep(self.rng.uniform(low, high))

    # -- instances -----------------------------------------------------------------------
    async def kill9(self, i: int) -> None:
        inst = self.cluster.instances[i]
        inst.signal(signal.SIGKILL)
        await inst.wait_exit(5)
        await self.hold(0.5, 1.5)
        inst.start()
        await inst.wait_healthy()

    async def sigterm(self, i: int) -> None:
        inst = self.cluster.instances[i]
        inst.signal(signal.SIGTERM)
        await inst.wait_exit(self.cluster.opts.request_ms / 1000 + 10)
        inst.start()
        await inst.wait_healthy()

    async def pause(self, i: int) -> None:
        inst = self.cluster.instances[i]
        inst.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(self.session_s + self.rng.uniform(1.0, 2.0))
        finally:
            inst.signal(signal.SIGCONT)

    async def cut_zk(self, i: int) -> None:
        links = self.cluster.links[i]["zk"]
        for link in links:
            link.cut()
        try:
            await self.hold(2.0, self.session_s + 2.0)
        finally:
            for link in links:
                link.restore()

    async def cut_pg(self, i: int) -> None:
        link = self.cluster.links[i]["pg"]
        link.cut()
        try:
            await self.hold(2.0, 5.0)
        finally:
            link.restore()

    async def silence(self, i: int) -> None:
        """A partition that drops packets: nothing moves between the instance and
        PostgreSQL either way and nothing is closed, for longer than a request may take;
        then what was held is delivered."""
        link = self.cluster.links[i]["pg"]
        request_s = self.cluster.opts.request_ms / 1000
        link.silence()
        try:
            await self.hold(request_s + 1.0, request_s + 3.0)
        finally:
            link.speak()

    async def slow_db(self, i: int) -> None:
        """A database too slow to answer: every message between the instance and
        PostgreSQL waits longer than a request may take, for a while."""
        link = self.cluster.links[i]["pg"]
        request_s = self.cluster.opts.request_ms / 1000
        link.slow(request_s + 1.0)
        try:
            await self.hold(request_s + 1.0, request_s + 3.0)
        finally:
            link.slow(0.0)

    async def drop_commit(self, i: int) -> None:
        link = self.cluster.links[i]["pg"]
        link.drop_next_commits(2)
        try:
            await self.hold(3.0, 5.0)
        finally:
            link.drop_next_commits(0)

    async def late_commit(self, i: int) -> None:
        """A congested link: the next COMMIT of a lock cycle that wrote an order of a buyer
        without an Idempotency-Key (so a wrong answer is that buyer's only one) is held back;
        the instance sees its connection die with no answer, and PostgreSQL gets the COMMIT
        3 s later. If no such COMMIT comes within 10 s, the next COMMIT of any kind."""
        link = self.cluster.links[i]["pg"]
        late = link.delay_next_commit(LATE_COMMIT_S, KEYLESS.encode())
        try:
            if not await _within(late.held.wait(), 10.0):
                late = link.delay_next_commit(LATE_COMMIT_S)
                if not await _within(late.held.wait(), 10.0):
                    self.history.note("late_commit", target=i, held=False)
                    return
            self.history.note("late_commit", target=i, held=True, keyless=late.marker is not None)
            await _within(late.done.wait(), LATE_COMMIT_S + 15.0)
            self.history.note("late_commit_delivered", target=i, outcome=late.outcome,
                              after_s=round(late.delivered_at - late.held_at, 2)
                              if late.delivered_at else None)
        finally:
            link.keep_commits()

    # -- shared parts --------------------------------------------------------------------
    async def stranger(self, _: str, until: asyncio.Event | None = None) -> None:
        """An instance on another ZooKeeper over the same database, for 6 to 9 s, or until
        `until` is set."""
        inst = self.cluster.new_stranger()
        inst.start()
        try:
            await inst.wait_healthy()
            # The load balancer sends it its share: it must sell nothing and fence nobody.
            self.sale.instances.append(inst.port)
            if until is None:
                await self.hold(6.0, 9.0)
            else:
                await until.wait()
        finally:
            if inst.port in self.sale.instances:
                self.sale.instances.remove(inst.port)
            inst.signal(signal.SIGTERM)
            await inst.wait_exit(self.cluster.opts.request_ms / 1000 + 10)

    async def zk_leader(self, _: str) -> None:
        zk = self.cluster.ensemble
        leader = await zk.leader()
        if leader is None:
            return
        zk.kill(leader)
        try:
            await self.hold(1.0, 3.0)
        finally:
            zk.start(leader)
            await zk.wait_serving(leader)

    async def pg_restart(self, _: str) -> None:
        await asyncio.to_thread(self.cluster.pg_restart)

    async def provider_down(self, _: str) -> None:
        # Sometimes past a payment's whole budget in its request (the request timeout less
        # a second): its outcome is then left to the sweep.
        self.cluster.kill_provider()
        try:
            await self.hold(3.0, 8.0)
        finally:
            self.cluster.start_provider()
            await self.cluster.wait_provider()

    async def _provider_fault(self, settings, reset, low=2.0, high=4.0):
        await self.cluster.provider_settings(settings)
        try:
            await self.hold(low, high)
        finally:
            await self.cluster.provider_settings(reset)

    async def provider_slow(self, _: str) -> None:
        # It charges, then answers after 7 s: past the caller's 2 s timeout on every try,
        # and, held long enough, past the buyer's whole request: the sweep settles those.
        await self._provider_fault({"slow_rate": 1.0, "slow_ms": 7000}, {"slow_rate": 0.0},
                                   4.0, 9.0)

    async def provider_5xx(self, _: str) -> None:
        await self._provider_fault({"error_rate": 0.5}, {"error_rate": 0.0})

    async def provider_lose(self, _: str) -> None:
        await self._provider_fault({"lose_rate": 0.5}, {"lose_rate": 0.0})


async def _within(waiting, limit: float) -> bool:
    """Whether `waiting` finished within `limit` seconds."""
    try:
        await asyncio.wait_for(waiting, limit)
        return True
    except asyncio.TimeoutError:
        return False
