// Every request and the event stream go through here. A request never throws: it resolves to
// {ok, status, body, problem}, problem being {status, code, message, retryable, retryAfter}
// (status 0: no answer). Whether to ask again is the answer's to say, never a list of codes.

import { setEntry, store } from './state.js';

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A read is quick or the server is in trouble. An order can queue for a lock up to the
// server's own request timeout (a minute in the tests): the page waits longer than that.
const READ_TIMEOUT_MS = 10_000;
const WRITE_TIMEOUT_MS = 120_000;

// The body as JSON, or undefined when it is not JSON (a proxy's error page). A body cut off
// (a timeout, a dropped connection) throws: that is no answer, whatever the status said.
async function readJson(response) {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

// An answer from the API itself: a 2xx with its JSON body, or an error body saying whether to
// retry. Anything else (an nginx 502 page in front of a dead instance) tells the page nothing.
const fromApi = (response, body) => (response.ok ? body != null : typeof body?.retryable === 'boolean');

/// What a failed answer says: its code and message (RFC 9457 fields, with the API's own
/// `error` and `message`), and whether asking again may succeed, after how long.
function problemOf(response, body) {
  return {
    status: response.status,
    code: body?.error ?? null,
    message: body?.message ?? body?.detail ?? '',
    retryable: body.retryable,
    retryAfter: Number(response.headers.get('Retry-After')) || 0,
  };
}

/// request('/orders', { method: 'POST', body, admin: true, as: name, idempotencyKey, timeoutMs })
/// sends, as `Authorization: Bearer`, the admin token (`admin`), a simulated buyer's (`as`: its
/// name), or else the page's buyer's, if one is held. A token refused as `invalid_token` (it
/// expired) is renewed once, signed in again by its name (demo mode), and the request sent again.
export async function request(path, options = {}) {
  const who = await credentials(options);
  const answer = await send(path, options, who.token);
  if (answer.problem?.code !== 'invalid_token' || options.admin || who.admin || !who.token) return answer;
  return send(path, options, await renewed(options, who, answer.problem));
}

async function send(path, { method = 'GET', body, admin = false, idempotencyKey, timeoutMs } = {}, token = '') {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  // The admin's header as before: sent, even empty, and answered 401 `unauthorized` then.
  if (admin || token) headers.Authorization = `Bearer ${token}`;
  if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs ?? (method === 'GET' ? READ_TIMEOUT_MS : WRITE_TIMEOUT_MS));
  try {
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: controller.signal,
    });
    const data = await readJson(response);
    if (!fromApi(response, data)) throw new Error(`no answer from the API (HTTP ${response.status})`);
    answered(true);
    return response.ok
      ? { ok: true, status: response.status, body: data, problem: null }
      : { ok: false, status: response.status, body: data, problem: problemOf(response, data) };
  } catch {
    const timedOut = controller.signal.aborted;
    if (!timedOut) answered(false);
    // No answer: nobody says whether to ask again. It is safe to when asking again changes
    // nothing more: a read, or a write under its Idempotency-Key.
    const repeatable = method === 'GET' || Boolean(idempotencyKey);
    const problem = { status: 0, code: null, message: '', retryable: repeatable, retryAfter: 0, unanswered: timedOut ? 'timeout' : 'unreachable' };
    return { ok: false, status: 0, body: null, problem };
  } finally {
    clearTimeout(timer);
  }
}

/// How long to wait before asking again: the answer's Retry-After, or (no answer) a backoff
/// that doubles with each attempt, jittered so that many buyers do not come back at once.
export const retryDelay = (problem, attempt) =>
  problem.retryAfter > 0 ? problem.retryAfter * 1000 : backoff(250, attempt);

/// `base` doubled `attempt` times (at most 8 s), jittered: the one backoff of the page.
const backoff = (base, attempt) => Math.min(8000, base * 2 ** attempt) * (0.5 + Math.random());

// ---------------------------------------------------------------- who asks

/// Signs `name` in (demo mode: the server issues a short-lived token for it). Sent with no
/// token: a stale one must not stand in the way of its renewal.
export const signIn = (name) => send('/api/session', { method: 'POST', body: { name } });

// The token a request carries, and for a simulated buyer the cache entry it came from. The
// crowd of a `jwks` server orders as the admin (who may order for anyone): a page cannot get
// tokens from another company's issuer for made-up names. In `open` mode nobody has a token.
async function credentials({ admin, as }) {
  const { adminToken, session } = store.get();
  if (admin) return { token: adminToken };
  if (as === undefined) return { token: session.token };
  if (session.mode === 'jwks') return { token: adminToken, admin: true };
  if (session.mode !== 'demo') return { token: '' };
  const entry = crowdToken(as);
  return { token: await entry, entry };
}

