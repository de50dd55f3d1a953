// 7 · The lock lab: the payment semaphore and the chosen product's terms lock (a read-write
// lock), polled while the page is visible (the event stream carries neither). Lab holders are
// real holders of those locks, made and let go through the admin endpoints. The lists are
// plain lists, not live regions, of js/widgets.js's tickets; what an action did is said in its
// result. The terms lock follows the product picked in the lock queue (store `queuePicked`).

import { request, sleep } from './api.js';
import { locale, t } from './i18n.js';
import { $, $$, el, setText } from './render.js';
import { bindOutput } from './show.js';
import { store } from './state.js';
import { fillSelect, productList } from './products.js';
import { ticket, watchText } from './widgets.js';

const POLL_MS = 400;
// With the server away, a poll every two seconds is enough to see it back.
const AWAY_POLL_MS = 2000;
const SEMAPHORE = '/api/payments/semaphore';
const termsPath = (id) => `/api/products/${id}/terms-lock`;

// Draws `items()` into `list` only when `from` (the data, in the current language) changed:
// the views are polled, and an unchanged list is left alone (focus, selection).
function drawList(list, from, items) {
  const drawn = `${locale()}|${JSON.stringify(from)}`;
  if (list.dataset.drawn === drawn) return;
  list.dataset.drawn = drawn;
  list.replaceChildren(...items());
}

const rwProduct = () => Number($('#rw-product').value) || null;
const empty = (key) => [el('li', { class: 'empty' }, t(key))];

function renderSemaphore({ semView: view }) {
  if (!view) return;
  setText($('#sem-path'), view.path);
  $('#sem-off').hidden = view.enabled;
  for (const button of $$('#sem .controls button')) button.disabled = !view.enabled;
  // N slots: the leases held, then the free ones (more held than N only while N changes).
  drawList($('#sem-leases'), [view.max_leases, view.leases], () => {
    const held = view.leases.map((tk) => ticket(tk, true, t('sem.holds')));
    const free = Array.from({ length: Math.max(0, view.max_leases - view.leases.length) }, () =>
      el('li', { class: 'ticket free' }, el('div', { class: 'num' }, '–'), el('div', {}, t('sem.free'))),
    );
    return held.length + free.length ? [...held, ...free] : empty('sem.no_leases');
  });
  // The acquirer whose lease node is over N watches the leases (no one node); the ones
  // behind it take turns at the recipe's mutex, each watching the one before.
  drawList($('#sem-waiters'), view.waiters, () =>
    view.waiters.length
      ? view.waiters.map((tk) => ticket(tk, false, t('ticket.waiting'), tk.watches ? watchText(tk) : t('sem.watches_leases')))
      : empty('lab.nobody_waits'),
  );
  $('#sem-leases').dataset.held = view.leases.length;
  $('#sem-waiters').dataset.waiting = view.waiters.length;
}

function renderTerms({ rwView: view }) {
  if (!view) {
    // A product chosen, its view on its way: the last one stays until it comes.
    if (rwProduct()) return;
    setText($('#rw-path'), '');
    drawList($('#rw-holders'), null, () => empty('rw.pick'));
    drawList($('#rw-waiters'), null, () => []);
    return;
  }
  setText($('#rw-path'), view.path);
  // Readers share: all of them side by side; a writer holds alone.
  drawList($('#rw-holders'), view.holders, () =>
    view.holders.length
      ? view.holders.map((tk) => ticket(tk, true, t(tk.access === 'write' ? 'rw.writes' : 'rw.reads')))
      : empty('rw.free'),
  );
  drawList($('#rw-waiters'), view.waiters, () =>
    view.waiters.length ? view.waiters.map((tk) => ticket(tk, false, t('ticket.waiting'))) : empty('lab.nobody_waits'),
  );
}

async function refreshSemaphore() {
  const { ok, body } = await request(SEMAPHORE);
  if (ok) store.set({ semView: body });
}

async function refreshTerms() {
  const id = rwProduct();
  if (!id) return store.set({ rwView: null });
  const { ok, body } = await request(termsPath(id));
  // A product switched meanwhile: this answer is for the one before.
  if (ok && body.product_id === rwProduct()) store.set({ rwView: body });
  return undefined;
}

