// The teaching page: the shop, a two-lane flash-sale simulator, the live lock queue, herd vs
// fair, the crash/zombie demos and the lock lab. Plain ES module, no build step. Everything
// live comes from one server-sent-events stream (/api/events), except the lock lab's two
// views, polled while the page is visible.
// Every text comes from i18n.js by key; this file holds no user-visible sentence.

import { t, tHtml, markup, has, escapeHtml as esc, locale, initI18n, onLanguageChange } from './i18n.js';

const $ = (selector, root = document) => root.querySelector(selector);
const products = new Map(); // id -> product
const lockStats = new Map(); // id -> {acquisitions, wakeups, orders}
const logEntries = []; // newest first: {key, params, bad, at}, redrawn in the current language
let queueProduct = null;
let queueView = null; // the last lock view shown, redrawn on a language switch

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const fmtMoney = (cents) => (cents / 100).toLocaleString(locale(), { style: 'currency', currency: 'USD' });
// Ratios: exact ones stay exact (1, not 1.00), so "a lock per order" reads as 1.
const ratio = (n, d) => (d ? (Number.isInteger(n / d) ? String(n / d) : (n / d).toFixed(2)) : '–');
const statusName = (s) => (has(`status.${s}`) ? t(`status.${s}`) : s);

// Texts drawn from data (results, verdicts, button states): each element keeps how it was
// drawn, so a language switch redraws it in place from the same data.
const drawings = new Map(); // element -> () => void
function draw(el, render) {
  drawings.set(el, render);
  render();
}
const drawText = (el, text) => draw(el, () => (el.textContent = text()));

async function api(path, options = {}) {
  const response = await fetch(path, options);
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  return { status: response.status, body, retryAfter: Number(response.headers.get('Retry-After') || 0) };
}

// An error answer, in the page's language: by its stable code; the server's (English)
// message only for a code the dictionaries do not know.
function errorHtml(status, body) {
  const code = body?.error;
  const message = code && has(`error.${code}`)
    ? tHtml(`error.${code}`, { message: body.message ?? '' })
    : esc(body?.message ?? t('error.no_answer'));
  return tHtml('error.line', { status, code: markup(code ? `<code data-ident>${esc(code)}</code>` : ''), message: markup(message) });
}
const showError = (out, status, body) => draw(out, () => {
  out.className = 'result err';
  out.innerHTML = errorHtml(status, body);
});

