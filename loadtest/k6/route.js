// Which instance a product's orders go to when they go where its lock is kept: the consistent
// hash nginx applies to POST /api/products/{id}/orders (deploy/nginx.conf, upstream
// seckill_by_product: `hash $seckill_product consistent`). The same as loadtest/lib/common/route.py
// (its docstring tells the algorithm, nginx's ketama continuum; tests/tooling/test_route.py
// holds the two to each other): 160 points per instance, each CRC-32 of HOST \0 PORT and the
// previous point's hash (4 bytes, little-endian); a product goes to the first point at or past
// the CRC-32 of its id.
//
//   import { ring, productUrl } from './route.js';
//   const route = ring(['http://127.0.0.1:8091', 'http://127.0.0.1:8092']);
//   route(7)  // the URL product 7's orders go to
//   productUrl(base, 7)  // `${base}/api/products/7/orders`

const TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n += 1) {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

// CRC-32 (IEEE, as zlib's and nginx's ngx_crc32) of a list of bytes.
function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// A string's bytes (addresses and ids are ASCII).
const ascii = (s) => Array.from(s, (ch) => ch.charCodeAt(0) & 0xff);

// The name nginx hashes: the address as the upstream block writes it (no scheme, no slash).
export const serverName = (url) => url.replace(/^[a-z]+:\/\//i, '').replace(/\/+$/, '');

// HOST \0 PORT: the port is what follows the last `:` when only digits follow.
function base(server) {
  if (server.slice(0, 5).toLowerCase() === 'unix:') return [...ascii(server.slice(5)), 0];
  const m = /^(.*):([0-9]*)$/.exec(server);
  return m ? [...ascii(m[1]), 0, ...ascii(m[2])] : [...ascii(server), 0];
}

// A function from a product (its id) to the URL, among `urls`, its orders go to.
export function ring(urls) {
  if (!urls.length) throw new Error('a ring needs at least one instance');
  const points = [];
  urls.forEach((url, i) => {
    const b = base(serverName(url));
    let prev = 0;
    for (let j = 0; j < 160; j += 1) {
      prev = crc32([...b, prev & 0xff, (prev >>> 8) & 0xff, (prev >>> 16) & 0xff, prev >>> 24]);
      points.push([prev, i]);
    }
  });
  // Array.prototype.sort is stable: equal hashes keep the upstream's order, one kept.
  points.sort((a, b) => a[0] - b[0]);
  const kept = points.filter((p, n) => n === 0 || p[0] !== points[n - 1][0]);
  return (product) => {
    const h = crc32(ascii(String(product)));
    let lo = 0;
    let hi = kept.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (kept[mid][0] < h) lo = mid + 1;
      else hi = mid;
    }
    return urls[kept[lo % kept.length][1]];
  };
}

// The route of a product's orders on the instance at `base`.
export const productUrl = (base, product) => `${base}/api/products/${product}/orders`;

// ROUTES (JSON {"product": "url"}, what loadtest/lib/fleet.py computed) if given, else the ring of
// `urls`: a function from a product to its instance's URL.
export function routesFrom(env, urls) {
  if (!env) return ring(urls);
  const given = JSON.parse(env);
  const fallback = ring(urls);
  return (product) => (given[String(product)] || fallback(product)).replace(/\/$/, '');
}
