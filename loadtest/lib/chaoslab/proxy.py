"""Fault-injecting TCP proxies between each instance and ZooKeeper or PostgreSQL.

A proxy of our own rather than `tc netem` / `iptables`: those need root and act on every
connection to a port, while a nemesis here cuts *one instance's* link and leaves the other
instances alone, and two faults ("drop the reply to a COMMIT", "deliver a COMMIT late")
need to read PostgreSQL's protocol, which no kernel tool does.
"""

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class LateCommit:
    """One COMMIT to hold back (see `Link.delay_next_commit`) and what became of it."""

    delay_s: float
    marker: bytes | None
    held: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    held_at: float | None = None       # time.monotonic() when the client's connection closed
    delivered_at: float | None = None  # when the COMMIT was written to PostgreSQL (None: never)
    outcome: str = ""                  # PostgreSQL's answer to it, in words


@dataclass
class _Conn:
    """What the two directions of one proxied PostgreSQL connection share."""

    blackhole: bool = False  # a dropped COMMIT reply: close without forwarding anything more
    late: bool = False       # a late COMMIT: the client is gone, keep PostgreSQL's answer here
    reply: bytearray = field(default_factory=bytearray)
    down_done: asyncio.Event = field(default_factory=asyncio.Event)


class Link:
    """127.0.0.1:<port> forwarded to a target. `cut()` drops every open connection and
    refuses new ones (accepted, then closed at once) until `restore()`."""

    def __init__(self, name: str, target_port: int, pg: bool = False):
        self.name = name
        self.target_port = target_port
        self.pg = pg
        self.up = True
        self.commits_to_drop = 0
        self.dropped_commits = 0
        self.late: LateCommit | None = None
        self.conns: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.port: int | None = None
        self.flowing = asyncio.Event()  # cleared: silent, nothing moves either way
        self.flowing.set()
        self.delay_s = 0.0  # slow: every message waits this long before it is passed on

    async def start(self, port: int = 0) -> "Link":
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def cut(self) -> None:
        self.up = False
        for writer in list(self.conns):
            writer.transport.abort()
        self.conns.clear()

    def restore(self) -> None:
        self.up = True

    def silence(self) -> None:
        """Nothing moves either way from now on, and nothing is closed: what is read is held
        (a partition that drops packets), until `speak()` delivers it."""
        self.flowing.clear()

    def speak(self) -> None:
        self.flowing.set()

    def slow(self, delay_s: float) -> None:
        """Every message from now on waits `delay_s` before it is passed on (0: none)."""
        self.delay_s = delay_s

    async def _gate(self) -> None:
        await self.flowing.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)

    def drop_next_commits(self, n: int) -> None:
        """The next `n` COMMITs go through to PostgreSQL, and their answers never come
        back: the connection closes instead. The commit happened; the client cannot know."""
        self.commits_to_drop = n

    def delay_next_commit(self, delay_s: float, marker: bytes | None = None) -> LateCommit:
        """What a congested link does to the next COMMIT: the client's connection closes at
        once, with no answer, and the COMMIT reaches PostgreSQL `delay_s` later (the
        transaction stays open until then, its locks held), then the connection ends. With a
        `marker`, only the COMMIT of a transaction that wrote orders (`INSERT INTO orders`)
        with `marker` among its parameters (a user id's prefix) is taken. One COMMIT: the
        returned `LateCommit` says when it was held and what PostgreSQL answered."""
        self.late = LateCommit(delay_s, marker)
        return self.late

    def keep_commits(self) -> None:
        """Disarms a late COMMIT not taken yet (one already held is still delivered)."""
        self.late = None

    async def close(self) -> None:
        self.cut()
        if self.server:
            self.server.close()

    async def _accept(self, reader, writer):
        if not self.up:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.conns.update((writer, up_writer))
        conn = _Conn()
        upstream = (self._pg_upstream(reader, up_writer, writer, conn) if self.pg
                    else _pump(reader, up_writer, gate=self._gate))
        down = _pump(up_reader, writer, conn, gate=self._gate)
        try:
            await asyncio.gather(upstream, down, return_exceptions=True)
        finally:
            for w in (writer, up_writer):
                self.conns.discard(w)
                w.transport.abort()

    def _takes(self, order_write: bool) -> LateCommit | None:
        """The armed late COMMIT, if this transaction's COMMIT is the one it waits for."""
        late = self.late
        if late is None or (late.marker is not None and not order_write):
            return None
        self.late = None
        return late

    async def _pg_upstream(self, reader, writer, client, conn):
        """Client to server, message by message: the startup message (and an SSLRequest)
        has no type byte, every later one a type byte and a length that counts itself.
        Clients connect with sslmode=disable. Prepared statements (Parse) are remembered by
        name, so a Bind says whether its transaction writes orders."""
        started = False
        writes_orders = set()  # names of this connection's prepared statements that do
        marked = False         # this transaction wrote orders carrying the late COMMIT's marker
        try:
            while True:
                kind = b""
                if started:
                    kind = await reader.readexactly(1)
                length = await reader.readexactly(4)
                body = await reader.readexactly(int.from_bytes(length, "big") - 4)
                message = kind + length + body
                if not started and body[:4] in (b"\x04\xd2\x16\x2f", b"\x04\xd2\x16\x30"):
                    writer.write(message)  # SSLRequest / GSSENCRequest: still untyped after
                    await writer.drain()
                    continue
                late = self.late
                if kind == b"P":  # Parse: name \0 query \0 ...
                    name, _, rest = body.partition(b"\0")
                    if _inserts_orders(rest.partition(b"\0")[0]):
                        writes_orders.add(name)
                    else:
                        writes_orders.discard(name)
                elif kind == b"B" and late and late.marker:  # Bind: portal \0 statement \0 ...
                    statement = body.partition(b"\0")[2].partition(b"\0")[0]
                    marked |= statement in writes_orders and late.marker in body
                elif kind == b"Q":
                    query = body.lstrip().upper()
                    if late and late.marker and _inserts_orders(body) and late.marker in body:
                        marked = True
                    if query.startswith(b"COMMIT"):
                        if self.commits_to_drop > 0:
                            self.commits_to_drop -= 1
                            self.dropped_commits += 1
                            conn.blackhole = True
                            writer.write(message)
                            await writer.drain()
                            return
                        taken = self._takes(marked)
                        if taken:
                            await self._deliver_late(taken, message, writer, client, conn)
                            return
                    if query.startswith((b"COMMIT", b"ROLLBACK", b"END", b"ABORT")):
                        marked = False
                await self._gate()
                writer.write(message)
                await writer.drain()
                started = True
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            if not (conn.blackhole or conn.late):
                writer.transport.abort()

    async def _deliver_late(self, late, commit, writer, client, conn):
        """Closes the client's connection now, delivers `commit` after the delay, then ends
        the server's connection; records what PostgreSQL answered."""
        conn.late = True
        client.transport.abort()
        late.held_at = time.monotonic()
        late.held.set()
        try:
            await asyncio.sleep(late.delay_s)
            if not conn.down_done.is_set():
                writer.write(commit + b"X\x00\x00\x00\x04")  # the COMMIT, then Terminate
                await writer.drain()
                late.delivered_at = time.monotonic()
            await asyncio.wait_for(conn.down_done.wait(), 10)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass
        finally:
            late.outcome = _outcome(bytes(conn.reply), late.delivered_at is not None)
            writer.transport.abort()
            late.done.set()