function adminHeaders() {
  const token = $('#admin-token').value.trim();
  sessionStorage.setItem('seckill-admin', token);
  return { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` };
}

// ---------------------------------------------------------------- products and selects

function renderProducts() {
  const list = [...products.values()].sort((a, b) => a.id - b.id);
  $('#products').innerHTML = list.length ? list.map(productCard).join('') : `<p class="hint">${t('shop.empty')}</p>`;
  fillSelect($('#buy-product'), list);
  for (const lane of document.querySelectorAll('.lane')) {
    fillSelect($('.lane-product', lane), list);
    showLaneGuarding(lane);
  }
  fillSelect($('#queue-product'), list.filter(locked));
  fillSelect($('#demo-product'), list.filter(locked));
  fillSelect($('#money-product'), list);
  // Every product has terms, so the lab's terms lock is there whatever the guard.
  fillSelect($('#rw-product'), list);
  renderHerd();
}

const locked = (p) => p.guard === 'zk' || p.guard === 'zk-herd';
const batched = (p) => p.batch_max > 1 && p.guard !== 'none';

// How the product is guarded, batching included: the difference the lanes compare.
function guarding(p) {
  if (p.guard === 'none') return t('guarding.none');
  if (!batched(p)) return t(locked(p) ? 'guarding.lock_per_order' : 'guarding.transaction_per_order');
  return t('guarding.batched', { n: p.batch_max, cycle: t(locked(p) ? 'cycle.lock' : 'cycle.transaction') });
}

const shortGuarding = (p) =>
  batched(p)
    ? t('guarding.short_batched', { guard: p.guard, n: p.batch_max })
    : locked(p) ? t('guarding.short_lock_per_order', { guard: p.guard }) : p.guard;
// In a select the name comes first, and the demo set's names already say "a lock per order".
const optionGuarding = (p) => (batched(p) ? t('guarding.short_batched', { guard: p.guard, n: p.batch_max }) : p.guard);

// Product names and guard names are the server's identifiers: data-ident, never translated.
function productCard(p) {
  const oversold = Math.max(0, p.sold - p.stocked_total);
  const pct = p.stocked_total ? Math.min(100, (100 * p.sold) / p.stocked_total) : 0;
  const line = tHtml('product.line', {
    price: fmtMoney(p.price_cents),
    stock: markup(`<strong data-k="stock">${p.stock}</strong>`),
    sold: markup(`<span data-k="sold">${p.sold}</span>`),
    total: p.stocked_total,
  });
  return `<article class="product" data-product="${p.id}" data-oversold="${oversold}">
    <h3 data-ident>${esc(p.name)}</h3>
    <span class="badge guard-${esc(p.guard)}" data-ident>${esc(p.guard)}</span>${p.sold_out ? `<span class="badge soldout">${t('product.sold_out')}</span>` : ''}
    <div class="small" data-k="guarding" data-batch-max="${p.batch_max}">${esc(guarding(p))}</div>
    <div class="bar" role="img" aria-label="${esc(t('product.bar', { sold: p.sold, total: p.stocked_total }))}"><span style="width:${pct}%"></span></div>
    <div>${line}</div>
    ${oversold ? `<div class="oversold">${t('product.oversold', { n: oversold })}</div>` : ''}
  </article>`;
}

function fillSelect(select, list) {
  const previous = select.value;
  select.innerHTML = list
    .map((p) => `<option value="${p.id}">${esc(t('product.option', { id: p.id, name: p.name, guarding: optionGuarding(p) }))}</option>`)
    .join('');
  if (list.some((p) => String(p.id) === previous)) select.value = previous;
  else if (select.prefer) {
    const preferred = list.find(select.prefer);
    if (preferred) select.value = preferred.id;
  }
}

async function loadProducts() {
  const { status, body } = await api('/api/products');
  if (status !== 200) return;
  for (const p of body) products.set(p.id, p);
  renderProducts();
  if (!queueProduct) selectQueue($('#queue-product').value);
}

// ---------------------------------------------------------------- buying

$('#buy').addEventListener('submit', async (event) => {
  event.preventDefault();
  const out = $('#buy-result');
  draw(out, () => {
    out.className = 'result';
    out.textContent = t('buy.ordering');
  });
  const order = {
    product_id: Number($('#buy-product').value),
    user_id: $('#buy-user').value,
    quantity: Number($('#buy-qty').value),
    pay: $('#buy-pay').checked,
  };
  const { status, body } = await api('/orders', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': crypto.randomUUID() },
    body: JSON.stringify(order),
  });
  // Every answer that names an order (paid, reserved, declined, outcome pending) shows its payment.
  const orderId = body?.id ?? body?.order_id;
  if (orderId) followPayment(orderId);
  else {
    // Nothing to follow: a poll of an earlier order stops drawing here.
    followed = null;
    const payment = $('#buy-payment');
    delete payment.dataset.outcome;
    delete payment.dataset.settledBy;
    drawText(payment, () => '');
  }
  if (status !== 201) return showError(out, status, body);
  draw(out, () => {
    out.className = 'result ok';
    out.innerHTML = tHtml('buy.ok', {
      id: markup(`<span class="mono" data-ident>${esc(body.id.slice(0, 8))}</span>`),
      status: markup(`<strong data-status="${esc(body.status)}">${esc(statusName(body.status))}</strong>`),
      wait: body.lock_wait_ms === null ? t('buy.no_lock') : t('buy.waited', { ms: body.lock_wait_ms }),
      fence: body.fence === null ? '' : t('buy.fence', { fence: body.fence }),
      batch: markup(servedWith(body)),
    });
  });
});

// ---------------------------------------------------------------- payments

// An order's payment, as the shop knows it: its intent (written before the charge is sent),
// its outcome, and who learnt it. Pending is not failed: the provider may have charged.
function paymentHtml(payment) {
  if (!payment) return esc(t('pay.none'));
  const key = markup(`<span class="mono" data-ident>${esc(payment.key)}</span>`);
  const outcome = markup(`<strong data-outcome="${esc(payment.outcome)}">${esc(t(`pay.outcome_${payment.outcome}`))}</strong>`);
  // A payment settled before its settler was recorded has none: settled, by whom unknown.
  const by = payment.settled_by
    ? t(`pay.by_${payment.settled_by}`)
    : t(payment.outcome === 'pending' ? 'pay.by_nobody' : 'pay.by_unrecorded');
  return tHtml('pay.line', { key, outcome, by });
}

// Follows the Buy form's last order until its payment is settled (polled: 1 s apart, two
// minutes at most — a pending intent waits for the sweep).
let followed = null;
async function followPayment(id) {
  followed = id;
  const out = $('#buy-payment');
  for (let i = 0; i < 120 && followed === id; i += 1) {
    const { status, body } = await api(`/orders/${id}`);
    if (followed !== id) return;
    if (status === 200) {
      out.dataset.outcome = body.payment?.outcome ?? 'none';
      out.dataset.settledBy = body.payment?.settled_by ?? '';
      draw(out, () => (out.innerHTML = paymentHtml(body.payment)));
      if (body.payment?.outcome !== 'pending') return;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// The order's batch: how many orders the lock cycle (or transaction) that decided it served.
function servedWith(order) {
  const n = order.batch_size;
  if (n === null || n === undefined) return '';
  const cycle = t(order.fence === null ? 'cycle.transaction' : 'cycle.lock');
  const text = n === 1 ? t('buy.own_cycle', { cycle }) : t('buy.shared_cycle', { cycle, n });
  return `<span data-batch-size="${n}">${esc(text)}</span>`;
}

$('#create').addEventListener('submit', async (event) => {
  event.preventDefault();
  const out = $('#create-result');
  const guard = $('#new-guard').value;
  const batch = $('#new-batch').value.trim();
  const { status, body } = await api('/api/products', {
    method: 'POST',
    headers: adminHeaders(),
    body: JSON.stringify({
      // The name is data from here on: it stays in the language it was created in.
      name: t('create.name', { time: new Date().toLocaleTimeString(locale()) }),
      price_cents: 999,
      stock: Number($('#new-stock').value),
      guard,
      // Empty: the server's --batch-max; `none` always serves one order at a time.
      ...(batch && guard !== 'none' ? { batch_max: Number(batch) } : {}),
    }),
  });
  if (status !== 201) return showError(out, status, body);
  products.set(body.id, body);
  renderProducts();
  draw(out, () => {
    out.className = 'result ok';
    out.textContent = t('create.ok', { id: body.id, guard, guarding: guarding(body) });
  });
});

// ---------------------------------------------------------------- simulator

// Under each lane's select: how its product is guarded, in full.
const showLaneGuarding = (lane) => {
  const p = products.get(Number($('.lane-product', lane).value));
  $('[data-k="lane-guarding"]', lane).textContent = p ? guarding(p) : '';
};
for (const lane of document.querySelectorAll('.lane')) {
  $('.lane-product', lane).addEventListener('change', () => showLaneGuarding(lane));
}
$('#lane-a .lane-product').prefer = (p) => p.guard === 'zk' && !batched(p);
$('#lane-b .lane-product').prefer = (p) => p.guard === 'none';

// The presets: the oversell lesson (zk vs none) and the combining one (a lock per order vs
// batched). Each lane takes the newest matching product with stock left: a fresh sale.
const presets = {
  oversell: [(p) => p.guard === 'zk' && !batched(p), (p) => p.guard === 'none'],
  batching: [(p) => p.guard === 'zk' && !batched(p), (p) => p.guard === 'zk' && batched(p)],
};
for (const [name, [forA, forB]] of Object.entries(presets)) {
  $(`#preset-${name}`).addEventListener('click', () => {
    const newest = (match) => {
      const list = [...products.values()].filter(match).sort((x, y) => y.id - x.id);
      return list.find((p) => p.stock > 0) ?? list[0];
    };
    const [pa, pb] = [newest(forA), newest(forB)];
    if (pa) $('#lane-a .lane-product').value = pa.id;
    if (pb) $('#lane-b .lane-product').value = pb.id;
    for (const lane of document.querySelectorAll('.lane')) showLaneGuarding(lane);
    const out = $('#preset-result');
    out.className = pa && pb ? 'result' : 'result err';
    drawText(out, () => (pa && pb ? '' : t('presets.missing')));
  });
}

