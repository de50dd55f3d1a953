// The rush (issue 48): a sale that opens at its second, and the crowd that came for it. Run
// by loadtest/lib/rush.py, which creates the product (opens_at = now + a lead), signs the buyers
// in and reads what this script records.
//
//   BASE_URLS=… PRODUCT=7 OPENS_AT=2026-…Z TOKENS_FILE=… RECORDS=… k6 run --log-format raw \
//     --console-output RECORDS loadtest/k6/rush.js
//
// Every VU drives many buyers at once (VUS of them, BUYERS + LATE buyers in all, buyer g on VU
// g % VUS), each an async task with its own state and timers, at most INFLIGHT requests of a
// VU in flight: 30,000 VUs would cost a 2-core machine's client more CPU than the sale. A VU
// talks to one instance (VU v to BASE_URLS[v % n]).
//
// LINE=1 (default): each buyer joins the line (POST /api/products/{id}/line) at a random moment
//   of the JOIN_WINDOW s before the opening (the LATE ones in the LATE_WINDOW s after it), then
//   looks (GET …/line/me) when its next_look_ms says, never sooner; once `admitted` it sends
//   POST /orders with the pass, once: a refusal whose answer says to retry (429, 503) is sent
//   again with the same pass and Idempotency-Key after its Retry-After, ORDER_TRIES in all.
// LINE=0 (the product has no line): each buyer sends POST /orders at a random moment of the
//   CROWD_WINDOW s from the opening; 409 not_open is sent again at the opening, an answer that
//   says to retry after its Retry-After, CROWD_TRIES in all; same Idempotency-Key.
// ROUTE=product: every order (not the line's requests) to the instance nginx's consistent hash
//   picks for PRODUCT, POST /api/products/{id}/orders without product_id in the body (ROUTES, or
//   the hash over BASE_URLS: loadtest/k6/route.js). Default (spread): to the VU's instance,
//   POST /orders, as the rush is held to the uniform one-hot row (loadtest/lib/rush.py).
// SCENARIO=fill: FILL buyers join the line and nothing more (the memory step): `fill-PREFIX-i`
//   named in the body (a server in open mode), or TOKENS_FILE's tokens.
//
// Every loop is bounded: tries and looks by count, every buyer by the opening + SALE_S.
// Each VU prints its buyers' records, `RUSH [{…}, …]`, one line (k6's console, raw): g buyer,
// late, s its moment, j its first request sent (its turn among the VU's came), jd the join's ms,
// ja joined_at as the server says, js join status, p place, a admitted (first seen), nl the
// longest next_look_ms while in_line, st last line state, os order's first send, oa its final answer, o final status, oe error code, ot
// tries, od ms spent in requests, pk the pass's digest, lk looks, rq requests, err. Times are
// ms on the server's clock (offset from the product's server_time).
import http from 'k6/http';
import exec from 'k6/execution';
import { setTimeout } from 'k6/timers';
import { Counter } from 'k6/metrics';
import { answer } from './answers.js';
import { fileTokens, orderHeaders } from './buyers.js';
import { productUrl, routesFrom } from './route.js';

