// 2 · The flash-sale simulator: two lanes side by side, N buyers each fired from the browser
// (js/widgets.js's buyer), live counters, and the audit's verdict at the end — read from the
// server, never guessed: an audit that could not be read is said so, with no verdict.

import { request, signInCrowd } from './api.js';
import { t } from './i18n.js';
import { $, busy, setText } from './render.js';
import { bindOutput } from './show.js';
import { log, patch, store } from './state.js';
import { batched, fillSelect, guarding, lockCycles, productList, ratio } from './products.js';
import { UNREAD, buyer, lockView, refreshLockStats } from './widgets.js';

// Each lane's product prefers, for a first choice, the oversell lesson's pair.
const prefer = { a: (p) => p.guard === 'zk' && !batched(p), b: (p) => p.guard === 'none' };

// The presets: the oversell lesson (zk vs none) and the combining one (a lock per order vs
// batched). Each lane takes the newest matching product with stock left: a fresh sale.
const presets = {
  oversell: [(p) => p.guard === 'zk' && !batched(p), (p) => p.guard === 'none'],
  batching: [(p) => p.guard === 'zk' && !batched(p), (p) => p.guard === 'zk' && batched(p)],
};

const laneOf = (key) => $(`#lane-${key}`);
const laneProduct = (key) => Number($('.lane-product', laneOf(key)).value);

// Under each lane's select: how its product is guarded, in full.
function showGuarding(key) {
  const p = store.get().products.get(laneProduct(key));
  setText($('[data-k="lane-guarding"]', laneOf(key)), p ? guarding(p) : '');
}

function applyPreset(name) {
  const [pa, pb] = presets[name].map((match) => {
    const list = productList().filter(match).reverse();
    return list.find((p) => p.stock > 0) ?? list[0];
  });
  if (pa) $('.lane-product', laneOf('a')).value = pa.id;
  if (pb) $('.lane-product', laneOf('b')).value = pb.id;
  for (const key of ['a', 'b']) showGuarding(key);
  store.set({ preset: pa && pb ? null : { tone: 'err', key: 'presets.missing' } });
}

// Orders per lock cycle: not yet known (undefined), the product takes no lock (null), a lock
// view could not be read (UNREAD), or the sale's counts.
function perCycleText(cycles) {
  if (cycles === undefined) return '…';
  if (cycles === null) return t('stats.no_lock');
  if (cycles === UNREAD) return t('stats.unread');
  return ratio(cycles.orders, cycles.cycles);
}

// A lane as the store has it (`lane.a`, `lane.b`), drawn: counters, timings and the verdict.
// Only what changed is written (setText): the verdict is a live region.
function renderLane(key, lane) {
  if (!lane) return;
  const root = laneOf(key);
  const field = (k) => $(`[data-k="${k}"]`, root);
  root.dataset.state = lane.state;
  for (const [k, v] of Object.entries(lane.stats)) setText(field(k), v);
  const progress = $('progress', root);
  progress.max = lane.buyers;
  progress.value = lane.answered;
  setText(field('elapsed'), lane.seconds === undefined ? '…' : t('stats.seconds', { s: lane.seconds.toFixed(2) }));
  setText(field('rate'), lane.seconds === undefined ? '…' : (lane.buyers / lane.seconds).toFixed(1));
  const { cycles } = lane;
  setText(field('per_cycle'), perCycleText(cycles));
  if (cycles !== undefined) root.dataset.perCycle = cycles?.cycles ? String(cycles.orders / cycles.cycles) : '';
  const { verdict } = lane;
  if (verdict.audit) root.dataset.oversold = verdict.audit.oversold;
  else delete root.dataset.oversold;
  const v = $('.verdict', root);
  v.className = `verdict${{ ok: ' ok', oversold: ' bad', inconsistent: ' bad' }[verdict.kind] ?? ''}`;
  setText(v, t(`verdict.${verdict.kind}`, verdict.params));
}

