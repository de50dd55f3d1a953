"""A small HTTP/1.1 client (keep-alive, one request at a time per connection) and the
history every request and answer goes into."""

import asyncio
import json
import time


class History:
    """Every request and its answer (or what happened instead), one JSON object a line:
    who, what, key, instance, when sent and answered (seconds since the sale began),
    status, body."""

    def __init__(self, path, t0):
        self.path = path
        self.t0 = t0
        self.events = []
        self.file = open(path, "w")

    def now(self):
        return time.monotonic() - self.t0

    def record(self, event):
        self.events.append(event)
        self.file.write(json.dumps(event, separators=(",", ":")) + "\n")

    def note(self, mark, **fields):
        """A nemesis or phase mark on the same clock."""
        self.record({"mark": mark, "t": round(self.now(), 3), **fields})

    def close(self):
        self.file.close()


class Conn:
    def __init__(self, port):
        self.port = port
        self.reader = None
        self.writer = None

    async def request(self, method, path, body=None, headers=None, timeout=10.0):
        """(status, headers, raw body). Raises asyncio.TimeoutError or OSError/ConnectionError
        (the connection is then closed)."""
        try:
            return await asyncio.wait_for(self._request(method, path, body, headers), timeout)
        except BaseException:
            self.close()
            raise

    async def _request(self, method, path, body, headers):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        payload = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}",
                f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        for name, value in (headers or {}).items():
            head.append(f"{name}: {value}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed before an answer")
        status = int(status_line.split()[1])
        answer = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            answer[name.strip().lower()] = value.strip()
        if "content-length" in answer:
            raw = await self.reader.readexactly(int(answer["content-length"]))
        elif answer.get("transfer-encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int((await self.reader.readline()).strip() or b"0", 16)
                if size == 0:
                    await self.reader.readline()
                    break
                raw += await self.reader.readexactly(size)
                await self.reader.readline()
        else:
            raw = await self.reader.read()
        if answer.get("connection", "").lower() == "close":
            self.close()
        return status, answer, raw.decode("utf-8", "replace")

    def close(self):
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None
