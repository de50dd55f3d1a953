// The teaching page: the shop, a two-lane flash-sale simulator, the live lock queue, herd vs
// fair, and the crash/zombie demos. Plain ES module, no build step. Everything live comes
// from one server-sent-events stream (/api/events); nothing here polls.

const $ = (selector, root = document) => root.querySelector(selector);
const products = new Map(); // id -> product
const lockStats = new Map(); // id -> {acquisitions, wakeups, orders}
let queueProduct = null;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const fmtMoney = (cents) => (cents / 100).toLocaleString(undefined, { style: 'currency', currency: 'USD' });
// Ratios: exact ones stay exact (1, not 1.00), so "a lock per order" reads as 1.
const ratio = (n, d) => (d ? (Number.isInteger(n / d) ? String(n / d) : (n / d).toFixed(2)) : '–');
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

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

function adminHeaders() {
  const token = $('#admin-token').value.trim();
  sessionStorage.setItem('seckill-admin', token);
  return { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` };
}

// ---------------------------------------------------------------- products and selects

function renderProducts() {
  const list = [...products.values()].sort((a, b) => a.id - b.id);
  $('#products').innerHTML = list.length
    ? list.map(productCard).join('')
    : '<p class="hint">No products yet: create one below (admin token), or run <code>scripts/demo</code>.</p>';
  fillSelect($('#buy-product'), list);
  for (const lane of document.querySelectorAll('.lane')) {
    fillSelect($('.lane-product', lane), list);
    showLaneGuarding(lane);
  }
  fillSelect($('#queue-product'), list.filter(locked));
  fillSelect($('#demo-product'), list.filter(locked));
  renderHerd();
}

const locked = (p) => p.guard === 'zk' || p.guard === 'zk-herd';
const batched = (p) => p.batch_max > 1 && p.guard !== 'none';

// How the product is guarded, batching included: the difference the lanes compare.
function guarding(p) {
  if (p.guard === 'none') return 'no lock: each order alone, racing the others';
  const cycle = locked(p) ? 'lock cycle' : 'transaction';
  if (!batched(p)) return locked(p) ? 'a lock per order' : 'a transaction per order';
  return `batched: up to ${p.batch_max} orders per ${cycle}`;
}

const shortGuarding = (p) => (batched(p) ? `${p.guard}, batched ≤${p.batch_max}` : locked(p) ? `${p.guard}, a lock per order` : p.guard);
// In a select the name comes first, and the demo set's names already say "a lock per order".
const optionGuarding = (p) => (batched(p) ? `${p.guard}, batched ≤${p.batch_max}` : p.guard);

function productCard(p) {
  const oversold = Math.max(0, p.sold - p.stocked_total);
  const pct = p.stocked_total ? Math.min(100, (100 * p.sold) / p.stocked_total) : 0;
  return `<article class="product" data-product="${p.id}" data-oversold="${oversold}">
    <h3>${esc(p.name)}</h3>
    <span class="badge guard-${esc(p.guard)}">${esc(p.guard)}</span>${p.sold_out ? '<span class="badge soldout">sold out</span>' : ''}
    <div class="small" data-k="guarding" data-batch-max="${p.batch_max}">${esc(guarding(p))}</div>
    <div class="bar" role="img" aria-label="${p.sold} of ${p.stocked_total} sold"><span style="width:${pct}%"></span></div>
    <div>${fmtMoney(p.price_cents)} · <strong data-k="stock">${p.stock}</strong> left · <span data-k="sold">${p.sold}</span> sold of ${p.stocked_total}</div>
    ${oversold ? `<div class="oversold">oversold by ${oversold}</div>` : ''}
  </article>`;
}

function fillSelect(select, list) {
  const previous = select.value;
  select.innerHTML = list.map((p) => `<option value="${p.id}">#${p.id} ${esc(p.name)} (${esc(optionGuarding(p))})</option>`).join('');
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
  out.className = 'result';
  out.textContent = 'ordering…';
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
  if (status === 201) {
    out.className = 'result ok';
    const wait = body.lock_wait_ms === null ? 'no lock' : `waited ${body.lock_wait_ms} ms for the lock`;
    const fence = body.fence === null ? '' : `, fencing token ${body.fence}`;
    out.innerHTML = `Order <span class="mono">${esc(body.id.slice(0, 8))}</span>: <strong data-status="${esc(body.status)}">${esc(body.status)}</strong> — ${wait}${fence}${servedWith(body)}.`;
  } else {
    out.className = 'result err';
    out.textContent = `${status} ${body?.error ?? ''}: ${body?.message ?? 'no answer'}`;
  }
});