const env = (name, fallback) => (__ENV[name] === undefined || __ENV[name] === '' ? fallback : __ENV[name]);
const int = (name, fallback) => parseInt(env(name, String(fallback)), 10);
const ms = (name, fallback) => parseFloat(env(name, String(fallback))) * 1000;
const URLS = env('BASE_URLS', 'http://127.0.0.1:8080').split(',').map((u) => u.trim().replace(/\/$/, ''));
const SCENARIO = env('SCENARIO', 'rush');
const PRODUCT = int('PRODUCT', 0);
const LINE = env('LINE', '1') !== '0';
const BUYERS = int('BUYERS', 30000);
const LATE = int('LATE', 0);
const TOTAL = BUYERS + LATE;
const JOIN_WINDOW = ms('JOIN_WINDOW', 10);
const LATE_WINDOW = ms('LATE_WINDOW', 2);
const CROWD_WINDOW = ms('CROWD_WINDOW', 1);
const SALE = ms('SALE_S', 120);
const VUS = Math.max(1, Math.min(int('VUS', 300), TOTAL));
// Requests in flight per VU at most: a VU's connections. The crowd without a line sends every
// order at the opening second: 3× as many, so that the client queues as little of it as it can.
const INFLIGHT = int('INFLIGHT', 16) * (LINE ? 1 : int('CROWD_INFLIGHT_TIMES', 3));
const ORDER_TRIES = int('ORDER_TRIES', 5);
const CROWD_TRIES = int('CROWD_TRIES', 20);
const JOIN_TRIES = 5;
const MAX_LOOKS = int('MAX_LOOKS', 1000);
const FILL = int('FILL', 100000);
const RUN = env('RUN', Date.now().toString(36));
const PREFIX = env('BUYER_PREFIX', `r-${RUN}-`);
const TOKENS = fileTokens(__ENV.TOKENS_FILE);
const OPENS_AT = Date.parse(env('OPENS_AT', new Date().toISOString()));
const ROUTE = env('ROUTE', 'spread');
if (ROUTE !== 'product' && ROUTE !== 'spread') throw new Error(`ROUTE must be product or spread, not ${ROUTE}`);
// Where every order goes with ROUTE=product (the product's own route on its instance).
const ORDER_URL = ROUTE === 'product' ? productUrl(routesFrom(__ENV.ROUTES, URLS)(PRODUCT), PRODUCT) : null;
// The run lasts to the opening, the sale's bound and a margin.
const MAX_S = Math.ceil(Math.max(OPENS_AT - Date.now(), 0) / 1000 + SALE / 1000 + 30);

// 403 and 404 are no answer a buyer of this run should get: they count as failed.
http.setResponseCallback(http.expectedStatuses(200, 201, 409, 429, 503));

const joins = new Counter('rush_joins');
const looks = new Counter('rush_looks');
const orders = new Counter('rush_orders');
const fillFailed = new Counter('fill_failed');

const scenarios = {
  rush: { executor: 'per-vu-iterations', vus: VUS, iterations: 1, maxDuration: `${MAX_S}s`, gracefulStop: '10s' },
  fill: { executor: 'shared-iterations', vus: int('FILL_VUS', 100), iterations: FILL, maxDuration: '600s', exec: 'fill' },
};
if (!scenarios[SCENARIO]) throw new Error(`SCENARIO must be rush or fill, not ${SCENARIO}`);

export const options = {
  scenarios: { [SCENARIO]: scenarios[SCENARIO] },
  // A VU's connections kept open between its requests (k6's idle pool is batchPerHost).
  batch: INFLIGHT,
  batchPerHost: INFLIGHT,
  setupTimeout: '60s',
  summaryTrendStats: ['avg', 'min', 'med', 'p(95)', 'p(99)', 'max'],
  thresholds: {
    // Named so that the summary keeps each route's figures; none hangs to its timeout (30 s).
    'http_req_duration{name:POST /orders}': ['p(99)<30000'],
    'http_req_duration{name:GET line/me}': ['p(99)<30000'],
    'http_req_duration{name:POST line}': ['p(99)<30000'],
    // Sold out (409) is an answer, not a failure; a crowd told to come back (429, 503) is
    // counted, and bounded: the verdict, not k6's exit, judges the sale.
    http_req_failed: ['rate<0.5'],
  },
};

// The product as the server has it, and the offset of the server's clock to ours.
export function setup() {
  if (SCENARIO === 'fill') return {};
  const sent = Date.now();
  const res = http.get(`${URLS[0]}/api/products/${PRODUCT}`, { tags: { name: 'GET product' } });
  const back = Date.now();
  if (res.status !== 200) throw new Error(`GET product ${PRODUCT}: ${res.status} ${res.body}`);
  const p = res.json();
  if (Boolean(p.line) !== LINE) throw new Error(`product ${PRODUCT} has line=${p.line}, LINE=${LINE ? 1 : 0}`);
  if (!p.opens_at) throw new Error(`product ${PRODUCT} has no opens_at`);
  return { opens: Date.parse(p.opens_at), offset: Date.parse(p.server_time) - (sent + back) / 2 };
}

