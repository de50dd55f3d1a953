// The page's modules, read as text (no browser, no server): the shape TodoMVC keeps. No
// section imports another section: they share the modules under them (widgets.js: a buyer, a
// ticket, a lock view; products.js, show.js, render.js...), and only main.js, which starts
// them, imports sections. No section touches an element another section touches: what one
// changes for another goes through the store. Every key the store is given or asked for is
// declared in state.js, with a comment naming the modules that write it; and the imports run
// one way, with no circle.
//
// Run by scripts/test with the browser tests (it needs neither): node --test modules.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const JS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'static', 'js');

// The page's sections, each with the modules that draw it (static/index.html's <section>s;
// the herd module also runs the queue's step-through, which no other module touches).
const SECTIONS = {
  shop: ['account.js', 'line-view.js', 'line.js', 'orders.js', 'sale.js', 'shop.js'],
  simulator: ['rush-model.js', 'rush.js', 'simulator.js'],
  queue: ['queue.js'],
  herd: ['herd.js'],
  crash: ['crash.js'],
  money: ['money.js'],
  lab: ['lab.js'],
  log: ['log.js'],
};
// What sections share: none of these imports a section, nor names an element.
const SHARED = ['api.js', 'clock.js', 'i18n.js', 'products.js', 'render.js', 'show.js', 'state.js', 'widgets.js'];
// Starts every section: the one module that imports them (and the header's own elements).
const MAIN = 'main.js';
// The helpers that take a store key as a parameter (their callers' keys are checked): the
// only places a key may be a variable.
const KEY_PARAMS = { 'state.js': ['key'], 'show.js': ['key'] };

// ---------------------------------------------------------------- reading JavaScript

const CLOSE = { '(': ')', '[': ']', '{': '}' };

