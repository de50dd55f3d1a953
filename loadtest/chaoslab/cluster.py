"""The topology on this machine: three seckill instances, a three-node ZooKeeper ensemble
(and a standalone one, for the stranger), PostgreSQL (the cluster the fault tests restart),
and the payment provider with its ledger on the other cluster. Each instance reaches
ZooKeeper and PostgreSQL through proxies of its own (`proxy.Link`)."""

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import time

from .client import Conn
from .proxy import Link


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_root(cmd):
    return cmd if os.geteuid() == 0 else ["sudo", *cmd]


async def four_letters(port, word, timeout=2.0):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        writer.write(word.encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
        writer.close()
        return data.decode(errors="replace")
    except (OSError, asyncio.TimeoutError):
        return ""


async def wait_for(what, check, limit=60.0, every=0.2):
    deadline = time.monotonic() + limit
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {limit:.0f} s")
        await asyncio.sleep(every)


async def get_json(port, path, timeout=3.0):
    conn = Conn(port)
    try:
        status, _, raw = await conn.request("GET", path, timeout=timeout)
        return status, json.loads(raw) if raw else None
    except (OSError, ConnectionError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError):
        return None, None
    finally:
        conn.close()


class ZooKeeper:
    """`count` servers: 3 an ensemble, 1 a standalone server."""

    def __init__(self, run_dir, name, count):
        self.dir = run_dir / name
        self.ports = [[free_port() for _ in range(3)] for _ in range(count)]
        self.procs = [None] * count

    def client_ports(self):
        return [p[0] for p in self.ports]

    def connect(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports())

    def start(self, i):
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
        log = open(node / "zookeeper.log", "a")
        self.procs[i] = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Dzookeeper.log.dir={node}",
             "-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar",
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(node / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT)

    async def mode(self, i):
        for line in (await four_letters(self.ports[i][0], "srvr")).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    async def wait_serving(self, i, limit=60.0):
        async def serving():
            return await self.mode(i) in ("leader", "follower", "standalone")
        await wait_for(f"ZooKeeper server {i + 1} ({self.dir.name})", serving, limit)

    async def leader(self):
        for i in range(len(self.ports)):
            if await self.mode(i) == "leader":
                return i
        return None

    def kill(self, i):
        if self.procs[i] and self.procs[i].poll() is None:
            self.procs[i].kill()
            self.procs[i].wait()

    def stop_all(self):
        for i in range(len(self.ports)):
            self.kill(i)


class Instance:
    def __init__(self, index, port, args, log_path, env):
        self.index = index
        self.port = port
        self.args = args
        self.log_path = log_path
        self.env = env
        self.proc = None

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    async def wait_exit(self, limit):
        deadline = time.monotonic() + limit
        while self.running() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if self.running():
            self.proc.kill()
        if self.proc:
            self.proc.wait()

    async def wait_healthy(self, limit=60.0):
        async def healthy():
            if not self.running():
                raise RuntimeError(f"instance {self.index} exited: see {self.log_path}")
            status, _ = await get_json(self.port, "/healthz")
            return status == 200

        await wait_for(f"instance {self.index} to serve", healthy, limit)

    async def ready(self):
        status, body = await get_json(self.port, "/readyz")
        return status == 200, body


class Cluster:
    def __init__(self, opts, run_dir):
        self.opts = opts
        self.run_dir = run_dir
        self.ensemble = ZooKeeper(run_dir, "ensemble", 3)
        self.elsewhere = ZooKeeper(run_dir, "elsewhere", 1)
        self.pg_port = opts.pg_port
        self.db = f"seckill_chaos_{os.getpid()}"
        self.ledger_db = f"seckill_chaos_ledger_{os.getpid()}"
        self.provider_port = free_port()
        self.provider = None
        self.instances = []
        self.links = []  # per instance: {"pg": Link, "zk": [Link, Link, Link]}
        self.stranger = None
        self.zk_root = f"/seckill-chaos/{opts.seed}-{os.getpid()}"

    # -- PostgreSQL --------------------------------------------------------------------
    def psql(self, port, db, sql):
        env = dict(os.environ, PGPASSWORD="seckill")
        out = subprocess.run(
            ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
             "-U", "seckill", "-d", db, "-c", sql],
            env=env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {out.stderr.strip()}")
        return out.stdout

    def query(self, sql):
        """Rows of `sql` on the sale's database, as dicts (through json_agg)."""
        raw = self.psql(self.pg_port, self.db,
                        f"SELECT coalesce(json_agg(t), '[]') FROM ({sql}) t").strip()
        return json.loads(raw or "[]")

    def pg_restart(self):
        ver, name = self.opts.pg_cluster.split("/")
        subprocess.run(as_root(["pg_ctlcluster", ver, name, "restart", "-m", "fast"]),
                       check=True, capture_output=True, timeout=120)

    # -- the provider ------------------------------------------------------------------
    # Its API key goes through the environment (PROVIDER_API_KEY, SECKILL_PAYMENT_API_KEY):
    # `ps` shows flags to anyone on the machine.
    def start_provider(self):
        log = open(self.run_dir / "provider.log", "a")
        self.provider = subprocess.Popen(
            [str(self.opts.bin_dir / "seckill-provider"), "--listen",
             f"127.0.0.1:{self.provider_port}", "--test-controls", "--database-url",
             f"postgres://seckill:seckill@127.0.0.1:{self.opts.ledger_pg_port}/{self.ledger_db}",
             "--decline-rate", "0.1"],
            stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, RUST_LOG="warn", PROVIDER_API_KEY=self.opts.payment_api_key))

    def provider_auth(self):
        """The header every call to the provider but /healthz needs."""
        return {"Authorization": f"Bearer {self.opts.payment_api_key}"}

    async def wait_provider(self):
        async def up():
            status, _ = await get_json(self.provider_port, "/healthz")
            return status == 200
        await wait_for("the payment provider", up)

    def kill_provider(self):
        if self.provider and self.provider.poll() is None:
            self.provider.kill()
            self.provider.wait()

    async def provider_settings(self, settings):
        conn = Conn(self.provider_port)
        try:
            status, _, raw = await conn.request("PUT", "/v1/settings", settings,
                                                self.provider_auth(), timeout=5)
            if status != 200:
                raise RuntimeError(f"provider settings: {status} {raw}")
        finally:
            conn.close()

    async def ledger(self):
        conn = Conn(self.provider_port)
        try:
            status, _, raw = await conn.request("GET", "/v1/charges", None,
                                                self.provider_auth(), timeout=30)
            if status != 200:
                raise RuntimeError(f"provider ledger: {status} {raw}")
            return json.loads(raw)
        finally:
            conn.close()

    # -- the instances -----------------------------------------------------------------
    def instance_env(self):
        return dict(os.environ, RUST_LOG="warn", SECKILL_PAYMENT_API_KEY=self.opts.payment_api_key)

    def instance_args(self, index, port, zk_connect, db_port, name):
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
            "--db-max-connections", "12", *o.instance_flags,
        ]

    async def start(self):
        self.psql(self.pg_port, "postgres", f"CREATE DATABASE {self.db}")
        self.psql(self.opts.ledger_pg_port, "postgres", f"CREATE DATABASE {self.ledger_db}")
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

    def new_stranger(self):
        """An instance pointed at another ZooKeeper over the same database, as with a
        staging ZooKeeper URL in a debug container."""
        port = free_port()
        args = self.instance_args(3, port, self.elsewhere.connect(), self.pg_port, "stranger")
        self.stranger = Instance(3, port, args, self.run_dir / "stranger.log", self.instance_env())
        return self.stranger

    async def stop(self):
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

    def drop_databases(self):
        for port, db in ((self.pg_port, self.db), (self.opts.ledger_pg_port, self.ledger_db)):
            try:
                self.psql(port, "postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            except RuntimeError as e:
                print(f"[chaos] could not drop {db}: {e}")

    def clean(self):
        shutil.rmtree(self.run_dir / "ensemble", ignore_errors=True)
        shutil.rmtree(self.run_dir / "elsewhere", ignore_errors=True)
