// 1 · The shop: the product cards (their sale windows and lines in js/sale.js), the Buy form
// and its order's payment, and the admin form that creates a product (it sits in the
// simulator's section, where its products are sold).

import { request, sleep } from './api.js';
import { locale, t, tHtml } from './i18n.js';
import { $, busy, el, html, setHtml, setText } from './render.js';
import { showProblem } from './show.js';
import { store } from './state.js';
import { fillSelect, fmtMoney, guarding, productList, putProduct, statusName } from './products.js';
import { refreshOrders } from './orders.js';
import { drawSale, initSale, saleBox } from './sale.js';
import { lookNow, passFor } from './line.js';

// Product names and guard names are the server's identifiers: data-ident, never translated.
function productFacts(p) {
  const pct = p.stocked_total ? Math.min(100, (100 * p.sold) / p.stocked_total) : 0;
  const oversold = Math.max(0, p.sold - p.stocked_total);
  const line = tHtml('product.line', {
    price: fmtMoney(p.price_cents),
    stock: html`<strong data-k="stock">${p.stock}</strong>`,
    sold: html`<span data-k="sold">${p.sold}</span>`,
    total: p.stocked_total,
  });
  return [
    el('h3', { 'data-ident': true }, p.name),
    el('span', { class: `badge guard-${p.guard}`, 'data-ident': true }, p.guard),
    p.sold_out && el('span', { class: 'badge soldout' }, t('product.sold_out')),
    el('div', { class: 'small', 'data-k': 'guarding', 'data-batch-max': p.batch_max }, guarding(p)),
    el('div', { class: 'bar', role: 'img', 'aria-label': t('product.bar', { sold: p.sold, total: p.stocked_total }) }, el('span', { style: `width:${pct}%` })),
    el('div', {}, line),
    oversold > 0 && el('div', { class: 'oversold' }, t('product.oversold', { n: oversold })),
  ];
}

// A card per product, kept from one drawing to the next: its facts are drawn again at every
// change, its sale box (js/sale.js: the window, the line and their buttons) is updated in
// place, so that a button on it stays under the pointer while events arrive during a sale.
function productCard(p) {
  const card = $(`#products > .product[data-product="${p.id}"]`)
    ?? el('article', { class: 'product', 'data-product': p.id }, el('div', { class: 'product-facts' }), saleBox(p.id));
  card.dataset.oversold = Math.max(0, p.sold - p.stocked_total);
  $('.product-facts', card).replaceChildren(...productFacts(p).filter(Boolean));
  drawSale($('.sale', card), p);
  return card;
}

function renderProducts(state) {
  const list = productList(state);
  const box = $('#products');
  const cards = list.map(productCard);
  // The cards are put in place only when they are not already: in the same order, no card moves.
  const placed = cards.length === box.children.length && cards.every((card, i) => box.children[i] === card);
  if (!placed) box.replaceChildren(...(cards.length ? cards : [el('p', { class: 'hint' }, tHtml('shop.empty'))]));
  fillSelect($('#buy-product'), list);
}

// ---------------------------------------------------------------- buying

// The order's batch: how many orders the lock cycle (or transaction) that decided it served.
function servedWith(order) {
  const n = order.batch_size;
  if (n === null || n === undefined) return '';
  const cycle = t(order.fence === null ? 'cycle.transaction' : 'cycle.lock');
  return html`<span data-batch-size="${n}">${n === 1 ? t('buy.own_cycle', { cycle }) : t('buy.shared_cycle', { cycle, n })}</span>`;
}

function renderBuy({ buy }) {
  const out = $('#buy-result');
  out.className = 'result';
  if (!buy) return setText(out, '');
  if (buy.problem) return showProblem(out, buy.problem);
  if (!buy.order) return setText(out, t('buy.ordering'));
  const order = buy.order;
  out.classList.add('ok');
  return setHtml(out, tHtml('buy.ok', {
    id: html`<span class="mono" data-ident>${order.id.slice(0, 8)}</span>`,
    status: html`<strong data-status="${order.status}">${statusName(order.status)}</strong>`,
    wait: order.lock_wait_ms === null ? t('buy.no_lock') : t('buy.waited', { ms: order.lock_wait_ms }),
    fence: order.fence === null ? '' : t('buy.fence', { fence: order.fence }),
    batch: servedWith(order),
  }));
}