// The audit's verdict on the lane's product; with no audit to read, none.
function verdictOf(audit) {
  if (!audit) return { kind: 'unread' };
  const params = { sold: audit.sold, total: audit.stocked_total, oversold: audit.oversold };
  if (audit.oversold > 0) return { kind: 'oversold', params, audit };
  // Not oversold yet, but lost updates already: more sales than the stock went down by.
  const taken = audit.stocked_total - audit.stock;
  if (!audit.consistent) return { kind: 'inconsistent', params: { ...params, taken, lost: audit.sold - taken }, audit };
  return { kind: 'ok', params, audit };
}

// A lane's buyers: new names for every sale (each orders once, under its own key).
function crowd(buyers) {
  const run = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  return Array.from({ length: buyers }, (_, i) => `sim-${run}-${i}`);
}

async function runLane(key, productId, names) {
  const lane = () => store.get()[`lane.${key}`];
  const change = (changes) => patch(`lane.${key}`, changes);
  change({ state: 'running', verdict: { kind: 'selling' } });
  // This instance's counters before the sale: the lane reports only what its sale added.
  const before = await lockView(productId);
  const started = performance.now();
  const count = (k) => {
    const { stats, answered } = lane();
    change({ stats: { ...stats, [k]: stats[k] + 1 }, answered: answered + (k === 'retried' ? 0 : 1) });
  };
  await Promise.all(
    names.map(async (user) => count(await buyer(productId, user, () => count('retried')))),
  );
  const seconds = (performance.now() - started) / 1000;
  change({ seconds });
  const after = await lockView(productId);
  let cycles = null;
  if (before === UNREAD || after === UNREAD) cycles = UNREAD;
  else if (before && after) cycles = { orders: after.stats.orders - before.stats.orders, cycles: lockCycles(after.stats) - lockCycles(before.stats) };
  const { ok, body } = await request(`/api/products/${productId}/audit`);
  const verdict = verdictOf(ok ? body : null);
  change({ cycles, verdict, state: 'done' });
  if (verdict.kind === 'oversold') log('log.oversold', { id: productId, ...verdict.params }, true);
  refreshLockStats(productId);
}

async function runSale() {
  const buyers = Math.max(1, Math.min(1000, Number($('#sim-buyers').value) || 1));
  store.set({ selling: true });
  try {
    const lanes = [];
    for (const key of ['a', 'b']) {
      const id = laneProduct(key);
      // The same product twice would share one stock.
      if (id && !lanes.some((lane) => lane.id === id)) lanes.push({ key, id, names: crowd(buyers) });
    }
    const stats = { paid: 0, sold_out: 0, retried: 0, other: 0 };
    for (const { key } of lanes) {
      store.set({ [`lane.${key}`]: { state: 'signing-in', buyers, answered: 0, stats, verdict: { kind: 'signing_in' } } });
    }
    // Every buyer of both lanes signed in before the first order: the race is the orders'.
    await signInCrowd(lanes.flatMap((lane) => lane.names));
    await Promise.all(lanes.map(({ key, id, names }) => runLane(key, id, names)));
  } finally {
    store.set({ selling: false });
  }
}

export function initSimulator() {
  for (const key of ['a', 'b']) {
    const select = $('.lane-product', laneOf(key));
    store.subscribe(['products', 'lang'], (state) => {
      fillSelect(select, productList(state), prefer[key]);
      showGuarding(key);
    });
    select.addEventListener('change', () => showGuarding(key));
    store.subscribe([`lane.${key}`, 'lang'], (state) => renderLane(key, state[`lane.${key}`]));
  }
  for (const name of Object.keys(presets)) $(`#preset-${name}`).addEventListener('click', () => applyPreset(name));
  bindOutput('#preset-result', 'preset');
  const run = $('#sim-run');
  store.subscribe(['selling', 'lang'], ({ selling }) => setText(run, t(selling ? 'sim.running' : 'sim.run')));
  run.addEventListener('click', () => busy(run, runSale));
}