let selling = false;
drawText($('#sim-run'), () => t(selling ? 'sim.running' : 'sim.run'));

$('#sim-run').addEventListener('click', async () => {
  const button = $('#sim-run');
  button.disabled = true;
  selling = true;
  drawings.get(button)();
  const buyers = Math.max(1, Math.min(1000, Number($('#sim-buyers').value) || 1));
  const lanes = [...document.querySelectorAll('.lane')];
  const chosen = new Set();
  await Promise.all(
    lanes.map((lane) => {
      const id = Number($('.lane-product', lane).value);
      if (!id || chosen.has(id)) return null; // the same product twice would share one stock
      chosen.add(id);
      return runLane(lane, id, buyers);
    }),
  );
  selling = false;
  drawings.get(button)();
  button.disabled = false;
});

async function runLane(lane, productId, buyers) {
  const stats = { paid: 0, sold_out: 0, retried: 0, other: 0 };
  const progress = $('progress', lane);
  const verdict = $('.verdict', lane);
  const field = (k) => $(`[data-k="${k}"]`, lane);
  verdict.className = 'verdict';
  drawText(verdict, () => t('verdict.selling'));
  lane.dataset.state = 'running';
  progress.max = buyers;
  let answered = 0;
  const show = () => {
    for (const [k, v] of Object.entries(stats)) field(k).textContent = v;
    progress.value = answered;
  };
  for (const k of ['elapsed', 'rate', 'per_cycle']) drawText(field(k), () => '…');
  const run = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  // This instance's counters before the sale: the lane reports only what its sale added.
  const before = await lockView(productId);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: buyers }, async (_, i) => {
      await buyer(productId, `sim-${run}-${i}`, stats);
      answered += 1;
      show();
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  drawText(field('elapsed'), () => t('stats.seconds', { s: seconds.toFixed(2) }));
  drawText(field('rate'), () => (buyers / seconds).toFixed(1));
  const after = await lockView(productId);
  if (before && after) {
    const orders = after.stats.orders - before.stats.orders;
    const cycles = after.stats.acquisitions - before.stats.acquisitions;
    drawText(field('per_cycle'), () => ratio(orders, cycles));
    lane.dataset.perCycle = cycles ? String(orders / cycles) : '';
  } else {
    drawText(field('per_cycle'), () => t('stats.no_lock'));
    lane.dataset.perCycle = '';
  }
  const { body: audit } = await api(`/api/products/${productId}/audit`);
  lane.dataset.oversold = audit.oversold;
  lane.dataset.state = 'done';
  const counts = { sold: audit.sold, total: audit.stocked_total, oversold: audit.oversold };
  if (audit.oversold > 0) {
    verdict.className = 'verdict bad';
    drawText(verdict, () => t('verdict.oversold', counts));
    log('log.oversold', { id: productId, ...counts }, true);
  } else if (!audit.consistent) {
    // Not oversold yet, but lost updates already: more sales than the stock went down by.
    const taken = audit.stocked_total - audit.stock;
    verdict.className = 'verdict bad';
    drawText(verdict, () => t('verdict.inconsistent', { ...counts, taken, lost: audit.sold - taken }));
  } else {
    verdict.className = 'verdict ok';
    drawText(verdict, () => t('verdict.ok', counts));
  }
  refreshLockStats(productId);
}