def _inserts_orders(query: bytes) -> bool:
    return b"INSERT INTO ORDERS" in b" ".join(query.upper().split())


def _outcome(reply: bytes, delivered: bool) -> str:
    """PostgreSQL's answer to a late COMMIT, from what it sent after the client was gone:
    `committed`, `rolled back` (the transaction had failed), or its error."""
    at = 0
    while at + 5 <= len(reply):
        kind, size = reply[at:at + 1], int.from_bytes(reply[at + 1:at + 5], "big")
        body = reply[at + 5:at + 1 + size]
        at += 1 + size
        if kind == b"C":
            tag = body.rstrip(b"\0").decode(errors="replace")
            return {"COMMIT": "committed", "ROLLBACK": "rolled back"}.get(tag, tag)
        if kind == b"E":
            fields = {f[:1]: f[1:].decode(errors="replace") for f in body.split(b"\0") if f}
            return f"error {fields.get(b'C', '?')}: {fields.get(b'M', '')}"
    return "the connection was gone before the COMMIT" if not delivered else "no answer"


async def _pump(reader, writer, conn=None, gate=None):
    try:
        while True:
            data = await reader.read(65536)
            if not data or (conn and conn.blackhole):
                break
            if conn and conn.late:
                conn.reply += data  # the client is gone: PostgreSQL's answer is the nemesis's
                continue
            if gate:
                await gate()  # held while the link is silent or slow
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # In a blackhole, the client sees its connection close with no answer to its commit.
        writer.transport.abort()
        if conn:
            conn.down_done.set()