// After `who.token` was refused (`problem`): the token to send again with.
async function renewed({ as }, who, problem) {
  if (as !== undefined) return crowdToken(as, who.entry);
  await renewBuyer(who.token, problem);
  return store.get().session.token;
}

// A simulated buyer's token: the cached one, or (none cached, or `stale` refused) a new
// sign-in, cached at once so that the buyer's other requests wait for the same one. A failed
// sign-in is not kept: the next request tries again.
function crowdToken(name, stale) {
  const cached = store.get().crowdTokens.get(name);
  if (cached && cached !== stale) return cached;
  const entry = signIn(name).then(({ ok, body }) => {
    if (!ok && store.get().crowdTokens.get(name) === entry) {
      const tokens = new Map(store.get().crowdTokens);
      tokens.delete(name);
      store.set({ crowdTokens: tokens });
    }
    return ok ? body.token : '';
  });
  setEntry('crowdTokens', name, entry);
  return entry;
}

/// Signs the crowd in before it buys (demo mode), `parallel` at a time: the sale then measures
/// the orders, not the sign-ins. Names already signed in this page's life keep their token.
export async function signInCrowd(names, parallel = 4) {
  if (store.get().session.mode !== 'demo') return;
  const known = store.get().crowdTokens;
  const todo = [...new Set(names)].filter((name) => !known.has(name)).reverse();
  const signed = [];
  const worker = async () => {
    for (let name = todo.pop(); name !== undefined; name = todo.pop()) {
      const { ok, body } = await signIn(name);
      if (ok) signed.push([name, Promise.resolve(body.token)]);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  // One new Map for the whole crowd, not one per buyer.
  store.set({ crowdTokens: new Map([...store.get().crowdTokens, ...signed]) });
}

// The page's buyer's token `stale` was refused (`problem`): signed in again by its name, once
// however many requests were refused (demo mode); otherwise dropped, and why said
// (session.refused).
async function renewBuyer(stale, problem) {
  if (store.get().session.token !== stale) return; // renewed or dropped already
  let pending = store.get().renewal;
  if (!pending) {
    pending = signInAgain(store.get().session, problem).finally(() => store.set({ renewal: null }));
    store.set({ renewal: pending });
  }
  await pending;
}

// Before the server has said its mode (the page's first request), a demo server is assumed:
// any other answers 403 no_demo_issuer, and the token is dropped all the same. A sign-in that
// got no answer changes nothing (the next refusal tries again), nor one overtaken by the
// reader signing in or out meanwhile.
async function signInAgain(session, problem) {
  const demo = session.mode === 'demo' || session.mode === null;
  const again = demo && session.name ? await signIn(session.name) : null;
  const now = store.get().session;
  if (now.token !== session.token || again?.problem?.unanswered) return;
  if (again?.ok) store.set({ session: { ...now, token: again.body.token, buyer: again.body.buyer, refused: null } });
  else store.set({ session: { ...now, token: '', buyer: null, refused: problem } });
}

// ---------------------------------------------------------------- the connection's state

// Only a request that got no answer says the server is away (`wasAway` remembers it until the
// stream opens again, which then says "live again"); an answered one ends that. The stream
// alone says "live": a page whose stream is closed misses updates, whatever its requests get.
function answered(yes) {
  const { conn, streamOpen } = store.get();
  if (!yes) store.set({ conn: 'away', wasAway: true });
  else if (conn === 'away') store.set({ conn: streamOpen ? 'back' : 'reconnecting', wasAway: !streamOpen });
}

// A closed or refused stream (503 at the instance's stream cap) is only "reconnecting": a
// server that answers requests is not away.
function streamIs(open) {
  const { conn, wasAway } = store.get();
  if (open) store.set({ streamOpen: true, conn: wasAway ? 'back' : 'live', wasAway: false });
  else store.set({ streamOpen: false, conn: conn === 'away' ? 'away' : 'reconnecting' });
}

/// Opens the server-sent events at `path` (each event's JSON to handlers[name]) and keeps them
/// open: reopened after any error, backing off from 0.5 s to 8 s, jittered. The browser's own
/// retry never backs off and gives up on a refused (503) stream. `onOpen` runs at each opening.
export function openEvents(path, handlers, onOpen) {
  let failures = 0;
  const connect = () => {
    const source = new EventSource(path);
    source.onopen = () => {
      failures = 0;
      streamIs(true);
      onOpen();
    };
    source.onerror = () => {
      source.close();
      streamIs(false);
      failures += 1;
      setTimeout(connect, backoff(500, failures - 1));
    };
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => handle(JSON.parse(event.data)));
    }
  };
  connect();
}
