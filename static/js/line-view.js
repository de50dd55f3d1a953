// The buyer's place in a product's line, on its card (js/line.js keeps it): Join, then the
// state in words, the place (before the opening: drawn then), who is ahead and the wait; once
// let in, the moment it happened and Buy, which orders through the Buy form with the pass.
// The state's words are a live region, written only when the state changes: the numbers,
// which change at every look, are shown beside it, not announced.

import { t } from './i18n.js';
import { $, $$, el, setText } from './render.js';
import { showProblem } from './show.js';
import { store } from './state.js';
import { when } from './clock.js';
import { joinLine, lineOf } from './line.js';

const FACTS = ['place', 'ahead', 'wait'];
const TONE = { admitted: 'ok', bought: 'ok', sold_out: 'err', closed: 'err' };

// Orders through the Buy form, as a reader would (its Idempotency-Key, its result, the
// payment followed): this product, one unit. js/shop.js puts the pass in.
function buyWithPass(id) {
  $('#buy-product').value = String(id);
  $('#buy-qty').value = '1';
  $('#buy').requestSubmit();
}

/// The line's part of a card, made once and kept (js/sale.js).
export function lineBox(id) {
  const join = el('button', { type: 'button', class: 'secondary', 'data-k': 'join' });
  const buy = el('button', { type: 'button', 'data-k': 'buy', disabled: true });
  join.addEventListener('click', () => joinLine(id));
  buy.addEventListener('click', () => buyWithPass(id));
  return el(
    'div',
    { class: 'line', 'data-line': id },
    el('output', { class: 'result', 'data-k': 'said' }),
    el('dl', { class: 'line-facts' }, FACTS.map((k) => el('div', {}, el('dt', { 'data-k': `${k}-label` }), el('dd', { 'data-k': k }, '–')))),
    el('div', { class: 'line-buttons' }, join, buy),
  );
}

function waitText(s) {
  if (s === null || s === undefined) return '–';
  if (s < 1) return t('line.wait_under_second');
  return s < 90 ? t('line.wait_seconds', { s: Math.round(s) }) : t('line.wait_minutes', { m: Math.round(s / 60) });
}

// What the buyer's last answer says, in words: a refusal by its code, else the place's state.
function drawSaid(out, entry, state, place) {
  if (entry?.problem) return showProblem(out, entry.problem);
  out.classList.toggle('ok', TONE[state] === 'ok');
  out.classList.toggle('err', TONE[state] === 'err');
  const at = state === 'admitted' ? { at: when(entry.admittedAt, true), until: when(place.pass_expires_at) } : {};
  return setText(out, t(`line.state_${state}`, at));
}

/// Draws the line's part of product `p`'s card from the store.
export function drawLine(box, p, state = store.get()) {
  const entry = lineOf(p.id, state);
  const place = entry?.place ?? null;
  const now = place?.state ?? 'out';
  box.dataset.lineState = now;
  box.dataset.place = place?.place ?? '';
  drawSaid($('[data-k="said"]', box), entry, now, place);
  for (const k of FACTS) setText($(`[data-k="${k}-label"]`, box), t(`line.${k}`));
  const waiting = now === 'waiting';
  setText($('[data-k="place"]', box), waiting ? t('line.drawn_at_opening') : place?.place ?? '–');
  setText($('[data-k="ahead"]', box), place?.ahead ?? '–');
  setText($('[data-k="wait"]', box), waiting || !place ? '–' : waitText(place.estimated_wait_s));
  // Joining again is harmless (the same place) but pointless while in: offered when out, or
  // when the last answer was a refusal (not in the line, say).
  const join = $('[data-k="join"]', box);
  join.disabled = Boolean(entry?.joining) || p.state === 'closed' || p.state === 'sold_out' || Boolean(place && !entry.problem);
  setText(join, t(entry?.joining ? 'line.joining' : 'line.join'));
  const ordering = state.buy && !state.buy.order && !state.buy.problem;
  const buy = $('[data-k="buy"]', box);
  buy.disabled = !(now === 'admitted' && place.pass) || Boolean(ordering);
  setText(buy, t('line.buy'));
}

export function initLineView() {
  store.subscribe(['lines', 'buy', 'session'], (state) => {
    for (const box of $$('#products .line[data-line]')) {
      const p = state.products.get(Number(box.dataset.line));
      if (p) drawLine(box, p, state);
    }
  });
}
