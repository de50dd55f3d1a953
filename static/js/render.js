// Rendering that escapes by construction. Text goes into the page as text (el(), setText());
// markup only as SafeHtml: built by the html`` tag, which escapes every interpolation, or
// marked trusted() (the page's own dictionaries). setHtml() takes nothing else, and is the
// only place in the page that writes innerHTML.

export class SafeHtml {
  constructor(html) {
    this.html = html;
  }
}

export const escapeHtml = (s) =>
  String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

// The page's own markup (a dictionary's text): never anything that came from a server or a reader.
export const trusted = (markup) => new SafeHtml(markup);

const piece = (value) => {
  if (value instanceof SafeHtml) return value.html;
  if (Array.isArray(value)) return value.map(piece).join('');
  return value === null || value === undefined || value === false ? '' : escapeHtml(value);
};

/// html`<b>${text}</b>`: every interpolation escaped, unless it is SafeHtml already.
export const html = (strings, ...values) => new SafeHtml(strings.reduce((out, s, i) => out + piece(values[i - 1]) + s));

// The markup each node was last given, and what the browser made of it: an unchanged
// rewrite is skipped, since a live region announces every write, even of the same words.
const written = new WeakMap();

export function setHtml(node, safe) {
  if (!(safe instanceof SafeHtml)) throw new TypeError('setHtml takes html`` or trusted() markup only');
  const last = written.get(node);
  if (last && last.given === safe.html && last.made === node.innerHTML) return;
  node.innerHTML = safe.html;
  written.set(node, { given: safe.html, made: node.innerHTML });
}

/// Writes `text` only when it differs: a live region announces every write, even of the same words.
export function setText(node, text) {
  const value = String(text ?? '');
  if (node.textContent !== value) node.textContent = value;
}

function fragment(safe) {
  const template = document.createElement('template');
  setHtml(template, safe);
  return template.content;
}

/// el('li', { class: 'ticket', 'data-node': name }, child, ...): children are nodes, SafeHtml,
/// or text (escaped by the DOM); null, undefined and false are left out, arrays flattened.
/// An attribute that is true is written empty (data-ident); null, undefined or false not at all.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof SafeHtml ? fragment(child) : child);
  }
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

/// Disables `button` while `work` runs, and gives it back however the work ends.
export async function busy(button, work) {
  button.disabled = true;
  try {
    return await work();
  } finally {
    button.disabled = false;
  }
}
