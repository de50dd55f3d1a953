// The teaching page: the shop (who buys in account.js, their orders in orders.js, sale windows
// and lines in sale.js), a two-lane flash-sale simulator (and its rush at the opening, rush.js),
// the live lock queue, herd vs fair, the crash/zombie demos, money and the lock lab, one module
// each. No section imports another: they share widgets.js (a buyer, a ticket, a lock view) and
// the modules under it, and tell each other things through the store (state.js declares every
// key, with who writes it). Plain ES modules, no build step. Everything live comes from one
// server-sent-events stream (/api/events), except the lock lab's two views, polled while the
// page is visible. No module holds a user-visible sentence: the texts are in /i18n/en.js and
// /i18n/zh.js.

import { openEvents } from './api.js';
import { initI18n, t } from './i18n.js';
import { $, setText } from './render.js';
import { store } from './state.js';
import { initLog } from './log.js';
import { loadProducts, onProductEvent } from './products.js';
import { checkSession, initAccount } from './account.js';
import { initOrders } from './orders.js';
import { initShop } from './shop.js';
import { initSimulator } from './simulator.js';
import { initRush } from './rush.js';
import { initQueue } from './queue.js';
import { initHerd } from './herd.js';
import { initCrash, onDemoEvent } from './crash.js';
import { initMoney } from './money.js';
import { initLab } from './lab.js';
import { onQueueEvent, reloadLockViews } from './widgets.js';

const CONN_TEXT = {
  connecting: 'live.connecting',
  live: 'live.on',
  reconnecting: 'live.reconnecting',
  away: 'live.away',
  back: 'live.back',
};

// The header's status: the one place that says whether the page hears the server.
function initStatus() {
  const status = $('.live');
  store.subscribe(['conn', 'lang'], ({ conn }) => {
    status.dataset.conn = conn;
    $('#live-dot').classList.toggle('on', conn === 'live' || conn === 'back');
    setText($('#live-text'), t(CONN_TEXT[conn]));
  });
}

// The admin token, as typed: kept for this tab's session, sent by the admin requests.
function initAdminToken() {
  const input = $('#admin-token');
  const keep = () => {
    const token = input.value.trim();
    sessionStorage.setItem('seckill-admin', token);
    store.set({ adminToken: token });
  };
  input.value = sessionStorage.getItem('seckill-admin') || '';
  keep();
  input.addEventListener('input', keep);
}

// The language first: every section draws in it from its first subscription.
initI18n();
initStatus();
initAdminToken();
initLog();
initAccount();
initShop();
initOrders();
initSimulator();
initRush();
initQueue();
initHerd();
initCrash();
initMoney();
initLab();
// At every opening of the stream (the first, and after the server was away) the products and
// lock views are read whole: updates sent while the stream was closed were missed.
openEvents('/api/events', { product: onProductEvent, queue: onQueueEvent, demo: onDemoEvent }, () => {
  loadProducts();
  reloadLockViews();
  // A server that was away at the start has not said yet how buyers sign in.
  if (store.get().session.mode === null) checkSession();
});
loadProducts();
