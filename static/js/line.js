// A product's line (its waiting room), for the page's buyer: joining it, then looking at the
// place again when the server says to (`next_look_ms`: never sooner, and no interval of the
// page's own), until the buyer is let in with a pass, buys with it, or the sale ends for them.
// One entry per product in the store's `lines`, drawn by js/line-view.js. A reload forgets
// it: joining again answers the same place.

import { request, retryDelay } from './api.js';
import { buyerName } from './account.js';
import { $ } from './render.js';
import { setEntry, store } from './state.js';

// A place in one of these states is over: nothing more to look at.
const OVER = new Set(['bought', 'sold_out', 'closed']);

const entryOf = (id) => store.get().lines.get(id);
const openMode = () => store.get().session.mode === 'open';

/// The page's buyer's entry in the line of product `id`, if any (another buyer's is not shown).
export function lineOf(id, state = store.get()) {
  const entry = state.lines.get(id);
  return entry && entry.buyer === buyerName(state) ? entry : null;
}

// Changes the entry of `id` if it is still the one of run `run` (a join starts a new run:
// the answers of the one before are dropped). Says whether it was.
function update(id, run, changes) {
  const entry = entryOf(id);
  if (entry?.run !== run) return false;
  setEntry('lines', id, { ...entry, ...changes });
  return true;
}

function lookIn(id, run, ms) {
  clearTimeout(entryOf(id)?.timer);
  update(id, run, { timer: setTimeout(() => look(id, run), ms) });
}

// A paused sale lets nobody in: the page stops looking until the product's events say it
// resumed (or, if the line's copy of the pause lags the product's, looks on as told).
const stops = (id, place) =>
  OVER.has(place.state) || (place.state === 'paused' && store.get().products.get(id)?.state === 'paused');

// A place, as joining or looking answered it.
function heard(id, run, place) {
  const entry = entryOf(id);
  // The moment the buyer was let in, by the server's clock: that of the first answer saying so.
  const admittedAt = entry?.admittedAt ?? (place.state === 'admitted' ? place.server_time : null);
  if (!update(id, run, { place, problem: null, admittedAt, attempt: 0, timer: null })) return;
  if (!stops(id, place)) lookIn(id, run, place.next_look_ms ?? 1000);
}

async function look(id, run) {
  const entry = entryOf(id);
  if (entry?.run !== run) return;
  const seq = (entry.seq ?? 0) + 1;
  update(id, run, { seq, looking: true, timer: null });
  const query = openMode() ? `?${new URLSearchParams({ user_id: entry.buyer ?? '' })}` : '';
  const { ok, body, problem } = await request(`/api/products/${id}/line/me${query}`);
  // A newer look is under way (or a new join): its answer is the one to keep.
  if (entryOf(id)?.run !== run || entryOf(id).seq !== seq) return;
  update(id, run, { looking: false });
  if (ok) return heard(id, run, body);
  const { attempt } = entryOf(id);
  update(id, run, { problem, attempt: attempt + 1 });
  // Looked at again only when the answer says that may help (or none came): a buyer the
  // line does not know (404 not_in_line) is told so, and joins again.
  if (problem.retryable) lookIn(id, run, retryDelay(problem, attempt));
}

/// Joins the line of product `id` as the page's buyer (again: the same place, 200).
export async function joinLine(id) {
  const buyer = buyerName();
  const before = entryOf(id);
  clearTimeout(before?.timer);
  const run = (before?.run ?? 0) + 1;
  const kept = before?.buyer === buyer ? { place: before.place, admittedAt: before.admittedAt } : { place: null, admittedAt: null };
  setEntry('lines', id, { buyer, run, ...kept, problem: null, joining: true, looking: false, timer: null, attempt: 0, seq: 0 });
  // The buyer is the token's (demo, jwks); in open mode, the name typed, in the body.
  const { ok, body, problem } = await request(`/api/products/${id}/line`, { method: 'POST', body: openMode() ? { user_id: buyer } : {} });
  if (!update(id, run, { joining: false })) return;
  if (ok) heard(id, run, body);
  else update(id, run, { problem });
}

/// Looks at the place now (after a purchase with its pass: it says `bought`).
export function lookNow(id) {
  const entry = entryOf(id);
  if (!entry) return;
  clearTimeout(entry.timer);
  look(id, entry.run);
}

/// The pass to order product `id` with, as the body's `pass`: the page's buyer's, once let in.
export function passFor(id) {
  const place = lineOf(id)?.place;
  return place?.state === 'admitted' && place.pass ? { pass: place.pass } : {};
}

// Another buyer (signed in or out; in open mode another name typed): the lines of the one
// before are let go, their looks stopped.
function forgetOthers() {
  const buyer = buyerName();
  const { lines } = store.get();
  if ([...lines.values()].every((entry) => entry.buyer === buyer)) return;
  for (const entry of lines.values()) if (entry.buyer !== buyer) clearTimeout(entry.timer);
  store.set({ lines: new Map([...lines].filter(([, entry]) => entry.buyer === buyer)) });
}

// A sale that resumes: the places it paused are looked at again.
function resumed({ lines, products }) {
  for (const [id, entry] of lines) {
    const paused = entry.place?.state === 'paused' && !entry.timer && !entry.looking;
    if (paused && products.get(id) && products.get(id).state !== 'paused') lookNow(id);
  }
}

export function initLine() {
  store.subscribe(['session'], forgetOthers);
  store.subscribe(['products'], resumed);
  $('#buy-user').addEventListener('change', () => {
    if (openMode()) forgetOthers();
  });
}
