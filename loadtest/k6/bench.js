// One step of loadtest/bench: an open-model load (orders arrive at RATE per second whatever
// the answers) for DURATION, round-robin over the hot products. The products are made by
// loadtest/bench, with stock to spare and a per-buyer limit to match.
//
//   BASE_URLS=http://127.0.0.1:8091,… PRODUCTS=3,4 RATE=800 DURATION=5s k6 run loadtest/k6/bench.js
//
// Where the orders go (ROUTE):
//   product (default) as nginx routes them (deploy/nginx.conf): each product's orders to one
//                 instance, POST /api/products/{id}/orders, the body without product_id.
//                 ROUTES='{"3":"http://127.0.0.1:8092",…}' names each product's instance (the
//                 bench computes it: loadtest/lib/common/route.py); a product it does not name goes
//                 where the same consistent hash over BASE_URLS sends it (loadtest/k6/route.js)
//   spread        round-robin over every instance, POST /orders with product_id in the body
//
// Who buys (loadtest/k6/buyers.js), round-robin over a pool:
//   TOKENS_FILE   the buyers' tokens, one JWT a line (the bench signs its pool in before its
//                 steps: loadtest/lib/fleet.py), each order with the next one's, its body no user_id
//   otherwise     setup() asks the servers: in demo mode it signs min(RATE × DURATION, BUYERS)
//                 buyers in itself (those sign-ins are setup's, not the step's orders); in open
//                 mode the body names the buyer: BUYER_PREFIX0 … BUYER_PREFIX(BUYERS-1) with
//                 BUYERS given, else a new buyer per order
//   BUYERS (2000 for the sign-ins), BUYER_PREFIX (bench-RUN-)
//
// Its JSON summary (RESULTS) carries the counts loadtest/bench reads: orders_paid, the
// refusals the service said to retry (orders_retry), the rest, and the orders' latency (tagged
// `name: POST /orders` whichever route carried them: the name the bench's readers know).
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { answer } from './answers.js';
import { fileTokens, orderHeaders, signIn, withoutTokens } from './buyers.js';
import { productUrl, routesFrom } from './route.js';

const BASE_URLS = (__ENV.BASE_URLS || 'http://127.0.0.1:8080').split(',').map((u) => u.trim().replace(/\/$/, ''));
const PRODUCTS = (__ENV.PRODUCTS || '1').split(',').map((p) => parseInt(p, 10));
const RATE = parseInt(__ENV.RATE || '100', 10);
const DURATION = __ENV.DURATION || '5s';
const RUN = __ENV.RUN || `${Date.now()}`;
// How many buyers: the sign-in's pool (at most this many), or the body's names in open mode.
const BUYERS = parseInt(__ENV.BUYERS || '0', 10);
const PREFIX = __ENV.BUYER_PREFIX || `bench-${RUN}-`;
// The buyers' tokens from a file, read once (init context) and shared by every VU.
const FILE_TOKENS = fileTokens(__ENV.TOKENS_FILE);
const ROUTE = __ENV.ROUTE || 'product';
if (ROUTE !== 'product' && ROUTE !== 'spread') throw new Error(`ROUTE must be product or spread, not ${ROUTE}`);
// A product's instance (ROUTE=product), or none: round-robin.
const INSTANCE_OF = ROUTE === 'product' ? routesFrom(__ENV.ROUTES, BASE_URLS) : null;

// 201 paid; 429 and 503 are the refusals an overloaded step is meant to show. Anything else
// (a 500, a timeout, a refused connection, a token refused 401) counts in http_req_failed.
// (setup()'s own requests say what they expect themselves: loadtest/k6/buyers.js.)
http.setResponseCallback(http.expectedStatuses(201, 429, 503));

const ordersPaid = new Counter('orders_paid');
const ordersRetry = new Counter('orders_retry');
const ordersOther = new Counter('orders_other');
// The accepted orders' own latency (a refusal answers at once: it would hide their wait).
const paidDuration = new Trend('orders_paid_duration', true);

export const options = {
  scenarios: {
    offered: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: DURATION,
      // Enough VUs that the offered rate holds while answers are slow: the open model.
      preAllocatedVUs: Math.min(Math.max(Math.ceil(RATE / 4), 20), 1000),
      maxVUs: Math.min(Math.max(RATE * 2, 100), 4000),
      // Every order is answered (the server bounds each by its lock timeout): 201s can then
      // be matched against the units sold.
      gracefulStop: '60s',
    },
  },
  summaryTrendStats: ['avg', 'med', 'p(90)', 'p(99)', 'max'],
  discardResponseBodies: false,
  // Signing up to BUYERS buyers in (without TOKENS_FILE) comes first.
  setupTimeout: '180s',
  // The steps go past saturation on purpose, so the bounds are the service's own: no answer
  // as slow as its request timeout (15 s, then 503), and under 1 % of answers unexpected.
  // loadtest/bench reads the figures whatever k6's exit; a crossed bound is logged.
  thresholds: {
    'http_req_duration{name:POST /orders}': ['p(99)<15000'],
    http_req_failed: ['rate<0.01'],
  },
};

export function setup() {
  const orders = RATE * parseInt(DURATION, 10);
  const pool = Math.min(orders, BUYERS || 2000);
  const names = Array.from({ length: FILE_TOKENS ? 0 : pool }, (_, i) => `${PREFIX}${i}`);
  const { mode, tokens } = signIn(BASE_URLS[0], names, FILE_TOKENS);
  return { buyer_auth: mode, tokens };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  let url;
  let order;
  if (INSTANCE_OF) {
    // The product's own route on its instance: the path names the product, the body not.
    const product = PRODUCTS[i % PRODUCTS.length];
    url = productUrl(INSTANCE_OF(product), product);
    order = {};
  } else {
    const base = BASE_URLS[i % BASE_URLS.length];
    order = { product_id: PRODUCTS[Math.floor(i / BASE_URLS.length) % PRODUCTS.length] };
    url = `${base}/orders`;
  }
  // The next buyer of the pool: its token, or its name in the body (open mode).
  const tokens = FILE_TOKENS || data.tokens;
  const token = tokens ? tokens[i % tokens.length] : null;
  if (!token) order.user_id = `${PREFIX}${BUYERS ? i % BUYERS : i}`;
  const res = http.post(url, JSON.stringify(order), {
    headers: orderHeaders(token),
    tags: { name: 'POST /orders' },
    timeout: '60s',
  });
  if (res.status === 201) {
    ordersPaid.add(1);
    paidDuration.add(res.timings.duration);
  } else if (answer(res).retryable) {
    // The answer says to retry (answers.js). Counted, not sent again: the open model offers
    // its rate whatever the answers, and a retry would add load the step did not offer.
    ordersRetry.add(1);
  } else {
    ordersOther.add(1);
  }
}

export function handleSummary(data) {
  data.setup_data = withoutTokens(data.setup_data);
  return __ENV.RESULTS ? { [__ENV.RESULTS]: JSON.stringify(data) } : {};
}
