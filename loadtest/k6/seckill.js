// A flash sale under k6: a fresh product per run, many buyers at once, and an audit at the
// end that fails the run on any oversell. The buyers sign in (loadtest/k6/buyers.js): setup()
// gets their tokens before the sale, and each order carries its buyer's.
//
//   BASE_URLS=http://127.0.0.1:8081,http://127.0.0.1:8082 ADMIN_TOKEN=… k6 run loadtest/k6/seckill.js
//
// Environment:
//   BASE_URLS     comma-separated instances
//   ROUTE         product (default): every order to the instance nginx's consistent hash picks
//                 for the product (deploy/nginx.conf; loadtest/k6/route.js, the same hash),
//                 POST /api/products/{id}/orders, the body without product_id: where the
//                 product's lock is kept. ROUTES='{"7":"http://…"}' names the instance instead
//                 (for a product known up front). spread: round-robin over every instance,
//                 POST /orders with product_id in the body, as before routing
//   ADMIN_TOKEN   the servers' admin token (setup() creates the product)
//   TOKENS_FILE   the buyers' tokens, one JWT a line (a real issuer's: --buyer-auth jwks);
//                 without it setup() signs the buyers in at the servers' demo issuer
//                 (--buyer-auth demo): one per VU for the burst, for the rate scenario a pool
//                 of at most BUYERS (2000) taking the orders round-robin; a server in open mode
//                 gets none, the body's user_id names a new buyer per order as before
//   SCENARIO      burst (default): VUS buyers, one order each, all at once — the seckill shape
//                 rate: RATE orders/s for DURATION — throughput and latency figures
//   STOCK (100), GUARD (zk), PRICE_CENTS (4999), VUS (500), RATE (200), DURATION (10s)
//   EXPECT_OVERSELL=1  the run is a demonstration of the `none` guard: do not fail on oversell
//                 or lost updates (loadtest/run checks that one of them happened)
//   RESULTS       where handleSummary writes the full JSON summary (default: none)
//   P99_MS        the bound on the orders' p99, in ms (5000; tagged `name: POST /orders`
//                 whichever route carried them)
import http from 'k6/http';
import exec from 'k6/execution';
import { check, fail } from 'k6';
import { Counter, Trend } from 'k6/metrics';
import { answer } from './answers.js';
import { fileTokens, orderHeaders, perBuyer, signIn, withoutTokens } from './buyers.js';
import { productUrl, routesFrom } from './route.js';

const BASE_URLS = (__ENV.BASE_URLS || 'http://127.0.0.1:8080').split(',').map((u) => u.trim().replace(/\/$/, ''));
const SCENARIO = __ENV.SCENARIO || 'burst';
const STOCK = parseInt(__ENV.STOCK || '100', 10);
const GUARD = __ENV.GUARD || 'zk';
const VUS = parseInt(__ENV.VUS || '500', 10);
const RATE = parseInt(__ENV.RATE || '200', 10);
const DURATION = __ENV.DURATION || '10s';
const EXPECT_OVERSELL = __ENV.EXPECT_OVERSELL === '1';
// An order waits at most the lock timeout (3 s) before it is served or refused 503: 5 s leaves
// a debug build on a busy 2-core machine room for its cycle; slower is a stall, not load.
const P99_MS = parseInt(__ENV.P99_MS || '5000', 10);
const BUYERS = parseInt(__ENV.BUYERS || '2000', 10);
// A real issuer's tokens, read once (init context) and shared by every VU.
const FILE_TOKENS = fileTokens(__ENV.TOKENS_FILE);
// The orders the run sends: one per VU (burst), RATE a second for DURATION (rate; DURATION in
// seconds, as loadtest/run gives it).
const ORDERS = SCENARIO === 'burst' ? VUS : RATE * parseInt(DURATION, 10);
const ROUTE = __ENV.ROUTE || 'product';
if (ROUTE !== 'product' && ROUTE !== 'spread') throw new Error(`ROUTE must be product or spread, not ${ROUTE}`);
// The product's instance (ROUTE=product): the product is made in setup(), so the hash (or
// ROUTES) is asked per order, not once here.
const INSTANCE_OF = ROUTE === 'product' ? routesFrom(__ENV.ROUTES, BASE_URLS) : null;