async function buy(event) {
  event.preventDefault();
  await busy($('#buy button[type=submit]'), async () => {
    store.set({ buy: {} });
    // The buyer is the token's (demo, jwks); in open mode, the name typed, in the body.
    const open = store.get().session.mode === 'open';
    const productId = Number($('#buy-product').value);
    // A product with a line sells to a buyer it let in: the pass it gave goes with the order.
    const pass = passFor(productId);
    const { ok, body, problem } = await request('/orders', {
      method: 'POST',
      idempotencyKey: crypto.randomUUID(),
      body: {
        product_id: productId,
        ...(open ? { user_id: $('#buy-user').value } : {}),
        quantity: Number($('#buy-qty').value),
        pay: $('#buy-pay').checked,
        ...pass,
      },
    });
    // What the pass is now (bought, or still good after a passing refusal): the line says.
    if (pass.pass) lookNow(productId);
    // Every answer that names an order (paid, reserved, declined, outcome pending) shows its payment.
    const orderId = body?.id ?? body?.order_id;
    if (orderId) followPayment(orderId);
    else store.set({ followed: null, payment: null });
    store.set({ buy: ok ? { order: body } : { problem } });
    if (orderId) refreshOrders();
  });
}

// ---------------------------------------------------------------- payments

// An order's payment, as the shop knows it: its intent (written before the charge is sent),
// its outcome, and who learnt it. Pending is not failed: the provider may have charged.
function renderPayment({ payment }) {
  const out = $('#buy-payment');
  if (!payment) {
    delete out.dataset.outcome;
    delete out.dataset.settledBy;
    return setText(out, '');
  }
  const p = payment.payment;
  out.dataset.outcome = p?.outcome ?? 'none';
  out.dataset.settledBy = p?.settled_by ?? '';
  if (!p) return setText(out, t('pay.none'));
  // A payment settled before its settler was recorded has none: settled, by whom unknown.
  const by = p.settled_by ? t(`pay.by_${p.settled_by}`) : t(p.outcome === 'pending' ? 'pay.by_nobody' : 'pay.by_unrecorded');
  return setHtml(out, tHtml('pay.line', {
    key: html`<span class="mono" data-ident>${p.key}</span>`,
    outcome: html`<strong data-outcome="${p.outcome}">${t(`pay.outcome_${p.outcome}`)}</strong>`,
    by,
  }));
}

// Follows the Buy form's last order until its payment is settled (polled: 1 s apart, two
// minutes at most — a pending intent waits for the sweep). A newer order stops it.
async function followPayment(id) {
  store.set({ followed: id, payment: null });
  for (let i = 0; i < 120 && store.get().followed === id; i += 1) {
    const { ok, body } = await request(`/orders/${id}`);
    if (store.get().followed !== id) return;
    if (ok) {
      store.set({ payment: { payment: body.payment } });
      if (body.payment?.outcome !== 'pending') {
        // Settled later than the order's answer: My orders shows it so.
        if (i > 0) refreshOrders();
        return;
      }
    }
    await sleep(1000);
  }
}

// ---------------------------------------------------------------- creating a product

async function create(event) {
  event.preventDefault();
  const guard = $('#new-guard').value;
  const batch = $('#new-batch').value.trim();
  await busy($('#create button[type=submit]'), async () => {
    const { ok, body, problem } = await request('/api/products', {
      method: 'POST',
      admin: true,
      body: {
        // The name is data from here on: it stays in the language it was created in.
        name: t('create.name', { time: new Date().toLocaleTimeString(locale()) }),
        price_cents: 999,
        stock: Number($('#new-stock').value),
        guard,
        // Empty: the server's --batch-max; `none` always serves one order at a time.
        ...(batch && guard !== 'none' ? { batch_max: Number(batch) } : {}),
      },
    });
    if (ok) putProduct(body);
    store.set({ created: ok ? { created: body } : { problem } });
  });
}

// The created product's line is drawn from it, so its guarding follows the language.
function renderCreated({ created }) {
  const out = $('#create-result');
  if (created?.problem) return showProblem(out, created.problem);
  const p = created?.created;
  out.className = p ? 'result ok' : 'result';
  return setText(out, p ? t('create.ok', { id: p.id, guard: p.guard, guarding: guarding(p) }) : '');
}

export function initShop() {
  initSale();
  store.subscribe(['products', 'lang'], renderProducts);
  store.subscribe(['buy', 'lang'], renderBuy);
  store.subscribe(['payment', 'lang'], renderPayment);
  store.subscribe(['created', 'lang'], renderCreated);
  $('#buy').addEventListener('submit', buy);
  $('#create').addEventListener('submit', create);
}
