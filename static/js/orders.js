// My orders: the page's buyer's own orders (GET /orders: the token's buyer; in open mode the
// name typed, as ?user_id=), newest first, a page at a time ("More" follows next_cursor),
// read again after each purchase and payment. A reservation can be paid from here.

import { request } from './api.js';
import { t } from './i18n.js';
import { $, el } from './render.js';
import { buyerName } from './account.js';
import { bindOutput } from './show.js';
import { store } from './state.js';
import { fmtMoney, statusName } from './products.js';

const PAGE = 10;

// The list as last read (store `myOrders`): whose, the orders, the cursor to the next page.
// `ordersRead` numbers the reads: an answer overtaken by a newer read is dropped.
async function read(more = false) {
  const owner = buyerName();
  const n = (store.get().ordersRead ?? 0) + 1;
  store.set({ ordersRead: n });
  if (!owner) return store.set({ myOrders: { owner: null, orders: [], next: null } });
  const current = store.get().myOrders;
  const cursor = more && current?.owner === owner ? current.next : null;
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (store.get().session.mode === 'open') query.set('user_id', owner);
  if (cursor) query.set('cursor', cursor);
  const { ok, body, problem } = await request(`/orders?${query}`);
  if (store.get().ordersRead !== n) return undefined;
  if (!ok) return store.set({ ordersSaid: { problem } });
  const orders = cursor ? [...current.orders, ...body.orders] : body.orders;
  return store.set({ myOrders: { owner, orders, next: body.next_cursor ?? null } });
}

/// Reads the buyer's orders again, from the newest.
export const refreshOrders = () => read(false);

async function pay(order, button) {
  button.disabled = true;
  const { ok, problem } = await request(`/orders/${order.id}/pay`, { method: 'POST' });
  store.set({ ordersSaid: ok ? { tone: 'ok', key: 'orders.paid', params: { id: order.id.slice(0, 8) } } : { problem } });
  await refreshOrders();
}

// Product names and order ids are data: data-ident, never translated.
function orderItem(order, products) {
  const product = products.get(order.product_id);
  const button = order.status === 'reserved' && el('button', { type: 'button', class: 'secondary', 'data-pay': order.id }, t('orders.pay'));
  if (button) button.addEventListener('click', () => pay(order, button));
  return el(
    'li',
    { 'data-order': order.id, 'data-status': order.status, 'data-product': order.product_id },
    el('span', { class: 'mono', 'data-ident': true, title: order.id }, order.id.slice(0, 8)),
    el('span', { 'data-ident': true }, product ? `#${product.id} ${product.name}` : `#${order.product_id}`),
    el('span', {}, t('orders.quantity', { n: order.quantity })),
    el('span', {}, fmtMoney(order.amount_cents)),
    el('strong', { 'data-k': 'status' }, statusName(order.status)),
    button,
  );
}

// Drawn again only when what it shows changed: product events come many times a second
// during a sale, and a redraw would take a Pay button from under the pointer.
function renderOrders({ myOrders, products, session, lang }) {
  const list = $('#my-orders');
  $('#orders-more').hidden = !myOrders?.next;
  const orders = myOrders?.orders ?? [];
  const names = orders.map((order) => products.get(order.product_id)?.name ?? null);
  const drawn = JSON.stringify([lang, session.mode, myOrders?.owner, orders.map((o) => [o.id, o.status]), names]);
  if (list.dataset.drawn === drawn) return;
  list.dataset.drawn = drawn;
  list.dataset.owner = myOrders?.owner ?? '';
  const empty = (key) => list.replaceChildren(el('li', { class: 'empty' }, t(key)));
  if (!myOrders?.owner) return empty(session.mode === 'open' ? 'orders.name_first' : 'orders.sign_in_first');
  if (!orders.length) return empty('orders.none');
  return list.replaceChildren(...orders.map((order) => orderItem(order, products)));
}

export function initOrders() {
  store.subscribe(['myOrders', 'products', 'session', 'lang'], renderOrders);
  bindOutput('#orders-result', 'ordersSaid');
  // Another buyer (signed in or out, or another mode): their list, from the newest.
  store.subscribe(['session'], (state) => {
    const owner = buyerName(state);
    if (state.session.mode !== null && owner !== (store.get().myOrders?.owner ?? null)) {
      store.set({ ordersSaid: null });
      refreshOrders();
    }
  });
  // In open mode the name typed is whose orders these are.
  $('#buy-user').addEventListener('change', () => {
    if (store.get().session.mode === 'open') refreshOrders();
  });
  const more = $('#orders-more');
  more.addEventListener('click', async () => {
    more.disabled = true;
    await read(true);
    more.disabled = false;
  });
}