// The order's batch: how many orders the lock cycle (or transaction) that decided it served.
function servedWith(order) {
  const n = order.batch_size;
  if (n === null || n === undefined) return '';
  const cycle = order.fence === null ? 'transaction' : 'lock cycle';
  const text = n === 1 ? `, in its own ${cycle}` : `, served in a ${cycle} with ${n} orders`;
  return `<span data-batch-size="${n}">${text}</span>`;
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
      name: `Flash sale ${new Date().toLocaleTimeString()}`,
      price_cents: 999,
      stock: Number($('#new-stock').value),
      guard,
      // Empty: the server's --batch-max; `none` always serves one order at a time.
      ...(batch && guard !== 'none' ? { batch_max: Number(batch) } : {}),
    }),
  });
  if (status === 201) {
    products.set(body.id, body);
    renderProducts();
    out.className = 'result ok';
    out.textContent = `Created product #${body.id} (${guard}, ${guarding(body)}).`;
  } else {
    out.className = 'result err';
    out.textContent = `${status} ${body?.error ?? ''}: ${body?.message ?? ''}`;
  }
});

// ---------------------------------------------------------------- simulator

for (const lane of document.querySelectorAll('.lane')) {
  lane.append($('#lane-stats').content.cloneNode(true));
}
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
    out.textContent = pa && pb ? '' : 'No product for one of the lanes: create one above (admin).';
  });
}

$('#sim-run').addEventListener('click', async () => {
  const button = $('#sim-run');
  button.disabled = true;
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
  button.disabled = false;
});

async function runLane(lane, productId, buyers) {
  const stats = { paid: 0, sold_out: 0, retried: 0, other: 0 };
  const progress = $('progress', lane);
  const verdict = $('.verdict', lane);
  verdict.className = 'verdict';
  verdict.textContent = 'selling…';
  lane.dataset.state = 'running';
  progress.max = buyers;
  let answered = 0;
  const show = () => {
    for (const [k, v] of Object.entries(stats)) $(`[data-k="${k}"]`, lane).textContent = v;
    progress.value = answered;
  };
  for (const k of ['elapsed', 'rate', 'per_cycle']) $(`[data-k="${k}"]`, lane).textContent = '…';
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
  $('[data-k="elapsed"]', lane).textContent = `${seconds.toFixed(2)} s`;
  $('[data-k="rate"]', lane).textContent = (buyers / seconds).toFixed(1);
  const after = await lockView(productId);
  const perCycle = $('[data-k="per_cycle"]', lane);
  if (before && after) {
    const orders = after.stats.orders - before.stats.orders;
    const cycles = after.stats.acquisitions - before.stats.acquisitions;
    perCycle.textContent = ratio(orders, cycles);
    lane.dataset.perCycle = cycles ? String(orders / cycles) : '';
  } else {
    perCycle.textContent = 'no lock';
    lane.dataset.perCycle = '';
  }
  const { body: audit } = await api(`/api/products/${productId}/audit`);
  lane.dataset.oversold = audit.oversold;
  lane.dataset.state = 'done';
  if (audit.oversold > 0) {
    verdict.className = 'verdict bad';
    verdict.textContent = `OVERSOLD: ${audit.sold} sold of ${audit.stocked_total} — ${audit.oversold} oversold, books inconsistent`;
    log(`Product #${productId} oversold by ${audit.oversold}: ${audit.sold} sold of ${audit.stocked_total}.`, true);
  } else if (!audit.consistent) {
    // Not oversold yet, but lost updates already: more sales than the stock went down by.
    const taken = audit.stocked_total - audit.stock;
    verdict.className = 'verdict bad';
    verdict.textContent = `${audit.sold} sold of ${audit.stocked_total} — 0 oversold yet, but INCONSISTENT: the stock went down by ${taken} for ${audit.sold} sales (${audit.sold - taken} lost updates)`;
  } else {
    verdict.className = 'verdict ok';
    verdict.textContent = `${audit.sold} sold of ${audit.stocked_total} — 0 oversold, consistent`;
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

$('#queue-product').addEventListener('change', (e) => selectQueue(e.target.value));

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
  const queue = $('#queue');
  if (!view) {
    queue.innerHTML = '<li class="empty">Pick a product guarded by a ZooKeeper lock.</li>';
    return;
  }
  lockStats.set(view.product_id, view.stats);
  renderHerd();
  $('#queue-path').textContent = view.path;
  const tickets = [];
  if (view.holder) tickets.push(ticket(view.holder, true, view.recipe));
  for (const w of view.waiters) tickets.push(ticket(w, false, view.recipe));
  if (view.recipe === 'herd' && view.waiting_here > 1) {
    tickets.push(`<li class="ticket waiting herd"><div class="num">${view.waiting_here - (view.holder ? 1 : 0)}</div>buyers here, all watching the one node</li>`);
  }
  queue.innerHTML = tickets.length ? tickets.join('') : '<li class="empty">Nobody holds the lock: the queue is empty.</li>';
  const more = view.nodes > view.waiters.length + (view.holder ? 1 : 0) ? ` (${view.nodes} nodes in all)` : '';
  const s = view.stats;
  const p = products.get(view.product_id);
  const nodes = p && batched(p) ? ' · batched: one node per instance, serving its queued orders' : '';
  $('#queue-stats').textContent =
    `${view.recipe === 'fair' ? 'Fair queue' : 'Herd lock'}${more}${nodes} · this instance: ${s.acquisitions} acquisitions, ${s.wakeups} watch wake-ups, ${s.orders} orders (${ratio(s.orders, s.acquisitions)} per lock cycle).`;
}

function ticket(t, holding, recipe) {
  const number = t.seq === null ? 'lock' : `#${t.seq}`;
  const watches = t.watches ? `<div class="watch">watches #${Number(t.watches.split('lock-')[1])}</div>` : '';
  const role = holding ? 'holds the lock' : recipe === 'fair' ? 'waiting' : '';
  return `<li class="ticket ${holding ? 'holding' : 'waiting'}"><div class="num">${number}</div><div>${role}</div>${watches}
    <div class="small mono" title="owner">${esc(t.owner)}</div><div class="small">token ${t.token}</div></li>`;
}

function renderHerd() {
  const rows = [...lockStats.entries()]
    .filter(([id]) => products.has(id))
    .map(([id, s]) => {
      const p = products.get(id);
      const per = s.acquisitions ? (s.wakeups / s.acquisitions).toFixed(2) : '–';
      return `<tr data-product="${id}" data-guard="${esc(p.guard)}"><td>#${id}</td><td>${esc(shortGuarding(p))}</td><td>${s.acquisitions}</td><td>${s.wakeups}</td><td data-k="per">${per}</td><td data-k="per_cycle">${ratio(s.orders, s.acquisitions)}</td></tr>`;
    });
  $('#herd-rows').innerHTML = rows.join('') || '<tr><td colspan="6" class="small">Run a sale on a zk or zk-herd product.</td></tr>';
}

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
    out.className = status === 202 ? 'result ok' : 'result err';
    out.textContent = status === 202
      ? `Armed: the next buyer to hold product #${id}'s lock will act out the ${mode}. Start a sale on it.`
      : `${status} ${body?.error ?? ''}: ${body?.message ?? ''}`;
  });
}