// The answers a sale gives by design: 201 paid, 409 sold out, 429 and 503 refusals, and
// setup's 201s (the product, the sign-ins) and 200s and teardown's 200. Anything else counts
// in http_req_failed.
http.setResponseCallback(http.expectedStatuses(200, 201, 409, 429, 503));

const ordersPaid = new Counter('orders_paid');
const ordersSoldOut = new Counter('orders_sold_out');
const ordersRetry = new Counter('orders_retry');
const ordersUnexpected = new Counter('orders_unexpected');
const lockWait = new Trend('lock_wait_ms');

const scenarios = {
  burst: { executor: 'per-vu-iterations', vus: VUS, iterations: 1, maxDuration: '2m' },
  rate: {
    executor: 'constant-arrival-rate',
    rate: RATE,
    timeUnit: '1s',
    duration: DURATION,
    preAllocatedVUs: Math.max(RATE, 10),
    maxVUs: Math.max(RATE * 4, 50),
  },
};
if (!scenarios[SCENARIO]) throw new Error(`SCENARIO must be burst or rate, not ${SCENARIO}`);

export const options = {
  scenarios: { [SCENARIO]: scenarios[SCENARIO] },
  summaryTrendStats: ['avg', 'min', 'med', 'p(95)', 'p(99)', 'max'],
  // Signing a few thousand buyers in comes first.
  setupTimeout: '180s',
  thresholds: {
    // Every answer is one of the expected outcomes, well formed.
    checks: ['rate==1'],
    // Neither paid, sold out nor told to retry: 5xx other than 503, 4xx other than 409/429,
    // an answer that is not JSON, connection errors.
    orders_unexpected: ['count==0'],
    // The same for every request, setup's (the sign-ins too) and teardown's.
    http_req_failed: ['rate==0'],
    'http_req_duration{name:POST /orders}': [`p(99)<${P99_MS}`],
  },
};

