"""The topology on this machine: three seckill instances, a three-node ZooKeeper ensemble
(and a standalone one, for the stranger), PostgreSQL (the cluster the fault tests restart),
and the payment provider with its ledger on the other cluster. Each instance reaches
ZooKeeper and PostgreSQL through proxies of its own (`proxy.Link`)."""

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from . import log
from ..common import zk
from ..common.pg import PsqlError, psql
from ..common.wait import WaitTimeout, wait_for_async
from .client import call_json, probe
from .proxy import Link


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_root(cmd: list[str]) -> list[str]:
    return cmd if os.geteuid() == 0 else ["sudo", *cmd]


class ZooKeeper:
    """`count` servers: 3 an ensemble, 1 a standalone server."""

    def __init__(self, run_dir: Path, name: str, count: int):
        self.dir = run_dir / name
        self.ports = [[free_port() for _ in range(3)] for _ in range(count)]
        self.procs: list[subprocess.Popen | None] = [None] * count

    def client_ports(self) -> list[int]:
        return [p[0] for p in self.ports]

    def connect(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports())

    def start(self, i: int) -> None:
        node = self.dir / f"server-{i + 1}"
        data = node / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            "tickTime=500", "initLimit=20", "syncLimit=4", f"dataDir={data}",
            f"clientPort={self.ports[i][0]}", "clientPortAddress=127.0.0.1", "maxClientCnxns=0",
            "maxSessionTimeout=60000", "4lw.commands.whitelist=*", "admin.enableServer=false",
        ]
        if len(self.ports) > 1:
            lines += [f"server.{n + 1}=127.0.0.1:{p[1]}:{p[2]}" for n, p in enumerate(self.ports)]
            (data / "myid").write_text(f"{i + 1}\n")
        (node / "zoo.cfg").write_text("\n".join(lines) + "\n")
        out = open(node / "zookeeper.log", "a")
        self.procs[i] = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Dzookeeper.log.dir={node}",
             "-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar",
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(node / "zoo.cfg")],
            stdout=out, stderr=subprocess.STDOUT)

    async def mode(self, i: int) -> str | None:
        """The server's mode (leader, follower, standalone); None when it does not answer."""
        try:
            # In a thread: a server that is down or paused must not hold up the sale's loop.
            stats = await asyncio.to_thread(zk.srvr, "127.0.0.1", self.ports[i][0])
        except OSError:
            return None
        return stats.get("Mode")

    async def wait_serving(self, i: int, limit: float = 60.0) -> None:
        async def serving():
            return await self.mode(i) in ("leader", "follower", "standalone")
        await wait_for_async(f"ZooKeeper server {i + 1} ({self.dir.name})", serving, limit)

    async def leader(self) -> int | None:
        for i in range(len(self.ports)):
            if await self.mode(i) == "leader":
                return i
        return None

    def kill(self, i: int) -> None:
        if self.procs[i] and self.procs[i].poll() is None:
            self.procs[i].kill()
            self.procs[i].wait()

    def stop_all(self) -> None:
        for i in range(len(self.ports)):
            self.kill(i)


class Instance:
    def __init__(self, index: int, port: int, args: list[str], log_path: Path,
                 env: dict[str, str]):
        self.index = index
        self.port = port
        self.args = args
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        # The child keeps its own copy of the log's descriptor.
        with open(self.log_path, "a") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                         env=self.env)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running():
            self.proc.send_signal(sig)

    async def wait_exit(self, limit: float) -> None:
        """Waits up to `limit` s for the process to exit, then kills it; reaps it either way."""
        async def exited() -> bool:
            return not self.running()

        try:
            await wait_for_async(f"instance {self.index} to exit", exited, limit, every=0.1)
        except WaitTimeout:
            self.proc.kill()
        if self.proc:
            self.proc.wait()

    async def wait_healthy(self, limit: float = 60.0) -> None:
        async def healthy():
            if not self.running():
                raise RuntimeError(f"instance {self.index} exited: see {self.log_path}")
            status, _ = await probe(self.port, "/healthz")
            return status == 200

        await wait_for_async(f"instance {self.index} to serve", healthy, limit)

    async def ready(self) -> tuple[bool, Any]:
        status, body = await probe(self.port, "/readyz")
        return status == 200, body


