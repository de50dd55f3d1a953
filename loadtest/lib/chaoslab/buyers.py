"""The buyers: each order carries an Idempotency-Key; an answer is retried when it says so
(`retryable`), after its Retry-After, and a timeout, a dropped connection or an answer that
is not JSON by replaying the key (at whichever instance the "load balancer" picks next). A
mix of pay-now orders, reservations paid later or left to lapse, replays of keys already
answered, and restocks by an operator. One buyer in ten is a client that sends no key: one
request per order, never retried.

Every buyer signs in (the instances run `--buyer-auth demo`): a user id's first request waits
for its token from the demo issuer (POST /api/session {"name": user id}, at whichever
instance), kept for the rest of the sale, and every request of that user id carries it
(`Authorization: Bearer`); the body still names the user id, equal to the token's sub, so the
checker matches orders to buyers by user id as before. A sign-in is retried as an order is
(the answer says so, or none came: an instance may be down), and goes into the history as a
request of its own kind (op `session`): the answers' invariant checks it, nothing that counts
orders does."""

import asyncio
import contextlib
import itertools
import json
import random
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ..common.web import retryable
from .client import History, once

# The user ids of the buyers without keys start so (one id per order: the order's row
# names its one request). The `late_commit` nemesis looks for it in a lock cycle's writes.
KEYLESS = "keyless-"
# The op of a sign-in in the history: a request, not an order.
SESSION = "session"
# A token is signed in again this long before it expires (an hour after its sign-in, unless
# the instances say otherwise: `expires_in`).
RENEW_S = 60.0


def is_order(event: dict[str, Any]) -> bool:
    """Whether a history event is an order request (or a payment, a replay, a restock: every
    request the sale makes but a sign-in); marks are none."""
    return "op" in event and event["op"] != SESSION


