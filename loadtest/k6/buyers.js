// Who buys, for every k6 script that sends orders (seckill.js, bench.js): the buyers sign in,
// as a deployment's do, and each order carries its buyer's token (`Authorization: Bearer`).
//
//   import { fileTokens, signIn, orderHeaders } from './buyers.js';
//   const FILE = fileTokens(__ENV.TOKENS_FILE);        // init context: tokens from a file
//   export function setup() { const { mode, tokens } = signIn(url, names, FILE); ... }
//
// Where the tokens come from:
// - TOKENS_FILE (a real issuer's, `--buyer-auth jwks`, or any fetched beforehand): one JWT a
//   line, read once into a SharedArray every VU shares; the buyer is each token's sub, so the
//   body names none. An absolute path (a relative one is k6's: from loadtest/k6/).
// - otherwise setup() asks the server (GET /api/session): in `demo` mode it signs the run's
//   buyers in at the server's own issuer (POST /api/session {"name"}); in `open` mode (or on a
//   build from before buyers signed in: 404) there are no tokens, the body's user_id names the
//   buyer as before.
// Sign-ins are not orders: they are tagged `name: POST /api/session` (never `POST /orders`,
// which the scripts' order thresholds and counters are about), and whether to send one again
// is the answer's to say (answers.js), as for an order.
import http from 'k6/http';
import { fail, sleep } from 'k6';
import { SharedArray } from 'k6/data';
import { answer } from './answers.js';

// Sign-ins sent at once (http.batch), and tries per sign-in the answer says to retry.
const AT_ONCE = 50;
const TRIES = 5;

// The tokens of TOKENS_FILE `path` (one JWT a line, blank lines skipped) as a SharedArray, or
// null without a path. Init context only (open() and SharedArray live there).
export function fileTokens(path) {
  if (!path) return null;
  const tokens = new SharedArray('buyer tokens', () =>
    open(path)
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== ''),
  );
  if (tokens.length === 0) throw new Error(`TOKENS_FILE ${path} holds no token`);
  return tokens;
}

// How the server at `base` knows its buyers: 'demo', 'jwks', 'open', or null for a build from
// before buyers signed in (no such route).
export function buyerAuth(base) {
  const res = http.get(`${base}/api/session`, {
    tags: { name: 'GET /api/session' },
    responseType: 'text',
    responseCallback: http.expectedStatuses(200, 404),
  });
  if (res.status === 404) return null;
  const { body } = answer(res);
  if (res.status !== 200 || body === null) fail(`GET /api/session: ${res.status} ${res.body}`);
  return body.buyer_auth;
}

// The run's buyers: { mode, tokens }. With tokens from a file (`file`, fileTokens'): mode
// 'file', tokens null (the VUs read the SharedArray). Otherwise as the server at `base` says:
// in demo mode a token for each of `names` (signed in AT_ONCE at a time), else none.
export function signIn(base, names, file) {
  if (file) return { mode: 'file', tokens: null };
  const mode = buyerAuth(base);
  if (mode === 'jwks') fail('the servers take a real issuer\'s tokens (--buyer-auth jwks): give them in TOKENS_FILE, one a line');
  if (mode !== 'demo') return { mode: mode || 'none', tokens: null };
  const tokens = [];
  for (let i = 0; i < names.length; i += AT_ONCE) {
    tokens.push(...signInBatch(base, names.slice(i, i + AT_ONCE)));
  }
  return { mode, tokens };
}

// A token for each of `names`, sent together; those the answer says to retry are sent again
// (after Retry-After, at most 2 s), TRIES times at most. Anything else fails the run.
function signInBatch(base, names) {
  const tokens = new Array(names.length);
  let left = names.map((name, i) => ({ name, i }));
  for (let tries = 1; left.length > 0; tries++) {
    const responses = http.batch(
      left.map(({ name }) => ({
        method: 'POST',
        url: `${base}/api/session`,
        body: JSON.stringify({ name }),
        params: {
          headers: { 'Content-Type': 'application/json' },
          tags: { name: 'POST /api/session' },
          responseType: 'text',
          responseCallback: http.expectedStatuses(201, 429, 503),
        },
      })),
    );
    const again = [];
    let wait = 0;
    responses.forEach((res, k) => {
      const { body, retryable } = answer(res);
      if (res.status === 201 && body !== null && typeof body.token === 'string') {
        tokens[left[k].i] = body.token;
      } else if (retryable && tries < TRIES) {
        again.push(left[k]);
        wait = Math.max(wait, Math.min(parseFloat(res.headers['Retry-After']) || 0.5, 2));
      } else {
        fail(`signing ${left[k].name} in failed: ${res.status} ${res.body}`);
      }
    });
    left = again;
    if (left.length > 0) sleep(wait);
  }
  return tokens;
}

// An order's headers: JSON, and the buyer's token if it has one.
export function orderHeaders(token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

// How many units each buyer of a pool of `buyers` may need to buy `orders` orders between
// them, round-robin (a product's per_user_limit), at least 1.
export function perBuyer(orders, buyers) {
  return Math.max(1, Math.ceil(orders / Math.max(buyers, 1)));
}

// setup()'s data as the summary keeps it: the tokens counted, not written out.
export function withoutTokens(data) {
  if (!data || !Array.isArray(data.tokens)) return data;
  const { tokens, ...rest } = data;
  return { ...rest, buyers: tokens.length };
}