// The product's lock view on this instance, or null (no lock, or ZooKeeper unreachable).
async function lockView(id) {
  const p = products.get(id);
  if (!p || !locked(p)) return null;
  const { status, body } = await api(`/api/products/${id}/lock`);
  return status === 200 ? body : null;
}

/// One buyer: one order, retried with the same Idempotency-Key on 429/503 (never sold twice).
async function buyer(productId, user, stats) {
  for (let attempt = 0; attempt < 4; attempt += 1) {
    const { status, body, retryAfter } = await api('/orders', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': user },
      body: JSON.stringify({ product_id: productId, user_id: user }),
    });
    if (status === 201) return void (stats.paid += 1);
    if (status === 409 && body?.error === 'sold_out') return void (stats.sold_out += 1);
    const transient = status === 429 || status === 503 || body?.error === 'idempotency_in_progress';
    if (!transient || attempt === 3) return void (stats.other += 1);
    stats.retried += 1;
    await sleep(Math.max(200, retryAfter * 1000));
  }
}

// ---------------------------------------------------------------- the lock queue

$('#queue-product').addEventListener('change', (e) => {
  selectQueue(e.target.value);
  // The lock lab's terms lock follows the product watched here (it can pick any other).
  $('#rw-product').value = e.target.value;
  $('#rw-product').dispatchEvent(new Event('change'));
});

async function selectQueue(id) {
  queueProduct = Number(id) || null;
  if (!queueProduct) return renderQueue(null);
  const { status, body } = await api(`/api/products/${queueProduct}/lock`);
  if (status === 200) renderQueue(body);
}

async function refreshLockStats(id) {
  const p = products.get(id);
  if (!p || !locked(p)) return;
  const { status, body } = await api(`/api/products/${id}/lock`);
  if (status === 200) {
    lockStats.set(id, body.stats);
    renderHerd();
    if (id === queueProduct) renderQueue(body);
  }
}

function renderQueue(view) {
  queueView = view;
  const queue = $('#queue');
  if (!view) {
    queue.innerHTML = `<li class="empty">${t('queue.pick')}</li>`;
    return;
  }
  lockStats.set(view.product_id, view.stats);
  renderHerd();
  $('#queue-path').textContent = view.path;
  const tickets = [];
  if (view.holder) tickets.push(ticket(view.holder, true, t('ticket.holds')));
  const waiting = view.recipe === 'fair' ? t('ticket.waiting') : '';
  for (const w of view.waiters) tickets.push(ticket(w, false, waiting));
  if (view.recipe === 'herd' && view.waiting_here > 1) {
    tickets.push(`<li class="ticket waiting herd"><div class="num">${view.waiting_here - (view.holder ? 1 : 0)}</div>${t('queue.crowd')}</li>`);
  }
  queue.innerHTML = tickets.length ? tickets.join('') : `<li class="empty">${t('queue.empty')}</li>`;
  renderStep(view);
  const s = view.stats;
  const p = products.get(view.product_id);
  $('#queue-stats').textContent = t('queue.stats', {
    recipe: t(view.recipe === 'fair' ? 'queue.fair' : 'queue.herd'),
    all: view.nodes > view.waiters.length + (view.holder ? 1 : 0) ? t('queue.all_nodes', { n: view.nodes }) : '',
    batched: p && batched(p) ? t('queue.batched') : '',
    acquisitions: s.acquisitions,
    wakeups: s.wakeups,
    orders: s.orders,
    ratio: ratio(s.orders, s.acquisitions),
  });
}

// One lock node as a numbered ticket: the lock queue's and the lock lab's. `role` says what it
// does (holds, waits, reads...); `watch` what it watches, by default the node named in
// `watches`, by that node's number. The node's label (an order, `lab-3`, `sale`) and its side
// of a read-write lock (R or W) are shown when the view has them; data-* attributes carry the
// raw node names for tests and for anyone inspecting the page.
function ticket(tk, holding, role, watch = watchText(tk)) {
  const number = tk.seq === null ? t('ticket.lock') : `#${tk.seq}`;
  const watches = watch ? `<div class="watch">${esc(watch)}</div>` : '';
  const access = tk.access
    ? `<abbr class="access" title="${esc(t(`ticket.access_${tk.access}`))}">${esc(t(`ticket.mark_${tk.access}`))}</abbr> `
    : '';
  const label = tk.label ? `<div class="label mono" data-ident>${esc(tk.label)}</div>` : '';
  const data = [
    ['node', tk.node],
    ['watches', tk.watches],
    ['label', tk.label],
    ['access', tk.access],
  ]
    .filter(([, value]) => value !== null && value !== undefined)
    .map(([name, value]) => ` data-${name}="${esc(value)}"`)
    .join('');
  return `<li class="ticket ${holding ? 'holding' : 'waiting'}"${data}><div class="num">${access}${number}</div>${label}<div>${role}</div>${watches}
    <div class="small mono" title="${esc(t('ticket.owner'))}" data-ident>${esc(tk.owner)}</div><div class="small">${tHtml('ticket.token', { token: tk.token })}</div></li>`;
}