def buyer_auth(instance_flags: list[str]) -> tuple[str, list[str]]:
    """How the instances know their buyers, and the flags that say so: `demo` (the buyers sign
    in at the instances' own issuer, whose key every instance reads from the one database,
    so each accepts the others' tokens), unless an `--instance-flag=--buyer-auth=MODE`
    says otherwise (then it alone says it: the flag is not given twice)."""
    for i, flag in enumerate(instance_flags):
        name, eq, value = flag.partition("=")
        if name == "--buyer-auth":
            mode = value if eq else (instance_flags[i + 1] if i + 1 < len(instance_flags) else "")
            return mode, []
    return "demo", ["--buyer-auth", "demo"]


class Cluster:
    def __init__(self, opts: argparse.Namespace, run_dir: Path):
        self.opts = opts
        self.run_dir = run_dir
        self.ensemble = ZooKeeper(run_dir, "ensemble", 3)
        self.elsewhere = ZooKeeper(run_dir, "elsewhere", 1)
        self.pg_port = opts.pg_port
        self.db = f"seckill_chaos_{os.getpid()}"
        self.ledger_db = f"seckill_chaos_ledger_{os.getpid()}"
        self.provider_port = free_port()
        self.provider: subprocess.Popen | None = None
        self.instances: list[Instance] = []
        self.links: list[dict[str, Any]] = []  # per instance: {"pg": Link, "zk": [Link, ...]}
        self.stranger: Instance | None = None
        self.ledger_charges: list[dict[str, Any]] = []  # read once the sale is over
        self.zk_root = f"/seckill-chaos/{opts.seed}-{os.getpid()}"
        self.buyer_auth, self.buyer_flags = buyer_auth(opts.instance_flags)

    # -- PostgreSQL --------------------------------------------------------------------
    def execute(self, sql: str, timeout: float = 60.0) -> str:
        """`sql` on the sale's database, its output as psql prints it (fields split by |)."""
        return psql(sql, port=self.pg_port, db=self.db, timeout=timeout)

    def query(self, sql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Rows of `sql` on the sale's database, as dicts (through json_agg). PsqlError (a
        RuntimeError) if PostgreSQL fails or takes over `timeout` s to answer."""
        raw = self.execute(f"SELECT coalesce(json_agg(t), '[]') FROM ({sql}) t", timeout).strip()
        return json.loads(raw or "[]")

    def pg_restart(self) -> None:
        ver, name = self.opts.pg_cluster.split("/")
        subprocess.run(as_root(["pg_ctlcluster", ver, name, "restart", "-m", "fast"]),
                       check=True, capture_output=True, timeout=120)

    # -- the provider ------------------------------------------------------------------
    # Its API key goes through the environment (PROVIDER_API_KEY, SECKILL_PAYMENT_API_KEY):
    # `ps` shows flags to anyone on the machine.
    def start_provider(self) -> None:
        out = open(self.run_dir / "provider.log", "a")
        self.provider = subprocess.Popen(
            [str(self.opts.bin_dir / "seckill-provider"), "--listen",
             f"127.0.0.1:{self.provider_port}", "--test-controls", "--database-url",
             f"postgres://seckill:seckill@127.0.0.1:{self.opts.ledger_pg_port}/{self.ledger_db}",
             "--decline-rate", "0.1"],
            stdout=out, stderr=subprocess.STDOUT,
            env=dict(os.environ, RUST_LOG="warn", PROVIDER_API_KEY=self.opts.payment_api_key))

    def provider_auth(self) -> dict[str, str]:
        """The header every call to the provider but /healthz needs."""
        return {"Authorization": f"Bearer {self.opts.payment_api_key}"}

    async def wait_provider(self) -> None:
        async def up():
            status, _ = await probe(self.provider_port, "/healthz")
            return status == 200
        await wait_for_async("the payment provider", up)

    def kill_provider(self) -> None:
        if self.provider and self.provider.poll() is None:
            self.provider.kill()
            self.provider.wait()

    async def provider_settings(self, settings: dict[str, Any]) -> None:
        await call_json(self.provider_port, "PUT", "/v1/settings", settings,
                        self.provider_auth(), timeout=5)

    async def ledger(self) -> dict[str, Any]:
        return await call_json(self.provider_port, "GET", "/v1/charges", None,
                               self.provider_auth(), timeout=30)

    # -- the instances -----------------------------------------------------------------
    def instance_env(self) -> dict[str, str]:
        return dict(os.environ, RUST_LOG="warn", SECKILL_PAYMENT_API_KEY=self.opts.payment_api_key)

    def instance_args(self, index: int, port: int, zk_connect: str, db_port: int,
                      name: str) -> list[str]:
        o = self.opts
        return [
            str(o.bin_dir / "seckill"), "--listen", f"127.0.0.1:{port}",
            "--database-url",
            f"postgres://seckill:seckill@127.0.0.1:{db_port}/{self.db}?sslmode=disable",
            "--zk", zk_connect, "--zk-root", self.zk_root, "--instance", name,
            "--admin-token", o.admin_token, "--payment-url", f"http://127.0.0.1:{self.provider_port}",
            "--zk-session-timeout-ms", str(o.session_ms), "--db-statement-timeout-ms", "1000",
            "--request-timeout-ms", str(o.request_ms), "--shutdown-grace-ms", str(o.request_ms + 3000),
            "--payment-timeout-ms", "2000", "--expiry-interval-ms", "500",
            "--db-max-connections", "12", *self.buyer_flags, *o.instance_flags,
        ]

    async def start(self) -> None:
        psql(f"CREATE DATABASE {self.db}", port=self.pg_port)
        psql(f"CREATE DATABASE {self.ledger_db}", port=self.opts.ledger_pg_port)
        for i in range(3):
            self.ensemble.start(i)
        self.elsewhere.start(0)
        self.start_provider()
        for i in range(3):
            await self.ensemble.wait_serving(i)
        await self.elsewhere.wait_serving(0)
        await self.wait_provider()
        for i in range(3):
            pg = await Link(f"i{i}-pg", self.pg_port, pg=True).start()
            zk = [await Link(f"i{i}-zk{j}", p).start() for j, p in enumerate(self.ensemble.client_ports())]
            self.links.append({"pg": pg, "zk": zk})
            zk_connect = ",".join(f"127.0.0.1:{link.port}" for link in zk)
            port = free_port()
            inst = Instance(i, port, self.instance_args(i, port, zk_connect, pg.port, f"i{i}"),
                            self.run_dir / f"instance-{i}.log", self.instance_env())
            self.instances.append(inst)
        # One at a time: each runs the migrations (they serialise anyway).
        for inst in self.instances:
            inst.start()
            await inst.wait_healthy()

    def new_stranger(self) -> Instance:
        """An instance pointed at another ZooKeeper over the same database, as with a
        staging ZooKeeper URL in a debug container."""
        port = free_port()
        args = self.instance_args(3, port, self.elsewhere.connect(), self.pg_port, "stranger")
        self.stranger = Instance(3, port, args, self.run_dir / "stranger.log", self.instance_env())
        return self.stranger

    async def stop(self) -> None:
        everyone = self.instances + ([self.stranger] if self.stranger else [])
        for inst in everyone:
            inst.signal(signal.SIGCONT)
            inst.signal(signal.SIGTERM)
        for inst in everyone:
            await inst.wait_exit(15)
        self.kill_provider()
        for link in self.links:
            await link["pg"].close()
            for z in link["zk"]:
                await z.close()
        self.ensemble.stop_all()
        self.elsewhere.stop_all()

    def drop_databases(self) -> None:
        for port, db in ((self.pg_port, self.db), (self.opts.ledger_pg_port, self.ledger_db)):
            try:
                psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", port=port)
            except PsqlError as e:
                log(f"could not drop {db}: {e}")

    def clean(self) -> None:
        shutil.rmtree(self.run_dir / "ensemble", ignore_errors=True)
        shutil.rmtree(self.run_dir / "elsewhere", ignore_errors=True)