export function setup() {
  const run = `${Date.now().toString(36)}`;
  // The buyers first: the product's per-buyer limit follows from how many there are.
  const names = Array.from({ length: Math.min(ORDERS, BUYERS) }, (_, i) => `k6-${run}-${i}`);
  const { mode, tokens } = signIn(BASE_URLS[0], names, FILE_TOKENS);
  const pool = FILE_TOKENS ? FILE_TOKENS.length : tokens ? tokens.length : 0;
  const product = { name: `k6 ${SCENARIO} ${new Date().toISOString()}`, price_cents: parseInt(__ENV.PRICE_CENTS || '4999', 10), stock: STOCK, guard: GUARD };
  // A pool smaller than the orders buys round-robin: each buyer may hold that many units (the
  // rate scenario one more: its arrivals are RATE × DURATION give or take one).
  if (pool) product.per_user_limit = perBuyer(ORDERS, pool) + (SCENARIO === 'rate' ? 1 : 0);
  const res = http.post(`${BASE_URLS[0]}/api/products`, JSON.stringify(product), {
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${__ENV.ADMIN_TOKEN || ''}` },
  });
  if (res.status !== 201) fail(`creating the product failed: ${res.status} ${res.body}`);
  return { product: res.json('id'), run, base_urls: BASE_URLS, guard: GUARD, stock: STOCK, buyer_auth: mode, tokens };
}

export default function (data) {
  // The product's own route on its instance (the path names the product), or round-robin.
  const url = INSTANCE_OF
    ? productUrl(INSTANCE_OF(data.product), data.product)
    : `${BASE_URLS[(__VU + __ITER) % BASE_URLS.length]}/orders`;
  // The buyer: the next token of the pool (the burst: one per VU), or, with none, one distinct
  // buyer per iteration named in the body.
  const tokens = FILE_TOKENS || data.tokens;
  const token = tokens ? tokens[exec.scenario.iterationInTest % tokens.length] : null;
  const order = INSTANCE_OF ? { quantity: 1 } : { product_id: data.product, quantity: 1 };
  if (!token) order.user_id = `k6-${data.run}-${__VU}-${__ITER}`;
  const res = http.post(url, JSON.stringify(order), {
    headers: orderHeaders(token),
    tags: { name: 'POST /orders' },
    responseType: 'text',
  });
  // Each buyer sends one order: a refusal the answer says to retry is counted, not sent again.
  const { body, retryable: retry, retryAfterAgrees } = answer(res);
  check(res, {
    'status is 201, 409, 429 or 503': (r) => [201, 409, 429, 503].includes(r.status),
    // A 409 is sold out, or a conflict the answer says to retry (too_many_unpaid,
    // idempotency_in_progress, payment_in_progress).
    'body is well formed': () =>
      body !== null &&
      (res.status === 201
        ? body.status === 'paid' && typeof body.id === 'string' && body.product_id === data.product
        : typeof body.error === 'string' &&
          typeof body.message === 'string' &&
          typeof body.retryable === 'boolean' &&
          (res.status !== 409 || body.error === 'sold_out' || body.retryable === true)),
    'retryable answers carry Retry-After, others none': () => retryAfterAgrees,
  });
  if (res.status === 201) {
    ordersPaid.add(1);
    if (body && body.lock_wait_ms !== null && body.lock_wait_ms !== undefined) lockWait.add(body.lock_wait_ms);
  } else if (retry) {
    ordersRetry.add(1);
  } else if (res.status === 409) {
    ordersSoldOut.add(1);
  } else {
    ordersUnexpected.add(1);
  }
}

export function teardown(data) {
  const res = http.get(`${BASE_URLS[0]}/api/products/${data.product}/audit`);
  if (res.status !== 200) fail(`audit failed: ${res.status} ${res.body}`);
  const audit = res.json();
  console.log(`AUDIT ${JSON.stringify({ product: data.product, ...audit })}`);
  if (!EXPECT_OVERSELL && (audit.oversold > 0 || !audit.consistent)) {
    fail(`OVERSOLD: ${audit.sold} sold of ${audit.stocked_total} (oversold ${audit.oversold}, consistent ${audit.consistent})`);
  }
}

function fmt(metric, stat) {
  const v = metric && metric.values[stat];
  return v === undefined ? '-' : v.toFixed(1);
}

export function handleSummary(data) {
  const m = data.metrics;
  const count = (name) => (m[name] ? m[name].values.count : 0);
  const lat = m['http_req_duration{name:POST /orders}'];
  const seconds = data.state.testRunDurationMs / 1000;
  // The orders alone: setup's sign-ins and product, teardown's audit are requests too.
  const orders = ['orders_paid', 'orders_sold_out', 'orders_retry', 'orders_unexpected'].reduce((n, name) => n + count(name), 0);
  data.setup_data = withoutTokens(data.setup_data);
  const lines = [
    `k6 ${SCENARIO}: guard ${GUARD}, stock ${STOCK}, ${BASE_URLS.length} instance(s), orders ${INSTANCE_OF ? 'routed by product (POST /api/products/{id}/orders)' : 'spread (POST /orders)'}, buyers: ${(data.setup_data || {}).buyer_auth || '-'}`,
    `  paid ${count('orders_paid')}  sold out ${count('orders_sold_out')}  retry ${count('orders_retry')}  unexpected ${count('orders_unexpected')}`,
    `  orders: ${orders} requests in ${seconds.toFixed(1)} s; p50 ${fmt(lat, 'med')} ms  p95 ${fmt(lat, 'p(95)')} ms  p99 ${fmt(lat, 'p(99)')} ms`,
    `  lock wait (paid orders): p50 ${fmt(m.lock_wait_ms, 'med')} ms  p99 ${fmt(m.lock_wait_ms, 'p(99)')} ms`,
    '',
  ];
  // loadtest/run prints its own summary with the audit; standalone runs get this one.
  if (__ENV.RESULTS) return { [__ENV.RESULTS]: JSON.stringify(data, null, 2) };
  return { stdout: lines.join('\n') };
}