// "watches #7": the number a node name ends with (lock-0000000007, __WRIT__0000000007...).
function watchText(tk) {
  const seq = /(\d+)$/.exec(tk.watches ?? '')?.[1];
  return seq === undefined ? '' : t('ticket.watches', { seq: Number(seq) });
}

function renderHerd() {
  const rows = [...lockStats.entries()]
    .filter(([id]) => products.has(id))
    .map(([id, s]) => {
      const p = products.get(id);
      const per = s.acquisitions ? (s.wakeups / s.acquisitions).toFixed(2) : '–';
      return `<tr data-product="${id}" data-guard="${esc(p.guard)}"><td>#${id}</td><td>${esc(shortGuarding(p))}</td><td>${s.acquisitions}</td><td>${s.wakeups}</td><td data-k="per">${per}</td><td data-k="per_cycle">${ratio(s.orders, s.acquisitions)}</td></tr>`;
    });
  $('#herd-rows').innerHTML = rows.join('') || `<tr><td colspan="6" class="small">${t('herd.empty')}</td></tr>`;
}

// ---------------------------------------------------------------- step-through

// The step-through sale on the queue's product: `click` counts Nexts, `base` is this
// instance's wake-up count when the last one was clicked (the queue was standing still then),
// `start` its count when the step-through began. The lock views that follow say who holds
// now and how many waiters woke. `pending` while a Next is on its way: a view that arrives
// before its answer (the release is quick, the answer can be slow) belongs to the new click,
// which is drawn once the answer says which holder went.
let step = null; // {product, click, released, base, start, pending}

async function stepAction(action) {
  const out = $('#step-result');
  const id = queueProduct;
  if (!id) return drawText(out, () => t('step.pick'));
  const wakeups = queueView?.product_id === id ? queueView.stats.wakeups : 0;
  const stepping = action === 'next' && step?.product === id ? step : null;
  if (stepping) stepping.pending = true;
  const { status, body } = await api(`/api/products/${id}/step`, {
    method: 'POST',
    headers: adminHeaders(),
    body: JSON.stringify({ action }),
  }).finally(() => {
    if (stepping) stepping.pending = false;
  });
  if (status !== 202) return showError(out, status, body);
  out.className = 'result ok';
  if (action === 'start') {
    step = { product: id, click: 0, released: null, base: wakeups, start: wakeups };
    drawText($('#step-woke'), () => '');
    drawText(out, () => t('step.started', { id }));
  } else if (action === 'stop') {
    step = null;
    drawText(out, () => t('step.stopped'));
  } else if (body.released === null) {
    drawText(out, () => t('step.nobody'));
  } else {
    if (step?.product === id) Object.assign(step, { click: step.click + 1, released: body.released, base: wakeups });
    drawText(out, () => t('step.released', { token: body.released }));
    // The new holder may already be in the last view (no event comes while it holds).
    if (queueView) renderStep(queueView);
  }
}

// Shows who woke since the last Next, once a new holder holds.
function renderStep(view) {
  if (!step || step.pending || step.released === null || view.product_id !== step.product) return;
  if (!view.holder || view.holder.token === step.released) return;
  const out = $('#step-woke');
  const woke = view.stats.wakeups - step.base;
  const total = view.stats.wakeups - step.start;
  out.dataset.click = step.click;
  out.dataset.woke = woke;
  out.dataset.total = total;
  const click = step.click;
  const seq = view.holder.seq ?? '';
  drawText(out, () => t(view.recipe === 'fair' ? 'step.woke_fair' : 'step.woke_herd', { click, woke, seq, total }));
}

for (const action of ['start', 'next', 'stop']) {
  $(`#step-${action}`).addEventListener('click', () => stepAction(action));
}

$('#step-queue').addEventListener('click', async () => {
  const id = queueProduct;
  if (!id) return drawText($('#step-result'), () => t('step.pick'));
  const out = $('#step-queued');
  const n = Math.max(1, Math.min(20, Number($('#step-buyers').value) || 1));
  const stats = { paid: 0, sold_out: 0, retried: 0, other: 0 };
  let answered = 0;
  out.className = 'result ok';
  const show = () => {
    out.dataset.answered = answered;
    drawText(out, () => t('step.queued', { id, n, answered }));
  };
  show();
  const stamp = Date.now();
  await Promise.all(
    Array.from({ length: n }, (_, i) =>
      buyer(id, `step-${stamp}-${i}`, stats).then(() => {
        answered += 1;
        show();
      }),
    ),
  );
});