// Whether a `/` after `prev` (the code before it) starts a regular expression, not a division.
const regexMayStart = (prev) => /(^|[(,=:[!&|?{};+\-*%<>~^]|\breturn|\btypeof|\bcase)\s*$/.test(prev);

// The end (exclusive) of the string, template, comment or regular expression starting at `i`,
// or -1 if none starts there.
function literalEnd(src, i) {
  const c = src[i];
  if (c === '"' || c === "'") {
    let j = i + 1;
    while (src[j] !== c) {
      if (j >= src.length) throw new Error(`unclosed ${c} at ${i}`);
      j += src[j] === '\\' ? 2 : 1;
    }
    return j + 1;
  }
  if (c === '`') {
    let j = i + 1;
    while (src[j] !== '`') {
      if (j >= src.length) throw new Error(`unclosed \` at ${i}`);
      if (src[j] === '\\') j += 2;
      else if (src[j] === '$' && src[j + 1] === '{') j = closeOf(src, j + 1) + 1;
      else j += 1;
    }
    return j + 1;
  }
  if (c === '/' && src[i + 1] === '/') {
    const end = src.indexOf('\n', i);
    return end < 0 ? src.length : end;
  }
  if (c === '/' && src[i + 1] === '*') return src.indexOf('*/', i + 2) + 2;
  if (c === '/' && regexMayStart(src.slice(Math.max(0, i - 12), i))) {
    let j = i + 1;
    let inClass = false;
    while (inClass || src[j] !== '/') {
      if (j >= src.length || src[j] === '\n') throw new Error(`unclosed regular expression at ${i}`);
      if (src[j] === '\\') j += 1;
      else if (src[j] === '[') inClass = true;
      else if (src[j] === ']') inClass = false;
      j += 1;
    }
    j += 1;
    while (/[a-z]/i.test(src[j] ?? '')) j += 1;
    return j;
  }
  return -1;
}

/// The index of the bracket closing the one at `open`.
function closeOf(src, open) {
  const stack = [CLOSE[src[open]]];
  for (let i = open + 1; i < src.length; ) {
    const end = literalEnd(src, i);
    if (end >= 0) {
      i = end;
      continue;
    }
    const c = src[i];
    if (CLOSE[c]) stack.push(CLOSE[c]);
    else if (c === stack.at(-1)) {
      stack.pop();
      if (!stack.length) return i;
    }
    i += 1;
  }
  throw new Error(`unclosed ${src[open]} at ${open}`);
}

/// The source with its comments blanked (newlines kept): strings and templates stay as written.
function stripComments(src) {
  let out = '';
  for (let i = 0; i < src.length; ) {
    const end = literalEnd(src, i);
    if (end < 0) {
      out += src[i];
      i += 1;
    } else {
      const piece = src.slice(i, end);
      out += /^\/[/*]/.test(piece) ? piece.replace(/[^\n]/g, ' ') : piece;
      i = end;
    }
  }
  return out;
}

/// The source with the text of its strings and templates blanked (their quotes and a
/// template's ${...} kept): where to look for code, at the same places as in `src`.
function codeOnly(src) {
  let out = '';
  for (let i = 0; i < src.length; ) {
    const end = literalEnd(src, i);
    if (end < 0 || !/^['"`]/.test(src[i])) {
      out += src.slice(i, end < 0 ? i + 1 : end);
      i = end < 0 ? i + 1 : end;
    } else if (src[i] !== '`') {
      out += src[i] + ' '.repeat(end - i - 2) + src[i];
      i = end;
    } else {
      // A template: its text blanked, its ${...} kept as code.
      let j = i + 1;
      out += '`';
      while (j < end - 1) {
        if (src[j] === '$' && src[j + 1] === '{') {
          const close = closeOf(src, j + 1);
          out += `$${codeOnly(src.slice(j + 1, close + 1))}`;
          j = close + 1;
        } else {
          out += src[j] === '\n' ? '\n' : ' ';
          j += 1;
        }
      }
      out += '`';
      i = end;
    }
  }
  return out;
}

/// The top-level, comma-separated parts of src[from, to), each with where it starts.
function parts(src, from, to) {
  const found = [];
  let start = from;
  for (let i = from; i < to; ) {
    const end = literalEnd(src, i);
    if (end >= 0) {
      i = end;
      continue;
    }
    if (CLOSE[src[i]]) {
      i = closeOf(src, i) + 1;
      continue;
    }
    if (src[i] === ',') {
      found.push({ text: src.slice(start, i), at: start });
      start = i + 1;
    }
    i += 1;
  }
  found.push({ text: src.slice(start, to), at: start });
  return found
    .map(({ text, at }) => ({ text: text.trim(), at: at + text.length - text.trimStart().length }))
    .filter(({ text }) => text);
}

// The string and template literals in an expression: a key it may name. A template's
// ${...} stands for any text.
function literals(expr) {
  return [...expr.matchAll(/'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|`([^`]*)`/g)].map((m) =>
    m[3] === undefined ? { name: m[1] ?? m[2] } : { pattern: m[3] },
  );
}

// An object literal's or destructuring pattern's keys: {name}, {pattern} (a computed key's
// template), or {dynamic: expr} (a key not written out).
function keysOf(body) {
  const keys = [];
  for (const { text } of parts(body, 0, body.length)) {
    if (text.startsWith('...')) keys.push({ dynamic: text });
    else if (text.startsWith('[')) {
      const expr = text.slice(1, closeOf(text, 0));
      const named = literals(expr);
      keys.push(...(named.length ? named : [{ dynamic: expr.trim() }]));
    } else {
      const m = /^(?:'([^']*)'|"([^"]*)"|([A-Za-z_$][\w$]*))/.exec(text);
      keys.push(m ? { name: m[1] ?? m[2] ?? m[3] } : { dynamic: text });
    }
  }
  return keys;
}

// The argument list of the call whose `(` is at `open`.
const argsOf = (src, open) => parts(src, open + 1, closeOf(src, open));

// One argument as a key: its literal, or {dynamic}.
function argKey(arg) {
  if (!arg) return [{ dynamic: '(none)' }];
  const named = literals(arg.text);
  return /^['"`]/.test(arg.text) && named.length === 1 ? named : [{ dynamic: arg.text }];
}

const files = readdirSync(JS).filter((f) => f.endsWith('.js')).sort();
const sectionOf = new Map(Object.entries(SECTIONS).flatMap(([name, list]) => list.map((f) => [f, name])));
// Each module without its comments, and its code alone (the text of its strings blanked).
const source = new Map(files.map((f) => [f, stripComments(readFileSync(join(JS, f), 'utf8'))]));
const code = new Map(files.map((f) => [f, codeOnly(source.get(f))]));

// ---------------------------------------------------------------- the store's keys

// state.js's `createStore({...})`: each key, and the comment beside and above it.
function declared() {
  const raw = readFileSync(join(JS, 'state.js'), 'utf8');
  const src = source.get('state.js');
  const open = src.indexOf('{', src.indexOf('export const store = createStore('));
  const lines = raw.split('\n');
  const keys = new Map();
  for (const { text, at } of parts(src, open + 1, closeOf(src, open))) {
    const [key] = keysOf(text);
    assert.ok(key.name, `state.js declares a key that is not written out: ${text}`);
    const line = src.slice(0, at).split('\n').length - 1;
    const comment = [lines[line].split(/\s\/\/\s/).slice(1).join(' ')];
    for (let above = line - 1; above >= 0 && /^\s*\/\//.test(lines[above]); above -= 1) comment.push(lines[above]);
    keys.set(key.name, comment.join(' '));
  }
  return keys;
}

// Every key a module names for the store, as {file, key, write}: given to store.set(),
// patch() or setEntry(); asked of store.get(), store.subscribe() or bindOutput(); read from
// the state a listener or a function is handed (`state.x`, `({ x }) =>`, `function f({ x })`).
function uses(file) {
  const src = source.get(file);
  const at = code.get(file);
  const found = [];
  const add = (keys, write) => {
    for (const key of keys) found.push({ file, key, write });
  };
  for (const m of at.matchAll(/\bstore\.set\(\s*/g)) {
    const open = m.index + m[0].length;
    if (src[open] !== '{') add([{ dynamic: 'store.set() of no object literal' }], true);
    else add(keysOf(src.slice(open + 1, closeOf(src, open))), true);
  }
  for (const m of at.matchAll(/(?<![\w$.])(patch|setEntry)\(/g)) add(argKey(argsOf(src, m.index + m[0].length - 1)[0]), true);
  for (const m of at.matchAll(/(?<![\w$.])bindOutput\(/g)) add(argKey(argsOf(src, m.index + m[0].length - 1)[1]), false);
  for (const m of at.matchAll(/\bstore\.subscribe\(/g)) {
    const [keys, listener] = argsOf(src, m.index + m[0].length - 1);
    if (!keys.text.startsWith('[')) add([{ dynamic: keys.text }], false);
    else add(parts(keys.text, 1, closeOf(keys.text, 0)).flatMap(argKey), false);
    // A listener that destructures the state: inline, or a function of this module.
    const inline = /^\(\s*\{/.exec(listener.text);
    const named = /^[A-Za-z_$][\w$]*$/.test(listener.text) && new RegExp(`function ${listener.text}\\(\\s*\\{`).exec(at);
    const pattern = inline ? listener.text.indexOf('{') : named ? named.index + named[0].length - 1 : -1;
    const text = inline ? listener.text : src;
    if (pattern >= 0) add(keysOf(text.slice(pattern + 1, closeOf(text, pattern))), false);
  }
  for (const m of at.matchAll(/\bstore\.get\(\)\s*(\.\s*([A-Za-z_$][\w$]*)|\[)?/g)) {
    if (m[2]) add([{ name: m[2] }], false);
    else if (m[1] === '[') {
      const open = m.index + m[0].length - 1;
      const expr = src.slice(open + 1, closeOf(src, open));
      const named = literals(expr);
      add(named.length ? named : [{ dynamic: expr.trim() }], false);
    }
  }
  // Destructured: `const { a, b: c } = store.get()`, `({ session } = store.get())`.
  for (const m of at.matchAll(/\{([^{}]*)\}\s*=\s*store\.get\(\)(?!\s*[.[])/g)) add(keysOf(m[1]), false);
  // What a listener or a function is handed: `state.x`, `state[...]` (a variable named state).
  for (const m of at.matchAll(/(?<![\w$.])state\s*(?:\.\s*([A-Za-z_$][\w$]*)|\[)/g)) {
    if (m[1]) add([{ name: m[1] }], false);
    else {
      const open = m.index + m[0].length - 1;
      const expr = src.slice(open + 1, closeOf(src, open));
      const named = literals(expr);
      add(named.length ? named : [{ dynamic: expr.trim() }], false);
    }
  }
  return found;
}

const matches = (key, name) =>
  key.name !== undefined
    ? key.name === name
    : new RegExp(`^${key.pattern.split(/\$\{[^}]*\}/).map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.+')}$`).test(name);

// ---------------------------------------------------------------- imports and elements

// The modules of static/js a module imports.
const importsOf = (file) =>
  [...source.get(file).matchAll(/\bimport\s*(?:[^'"`;]*?\bfrom\s*)?['"]\.\/([\w.-]+\.js)['"]|\bimport\(\s*['"]\.\/([\w.-]+\.js)['"]/g)].map(
    (m) => m[1] ?? m[2],
  );

// The element ids a module names in its selectors ($, $$, bindOutput): a template's ${...}
// stands for any text (`lane-*`).
function idsOf(file) {
  const src = source.get(file);
  const ids = new Set();
  for (const m of code.get(file).matchAll(/(?<![\w$.])(\$\$?|bindOutput)\(/g)) {
    const [selector] = argsOf(src, m.index + m[0].length - 1);
    if (!selector || !/^['"`]/.test(selector.text)) continue;
    const text = selector.text.slice(1, -1).replace(/\$\{[^}]*\}/g, '*');
    for (const id of text.matchAll(/#([A-Za-z][\w*-]*)/g)) ids.add(id[1]);
  }
  return ids;
}

const idPattern = (id) => new RegExp(`^${id.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\-]/g, '\\$&')).join('[\\w-]+')}$`);
const sameElement = (x, y) => idPattern(x).test(y.replaceAll('*', 'x')) || idPattern(y).test(x.replaceAll('*', 'x'));

// ---------------------------------------------------------------- the tests

test('every module of static/js is a section\'s, shared, or main.js', () => {
  const unknown = files.filter((f) => !sectionOf.has(f) && !SHARED.includes(f) && f !== MAIN);
  assert.deepEqual(unknown, [], 'modules to add to SECTIONS or SHARED in this test');
  const gone = [...sectionOf.keys(), ...SHARED].filter((f) => !files.includes(f));
  assert.deepEqual(gone, [], 'modules this test names that static/js no longer has');
});

test('no section imports another section, no shared module imports a section', () => {
  const wrong = [];
  for (const file of files) {
    for (const imported of importsOf(file)) {
      assert.ok(files.includes(imported), `${file} imports ${imported}, which static/js does not have`);
      const to = sectionOf.get(imported);
      if (!to || file === MAIN) continue;
      const from = sectionOf.get(file);
      if (!from) wrong.push(`${file} (shared) → ${imported} (${to})`);
      else if (from !== to) wrong.push(`${file} (${from}) → ${imported} (${to})`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('the imports run one way: no circle', () => {
  const state = new Map(); // file -> 'open' while its imports are followed, then 'done'
  const visit = (file, path) => {
    if (state.get(file) === 'done') return;
    assert.notEqual(state.get(file), 'open', `a circle: ${[...path, file].join(' → ')}`);
    state.set(file, 'open');
    for (const imported of importsOf(file)) visit(imported, [...path, file]);
    state.set(file, 'done');
  };
  for (const file of files) visit(file, []);
});

test('every store key a module names is declared in state.js', () => {
  const keys = declared();
  const names = [...keys.keys()];
  const wrong = [];
  for (const file of files) {
    for (const { key } of uses(file)) {
      if (key.dynamic !== undefined) {
        if (!(KEY_PARAMS[file] ?? []).includes(key.dynamic)) wrong.push(`${file}: a key not written out: ${key.dynamic}`);
      } else if (!names.some((name) => matches(key, name))) {
        wrong.push(`${file}: ${key.name ?? `\`${key.pattern}\``}, not declared`);
      }
    }
  }
  assert.deepEqual([...new Set(wrong)], []);
  // The store is read and written by name in these: a check that finds nothing checks nothing.
  for (const file of ['simulator.js', 'lab.js', 'herd.js', 'queue.js', 'shop.js']) {
    assert.ok(uses(file).filter(({ write }) => write).length > 0, `no store write found in ${file}`);
  }
});

test('every declared store key is written, by the modules its comment names', () => {
  const wrong = [];
  const all = files.flatMap(uses).filter(({ write, key }) => write && key.dynamic === undefined);
  for (const [name, comment] of declared()) {
    const named = new Set([...comment.matchAll(/js\/([\w-]+\.js)/g)].map((m) => m[1]));
    const writers = new Set(all.filter(({ key }) => matches(key, name)).map(({ file }) => file));
    if (!writers.size) wrong.push(`${name}: nobody writes it`);
    if (!named.size) wrong.push(`${name}: no comment naming who writes it (js/….js)`);
    for (const writer of writers) if (!named.has(writer)) wrong.push(`${name}: written by ${writer}, which its comment does not name`);
  }
  assert.deepEqual(wrong, []);
});

test('no section touches another section\'s elements; shared modules name none', () => {
  const owners = []; // [id, section, file]
  for (const file of files) {
    const ids = idsOf(file);
    if (SHARED.includes(file)) assert.deepEqual([...ids], [], `${file} (shared) names elements`);
    if (sectionOf.has(file)) for (const id of ids) owners.push([id, sectionOf.get(file), file]);
  }
  const wrong = [];
  for (const [id, section, file] of owners) {
    for (const [other, otherSection, otherFile] of owners) {
      if (section < otherSection && sameElement(id, other)) wrong.push(`#${id} (${file}) and #${other} (${otherFile})`);
    }
  }
  assert.deepEqual(wrong, []);
  // Found at all: the lab's terms select, the simulator's lanes.
  assert.ok(idsOf('lab.js').has('rw-product') && idsOf('simulator.js').has('lane-*'), 'the selectors were read');
});
