// 3 · The lock queue, live: the chosen product's ZooKeeper nodes as numbered tickets, from
// the event stream's `queue` events (the tickets and the lock views are js/widgets.js's,
// shared with the lock lab and the herd table). A plain list, not a live region: during a
// sale it is redrawn many times a second.

import { request } from './api.js';
import { t } from './i18n.js';
import { $, el, setText } from './render.js';
import { store } from './state.js';
import { batched, fillSelect, locked, lockCycles, productList, ratio } from './products.js';
import { onQueueEvent, ticket } from './widgets.js';

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
    // The lock lab's terms lock follows the product picked here (it can pick any other): said
    // in the store, which js/lab.js follows; a new object at each pick.
    store.set({ queuePicked: { id: Number(select.value) } });
  });
}