const pause = (wait) => new Promise((resolve) => setTimeout(resolve, Math.max(0, wait)));

// At most `n` requests at once; the others wait their turn.
function slots(n) {
  let free = n;
  const queue = [];
  return async (fn) => {
    if (free > 0) free -= 1;
    else await new Promise((resolve) => queue.push(resolve));
    try {
      return await fn();
    } finally {
      const next = queue.shift();
      if (next) next();
      else free += 1;
    }
  };
}

// A pass's digest (two 32-bit FNV-1a hashes, 16 hex digits): distinct passes, told apart
// without keeping them.
function digest(text) {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x5bd1e995) >>> 0;
  }
  return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
}

// Retry-After in ms (whole seconds on the wire), or `fallback`.
function retryAfter(res, fallback) {
  const s = parseFloat(res.headers['Retry-After']);
  return Number.isFinite(s) ? s * 1000 : fallback;
}

function buyerOf(g, base) {
  const token = TOKENS ? TOKENS[g % TOKENS.length] : null;
  return { g, base, token, name: token ? null : `${PREFIX}${g}`, late: g >= BUYERS };
}

export default async function (data) {
  const v = exec.vu.idInTest - 1;
  const base = URLS[v % URLS.length];
  const now = () => Date.now() + data.offset;
  const deadline = data.opens + SALE;
  const run = slots(INFLIGHT);

  // One request, counted on the buyer's record; its answer read.
  // `sent`: when it left (its turn among the VU's requests in flight came), on the server's clock.
  async function call(r, method, url, body, name, counter, key) {
    const headers = orderHeaders(r.b.token);
    if (key) headers['Idempotency-Key'] = key;
    let sent = 0;
    const res = await run(() => {
      sent = now();
      return http.asyncRequest(method, url, body === null ? null : JSON.stringify(body),
        { headers, tags: { name }, responseType: 'text', timeout: '30s' });
    });
    r.rq += 1;
    counter.add(1);
    return { res, sent, took: now() - sent, ...answer(res) };
  }

  async function lineBuyer(b) {
    const r = { g: b.g, late: b.late, b, rq: 0, lk: 0 };
    r.s = b.late ? data.opens + Math.random() * LATE_WINDOW : data.opens - JOIN_WINDOW + Math.random() * JOIN_WINDOW;
    await pause(r.s - now());
    const who = b.name ? { user_id: b.name } : {};
    const line = `${b.base}/api/products/${PRODUCT}/line`;
    let a;
    for (let t = 1; ; t++) {
      a = await call(r, 'POST', line, who, 'POST line', joins);
      if (t === 1) Object.assign(r, { j: a.sent, jd: a.took });
      if (!a.retryable || t >= JOIN_TRIES || now() > deadline) break;
      await pause(retryAfter(a.res, 1000));
    }
    r.js = a.res.status;
    if (a.res.status !== 200 && a.res.status !== 201) return fail(r, a);
    let place = a.body;
    r.ja = Date.parse(place.joined_at);
    const me = `${line}/me${b.name ? `?user_id=${encodeURIComponent(b.name)}` : ''}`;
    for (;;) {
      if (place.place !== null && place.place !== undefined && r.p === undefined) r.p = place.place;
      r.st = place.state;
      if (place.state === 'admitted' && place.pass) break;
      if (place.state === 'sold_out' || place.state === 'closed' || place.state === 'bought') return r;
      if (r.lk >= MAX_LOOKS || now() > deadline) return Object.assign(r, { err: 'gave_up' });
      if (place.state === 'in_line') r.nl = Math.max(r.nl || 0, place.next_look_ms);
      // When the server says to look again, never sooner.
      const wait = Number.isFinite(place.next_look_ms) ? place.next_look_ms : retryAfter(a.res, 1000);
      await pause(wait);
      r.lk += 1;
      a = await call(r, 'GET', me, null, 'GET line/me', looks);
      if (a.res.status === 200 && a.body) place = a.body;
      else if (a.retryable) place = { ...place, next_look_ms: retryAfter(a.res, 1000) };
      else return fail(r, a);
    }
    r.a = now();
    r.pk = digest(String(place.pass));
    return order(r, { ...who, product_id: PRODUCT, quantity: 1, pass: place.pass }, ORDER_TRIES);
  }

  async function crowdBuyer(b) {
    const r = { g: b.g, late: b.late, b, rq: 0, lk: 0 };
    r.s = data.opens + Math.random() * CROWD_WINDOW;
    await pause(r.s - now());
    const body = { product_id: PRODUCT, quantity: 1 };
    if (b.name) body.user_id = b.name;
    return order(r, body, CROWD_TRIES);
  }

  // The order, sent again while its answer says to (the same key: one order at most).
  async function order(r, body, tries) {
    const key = `rush-${RUN}-${LINE ? 'l' : 'c'}-${r.g}`;
    r.os = now();
    r.od = 0;
    let a;
    // On the product's own route the path names the product, the body not.
    const url = ORDER_URL || `${r.b.base}/orders`;
    if (ORDER_URL) delete body.product_id;
    for (let t = 1; ; t++) {
      a = await call(r, 'POST', url, body, 'POST /orders', orders, key);
      if (r.j === undefined) r.j = a.sent;
      r.ot = t;
      r.od += a.took;
      if (a.res.status === 201 || !a.retryable || t >= tries || now() > deadline) break;
      const code = a.body && a.body.error;
      // Not open yet: again at the opening (its Retry-After, in whole seconds, may overshoot).
      const wait = code === 'not_open' ? data.opens - now() + Math.random() * 100 : retryAfter(a.res, 500) + Math.random() * 100;
      await pause(Math.min(wait, deadline - now()));
    }
    r.oa = now();
    r.o = a.res.status;
    if (a.res.status !== 201) r.oe = (a.body && a.body.error) || `status ${a.res.status} ${a.res.error || ''}`.trim();
    return r;
  }

  function fail(r, a) {
    r.err = `${a.res.status} ${(a.body && a.body.error) || a.res.error || ''}`.trim();
    return r;
  }

  const mine = [];
  for (let g = v; g < TOTAL; g += VUS) mine.push(buyerOf(g, base));
  const records = await Promise.all(mine.map((b) => (LINE ? lineBuyer(b) : crowdBuyer(b)).catch((e) => ({ g: b.g, late: b.late, err: String(e) }))));
  for (const r of records) delete r.b;
  console.log(`RUSH ${JSON.stringify(records)}`);
}

// The memory step: FILL buyers join, one request each (retried while the answer says to).
export function fill() {
  const i = exec.scenario.iterationInTest;
  const base = URLS[i % URLS.length];
  const token = TOKENS ? TOKENS[i % TOKENS.length] : null;
  const body = JSON.stringify(token ? {} : { user_id: `fill-${PREFIX}${i}` });
  for (let t = 1; t <= JOIN_TRIES; t++) {
    const res = http.post(`${base}/api/products/${PRODUCT}/line`, body, { headers: orderHeaders(token), tags: { name: 'POST line' }, responseType: 'text' });
    joins.add(1);
    if (res.status === 200 || res.status === 201) return;
    if (!answer(res).retryable) break;
  }
  fillFailed.add(1);
}

export function handleSummary(data) {
  if (__ENV.RESULTS) return { [__ENV.RESULTS]: JSON.stringify(data, null, 1) };
  return { stdout: `rush: ${JSON.stringify(data.metrics.http_reqs ? data.metrics.http_reqs.values : {})}\n` };
}
