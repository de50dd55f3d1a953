// The rush at the opening: the same crowd meets a shop with a line and one without, side by
// side, simulated in the page (js/rush-model.js; nothing is sent to the server). A buyer is a
// dot: the line's lane is drawn by place once the line is drawn (the dots move: arrival no
// longer counts), and both lanes by arrival again at the end, to show who got the units.
// Built here inside the simulator's closed <details id="rush">, so that the page's HTML stays
// short and nothing under it moves as the page loads.

import { sleep } from './api.js';
import { t } from './i18n.js';
import { $, busy, el, setText, trusted } from './render.js';
import { store } from './state.js';
import { TICK_MS, crowd, lane, results, seeded } from './rush-model.js';

const LANES = ['line', 'crowd'];
const STATS = ['sold_out_in', 'sent', 'refused', 'peak', 'fairness', 'bots'];
const LEGEND = ['away', 'waiting', 'admitted', 'bought', 'refused', 'sold_out', 'bot'];
const FAST_MS = 25; // a tick played fast: the ten seconds before the opening in two and a half
const DRAW_MS = 1500; // the draw, shown on its own
const MOVE_MS = 1000; // dots moving to their new places

// Static texts carry their key, so that the language switch redraws them (js/i18n.js).
const text = (tag, key, attrs = {}) => el(tag, { ...attrs, 'data-i18n': key }, t(key));
const markup = (tag, key, attrs = {}) => el(tag, { ...attrs, 'data-i18n-html': key }, trusted(t(key)));

function laneBox(key) {
  return el(
    'div',
    { class: 'lane rush-lane', id: `rush-${key}`, 'data-lane': key },
    text('h4', `rush.lane_${key}`),
    el('p', { class: 'small', 'data-k': 'order' }),
    // The dots are a picture of the counters below them: not read out.
    el('div', { class: 'dots', 'data-k': 'dots', 'aria-hidden': 'true' }),
    el('dl', { class: 'stats rush-stats' }, STATS.map((k) => el('div', {}, text('dt', `rush.${k}`), el('dd', { 'data-k': k }, '–')))),
    el('p', { class: 'verdict', 'aria-live': 'polite', 'data-k': 'verdict' }),
  );
}

function build(root) {
  const dot = (k) => el('span', { class: k === 'bot' ? 'b bot' : 'b', 'data-s': k === 'bot' ? 'waiting' : k });
  root.append(
    markup('p', 'rush.hint', { class: 'hint' }),
    el(
      'div',
      { class: 'controls' },
      el('label', {}, text('span', 'rush.buyers'), el('input', { id: 'rush-buyers', type: 'range', min: 60, max: 500, step: 20, value: 200 })),
      el('span', { id: 'rush-n', class: 'rush-n' }, '200'),
      el('button', { id: 'rush-run', type: 'button' }, t('rush.run')),
    ),
    el('p', { id: 'rush-clock', class: 'rush-clock' }),
    el('div', { class: 'lanes' }, LANES.map(laneBox)),
    el('ul', { class: 'rush-legend small' }, LEGEND.map((k) => el('li', {}, dot(k), text('span', `rush.legend_${k}`)))),
    markup('div', 'rush.lesson', { class: 'rush-lesson small' }),
  );
}

// ---------------------------------------------------------------- drawing

// The lane's dots, made for the run (one per buyer, in arrival order), indexed by buyer.
function dotsOf(box, rush) {
  if (box.dataset.run !== String(rush.run)) {
    box.dataset.run = rush.run;
    box.dataset.order = 'arrival';
    box.replaceChildren(...rush.bots.map((bot, id) => el('span', { class: bot ? 'b bot' : 'b', 'data-id': id, 'data-s': 'away' })));
  }
  const dots = [];
  for (const d of box.children) dots[Number(d.dataset.id)] = d;
  return dots;
}

// Puts the dots in `order`, each gliding from where it was (unless the reader asks for less motion).
function reorder(box, dots, order) {
  const before = dots.map((d) => d.getBoundingClientRect());
  box.append(...order.map((id) => dots[id]));
  if (matchMedia('(prefers-reduced-motion: reduce)').matches) return;
  dots.forEach((d, id) => {
    const after = d.getBoundingClientRect();
    const [dx, dy] = [before[id].left - after.left, before[id].top - after.top];
    if (dx || dy) d.animate([{ transform: `translate(${dx}px, ${dy}px)` }, { transform: 'none' }], { duration: MOVE_MS, easing: 'ease-in-out' });
  });
}

