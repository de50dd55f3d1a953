// Every request and the event stream go through here. A request never throws: it resolves to
// {ok, status, body, problem}, problem being {status, code, message, retryable, retryAfter}
// (status 0: no answer). Whether to ask again is the answer's to say, never a list of codes.

import { store } from './state.js';

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

/// request('/orders', { method: 'POST', body, admin: true, idempotencyKey, timeoutMs })
export async function request(path, { method = 'GET', body, admin = false, idempotencyKey, timeoutMs } = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (admin) headers.Authorization = `Bearer ${store.get().adminToken}`;
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
