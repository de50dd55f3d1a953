// The switch between the page's two languages, and t(): the texts themselves are in
// /i18n/en.js and /i18n/zh.js, one dictionary each, under the same stable keys. index.html
// names keys in data-i18n* attributes; the sections call t(key, params) and subscribe to
// the store's `lang` to redraw what they drew from data.

import en from '/i18n/en.js';
import zh from '/i18n/zh.js';
import { store } from './state.js';
import { $$, SafeHtml, escapeHtml, setHtml, trusted } from './render.js';

const STORAGE_KEY = 'seckill-lang';

export const dictionaries = { en, zh };
export const languages = Object.keys(dictionaries);

// A choice made on this page wins; otherwise the browser's language.
function detect() {
  try {
    const saved = localStorage.getItem(STORAGE_KEY);
    if (languages.includes(saved)) return saved;
  } catch {
    // Storage can be off (privacy settings): fall back to the browser's language.
  }
  return (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

const current = () => store.get().lang;
// For dates, times and money: the page's language, not the browser's.
export const locale = () => (current() === 'zh' ? 'zh-CN' : 'en-US');
export const has = (key) => key in dictionaries[current()];

/// The text for `key` in the current language, with each {name} replaced by params[name].
export function t(key, params = {}) {
  const text = dictionaries[current()][key] ?? en[key];
  if (text === undefined) {
    console.warn(`i18n: no text for ${key}`);
    return key;
  }
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

/// t() for markup: the dictionary's own markup is kept, params are escaped unless SafeHtml.
export function tHtml(key, params = {}) {
  const safe = {};
  for (const [name, value] of Object.entries(params)) safe[name] = value instanceof SafeHtml ? value.html : escapeHtml(value);
  return trusted(t(key, safe));
}

/// Writes the current language into the static page: data-i18n (text), data-i18n-html
/// (text with markup), data-i18n-attr ("attr:key,attr:key"), the long-form [data-text]
/// blocks, the switch's state and <html lang>.
function applyTexts() {
  for (const el of $$('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of $$('[data-i18n-html]')) setHtml(el, trusted(t(el.dataset.i18nHtml)));
  for (const el of $$('[data-i18n-attr]')) {
    for (const pair of el.dataset.i18nAttr.split(',')) {
      const [attr, key] = pair.split(':').map((s) => s.trim());
      el.setAttribute(attr, t(key));
    }
  }
  for (const block of $$('[data-text]')) block.hidden = block.dataset.text !== current();
  for (const button of $$('button[data-lang]')) button.setAttribute('aria-pressed', String(button.dataset.lang === current()));
  document.documentElement.lang = current() === 'zh' ? 'zh-CN' : 'en';
}

/// Switches the whole page live, and remembers the choice for the next visit.
function setLanguage(lang) {
  if (!languages.includes(lang)) return;
  try {
    localStorage.setItem(STORAGE_KEY, lang);
  } catch {
    // Not remembered, still switched.
  }
  store.set({ lang });
}

/// The first pass over the page, and the switch's buttons. First of all: the static texts
/// are redrawn before any section's subscriber draws from data.
export function initI18n() {
  store.set({ lang: detect() });
  store.subscribe(['lang'], applyTexts);
  for (const button of $$('button[data-lang]')) button.addEventListener('click', () => setLanguage(button.dataset.lang));
}
