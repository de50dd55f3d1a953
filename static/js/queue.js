// 3 · The lock queue, live: the chosen product's ZooKeeper nodes as numbered tickets, from
// the event stream's `queue` events. The tickets are the lock lab's too. A plain list, not a
// live region: during a sale it is redrawn many times a second.

import { request } from './api.js';
import { t } from './i18n.js';
import { $, el, setText } from './render.js';
import { setEntry, store } from './state.js';
import { batched, fillSelect, locked, lockCycles, productList, ratio } from './products.js';

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

/// Records a product's lock counters on this instance (the herd table draws them).
export const setLockStats = (id, stats) => setEntry('lockStats', id, stats);

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

async function selectQueue(id) {
  const product = Number(id) || null;
  store.set({ queueProduct: product, queueView: null });
  if (!product) return;
  const { ok, body } = await request(`/api/products/${product}/lock`);
  if (ok && store.get().queueProduct === product) onQueueEvent(body);
}

function renderQueue({ queueView: view, queueProduct, products }) {
  const queue = $('#queue');
  if (!view) {
    if (!queueProduct) queue.replaceChildren(el('li', { class: 'empty' }, t('queue.pick')));
    return;
  }
  setText($('#queue-path'), view.path);
  const tickets = [];
  if (view.holder) tickets.push(ticket(view.holder, true, t('ticket.holds')));
  const waiting = view.recipe === 'fair' ? t('ticket.waiting') : '';
  for (const w of view.waiters) tickets.push(ticket(w, false, waiting));
  if (view.recipe === 'herd' && view.waiting_here > 1) {
    const crowd = view.waiting_here - (view.holder ? 1 : 0);
    tickets.push(el('li', { class: 'ticket waiting herd' }, el('div', { class: 'num' }, crowd), t('queue.crowd')));
  }
  queue.replaceChildren(...(tickets.length ? tickets : [el('li', { class: 'empty' }, t('queue.empty'))]));
  const s = view.stats;
  const p = products.get(view.product_id);
  setText($('#queue-stats'), t('queue.stats', {
    recipe: t(view.recipe === 'fair' ? 'queue.fair' : 'queue.herd'),
    all: view.nodes > view.waiters.length + (view.holder ? 1 : 0) ? t('queue.all_nodes', { n: view.nodes }) : '',
    batched: p && batched(p) ? t('queue.batched') : '',
    acquisitions: s.acquisitions,
    wakeups: s.wakeups,
    orders: s.orders,
    ratio: ratio(s.orders, lockCycles(s)),
  }));
}

export function initQueue() {
  const select = $('#queue-product');
  store.subscribe(['products', 'lang'], (state) => {
    fillSelect(select, productList(state).filter(locked));
    // The first products to arrive: the queue shows the first locked one.
    if (!state.queueProduct && select.value) selectQueue(select.value);
  });
  store.subscribe(['queueView', 'queueProduct', 'lang'], renderQueue);
  select.addEventListener('change', () => {
    selectQueue(select.value);
    // The lock lab's terms lock follows the product watched here (it can pick any other).
    const terms = $('#rw-product');
    terms.value = select.value;
    terms.dispatchEvent(new Event('change'));
  });
}
