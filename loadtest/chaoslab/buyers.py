"""The buyers: each order carries an Idempotency-Key; an answer is retried when it says so
(`retryable`), after its Retry-After, and a timeout, a dropped connection or an answer that
is not JSON by replaying the key (at whichever instance the "load balancer" picks next). A
mix of pay-now orders, reservations paid later or left to lapse, replays of keys already
answered, and restocks by an operator. One buyer in ten is a client that sends no key: one
request per order, never retried."""

import asyncio
import contextlib
import itertools
import json
import random
import uuid
from typing import Any

from ..common.web import retryable
from .client import History, once

# The user ids of the buyers without keys start so (one id per order: the order's row
# names its one request). The `late_commit` nemesis looks for it in a lock cycle's writes.
KEYLESS = "keyless-"


def should_retry(event: dict[str, Any]) -> bool:
    """Whether a client holding a key sends its request again after `event`: as the answer
    says (`retryable`); with no answer to go by (none came, or one that is not JSON), yes,
    since replaying a key cannot buy twice."""
    said = retryable(event["body"]) if "status" in event else None
    return True if said is None else said


def retry_wait(event: dict[str, Any], default: float) -> float:
    """How long to wait before sending again: the answer's Retry-After, at most 2 s (the
    sale goes on meanwhile), or `default` when it gives none."""
    try:
        return min(float(event["retry_after"]), 2.0)
    except (KeyError, TypeError, ValueError):
        return default


class Sale:
    def __init__(self, history: History, instances: list[int], products: list[dict[str, Any]],
                 admin_token: str, seed: int, client_timeout: float):
        self.history = history
        self.instances = instances  # ports the "load balancer" spreads requests over
        self.products = products    # [{"id", "name"}]
        self.admin_token = admin_token
        self.rng = random.Random(seed)
        self.client_timeout = client_timeout
        self.stopping = False       # no new orders after the sale's end
        self.hard_end = None        # history time after which nobody retries any more

    def pick_instance(self, rng: random.Random) -> int:
        return rng.choice(list(self.instances))

    async def send(self, who: str, op: str, method: str, path: str, body: Any = None,
                   key: str | None = None, rng: random.Random | None = None,
                   admin: bool = False) -> dict[str, Any]:
        port = self.pick_instance(rng or self.rng)
        headers = {}
        if key:
            headers["Idempotency-Key"] = key
        if admin:
            headers["Authorization"] = f"Bearer {self.admin_token}"
        event = {"who": who, "op": op, "key": key, "port": port, "method": method,
                 "path": path, "req": body, "t0": round(self.history.now(), 4)}
        try:
            status, heads, raw = await once(port, method, path, body, headers,
                                            timeout=self.client_timeout)
            event.update(status=status, body=raw, retry_after=heads.get("retry-after"),
                         replayed=heads.get("idempotent-replayed") == "true")
        except asyncio.TimeoutError:
            event["error"] = "timeout"
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
            event["error"] = type(e).__name__
        event["t1"] = round(self.history.now(), 4)
        self.history.record(event)
        return event

    async def until_final(self, who: str, op: str, method: str, path: str, body: dict | None,
                          key: str | None, rng: random.Random, backoff_s: float = 0.0,
                          gate: asyncio.Semaphore | None = None) -> dict[str, Any] | None:
        """Sends, then retries the same request (same key) until a final answer or the hard
        end. With `backoff_s`, a crowd's client: it waits at least that long before its
        first retry, twice as long before each next one (up to 8 s); with `gate` (a
        semaphore), each try waits for its turn. Returns the final event, or None."""
        for tries in itertools.count():
            async with gate or contextlib.nullcontext():
                event = await self.send(who, op, method, path, body, key, rng)
            if not should_retry(event):
                return event
            if self.hard_end is not None and self.history.now() > self.hard_end:
                return None
            # With no Retry-After (no answer at all): another instance may answer soon.
            wait = retry_wait(event, 0.2)
            if backoff_s:
                wait = max(wait, min(backoff_s * 2 ** tries, 8.0))
            await asyncio.sleep(wait * (0.5 + rng.random()))


