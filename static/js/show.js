// Results and errors as data, drawn in the page's language: a section stores what an output
// says ({tone, key, params}, or {problem} from js/api.js) under a key of the store, and the
// output is redrawn when that changes or the language does.

import { has, t, tHtml } from './i18n.js';
import { $, html, setHtml, setText } from './render.js';
import { store } from './state.js';

/// An error answer, in the page's language: by its stable code, the server's (English)
/// message only for a code the dictionaries do not know; no answer at all, said as such.
/// `messageKey` puts the page's own words in place of the code's.
export function showProblem(out, problem, messageKey) {
  out.classList.add('err');
  out.classList.remove('ok');
  if (problem.unanswered) return setText(out, t(`error.${problem.unanswered}`));
  const { code } = problem;
  let message = problem.message || t('error.no_answer');
  if (messageKey) message = tHtml(messageKey);
  else if (code && has(`error.${code}`)) message = tHtml(`error.${code}`, { message: problem.message });
  return setHtml(out, tHtml('error.line', { status: problem.status, code: code ? html`<code data-ident>${code}</code>` : '', message }));
}

/// Draws `said` into `out`: nothing, a problem, or a text with its tone (ok, err, or none).
export function say(out, said) {
  if (said?.problem) return showProblem(out, said.problem, said.messageKey);
  out.classList.toggle('ok', said?.tone === 'ok');
  out.classList.toggle('err', said?.tone === 'err');
  return setText(out, said ? t(said.key, said.params) : '');
}

/// Binds the output `selector` to the store's `key`.
export function bindOutput(selector, key) {
  const out = $(selector);
  store.subscribe([key, 'lang'], (state) => say(out, state[key]));
}
