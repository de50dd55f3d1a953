"""A stand-in for a seckill instance, for the load scripts' tests (k6's sales, wrk's
orders.lua, the Python clients): on 127.0.0.1, any free port, in a thread. It speaks just
enough of the API (docs/api.md) to be bought from, and records every order and sign-in.

- GET /api/session: 200 {"buyer_auth": MODE}; 404 for a build from before sign-in (`none`)
- POST /api/session {"name"}: in `demo` mode 201 and a token naming the buyer (the first
  `busy` sign-ins answered 503, retryable, Retry-After 0), else 403 `no_demo_issuer`
- POST /api/products (the admin token): 201 and an id
- POST /orders: in `demo` mode the buyer is the token's (none: 401 `unauthenticated`; a
  body's user_id that differs: 403 `not_your_account`), in `open` and `none` the body's
  user_id; 201 `paid`
- POST /api/products/{id}/orders: the same, the product the path's (a body that names one:
  400 `invalid_request`)
- GET /api/products/{id}/audit: the units sold, never oversold
- GET /api/products/{id}/lock: `stats` (`lock_stats`, a product's: kept_cycles and
  longest_handover_ms; zeros for any other)
"""

import http.server
import json
import re
import threading
import uuid

ADMIN = "admin-token-for-tests"


def token_of(name: str) -> str:
    """The fake issuer's token for `name` (the real one is a JWT; this stands in for it)."""
    return f"tok.{name}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as k6 and wrk expect
    # An answer in one write (head and body; flushed after each request): in two, the second
    # waits on the client's delayed ACK.
    wbufsize = 1 << 16

    def log_message(self, *_):
        pass

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def _problem(self, status: int, error: str, retryable: bool = False) -> None:
        self._send(status, {"error": error, "message": error, "retryable": retryable},
                   {"Retry-After": "0"} if retryable else None)

    def _body(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return json.loads(raw) if raw else None

    def do_GET(self):
        fake = self.server.fake
        if self.path == "/api/session":
            if fake.mode == "none":
                return self._problem(404, "not_found")
            return self._send(200, {"buyer_auth": fake.mode, "buyer": None, "admin": False})
        lock = re.fullmatch(r"/api/products/(\d+)/lock", self.path)
        if lock:
            stats = fake.lock_stats.get(int(lock.group(1)),
                                        {"kept_cycles": 0, "longest_handover_ms": 0})
            return self._send(200, {"holder": None, "waiters": [], "stats": {
                "acquisitions": 0, "wakeups": 0, "orders": 0, "watching": 0, **stats}})
        if self.path.startswith("/api/products/") and self.path.endswith("/audit"):
            with fake.lock:
                sold = len(fake.orders)
            return self._send(200, {"sold": sold, "oversold": 0, "consistent": True,
                                    "stock": 10**6 - sold, "stocked_total": 10**6})
        self._problem(404, "not_found")

    def do_POST(self):
        fake = self.server.fake
        body = self._body()
        auth = self.headers.get("Authorization")
        if self.path == "/api/session":
            with fake.lock:
                fake.sign_ins.append(body)
                busy = fake.busy > 0
                fake.busy -= busy
            if fake.mode != "demo":
                return self._problem(403, "no_demo_issuer")
            if busy:
                return self._problem(503, "unavailable", retryable=True)
            return self._send(201, {"token": token_of(body["name"]), "buyer": body["name"],
                                    "token_type": "Bearer", "expires_in": 3600,
                                    "expires_at": "2099-01-01T00:00:00Z"})
        if self.path == "/api/products":
            if auth != f"Bearer {ADMIN}":
                return self._problem(401, "unauthorized")
            with fake.lock:
                fake.products.append(body)
                return self._send(201, {"id": len(fake.products), **body})
        routed = re.fullmatch(r"/api/products/(\d+)/orders", self.path)
        if self.path == "/orders" or routed:
            with fake.lock:
                fake.requests.append({"auth": auth, "body": body, "path": self.path})
            if routed:
                if "product_id" in (body or {}):
                    return self._problem(400, "invalid_request")
                body = {**(body or {}), "product_id": int(routed.group(1))}
            if fake.mode == "demo":
                if not auth or not auth.startswith("Bearer tok."):
                    return self._problem(401, "unauthenticated")
                buyer = auth.removeprefix("Bearer tok.")
                if body.get("user_id") not in (None, buyer):
                    return self._problem(403, "not_your_account")
            else:
                buyer = body.get("user_id")
                if not buyer:
                    return self._problem(400, "invalid_request")
            order = {"id": str(uuid.uuid4()), "status": "paid", "product_id": body["product_id"],
                     "user_id": buyer, "quantity": body.get("quantity", 1), "lock_wait_ms": None}
            with fake.lock:
                fake.orders.append(order)
            return self._send(201, order)
        self._problem(404, "not_found")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Connections at once (k6's VUs, wrk's): socketserver's 5 would drop SYNs, a second each.
    request_queue_size = 256


class FakeSeckill:
    """`with FakeSeckill("demo") as fake: ... fake.url`; what it was sent is in `sign_ins`,
    `products`, `requests` (every order, either route: its Authorization, body and path) and
    `orders`. `lock_stats`: {product: its lock's kept_cycles and longest_handover_ms}."""

    def __init__(self, mode: str = "demo", busy: int = 0):
        self.mode = mode
        self.busy = busy
        self.lock = threading.Lock()
        self.sign_ins: list[dict] = []
        self.products: list[dict] = []
        self.requests: list[dict] = []
        self.orders: list[dict] = []
        self.lock_stats: dict[int, dict] = {}
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.fake = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll: the test waits that long for each server to stop.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)

    def __enter__(self) -> "FakeSeckill":
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