def is_keyless(n: int) -> bool:
    """Whether buyer `n` sends its orders without an Idempotency-Key."""
    return n % 10 == 9


async def buyer(sale: Sale, n: int) -> None:
    if is_keyless(n):
        return await keyless_buyer(sale, n)
    rng = random.Random(f"{sale.rng.random()}-{n}")
    users = [f"u{n}-{k}" for k in range(200)]
    answered = []  # (key, body) of keys with a final answer, to replay later
    who = f"buyer-{n}"
    await asyncio.sleep(rng.random())
    while not sale.stopping:
        roll = rng.random()
        product = rng.choice(sale.products)
        user = rng.choice(users)
        if roll < 0.10 and answered:
            key, body = rng.choice(answered)
            await sale.until_final(who, "replay", "POST", "/orders", body, key, rng)
        elif roll < 0.65:
            body = {"product_id": product["id"], "user_id": user,
                    "quantity": 2 if rng.random() < 0.2 else 1}
            key = str(uuid.UUID(int=rng.getrandbits(128)))
            final = await sale.until_final(who, "order", "POST", "/orders", body, key, rng)
            if final:
                answered.append((key, body))
        else:
            body = {"product_id": product["id"], "user_id": user, "pay": False}
            key = str(uuid.UUID(int=rng.getrandbits(128)))
            final = await sale.until_final(who, "reserve", "POST", "/orders", body, key, rng)
            if final:
                answered.append((key, body))
            if final and final.get("status") == 201 and rng.random() < 0.6:
                order = json.loads(final["body"])
                await asyncio.sleep(rng.uniform(0.1, 2.5))
                await sale.until_final(who, "pay", "POST", f"/orders/{order['id']}/pay",
                                       None, None, rng)
        await asyncio.sleep(rng.uniform(0.1, 0.6))


async def keyless_buyer(sale: Sale, n: int) -> None:
    """A client that sends no Idempotency-Key: pay-now orders, each under a user id of its
    own, each sent once (without a key a retry could buy twice). Whatever it is told is all
    it will ever know of that order."""
    rng = random.Random(f"{sale.rng.random()}-{n}")
    who = f"buyer-{n}"
    await asyncio.sleep(rng.random())
    for seq in itertools.count():
        if sale.stopping:
            break
        product = rng.choice(sale.products)
        body = {"product_id": product["id"], "user_id": f"{KEYLESS}{n}-{seq}", "quantity": 1}
        await sale.send(who, "keyless", "POST", "/orders", body, rng=rng)
        await asyncio.sleep(rng.uniform(0.1, 0.6))


async def reserve_at_once(sale: Sale, product_id: int, n: int, seed: int,
                          in_flight: int) -> list[dict | None]:
    """`n` reservations (`"pay": false`) of one product by `n` users, all at once: as fast
    as the service takes them, `in_flight` requests at a time, each under a key, retried as
    a crowd's client does (backing off: a crowd retrying every 0.2 s would be a flood of its
    own). Their final answers (None: none by the hard end)."""
    rng = random.Random(f"lapse-{seed}")
    keys = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n)]
    gate = asyncio.Semaphore(in_flight)

    async def one(i):
        body = {"product_id": product_id, "user_id": f"lapse-{i}", "pay": False}
        return await sale.until_final("lapse", "lapse", "POST", "/orders", body, keys[i],
                                      random.Random(f"{seed}-{i}"), backoff_s=1.0, gate=gate)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def restocker(sale: Sale) -> None:
    """An operator adds units now and then. A restock is not idempotent, so only an answer
    that says so is retried; an ambiguous failure (a timeout, an answer that is not JSON) is
    not: the checker reads the books from PostgreSQL."""
    rng = random.Random(sale.rng.random())
    while not sale.stopping:
        await asyncio.sleep(rng.uniform(2.0, 5.0))
        if sale.stopping:
            break
        product = rng.choice(sale.products)
        body = {"quantity": rng.randint(20, 60)}
        for _ in range(5):
            event = await sale.send("operator", "restock", "POST",
                                    f"/api/products/{product['id']}/restock", body,
                                    rng=rng, admin=True)
            if retryable(event.get("body")):
                await asyncio.sleep(retry_wait(event, 0.5))
                continue
            break