// ---------------------------------------------------------------- live events

function log(text, bad = false) {
  const item = document.createElement('li');
  item.className = bad ? 'bad' : '';
  item.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $('#log').prepend(item);
  while ($('#log').children.length > 100) $('#log').lastChild.remove();
}

function connect() {
  const events = new EventSource('/api/events');
  events.onopen = () => {
    $('#live-dot').classList.add('on');
    $('#live-text').textContent = 'live';
  };
  events.onerror = () => {
    $('#live-dot').classList.remove('on');
    $('#live-text').textContent = 'reconnecting…';
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
    if (before && !before.sold_out && p.stock === 0) log(`Product #${p.id} sold out.`);
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
    if (d.kind === 'zombie' && d.write === 'accepted') {
      log(`Zombie on product #${d.product_id}: nobody took the lock over while it stalled, so its token ${d.stale_token} was still the newest and its write was accepted. Arm it again and start more buyers.`);
    } else if (d.kind === 'zombie') {
      log(`Zombie on product #${d.product_id}: it held token ${d.stale_token}, its session ended, token ${d.current_token} took over — its stock write was rejected by the fence. Nothing oversold.`, true);
    } else if (d.kind === 'crash') {
      log(`Crash on product #${d.product_id}: the holder with token ${d.token} vanished with its session; its node was deleted and the queue moved on.`, true);
    }
  });
}

// ---------------------------------------------------------------- language

for (const button of document.querySelectorAll('.lang button')) {
  button.addEventListener('click', () => {
    for (const b of document.querySelectorAll('.lang button')) b.setAttribute('aria-pressed', String(b === button));
    for (const block of document.querySelectorAll('[data-text]')) block.hidden = block.dataset.text !== button.dataset.lang;
  });
}

$('#admin-token').value = sessionStorage.getItem('seckill-admin') || '';
renderQueue(null);
connect();
loadProducts();