// One poller for both panels while the page is visible; a hidden page asks nothing, and
// polling resumes when it shows again.
async function poll() {
  if (store.get().labPolling) return;
  store.set({ labPolling: true });
  try {
    while (!document.hidden) {
      try {
        await Promise.all([refreshSemaphore(), refreshTerms()]);
      } catch (error) {
        // One bad round (a view that would not draw) must not end the polling: said, then on.
        console.error('lock lab:', error);
      }
      await sleep(store.get().conn === 'away' ? AWAY_POLL_MS : POLL_MS);
    }
  } finally {
    store.set({ labPolling: false });
  }
}

// The lab holders that went between two lists of them: the one a release let go.
const goneFrom = (before, after) =>
  (before ?? []).filter((h) => !(after ?? []).some((a) => a.label === h.label)).map((h) => h.label);

// One of the lab's buttons: its answer is drawn at once, and said through `say` (which stores
// it) by `done({started, released, none})`. The result counts its answers and names the lab
// holder the last one started or let go (data-answers, data-label).
async function labAction(path, action, out, say, done) {
  const terms = path !== SEMAPHORE;
  const before = store.get()[terms ? 'rwView' : 'semView']?.lab;
  const { ok, body, problem } = await request(path, { method: 'POST', admin: true, body: { action } });
  out.dataset.answers = Number(out.dataset.answers ?? 0) + 1;
  out.dataset.label = '';
  if (!ok) {
    // 404 no_lock from the semaphore: the server bounds no payments (its note says so).
    const messageKey = !terms && problem.code === 'no_lock' ? 'sem.disabled' : undefined;
    return say({ problem, messageKey });
  }
  // A new holder is the newest of this lock's lab holders.
  const started = ['acquire', 'read', 'write'].includes(action) ? body.lab.at(-1)?.label : undefined;
  const [released] = goneFrom(before, body.lab);
  // Nothing to let go: no lab holder of this lock in the last view, nor now.
  const none = !before?.length && !body.lab.length;
  out.dataset.label = started ?? released ?? '';
  say({ tone: 'ok', ...done({ started, released, none }) });
  if (!terms) return store.set({ semView: body });
  if (body.product_id === rwProduct()) store.set({ rwView: body });
  return undefined;
}

const semSaid = (action, { started, released, none }) => {
  if (action === 'acquire') return { key: 'sem.acquired', params: { label: started ?? '' } };
  if (action === 'clear') return { key: 'sem.cleared' };
  if (released) return { key: 'sem.released', params: { label: released } };
  return { key: none ? 'sem.nothing' : 'sem.release_sent' };
};

const rwSaid = (action, id, { started, released, none }) => {
  if (action === 'read' || action === 'write') return { key: `rw.started_${action}`, params: { label: started ?? '', id } };
  if (action === 'clear') return { key: 'rw.cleared', params: { id } };
  if (released) return { key: 'rw.released', params: { label: released } };
  return { key: none ? 'rw.nothing' : 'rw.release_sent' };
};

export function initLab() {
  const select = $('#rw-product');
  // Every product has terms, so the lab's terms lock is there whatever the guard.
  store.subscribe(['products', 'lang'], (state) => fillSelect(select, productList(state)));
  store.subscribe(['semView', 'lang'], renderSemaphore);
  store.subscribe(['rwView', 'lang'], renderTerms);
  bindOutput('#sem-result', 'semSaid');
  bindOutput('#rw-result', 'rwSaid');
  for (const action of ['acquire', 'release', 'clear']) {
    $(`#sem-${action}`).addEventListener('click', () =>
      labAction(SEMAPHORE, action, $('#sem-result'), (said) => store.set({ semSaid: said }), (what) => semSaid(action, what)),
    );
  }
  for (const action of ['read', 'write', 'release', 'clear']) {
    $(`#rw-${action}`).addEventListener('click', () => {
      const id = rwProduct();
      if (!id) return store.set({ rwSaid: { key: 'rw.pick' } });
      return labAction(termsPath(id), action, $('#rw-result'), (said) => store.set({ rwSaid: said }), (what) => rwSaid(action, id, what));
    });
  }
  const switched = () => {
    store.set({ rwView: null }); // another lock: its lab holders are not the last view's
    refreshTerms();
  };
  select.addEventListener('change', switched);
  // A product picked in the lock queue (js/queue.js): the terms lock follows it.
  store.subscribe(['queuePicked'], ({ queuePicked }) => {
    if (!queuePicked) return;
    select.value = String(queuePicked.id);
    switched();
  });
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) poll();
  });
  poll();
}