// ---------------------------------------------------------------- demos

for (const mode of ['zombie', 'crash']) {
  $(`#demo-${mode}`).addEventListener('click', async () => {
    const id = Number($('#demo-product').value);
    const out = $('#demo-result');
    const { status, body } = await api(`/api/products/${id}/demo`, {
      method: 'POST',
      headers: adminHeaders(),
      body: JSON.stringify({ mode }),
    });
    if (status !== 202) return showError(out, status, body);
    out.className = 'result ok';
    drawText(out, () => t(`demo.armed_${mode}`, { id }));
  });
}

// ---------------------------------------------------------------- money: a lost answer

// The money demo: the server reserves a unit and pays it while the provider loses every
// answer; the page shows the shop's books and the provider's ledger side by side, polled
// until the sweep has settled the order (every 500 ms, three minutes at most).
const MONEY_POLL_MS = 500;
let moneyRun = 0;
$('#money-lose').addEventListener('click', async () => {
  const run = (moneyRun += 1);
  const button = $('#money-lose');
  const out = $('#money-result');
  const section = $('#money');
  const id = Number($('#money-product').value);
  // A new run starts from blank books: nothing of the last run's stays on screen.
  resetMoney();
  button.disabled = true; // one reservation per click, whatever the double clicks
  const { status, body } = await api(`/api/products/${id}/lost-answer`, { method: 'POST', headers: adminHeaders() });
  button.disabled = false;
  if (status !== 202) return showError(out, status, body);
  out.className = 'result ok';
  drawText(out, () => t('money.started', { id }));
  section.dataset.state = 'reserved';
  for (const li of section.querySelectorAll('.money-steps li')) li.classList.toggle('done', li.dataset.step === 'reserved');
  const deadline = Date.now() + 180_000;
  while (run === moneyRun && Date.now() < deadline) {
    const [shop, ledger] = await Promise.all([
      api(`/orders/${body.id}`),
      api(`/api/orders/${body.id}/charge`, { headers: adminHeaders() }),
    ]);
    if (run !== moneyRun) return;
    if (shop.status === 200 && ledger.status === 200) {
      drawMoney(shop.body, ledger.body);
      if (shop.body.payment && shop.body.payment.outcome !== 'pending') return;
    }
    await new Promise((r) => setTimeout(r, MONEY_POLL_MS));
  }
});

function resetMoney() {
  const section = $('#money');
  delete section.dataset.state;
  delete section.dataset.seenPendingCharged;
  for (const panel of [$('#money-shop'), $('#money-ledger')]) {
    for (const key of Object.keys(panel.dataset)) delete panel.dataset[key];
    for (const dd of panel.querySelectorAll('dd')) drawText(dd, () => '–');
  }
  for (const li of section.querySelectorAll('.money-steps li')) li.classList.remove('done');
  const verdict = $('#money-verdict');
  verdict.className = 'verdict';
  drawText(verdict, () => '');
  drawText($('#money-result'), () => '');
}

function drawMoney(order, line) {
  const section = $('#money');
  const shop = $('#money-shop');
  const payment = order.payment;
  const charge = line.charge;
  const field = (root, k) => $(`[data-k="${k}"]`, root);
  shop.dataset.status = order.status;
  shop.dataset.outcome = payment?.outcome ?? '';
  shop.dataset.settledBy = payment?.settled_by ?? '';
  $('#money-ledger').dataset.charge = charge?.status ?? 'none';
  drawText(field(shop, 'order'), () => order.id.slice(0, 8));
  drawText(field(shop, 'status'), () => statusName(order.status));
  drawText(field(shop, 'intent'), () => (payment ? t(`pay.outcome_${payment.outcome}`) : t('pay.none')));
  drawText(field(shop, 'settled_by'), () => (payment?.settled_by ? t(`pay.by_${payment.settled_by}`) : '–'));
  const ledger = $('#money-ledger');
  drawText(field(ledger, 'key'), () => line.key);
  drawText(field(ledger, 'charge'), () => (charge ? t(`money.charge_${charge.status}`) : t('money.no_charge')));
  drawText(field(ledger, 'reference'), () => charge?.reference ?? '–');
  drawText(field(ledger, 'amount'), () => (charge ? fmtMoney(charge.amount_cents) : '–'));
  const pending = payment?.outcome === 'pending';
  // The lesson: the ledger has the charge while the shop's intent is still pending.
  if (pending && charge?.status === 'succeeded') section.dataset.seenPendingCharged = 'true';
  const state = payment && !pending ? 'settled' : payment ? 'pending' : 'reserved';
  section.dataset.state = state;
  const steps = ['reserved', 'pending', 'settled'];
  for (const li of section.querySelectorAll('.money-steps li')) {
    li.classList.toggle('done', steps.indexOf(li.dataset.step) <= steps.indexOf(state));
  }
  const verdict = $('#money-verdict');
  if (state === 'settled') {
    const agree = charge?.status === 'succeeded' && payment.outcome === 'succeeded' && order.status === 'paid'
      && payment.provider_ref === charge.reference && charge.amount_cents === order.amount_cents;
    verdict.className = `verdict ${agree ? 'ok' : 'bad'}`;
    drawText(verdict, () => t(agree ? 'money.agree' : 'money.disagree', { by: t(`pay.by_${payment.settled_by}`) }));
  }
}

