// What more than one section uses, in a module of its own (as TodoMVC keeps its shared
// helpers in one): a simulated buyer (the simulator's lanes, the step-through's queued
// buyers), a lock node drawn as a numbered ticket (the lock queue, the lock lab) and a
// product's lock view on this instance (the queue, the herd table, the simulator's orders per
// lock cycle). Sections import these and never each other: what one section changes for
// another goes through the store (js/state.js).

import { request, retryDelay, sleep } from './api.js';
import { t } from './i18n.js';
import { el } from './render.js';
import { setEntry, store } from './state.js';
import { locked } from './products.js';

// ---------------------------------------------------------------- a buyer

const ATTEMPTS = 4;

/// One buyer: one order under its own Idempotency-Key (never sold twice), asked again while
/// the answer says it may be, at most ATTEMPTS times. Says how it ended: paid, sold_out or
/// other; `onRetry` hears each retry. The buyer is `user`: signed in by that name (demo mode:
/// js/api.js holds its token; sign the crowd in first, signInCrowd), or named in the body.
export async function buyer(productId, user, onRetry = () => {}) {
  for (let attempt = 0; ; attempt += 1) {
    const { ok, problem } = await request('/orders', {
      method: 'POST',
      idempotencyKey: user,
      as: user,
      body: { product_id: productId, user_id: user },
    });
    if (ok) return 'paid';
    if (problem.code === 'sold_out') return 'sold_out';
    if (!problem.retryable || attempt === ATTEMPTS - 1) return 'other';
    onRetry();
    await sleep(Math.max(200, retryDelay(problem, attempt)));
  }
}

// ---------------------------------------------------------------- a ticket

// "watches #7": the number a node name ends with (lock-0000000007, __WRIT__0000000007...).
export function watchText(tk) {
  const seq = /(\d+)$/.exec(tk.watches ?? '')?.[1];
  return seq === undefined ? '' : t('ticket.watches', { seq: Number(seq) });
}

// One lock node as a numbered ticket: the lock queue's and the lock lab's. `role` says what it
// does (holds, waits, reads...); `watch` what it watches, by default the node named in
// `watches`, by that node's number. The node's label (an order, `lab-3`, `sale`) and its side
// of a read-write lock (R or W) are shown when the view has them; data-* attributes carry the
// raw node names for tests and for anyone inspecting the page.
export function ticket(tk, holding, role, watch = watchText(tk)) {
  const data = {};
  for (const name of ['node', 'watches', 'label', 'access']) data[`data-${name}`] = tk[name];
  const access = tk.access && [
    el('abbr', { class: 'access', title: t(`ticket.access_${tk.access}`) }, t(`ticket.mark_${tk.access}`)),
    ' ',
  ];
  return el(
    'li',
    { class: `ticket ${holding ? 'holding' : 'waiting'}`, ...data },
    el('div', { class: 'num' }, access, tk.seq === null ? t('ticket.lock') : `#${tk.seq}`),
    tk.label && el('div', { class: 'label mono', 'data-ident': true }, tk.label),
    el('div', {}, role),
    watch && el('div', { class: 'watch' }, watch),
    el('div', { class: 'small mono', title: t('ticket.owner'), 'data-ident': true }, tk.owner),
    el('div', { class: 'small' }, t('ticket.token', { token: tk.token })),
  );
}

// ---------------------------------------------------------------- a lock view

// Records a product's lock counters on this instance (the herd table draws them).
const setLockStats = (id, stats) => setEntry('lockStats', id, stats);

/// What lockView resolves to when the view could not be read: not to be drawn as "no lock".
export const UNREAD = Symbol('unread');

/// The product's lock view on this instance, null if it takes no lock, or UNREAD.
export async function lockView(id) {
  const p = store.get().products.get(id);
  if (!p || !locked(p)) return null;
  const { ok, body } = await request(`/api/products/${id}/lock`);
  return ok ? body : UNREAD;
}

/// Reads a product's lock view again: its counters, and the queue if it is the one shown.
export async function refreshLockStats(id) {
  const view = await lockView(id);
  if (!view || view === UNREAD) return;
  setLockStats(id, view.stats);
  if (id === store.get().queueProduct) store.set({ queueView: view });
}

/// Reads again every lock view the page shows (the queue, the herd table's counters): the
/// updates sent while the event stream was closed were missed, a dead instance's holder too.
export function reloadLockViews() {
  const { lockStats, queueProduct } = store.get();
  for (const id of new Set([queueProduct, ...lockStats.keys()])) if (id) refreshLockStats(id);
}

/// A `queue` event: one product's lock view, as this instance sees it now.
export function onQueueEvent(view) {
  setLockStats(view.product_id, view.stats);
  if (view.product_id === store.get().queueProduct) store.set({ queueView: view });
}