def redacted(raw: str | None) -> str | None:
    """A sign-in's answer as the history keeps it: its token left out (the history is a file
    anyone may read; the token is a credential, however short-lived)."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return raw
    if isinstance(body, dict) and isinstance(body.get("token"), str):
        return json.dumps({**body, "token": "(redacted)"})
    return raw


def session_token(event: dict[str, Any]) -> tuple[str, float] | None:
    """(token, seconds it lasts) from a sign-in's 201, or None if the answer is not one."""
    if event.get("status") != 201:
        return None
    try:
        body = json.loads(event["body"])
    except (TypeError, ValueError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("token"), str):
        return None
    try:
        return body["token"], float(body.get("expires_in", 3600))
    except (TypeError, ValueError):
        return body["token"], 3600.0


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
                 admin_token: str, seed: int, client_timeout: float, buyer_auth: str = "demo"):
        self.history = history
        self.instances = instances  # ports the "load balancer" spreads requests over
        self.products = products    # [{"id", "name"}]
        self.admin_token = admin_token
        self.rng = random.Random(seed)
        self.client_timeout = client_timeout
        self.stopping = False       # no new orders after the sale's end
        self.hard_end = None        # history time after which nobody retries any more
        # Whether buyers sign in (`demo`); in `open` mode the body's user id is the buyer.
        self.signs_in = buyer_auth == "demo"
        self.tokens: dict[str, tuple[str, float]] = {}  # user id: (token, history time to renew)

    def pick_instance(self, rng: random.Random) -> int:
        return rng.choice(list(self.instances))

    async def send(self, who: str, op: str, method: str, path: str, body: Any = None,
                   key: str | None = None, rng: random.Random | None = None,
                   admin: bool = False, auth: Mapping[str, str] | None = None) -> dict[str, Any]:
        """One request and its answer (or what happened instead), recorded in the history
        (a sign-in's token left out there) and returned whole. `auth`: the buyer's headers
        (`credentials`)."""
        port = self.pick_instance(rng or self.rng)
        headers = dict(auth or {})
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
        self.history.record(event if op != SESSION else {**event, "body": redacted(event.get("body"))})
        return event

    async def credentials(self, who: str, user: str,
                          rng: random.Random) -> dict[str, str] | None:
        """The headers a request of `user` carries: its token (`Authorization: Bearer`),
        signed in at the first request (POST /api/session {"name": user}) and kept until
        RENEW_S before it expires; none in `open` mode. A sign-in is sent again as an order
        is: when the answer says so, or none came (another instance may answer), until the
        hard end (then None: no request goes without its token). A final refusal is
        RuntimeError: a buyer who cannot sign in breaks the run, not an invariant."""
        if not self.signs_in:
            return {}
        kept = self.tokens.get(user)
        if kept and self.history.now() < kept[1]:
            return {"Authorization": f"Bearer {kept[0]}"}
        while True:
            event = await self.send(who, SESSION, "POST", "/api/session", {"name": user}, rng=rng)
            if got := session_token(event):
                token, lasts = got
                self.tokens[user] = (token, self.history.now() + max(lasts - RENEW_S, lasts / 2))
                return {"Authorization": f"Bearer {token}"}
            if not should_retry(event):
                raise RuntimeError(f"{user} could not sign in: {event['status']} "
                                   f"{redacted(event.get('body'))[:200]}")
            if self.hard_end is not None and self.history.now() > self.hard_end:
                return None
            await asyncio.sleep(retry_wait(event, 0.2) * (0.5 + rng.random()))

    async def sign_in_all(self, who: str, users: Iterable[str], in_flight: int) -> None:
        """Every one of `users` signed in ahead, `in_flight` at a time (a burst of orders
        then sends at once, not after a sign-in each)."""
        gate = asyncio.Semaphore(in_flight)

        async def one(user: str) -> None:
            async with gate:
                await self.credentials(who, user, random.Random(user))

        await asyncio.gather(*(one(u) for u in users))

    async def until_final(self, who: str, op: str, method: str, path: str, body: dict | None,
                          key: str | None, rng: random.Random, backoff_s: float = 0.0,
                          gate: asyncio.Semaphore | None = None,
                          buyer: str | None = None) -> dict[str, Any] | None:
        """Sends, then retries the same request (same key) until a final answer or the hard
        end. With `backoff_s`, a crowd's client: it waits at least that long before its
        first retry, twice as long before each next one (up to 8 s); with `gate` (a
        semaphore), each try waits for its turn; with `buyer` (a user id), each try carries
        that buyer's token. Returns the final event, or None."""
        for tries in itertools.count():
            async with gate or contextlib.nullcontext():
                auth = await self.credentials(who, buyer, rng) if buyer else None
                if buyer and auth is None:
                    return None  # the hard end came before a token did
                event = await self.send(who, op, method, path, body, key, rng, auth=auth)
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
        # The body names the buyer too (the token's sub: the same), as a client may.
        if roll < 0.10 and answered:
            key, body = rng.choice(answered)
            await sale.until_final(who, "replay", "POST", "/orders", body, key, rng,
                                   buyer=body["user_id"])
        elif roll < 0.65:
            body = {"product_id": product["id"], "user_id": user,
                    "quantity": 2 if rng.random() < 0.2 else 1}
            key = str(uuid.UUID(int=rng.getrandbits(128)))
            final = await sale.until_final(who, "order", "POST", "/orders", body, key, rng,
                                           buyer=user)
            if final:
                answered.append((key, body))
        else:
            body = {"product_id": product["id"], "user_id": user, "pay": False}
            key = str(uuid.UUID(int=rng.getrandbits(128)))
            final = await sale.until_final(who, "reserve", "POST", "/orders", body, key, rng,
                                           buyer=user)
            if final:
                answered.append((key, body))
            if final and final.get("status") == 201 and rng.random() < 0.6:
                order = json.loads(final["body"])
                await asyncio.sleep(rng.uniform(0.1, 2.5))
                # Only the order's buyer (or the admin) may pay it.
                await sale.until_final(who, "pay", "POST", f"/orders/{order['id']}/pay",
                                       None, None, rng, buyer=user)
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
        user = f"{KEYLESS}{n}-{seq}"
        # Its sign-in may be retried (it buys nothing); its order never is.
        auth = await sale.credentials(who, user, rng)
        if auth is None:
            break
        body = {"product_id": product["id"], "user_id": user, "quantity": 1}
        await sale.send(who, "keyless", "POST", "/orders", body, rng=rng, auth=auth)
        await asyncio.sleep(rng.uniform(0.1, 0.6))


def lapse_user(i: int) -> str:
    """The user id of the mass lapse's reservation `i`."""
    return f"lapse-{i}"


async def reserve_at_once(sale: Sale, product_id: int, n: int, seed: int,
                          in_flight: int) -> list[dict | None]:
    """`n` reservations (`"pay": false`) of one product by `n` users, all at once: as fast
    as the service takes them, `in_flight` requests at a time, each under a key, retried as
    a crowd's client does (backing off: a crowd retrying every 0.2 s would be a flood of its
    own). Their final answers (None: none by the hard end). Their users are best signed in
    ahead (`Sale.sign_in_all`): a user without a token signs in on its first try."""
    rng = random.Random(f"lapse-{seed}")
    keys = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n)]
    gate = asyncio.Semaphore(in_flight)

    async def one(i):
        body = {"product_id": product_id, "user_id": lapse_user(i), "pay": False}
        return await sale.until_final("lapse", "lapse", "POST", "/orders", body, keys[i],
                                      random.Random(f"{seed}-{i}"), backoff_s=1.0, gate=gate,
                                      buyer=lapse_user(i))

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
