"""A small HTTP/1.1 client (keep-alive, one request at a time per connection) and the
history every request and answer goes into. Asynchronous and raw, unlike
`loadtest.lib.common.web`: a sale's thousands of buyers share one event loop, and the history
keeps each answer's status, headers and body exactly as they came."""

import asyncio
import json
import time
from pathlib import Path
from typing import Any


class History:
    """Every request and its answer (or what happened instead), one JSON object a line:
    who, what, key, instance, when sent and answered (seconds since the sale began),
    status, body."""

    def __init__(self, path: Path, t0: float):
        self.path = path
        self.t0 = t0
        self.events: list[dict[str, Any]] = []
        self.file = open(path, "w")

    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.file.write(json.dumps(event, separators=(",", ":")) + "\n")

    def note(self, mark: str, **fields: Any) -> None:
        """A nemesis or phase mark on the same clock."""
        self.record({"mark": mark, "t": round(self.now(), 3), **fields})

    def close(self) -> None:
        self.file.close()


class Conn:
    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None,
                      timeout: float = 10.0) -> tuple[int, dict[str, str], str]:
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

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None


async def once(port: int, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None,
               timeout: float = 10.0) -> tuple[int, dict[str, str], str]:
    """One request on a connection of its own, closed after: `Conn.request`'s answer."""
    conn = Conn(port)
    try:
        return await conn.request(method, path, body, headers, timeout)
    finally:
        conn.close()


async def call_json(port: int, method: str, path: str, body: Any = None,
                    headers: dict[str, str] | None = None, timeout: float = 10.0) -> Any:
    """A call the run needs answered 200 or 201: its JSON body. RuntimeError otherwise (the
    run broke, not an invariant)."""
    status, _, raw = await once(port, method, path, body, headers, timeout)
    if status not in (200, 201):
        raise RuntimeError(f"{method} {path}: {status} {raw}")
    return json.loads(raw) if raw else None


async def probe(port: int, path: str, timeout: float = 3.0) -> tuple[int | None, Any]:
    """(status, JSON body) of a GET, or (None, None) when no answer came (a server down,
    paused or cut off) or it was not JSON."""
    try:
        status, _, raw = await once(port, "GET", path, timeout=timeout)
        return status, json.loads(raw) if raw else None
    except (OSError, ConnectionError, asyncio.TimeoutError, ValueError,
            asyncio.IncompleteReadError):
        return None, None
