// Who buys: the server's mode (GET /api/session) and the page's buyer. In `demo` mode a name
// signs in (POST /api/session) for a short-lived token; in `jwks` mode a token from the
// deployment's identity provider is pasted; in `open` mode (teaching only) the name typed is
// the buyer, with no token. The token and its name are kept for this tab's session
// (sessionStorage); js/api.js sends the token with every request and signs in again by the
// name when the token is refused.

import { request, signIn } from './api.js';
import { t, tHtml } from './i18n.js';
import { $, html, setHtml, setText } from './render.js';
import { showProblem } from './show.js';
import { store } from './state.js';

const TOKEN_KEY = 'seckill-buyer-token';
const NAME_KEY = 'seckill-buyer-name';

const setSession = (changes) => store.set({ session: { ...store.get().session, ...changes } });

/// The name the page buys as: the signed-in buyer (demo, jwks), or the name typed (open).
export function buyerName({ session } = store.get()) {
  if (session.mode === 'open') return $('#buy-user').value.trim() || null;
  return session.buyer;
}

// Storage can be off (privacy settings): the sign-in then lasts as long as the page.
function remember({ token, name }) {
  try {
    for (const [key, value] of [[TOKEN_KEY, token], [NAME_KEY, name]]) {
      if (value) sessionStorage.setItem(key, value);
      else sessionStorage.removeItem(key);
    }
  } catch {
    // Not kept, still signed in.
  }
}

function recalled() {
  try {
    return { token: sessionStorage.getItem(TOKEN_KEY) ?? '', name: sessionStorage.getItem(NAME_KEY) ?? '' };
  } catch {
    return { token: '', name: '' };
  }
}

/// Asks the server in which mode it runs and whom it takes the page's token for (at start,
/// and at every opening of the event stream while the mode is not known). A token it refuses
/// is renewed or dropped by js/api.js, whose session then stands.
export async function checkSession() {
  const asked = store.get().session.token;
  const { ok, body, problem } = await request('/api/session');
  if (!ok) return store.set({ accountSaid: { problem } });
  if (store.get().accountSaid?.problem?.unanswered) store.set({ accountSaid: null });
  const mode = body.buyer_auth;
  // Open mode takes no tokens: one kept from another server is let go.
  const open = mode === 'open' ? { token: '', name: '', buyer: null } : {};
  if (store.get().session.token !== asked) return setSession({ mode, ...open });
  return setSession({ mode, buyer: body.buyer, ...open });
}

async function submit(event) {
  event.preventDefault();
  const { mode } = store.get().session;
  if (mode === null || mode === 'open') return;
  store.set({ accountSaid: null, accountBusy: true });
  try {
    if (mode === 'jwks') {
      // The issuer's token as pasted: the server says whom it names, or refuses it.
      setSession({ token: $('#buyer-token').value.trim(), name: '', buyer: null, refused: null });
      await checkSession();
      return;
    }
    const name = $('#buy-user').value.trim();
    const { ok, body, problem } = await signIn(name);
    if (ok) setSession({ token: body.token, name, buyer: body.buyer, refused: null });
    else store.set({ accountSaid: { problem } });
  } finally {
    store.set({ accountBusy: false });
  }
}

function signOut() {
  $('#buyer-token').value = '';
  store.set({ accountSaid: null });
  setSession({ token: '', name: '', buyer: null, refused: null });
}

// The note for the mode (demo's until the server has said), the fields it takes, and who the
// page buys as. Only what changed is written: #whoami is a live region.
function renderAccount({ session, accountSaid, accountBusy, lang }) {
  const mode = session.mode ?? 'demo';
  const note = $('#account-note');
  const drawn = `${lang}|${mode}`;
  if (note.dataset.drawn !== drawn) {
    note.dataset.drawn = drawn;
    setHtml(note, tHtml(`account.note_${mode}`));
  }
  $('#account').dataset.mode = mode;
  $('#account-name').hidden = mode === 'jwks';
  $('#account-token').hidden = mode !== 'jwks';
  $('#sign-in').hidden = mode === 'open';
  $('#sign-out').hidden = mode === 'open';
  const signedIn = Boolean(session.buyer);
  $('#sign-in').disabled = session.mode === null || signedIn || Boolean(accountBusy);
  $('#sign-out').disabled = !session.token;
  // Signed in, the field shows who; signed out, it takes a name again.
  const user = $('#buy-user');
  // A hidden field must not be required: the form could not be sent, nor say why.
  user.required = mode !== 'jwks';
  $('#buyer-token').required = mode === 'jwks';
  user.readOnly = mode === 'demo' && signedIn;
  if (mode === 'demo' && signedIn && user.value !== session.buyer) user.value = session.buyer;

  const out = $('#whoami');
  out.dataset.buyer = session.buyer ?? '';
  const problem = accountSaid?.problem ?? session.refused;
  if (problem && !signedIn) return showProblem(out, problem);
  out.className = `result whoami${signedIn ? ' ok' : ''}`;
  if (session.mode === null) return setText(out, t('account.asking'));
  if (mode === 'open') return setText(out, t('account.open'));
  if (!signedIn) return setText(out, t(`account.signed_out_${mode}`));
  return setHtml(out, tHtml('account.signed_in', { name: html`<strong data-ident>${session.buyer}</strong>` }));
}

export function initAccount() {
  const { token, name } = recalled();
  setSession({ token, name });
  if (name) $('#buy-user').value = name;
  store.subscribe(['session', 'accountSaid', 'accountBusy', 'lang'], renderAccount);
  store.subscribe(['session'], ({ session }) => remember(session));
  $('#account').addEventListener('submit', submit);
  $('#sign-out').addEventListener('click', signOut);
  checkSession();
}
