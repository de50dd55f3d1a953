// A product card's sale box: the sale's state, a countdown to the opening on the server's
// clock (js/clock.js), when it opens and closes, and for a product with a line the buyer's
// place in it (js/line-view.js). Made once per card and kept (js/shop.js): updated in place,
// so that its buttons stay under the pointer while product events redraw the rest of the card.

import { t } from './i18n.js';
import { $, $$, el, setText } from './render.js';
import { store } from './state.js';
import { countdown, until, when } from './clock.js';
import { loadProduct } from './products.js';
import { drawLine, initLineView, lineBox } from './line-view.js';
import { initLine } from './line.js';

const TICK_MS = 200;
// A state due to change (the opening or closing has come, by the server's clock, and the
// product still says otherwise) is read again, at most this often, until it does: no event
// says it, since nothing was written.
const ASK_EVERY_MS = 1000;

/// The sale box of product `id`: empty, until drawSale() fills it.
export function saleBox(id) {
  return el(
    'div',
    { class: 'sale', 'data-sale': id },
    el('p', { class: 'sale-when' }, el('span', { class: 'badge', 'data-k': 'sale-state' }), el('span', { class: 'countdown', 'data-k': 'countdown' })),
    el('p', { class: 'small', 'data-k': 'window' }),
  );
}

// When the product's state is due to change next, in ms from now by the server's clock.
function due(p) {
  if (p.state === 'upcoming') return until(p.opens_at);
  return ['open', 'sold_out', 'paused'].includes(p.state) ? until(p.closes_at) : null;
}

// The countdown, drawn again every tick; and a state overdue, read again.
function tick(box, p) {
  const out = $('[data-k="countdown"]', box);
  const left = p.state === 'upcoming' ? until(p.opens_at) : null;
  out.dataset.left = left === null ? '' : String(Math.max(0, Math.ceil(left / 1000)));
  const days = (d, time) => t('sale.days', { d, time });
  setText(out, left === null ? '' : left > 0 ? t('sale.opens_in', { time: countdown(left, days) }) : t('sale.opening'));
  const next = due(p);
  if (next !== null && next <= 0 && Date.now() - Number(box.dataset.asked || 0) >= ASK_EVERY_MS) {
    box.dataset.asked = String(Date.now());
    loadProduct(p.id);
  }
}

/// Draws product `p` into its sale box. A server from before sale windows says no state:
/// nothing is shown then.
export function drawSale(box, p) {
  const state = p.state ?? '';
  box.dataset.state = state;
  const badge = $('[data-k="sale-state"]', box);
  // Sold out has the card's own badge.
  badge.hidden = !state || state === 'sold_out';
  badge.className = `badge state-${state}`;
  setText(badge, state && state !== 'sold_out' ? t(`sale.state_${state}`) : '');
  tick(box, p);
  const times = [
    state === 'upcoming' && p.opens_at && t('sale.opens_at', { time: when(p.opens_at) }),
    p.closes_at && t('sale.closes_at', { time: when(p.closes_at) }),
  ];
  setText($('[data-k="window"]', box), times.filter(Boolean).join(' · '));
  let line = $('.line', box);
  if (p.line && !line) {
    line = lineBox(p.id);
    box.append(line);
  }
  if (p.line) drawLine(line, p);
  else line?.remove();
}

export function initSale() {
  initLine();
  initLineView();
  setInterval(() => {
    const { products } = store.get();
    for (const box of $$('#products .sale[data-sale]')) {
      const p = products.get(Number(box.dataset.sale));
      if (p) tick(box, p);
    }
  }, TICK_MS);
}
