// 4 · Herd vs fair: watch wake-ups per lock acquisition, by product, as this instance counts
// them; and the queue section's step-through sale, which shows those wake-ups one release at
// a time.

import { request, signInCrowd } from './api.js';
import { t } from './i18n.js';
import { $, busy, el, setText } from './render.js';
import { bindOutput } from './show.js';
import { patch, store } from './state.js';
import { lockCycles, ratio, shortGuarding } from './products.js';
import { buyer } from './widgets.js';

function renderHerd({ lockStats, products }) {
  const rows = [...lockStats.entries()]
    .filter(([id]) => products.has(id))
    .map(([id, s]) => {
      const p = products.get(id);
      return el(
        'tr',
        { 'data-product': id, 'data-guard': p.guard },
        el('td', {}, `#${id}`),
        el('td', {}, shortGuarding(p)),
        el('td', {}, s.acquisitions),
        el('td', {}, s.wakeups),
        el('td', { 'data-k': 'per' }, s.acquisitions ? (s.wakeups / s.acquisitions).toFixed(2) : '–'),
        el('td', { 'data-k': 'per_cycle' }, ratio(s.orders, lockCycles(s))),
      );
    });
  $('#herd-rows').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6, class: 'small' }, t('herd.empty')))]));
}

// ---------------------------------------------------------------- step-through

// The step-through sale on the queue's product (store `step`): `click` counts Nexts, `base`
// is this instance's wake-up count when the last one was clicked (the queue was standing
// still then), `start` its count when the step-through began. The lock views that follow say
// who holds now and how many waiters woke. `pending` while a Next is on its way: a view that
// arrives before its answer (the release is quick, the answer can be slow) belongs to the new
// click, which is drawn once the answer says which holder went.
async function stepAction(action, button) {
  const { queueProduct: id, queueView } = store.get();
  if (!id) return store.set({ stepSaid: { key: 'step.pick' } });
  const wakeups = queueView?.product_id === id ? queueView.stats.wakeups : 0;
  const stepping = action === 'next' && store.get().step?.product === id;
  if (stepping) patch('step', { pending: true });
  const { ok, body, problem } = await busy(button, () =>
    request(`/api/products/${id}/step`, { method: 'POST', admin: true, body: { action } }),
  );
  const step = store.get().step;
  const mine = stepping && step?.product === id ? step : null;
  // One change of the step per answer: who woke is drawn from a settled step only.
  const released = ok && action === 'next' && body.released !== null;
  if (mine) {
    store.set({ step: released ? { ...mine, pending: false, click: mine.click + 1, released: body.released, base: wakeups } : { ...mine, pending: false } });
  }
  if (!ok) return store.set({ stepSaid: { problem } });
  if (action === 'start') {
    return store.set({
      step: { product: id, click: 0, released: null, base: wakeups, start: wakeups, pending: false },
      stepWoke: null,
      stepSaid: { tone: 'ok', key: 'step.started', params: { id } },
    });
  }
  if (action === 'stop') return store.set({ step: null, stepSaid: { tone: 'ok', key: 'step.stopped' } });
  if (!released) return store.set({ stepSaid: { tone: 'ok', key: 'step.nobody' } });
  return store.set({ stepSaid: { tone: 'ok', key: 'step.released', params: { token: body.released } } });
}

// Who woke since the last Next, once a new holder holds.
function followStep({ step, queueView: view }) {
  if (!step || !view || step.pending || step.released === null || view.product_id !== step.product) return;
  if (!view.holder || view.holder.token === step.released) return;
  store.set({
    stepWoke: {
      click: step.click,
      woke: view.stats.wakeups - step.base,
      total: view.stats.wakeups - step.start,
      seq: view.holder.seq ?? '',
      recipe: view.recipe,
    },
  });
}

function renderWoke({ stepWoke: woke }) {
  const out = $('#step-woke');
  if (!woke) return setText(out, '');
  Object.assign(out.dataset, { click: woke.click, woke: woke.woke, total: woke.total });
  return setText(out, t(woke.recipe === 'fair' ? 'step.woke_fair' : 'step.woke_herd', woke));
}

// A few buyers for the step-through, each waiting in the queue until its turn.
async function queueBuyers() {
  const id = store.get().queueProduct;
  if (!id) return store.set({ stepSaid: { key: 'step.pick' } });
  const n = Math.max(1, Math.min(20, Number($('#step-buyers').value) || 1));
  let answered = 0;
  const show = () => store.set({ stepQueued: { id, n, answered } });
  show();
  const stamp = Date.now();
  const names = Array.from({ length: n }, (_, i) => `step-${stamp}-${i}`);
  // Signed in first (demo mode), so that they queue together.
  await signInCrowd(names);
  return Promise.all(
    names.map((name) =>
      buyer(id, name).then(() => {
        answered += 1;
        show();
      }),
    ),
  );
}

function renderQueued({ stepQueued: q }) {
  const out = $('#step-queued');
  if (!q) return;
  out.className = 'result ok';
  out.dataset.answered = q.answered;
  setText(out, t('step.queued', q));
}

export function initHerd() {
  store.subscribe(['lockStats', 'products', 'lang'], renderHerd);
  bindOutput('#step-result', 'stepSaid');
  store.subscribe(['step', 'queueView'], followStep);
  store.subscribe(['stepWoke', 'lang'], renderWoke);
  store.subscribe(['stepQueued', 'lang'], renderQueued);
  for (const action of ['start', 'next', 'stop']) {
    const button = $(`#step-${action}`);
    button.addEventListener('click', () => stepAction(action, button));
  }
  $('#step-queue').addEventListener('click', queueBuyers);
}
