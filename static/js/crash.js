// 5 · Crash and zombie: arms a demo on a product's next lock holder; the event stream's
// `demo` events say what came of it, in the event log.

import { request } from './api.js';
import { $, busy } from './render.js';
import { bindOutput } from './show.js';
import { log, store } from './state.js';
import { fillSelect, locked, productList } from './products.js';

async function arm(mode, button) {
  const id = Number($('#demo-product').value);
  const { ok, problem } = await busy(button, () =>
    request(`/api/products/${id}/demo`, { method: 'POST', admin: true, body: { mode } }),
  );
  store.set({ demoSaid: ok ? { tone: 'ok', key: `demo.armed_${mode}`, params: { id } } : { problem } });
}

/// A `demo` event: a zombie's write (accepted, or rejected by the fence) or a crash.
export function onDemoEvent(d) {
  const id = d.product_id;
  if (d.kind === 'zombie' && d.write === 'accepted') {
    log('log.zombie_accepted', { id, token: d.stale_token });
  } else if (d.kind === 'zombie') {
    log('log.zombie_rejected', { id, stale: d.stale_token, current: d.current_token }, true);
  } else if (d.kind === 'crash') {
    log('log.crash', { id, token: d.token }, true);
  }
}

export function initCrash() {
  const select = $('#demo-product');
  store.subscribe(['products', 'lang'], (state) => fillSelect(select, productList(state).filter(locked)));
  bindOutput('#demo-result', 'demoSaid');
  for (const mode of ['zombie', 'crash']) {
    const button = $(`#demo-${mode}`);
    button.addEventListener('click', () => arm(mode, button));
  }
}
