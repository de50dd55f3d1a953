// The event log: sold out, oversold, the demos' zombies and crashes. A plain list, not a live
// region: during a sale it changes faster than anyone could listen.

import { locale, t } from './i18n.js';
import { $, el } from './render.js';
import { store } from './state.js';

const KEEP = 100;

/// Logs a line, kept as key and params so that a language switch redraws it.
export function log(key, params, bad = false) {
  store.set({ log: [{ key, params, bad, at: new Date() }, ...store.get().log].slice(0, KEEP) });
}

export function initLog() {
  const list = $('#log');
  store.subscribe(['log', 'lang'], (state) =>
    list.replaceChildren(
      ...state.log.map(({ key, params, bad, at }) => el('li', { class: bad ? 'bad' : null }, `${at.toLocaleTimeString(locale())} ${t(key, params)}`)),
    ),
  );
}
