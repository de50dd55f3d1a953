// 6 · Money: the answer that never came. The server reserves a unit and pays it while the
// provider loses every answer; the page shows the shop's books and the provider's ledger side
// by side, polled until the sweep has settled the order (every 500 ms, three minutes at most).

import { request, sleep } from './api.js';
import { t } from './i18n.js';
import { $, $$, busy, setText } from './render.js';
import { bindOutput } from './show.js';
import { store } from './state.js';
import { fillSelect, fmtMoney, productList, statusName } from './products.js';

const POLL_MS = 500;
const POLL_FOR_MS = 180_000;
const STEPS = ['reserved', 'pending', 'settled'];

// A run's books (store `money`): null before any, {state: 'reserved'} once the reservation is
// made, then the order and the ledger's line as last read. A new run starts from blank books.
async function loseAnswer(button) {
  const run = (store.get().moneyRun ?? 0) + 1;
  const id = Number($('#money-product').value);
  store.set({ moneyRun: run, money: null, moneySaid: null });
  // One reservation per click, whatever the double clicks.
  const { ok, body, problem } = await busy(button, () =>
    request(`/api/products/${id}/lost-answer`, { method: 'POST', admin: true }),
  );
  if (!ok) return store.set({ moneySaid: { problem } });
  store.set({ moneySaid: { tone: 'ok', key: 'money.started', params: { id } }, money: { state: 'reserved' } });
  const deadline = Date.now() + POLL_FOR_MS;
  while (store.get().moneyRun === run && Date.now() < deadline) {
    const [shop, ledger] = await Promise.all([
      // The demo's buyer's order: the admin reads it (a buyer token reads only its own).
      request(`/orders/${body.id}`, { admin: true }),
      request(`/api/orders/${body.id}/charge`, { admin: true }),
    ]);
    if (store.get().moneyRun !== run) return undefined;
    if (shop.ok && ledger.ok) {
      const order = shop.body;
      const line = ledger.body;
      const pending = order.payment?.outcome === 'pending';
      // The lesson: the ledger has the charge while the shop's intent is still pending.
      const seen = store.get().money?.seenPendingCharged || (pending && line.charge?.status === 'succeeded');
      const state = order.payment && !pending ? 'settled' : order.payment ? 'pending' : 'reserved';
      store.set({ money: { state, order, line, seenPendingCharged: seen } });
      if (state === 'settled') return undefined;
    }
    await sleep(POLL_MS);
  }
  return undefined;
}

function renderMoney({ money }) {
  const section = $('#money');
  const shop = $('#money-shop');
  const ledger = $('#money-ledger');
  const field = (root, k) => $(`[data-k="${k}"]`, root);
  const order = money?.order;
  const line = money?.line;
  const payment = order?.payment;
  const charge = line?.charge;
  if (money) section.dataset.state = money.state;
  else delete section.dataset.state;
  if (money?.seenPendingCharged) section.dataset.seenPendingCharged = 'true';
  else delete section.dataset.seenPendingCharged;
  if (order) {
    shop.dataset.status = order.status;
    shop.dataset.outcome = payment?.outcome ?? '';
    shop.dataset.settledBy = payment?.settled_by ?? '';
    ledger.dataset.charge = charge?.status ?? 'none';
  } else {
    for (const panel of [shop, ledger]) for (const key of Object.keys(panel.dataset)) delete panel.dataset[key];
  }
  setText(field(shop, 'order'), order ? order.id.slice(0, 8) : '–');
  setText(field(shop, 'status'), order ? statusName(order.status) : '–');
  setText(field(shop, 'intent'), !order ? '–' : payment ? t(`pay.outcome_${payment.outcome}`) : t('pay.none'));
  setText(field(shop, 'settled_by'), payment?.settled_by ? t(`pay.by_${payment.settled_by}`) : '–');
  setText(field(ledger, 'key'), line ? line.key : '–');
  setText(field(ledger, 'charge'), !line ? '–' : charge ? t(`money.charge_${charge.status}`) : t('money.no_charge'));
  setText(field(ledger, 'reference'), charge?.reference ?? '–');
  setText(field(ledger, 'amount'), charge ? fmtMoney(charge.amount_cents) : '–');
  const reached = money ? STEPS.indexOf(money.state) : -1;
  for (const li of $$('.money-steps li', section)) li.classList.toggle('done', STEPS.indexOf(li.dataset.step) <= reached && reached >= 0);
  const verdict = $('#money-verdict');
  if (money?.state !== 'settled') {
    verdict.className = 'verdict';
    return setText(verdict, '');
  }
  const agree = charge?.status === 'succeeded' && payment.outcome === 'succeeded' && order.status === 'paid'
    && payment.provider_ref === charge.reference && charge.amount_cents === order.amount_cents;
  verdict.className = `verdict ${agree ? 'ok' : 'bad'}`;
  return setText(verdict, t(agree ? 'money.agree' : 'money.disagree', { by: t(`pay.by_${payment.settled_by}`) }));
}

export function initMoney() {
  const select = $('#money-product');
  store.subscribe(['products', 'lang'], (state) => fillSelect(select, productList(state)));
  store.subscribe(['money', 'lang'], renderMoney);
  bindOutput('#money-result', 'moneySaid');
  const button = $('#money-lose');
  button.addEventListener('click', () => loseAnswer(button));
}