function statText(k, r, done) {
  if (k === 'sold_out_in') {
    if (r.soldOutS !== null) return t('stats.seconds', { s: r.soldOutS.toFixed(1) });
    return done ? t('rush.not_sold_out') : '…';
  }
  if (k === 'peak') return t('rush.per_second', { n: r.peak });
  if (k === 'fairness') return r.fairness === null ? '…' : r.fairness.toFixed(2);
  if (k === 'bots') return `${Math.round(100 * r.bots)}%`;
  return String(r[k]);
}

function drawLane(key, rush) {
  const root = $(`#rush-${key}`);
  const field = (k) => $(`[data-k="${k}"]`, root);
  const view = rush?.lanes[key];
  if (!view) return;
  const box = field('dots');
  const dots = dotsOf(box, rush);
  // By place while the line holds; by arrival before its draw, and again at the end.
  const by = rush.state !== 'done' && view.drawn ? 'place' : 'arrival';
  if (box.dataset.order !== by) {
    box.dataset.order = by;
    reorder(box, dots, by === 'place' ? view.order : dots.map((_, id) => id));
  }
  view.status.forEach((s, id) => {
    if (dots[id].dataset.s !== s) dots[id].dataset.s = s;
  });
  setText(field('order'), t(`rush.by_${by}`));
  const r = view.results;
  const done = rush.state === 'done';
  for (const k of STATS) setText(field(k), statText(k, r, done));
  // For a reader, and a test: the lane's numbers as numbers.
  Object.assign(root.dataset, { sent: r.sent, refused: r.refused, fairness: r.fairness ?? '', bots: r.bots, soldOutS: r.soldOutS ?? '' });
  const params = { s: (r.soldOutS ?? rush.t / 1000).toFixed(1), sent: r.sent, refused: r.refused, rho: r.fairness?.toFixed(2), bots: Math.round(100 * r.bots), crowd: Math.round(100 * rush.botShare) };
  setText(field('verdict'), done ? t(r.soldOutS === null ? 'rush.verdict_unsold' : 'rush.verdict', params) : '');
}

function clockText(rush) {
  if (!rush) return t('rush.clock_idle');
  const s = (Math.abs(rush.t) / 1000).toFixed(1);
  if (rush.state === 'draw') return t('rush.clock_draw');
  if (rush.state === 'done') return t('rush.clock_done', { s });
  return t(rush.t < 0 ? 'rush.clock_before' : 'rush.clock_after', { s });
}

function renderRush({ rush }) {
  $('#rush').dataset.state = rush?.state ?? 'idle';
  setText($('#rush-clock'), clockText(rush));
  for (const key of LANES) drawLane(key, rush);
}

// ---------------------------------------------------------------- playing

// What the page draws of the run (store `rush`): copies, so that the store's value never
// changes under it.
function snapshot(run, state, buyers, bots, lanes) {
  return {
    run,
    state, // before | draw | selling | done
    t: Math.max(...LANES.map((k) => lanes[k].t)),
    bots,
    botShare: bots.filter(Boolean).length / bots.length,
    lanes: Object.fromEntries(LANES.map((k) => {
      const s = lanes[k];
      return [k, { status: [...s.status], order: [...s.order], drawn: s.drawn, results: results(s, buyers) }];
    })),
  };
}

async function play() {
  const random = seeded(crypto.getRandomValues(new Uint32Array(1))[0]);
  const buyers = crowd(Number($('#rush-buyers').value), random);
  const bots = buyers.map((b) => b.bot);
  const lanes = { line: lane(buyers, true, random), crowd: lane(buyers, false, random) };
  const run = (store.get().rush?.run ?? 0) + 1;
  const show = (state) => store.set({ rush: snapshot(run, state, buyers, bots, lanes) });
  show('before');
  while (!LANES.every((k) => lanes[k].done)) {
    for (const k of LANES) if (!lanes[k].done) lanes[k].step();
    const now = Math.max(...LANES.map((k) => lanes[k].t));
    show(now < 0 ? 'before' : now === 0 ? 'draw' : 'selling');
    // Before the opening, and once both lanes sold out (the late learn it), fast; the draw, slow.
    const over = LANES.every((k) => lanes[k].soldOutAt !== null);
    await sleep(now === 0 ? DRAW_MS : now < 0 || over ? FAST_MS : TICK_MS);
  }
  show('done');
}

export function initRush() {
  const root = $('#rush');
  build(root);
  const count = $('#rush-buyers');
  count.addEventListener('input', () => setText($('#rush-n'), count.value));
  const button = $('#rush-run');
  store.subscribe(['rushing', 'lang'], ({ rushing }) => setText(button, t(rushing ? 'rush.running' : 'rush.run')));
  store.subscribe(['rush', 'lang'], renderRush);
  button.addEventListener('click', () =>
    busy(button, async () => {
      store.set({ rushing: true });
      try {
        await play();
      } finally {
        store.set({ rushing: false });
      }
    }),
  );
}
