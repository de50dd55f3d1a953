"""The CPU each part of the sale spent, from /proc: the instances, PostgreSQL (every backend,
the provider's ledger apart), ZooKeeper (its JIT compiler apart), the provider and the
generator (this process's children)."""

import os
import resource
import subprocess
from pathlib import Path

from ..fleet import Instances

TICK = os.sysconf("SC_CLK_TCK")

# Every part whose CPU a row reads, by key: its name in the report and its colour in the chart.
PARTS = {
    "service": ("service", "#d64545"),
    "postgresql": ("PostgreSQL", "#3e4c59"),
    "zookeeper": ("ZooKeeper", "#f0b429"),
    "provider": ("provider", "#9aa5b1"),
    "ledger": ("its ledger", "#cbd2d9"),
    "generator": ("wrk", "#7b93db"),
}


def pids_matching(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def zookeeper_pids() -> list[int]:
    return pids_matching(r"QuorumPeerMain|ZooKeeperServerMain")


def stat_fields(path: str | Path) -> list[str] | None:
    """A stat(5) file's fields after the command's closing parenthesis (field 3 on), or
    None if the process or thread is gone."""
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_ticks(pids: list[int]) -> dict[int, int]:
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

    def __init__(self, instances: Instances, provider_pid: int):
        self.instances = [p.pid for p in instances.procs]
        self.provider = [provider_pid]

    def snapshot(self) -> dict[str, dict[int, int] | float]:
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


def user_sys_ticks(pids: list[int]) -> tuple[int, int]:
    """(utime, stime) of every pid still alive, summed: where a request's CPU goes, in our
    code or in the kernel (syscalls, TCP)."""
    user = system = 0
    for pid in pids:
        if (fields := stat_fields(f"/proc/{pid}/stat")) is None:
            continue
        user, system = user + int(fields[11]), system + int(fields[12])
    return user, system


def spent_us(before: dict, after: dict) -> dict[str, float]:
    """CPU µs per part between two snapshots (a process new since `before` counts whole)."""
    out = {}
    for part, now in after.items():
        if part == "generator":
            out[part] = (now - before[part]) / TICK * 1e6
        else:
            then = before[part]
            out[part] = sum(t - then.get(pid, 0) for pid, t in now.items()) / TICK * 1e6
    return out


def jit_ticks(pids: list[int]) -> int:
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
