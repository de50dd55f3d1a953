// What every section says of a product (its guard, batching, price, status names), the
// product selects, and the products themselves: read whole at start and at every reopening
// of the event stream, then kept up to date by its `product` events.

import { request } from './api.js';
import { has, locale, t } from './i18n.js';
import { el } from './render.js';
import { log, setEntry, store } from './state.js';
import { noteServerTime } from './clock.js';

export const fmtMoney = (cents) => (cents / 100).toLocaleString(locale(), { style: 'currency', currency: 'USD' });
// Ratios: exact ones stay exact (1, not 1.00), so "a lock per order" reads as 1.
// Lock cycles a lock view's stats count: one per acquisition, and one per cycle served on a
// kept node (a sale's instance keeps its node while its orders keep coming).
export const lockCycles = (s) => s.acquisitions + (s.kept_cycles ?? 0);
export const ratio = (n, d) => (d ? (Number.isInteger(n / d) ? String(n / d) : (n / d).toFixed(2)) : '–');
export const statusName = (s) => (has(`status.${s}`) ? t(`status.${s}`) : s);

export const locked = (p) => p.guard === 'zk' || p.guard === 'zk-herd';
export const batched = (p) => p.batch_max > 1 && p.guard !== 'none';

/// The products, oldest first.
export const productList = (state = store.get()) => [...state.products.values()].sort((a, b) => a.id - b.id);

// How the product is guarded, batching included: the difference the lanes compare.
export function guarding(p) {
  if (p.guard === 'none') return t('guarding.none');
  if (!batched(p)) return t(locked(p) ? 'guarding.lock_per_order' : 'guarding.transaction_per_order');
  return t('guarding.batched', { n: p.batch_max, cycle: t(locked(p) ? 'cycle.lock' : 'cycle.transaction') });
}

export const shortGuarding = (p) =>
  batched(p)
    ? t('guarding.short_batched', { guard: p.guard, n: p.batch_max })
    : locked(p) ? t('guarding.short_lock_per_order', { guard: p.guard }) : p.guard;
// In a select the name comes first, and the demo set's names already say "a lock per order".
const optionGuarding = (p) => (batched(p) ? t('guarding.short_batched', { guard: p.guard, n: p.batch_max }) : p.guard);

/// Fills a product select, keeping its choice; a first choice goes to the product `prefer`
/// picks, if any.
export function fillSelect(select, list, prefer) {
  const previous = select.value;
  select.replaceChildren(
    ...list.map((p) => el('option', { value: p.id }, t('product.option', { id: p.id, name: p.name, guarding: optionGuarding(p) }))),
  );
  if (list.some((p) => String(p.id) === previous)) select.value = previous;
  else if (prefer) {
    const preferred = list.find(prefer);
    if (preferred) select.value = preferred.id;
  }
}

/// Reads every product (a failed read leaves the ones known: the next opening reads again).
/// Each read sets the server's clock again (js/clock.js).
export async function loadProducts() {
  const { ok, body } = await request('/api/products');
  if (!ok) return;
  noteServerTime(body[0]?.server_time);
  const products = new Map(store.get().products);
  for (const p of body) products.set(p.id, p);
  store.set({ products });
}

/// Reads one product again: its state changes at its opening and closing, with no event.
export async function loadProduct(id) {
  const { ok, body } = await request(`/api/products/${id}`);
  if (!ok) return;
  noteServerTime(body.server_time);
  putProduct(body);
}

/// One product as an answer or event has it now.
export const putProduct = (p) => setEntry('products', p.id, p);

/// A `product` event: the product's new state, from whichever instance changed it.
export function onProductEvent(p) {
  const before = store.get().products.get(p.id);
  if (before && !before.sold_out && p.stock === 0) log('log.sold_out', { id: p.id });
  putProduct(p);
}
