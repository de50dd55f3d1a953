"""Which instance a product's orders go to when they go where its lock is kept: the consistent
hash nginx applies to `POST /api/products/{id}/orders` (deploy/nginx.conf's upstream
`seckill_by_product`, `hash $seckill_product consistent`), so that the bench routes as a
deployment does. loadtest/k6/route.js is the same for k6 (tests/tooling/test_route.py holds the
two to each other, and this one to a real nginx where one is installed).

A port of nginx's ngx_http_upstream_hash_module.c (`ngx_http_upstream_init_chash`,
`ngx_http_upstream_find_chash_point`, `ngx_http_upstream_get_chash_peer`), the ketama
continuum of Cache::Memcached::Fast:

- each server, as named in the upstream block (`127.0.0.1:8091`), is split at its last `:`
  when only digits follow (host, port); its base is CRC-32 of HOST, a NUL byte, PORT;
- it gets 160 points per unit of weight (every server here weighs 1): point j is CRC-32 of the
  base followed by point j-1's hash as 4 bytes, little-endian (0 for the first);
- the points are sorted by hash, one kept of any that are equal;
- a key (the product id, as the path writes it) goes to the first point whose hash is ≥ its
  CRC-32, past the last back to the first; that point's server takes it.

Only a healthy upstream is modelled: nginx moves to the next point when the server is down or
has failed (max_fails), which the bench's instances never are.
"""

import bisect
import struct
import zlib
from collections.abc import Iterable

POINTS_PER_WEIGHT = 160


def server_name(url: str) -> str:
    """The name nginx hashes for an instance: its address as the upstream block writes it
    (`http://127.0.0.1:8091/` → `127.0.0.1:8091`)."""
    return url.split("://", 1)[-1].rstrip("/")


def _base(server: str) -> bytes:
    """HOST \\0 PORT, the port being what follows the last `:` if it is all digits."""
    raw = server.encode()
    if raw[:5].lower() == b"unix:":
        return raw[5:] + b"\0"
    host, colon, port = raw.rpartition(b":")
    if colon and (not port or port.isdigit()):
        return host + b"\0" + port
    return raw + b"\0"


class Ring:
    """The continuum of `urls` (every instance of weight 1, in the upstream's order)."""

    def __init__(self, urls: Iterable[str]):
        self.urls = list(urls)
        if not self.urls:
            raise ValueError("a ring needs at least one instance")
        points: list[tuple[int, int]] = []
        for i, url in enumerate(self.urls):
            base, prev = _base(server_name(url)), 0
            for _ in range(POINTS_PER_WEIGHT):
                prev = zlib.crc32(base + struct.pack("<I", prev))
                points.append((prev, i))
        # Sorted by hash alone (a stable sort: equal hashes keep the upstream's order), then
        # one point kept per hash, as nginx's qsort and its pass over the sorted points do.
        points.sort(key=lambda p: p[0])
        kept = [p for n, p in enumerate(points) if n == 0 or p[0] != points[n - 1][0]]
        self.hashes = [h for h, _ in kept]
        self.owners = [i for _, i in kept]

    def url(self, key: int | str) -> str:
        """The instance (its URL, as given) that `key`'s requests go to."""
        at = bisect.bisect_left(self.hashes, zlib.crc32(str(key).encode()))
        return self.urls[self.owners[at % len(self.hashes)]]


def routes(urls: Iterable[str], products: Iterable[int]) -> dict[int, str]:
    """{product: the URL of the instance its orders go to}."""
    ring = Ring(urls)
    return {p: ring.url(p) for p in products}


def by_instance(urls: Iterable[str], products: Iterable[int]) -> dict[str, list[int]]:
    """{url: the products whose orders go to it, in the order given}, every instance a key
    (an empty list for one that got none)."""
    ring = Ring(urls)
    out: dict[str, list[int]] = {url: [] for url in ring.urls}
    for p in products:
        out[ring.url(p)].append(p)
    return out
