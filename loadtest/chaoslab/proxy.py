"""Fault-injecting TCP proxies between each instance and ZooKeeper or PostgreSQL.

A proxy of our own rather than `tc netem` / `iptables`: those need root and act on every
connection to a port, while a nemesis here cuts *one instance's* link and leaves the other
instances alone, and one fault ("drop the reply to a COMMIT") needs to read PostgreSQL's
protocol, which no kernel tool does.
"""

import asyncio


class Link:
    """127.0.0.1:<port> forwarded to a target. `cut()` drops every open connection and
    refuses new ones (accepted, then closed at once) until `restore()`."""

    def __init__(self, name, target_port, pg=False):
        self.name = name
        self.target_port = target_port
        self.pg = pg
        self.up = True
        self.commits_to_drop = 0
        self.dropped_commits = 0
        self.conns = set()
        self.server = None
        self.port = None

    async def start(self, port=0):
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def cut(self):
        self.up = False
        for writer in list(self.conns):
            writer.transport.abort()
        self.conns.clear()

    def restore(self):
        self.up = True

    def drop_next_commits(self, n):
        """The next `n` COMMITs go through to PostgreSQL, and their answers never come
        back: the connection closes instead. The commit happened; the client cannot know."""
        self.commits_to_drop = n

    async def close(self):
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
        state = {"blackhole": False}
        upstream = self._pg_upstream(reader, up_writer, state) if self.pg else _pump(reader, up_writer)
        down = _pump(up_reader, writer, state)
        try:
            await asyncio.gather(upstream, down, return_exceptions=True)
        finally:
            for w in (writer, up_writer):
                self.conns.discard(w)
                w.transport.abort()

    async def _pg_upstream(self, reader, writer, state):
        """Client to server, message by message: the startup message (and an SSLRequest)
        has no type byte, every later one a type byte and a length that counts itself.
        Clients connect with sslmode=disable."""
        started = False
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
                commit = (
                    kind == b"Q"
                    and body.lstrip().upper().startswith(b"COMMIT")
                    and self.commits_to_drop > 0
                )
                if commit:
                    self.commits_to_drop -= 1
                    self.dropped_commits += 1
                    state["blackhole"] = True
                    writer.write(message)
                    await writer.drain()
                    return
                writer.write(message)
                await writer.drain()
                started = True
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            if not state["blackhole"]:
                writer.transport.abort()


async def _pump(reader, writer, state=None):
    try:
        while True:
            data = await reader.read(65536)
            if not data or (state and state["blackhole"]):
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # In a blackhole, the client sees its connection close with no answer to its commit.
        writer.transport.abort()
