// The event log: sold out, oversold, the demos' zombies and crashes, written by any module
// through js/state.js's log() (the store's `log`). A plain list, not a live region: during a
// sale it changes faster than anyone could listen.

import { locale, t } from './i18n.js';
import { $, el } from './render.js';
import { store } from './state.js';

export function initLog() {
  const list = $('#log');
  store.subscribe(['log', 'lang'], (state) =>
    list.replaceChildren(
      ...state.log.map(({ key, params, bad, at }) => el('li', { class: bad ? 'bad' : null }, `${at.toLocaleTimeString(locale())} ${t(key, params)}`)),
    ),
  );
}