// ---------------------------------------------------------------- lock lab

// The payment semaphore and the chosen product's terms lock, polled while the page is
// visible (the event stream carries neither). Lab holders are real holders of those locks,
// made and let go through the admin endpoints.
const LAB_POLL_MS = 400;
let semView = null; // the last semaphore view shown
let rwView = null; // the last terms-lock view shown, for the product in #rw-product
const labDrawn = new Map(); // list element -> what it was last drawn from (skip redraws)

// Draws `html()` into `el` only when `from` (the data, in the current language) changed:
// the views are polled, and an unchanged list is left alone (focus, screen readers).
function drawList(el, from, html) {
  const key = `${locale()}|${JSON.stringify(from)}`;
  if (labDrawn.get(el) === key) return;
  labDrawn.set(el, key);
  el.innerHTML = html();
}

const rwProduct = () => Number($('#rw-product').value) || null;

async function refreshSemaphore() {
  const { status, body } = await api('/api/payments/semaphore');
  if (status === 200) renderSemaphore(body);
}

async function refreshTerms() {
  const id = rwProduct();
  if (!id) return renderTerms(null);
  const { status, body } = await api(`/api/products/${id}/terms-lock`);
  // A product switched meanwhile: this answer is for the one before.
  if (status === 200 && body.product_id === rwProduct()) renderTerms(body);
}

function renderSemaphore(view) {
  semView = view;
  if (!view) return;
  $('#sem-path').textContent = view.path;
  $('#sem-off').hidden = view.enabled;
  for (const button of document.querySelectorAll('#sem .controls button')) button.disabled = !view.enabled;
  // N slots: the leases held, then the free ones (more held than N only while N changes).
  drawList($('#sem-leases'), [view.max_leases, view.leases], () => {
    const held = view.leases.map((tk) => ticket(tk, true, t('sem.holds')));
    const free = Array.from(
      { length: Math.max(0, view.max_leases - view.leases.length) },
      () => `<li class="ticket free"><div class="num">–</div><div>${t('sem.free')}</div></li>`,
    );
    return [...held, ...free].join('') || `<li class="empty">${t('sem.no_leases')}</li>`;
  });
  // The acquirer whose lease node is over N watches the leases (no one node); the ones
  // behind it take turns at the recipe's mutex, each watching the one before.
  drawList($('#sem-waiters'), view.waiters, () =>
    view.waiters
      .map((tk) => ticket(tk, false, t('ticket.waiting'), tk.watches ? watchText(tk) : t('sem.watches_leases')))
      .join('') || `<li class="empty">${t('lab.nobody_waits')}</li>`,
  );
  $('#sem-leases').dataset.held = view.leases.length;
  $('#sem-waiters').dataset.waiting = view.waiters.length;
}

function renderTerms(view) {
  rwView = view;
  if (!view) {
    $('#rw-path').textContent = '';
    drawList($('#rw-holders'), null, () => `<li class="empty">${t('rw.pick')}</li>`);
    drawList($('#rw-waiters'), null, () => '');
    return;
  }
  $('#rw-path').textContent = view.path;
  // Readers share: all of them side by side; a writer holds alone.
  drawList($('#rw-holders'), view.holders, () =>
    view.holders
      .map((tk) => ticket(tk, true, t(tk.access === 'write' ? 'rw.writes' : 'rw.reads')))
      .join('') || `<li class="empty">${t('rw.free')}</li>`,
  );
  drawList($('#rw-waiters'), view.waiters, () =>
    view.waiters.map((tk) => ticket(tk, false, t('ticket.waiting'))).join('') ||
    `<li class="empty">${t('lab.nobody_waits')}</li>`,
  );
}

// One poller for both panels while the page is visible; a hidden page asks nothing, and
// polling resumes when it shows again.
let labPolling = false;
async function pollLab() {
  if (labPolling) return;
  labPolling = true;
  while (!document.hidden) {
    try {
      await Promise.all([refreshSemaphore(), refreshTerms()]);
    } catch {
      // The server is restarting or gone: the live dot says so; try again next round.
    }
    await sleep(LAB_POLL_MS);
  }
  labPolling = false;
}
document.addEventListener('visibilitychange', () => {
  if (!document.hidden) pollLab();
});

// The lab holders that went between two lists of them: the one a release let go.
const goneFrom = (before, after) =>
  (before ?? []).filter((h) => !(after ?? []).some((a) => a.label === h.label)).map((h) => h.label);

async function labAction(path, action, out, done) {
  const before = (path.includes('terms-lock') ? rwView : semView)?.lab;
  const { status, body } = await api(path, { method: 'POST', headers: adminHeaders(), body: JSON.stringify({ action }) });
  // Answers so far, ok or not, and the lab holder the last one started or let go.
  out.dataset.answers = Number(out.dataset.answers ?? 0) + 1;
  out.dataset.label = '';
  if (status !== 202) {
    // 404 no_lock from the semaphore: the server bounds no payments (its note says so).
    if (body?.error === 'no_lock' && path.includes('semaphore')) {
      return draw(out, () => {
        out.className = 'result err';
        out.innerHTML = tHtml('error.line', { status, code: markup(`<code data-ident>no_lock</code>`), message: markup(t('sem.disabled')) });
      });
    }
    return showError(out, status, body);
  }
  out.className = 'result ok';
  // A new holder is the newest of this lock's lab holders.
  const started = action === 'acquire' || action === 'read' || action === 'write' ? body.lab.at(-1)?.label : undefined;
  const [released] = goneFrom(before, body.lab);
  // Nothing to let go: no lab holder of this lock in the last view, nor now.
  const none = !before?.length && !body.lab.length;
  out.dataset.label = started ?? released ?? '';
  drawText(out, () => done({ started, released, none }));
  if (path.includes('terms-lock')) {
    if (body.product_id === rwProduct()) renderTerms(body);
  } else {
    renderSemaphore(body);
  }
}

for (const action of ['acquire', 'release', 'clear']) {
  $(`#sem-${action}`).addEventListener('click', () =>
    labAction('/api/payments/semaphore', action, $('#sem-result'), ({ started, released, none }) => {
      if (action === 'acquire') return t('sem.acquired', { label: started ?? '' });
      if (action === 'clear') return t('sem.cleared');
      if (released) return t('sem.released', { label: released });
      return t(none ? 'sem.nothing' : 'sem.release_sent');
    }),
  );
}

for (const action of ['read', 'write', 'release', 'clear']) {
  $(`#rw-${action}`).addEventListener('click', () => {
    const id = rwProduct();
    const out = $('#rw-result');
    if (!id) return drawText(out, () => t('rw.pick'));
    return labAction(`/api/products/${id}/terms-lock`, action, out, ({ started, released, none }) => {
      if (action === 'read' || action === 'write') return t(`rw.started_${action}`, { label: started ?? '', id });
      if (action === 'clear') return t('rw.cleared', { id });
      if (released) return t('rw.released', { label: released });
      return t(none ? 'rw.nothing' : 'rw.release_sent');
    });
  });
}

$('#rw-product').addEventListener('change', () => {
  rwView = null; // another lock: its lab holders are not the last view's
  refreshTerms();
});

// ---------------------------------------------------------------- live events

// Log lines are kept as keys and params, so a language switch redraws the ones already shown.
function log(key, params, bad = false) {
  logEntries.unshift({ key, params, bad, at: new Date() });
  logEntries.length = Math.min(logEntries.length, 100);
  renderLog();
}

function renderLog() {
  $('#log').replaceChildren(
    ...logEntries.map(({ key, params, bad, at }) => {
      const item = document.createElement('li');
      item.className = bad ? 'bad' : '';
      item.textContent = `${at.toLocaleTimeString(locale())} ${t(key, params)}`;
      return item;
    }),
  );
}

const live = (on, key) => {
  $('#live-dot').classList.toggle('on', on);
  drawText($('#live-text'), () => t(key));
};

function connect() {
  const events = new EventSource('/api/events');
  events.onopen = () => live(true, 'live.on');
  events.onerror = () => {
    live(false, 'live.reconnecting');
    // A stream that ends (the server ends each after --event-stream-max-s) is reopened by
    // the browser; a refused one (503 too_busy: the instance is at its stream cap) is not,
    // so try again ourselves, a little later and not all at once.
    if (events.readyState === EventSource.CLOSED) {
      setTimeout(connect, 2000 + Math.random() * 3000);
    }
  };
  events.addEventListener('product', (e) => {
    const p = JSON.parse(e.data);
    const before = products.get(p.id);
    products.set(p.id, p);
    if (before && !before.sold_out && p.stock === 0) log('log.sold_out', { id: p.id });
    renderProducts();
  });
  events.addEventListener('queue', (e) => {
    const view = JSON.parse(e.data);
    lockStats.set(view.product_id, view.stats);
    if (view.product_id === queueProduct) renderQueue(view);
    else renderHerd();
  });
  events.addEventListener('demo', (e) => {
    const d = JSON.parse(e.data);
    const id = d.product_id;
    if (d.kind === 'zombie' && d.write === 'accepted') {
      log('log.zombie_accepted', { id, token: d.stale_token });
    } else if (d.kind === 'zombie') {
      log('log.zombie_rejected', { id, stale: d.stale_token, current: d.current_token }, true);
    } else if (d.kind === 'crash') {
      log('log.crash', { id, token: d.token }, true);
    }
  });
}

// ---------------------------------------------------------------- language

// Static texts are redrawn by i18n.js itself; everything drawn from data is redrawn here.
onLanguageChange(() => {
  for (const render of drawings.values()) render();
  renderProducts();
  renderQueue(queueView);
  renderSemaphore(semView);
  renderTerms(rwView);
  renderLog();
});

initI18n(); // after the page cloned the lanes' stats from their template, so they get translated
$('#admin-token').value = sessionStorage.getItem('seckill-admin') || '';
live(false, 'live.connecting');
renderQueue(null);
connect();
loadProducts();
pollLab();
