// What the browser test files of the page's sections share (shop, simulator, queue, crash,
// layout, money, survive, languages and lab .test.mjs, each a process of its own): the
// instances a file starts and the browser, a page opened on it (its console errors counted),
// the step mode, the language switch and the checks of what the page says in each language.
// The servers themselves, and the requests made without the page, are harness.mjs's.
//
// Run by scripts/test, with the environment harness.mjs lists.
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ADMIN, launchBrowser, shots, startServer, stopServers } from './harness.mjs';

// Set before the file's tests (useServers): its browser, and its instances.
export let browser;
export let a;
export let b;
// Every console error of the file's pages (its last test asserts there are none).
export const consoleErrors = [];

/// Before the file's tests: its instances, named `names` (none, one or two: `a` and `b`, on the
/// run's database and ZooKeeper root), and the browser; after them, both stopped.
export function useServers(...names) {
  before(async () => {
    mkdirSync(shots, { recursive: true });
    [a, b] = await Promise.all(names.map((name) => startServer(name)));
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    stopServers();
  });
}

// A page in a fresh context (its own localStorage, so no remembered language), in the given
// browser locale: en-US unless a test says otherwise, so the English assertions stay stable.
export async function openPage(base, viewport = { width: 1280, height: 900 }, locale = 'en-US') {
  const page = await browser.newPage({ viewport, locale });
  // Chromium logs every non-2xx fetch as "Failed to load resource"; a 409 sold_out is an
  // answer, not an error. Anything else logged as an error counts.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource: the server responded with a status of (409|429|503)/.test(m.text())) {
      consoleErrors.push(m.text());
    }
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(base);
  await waitLive(page);
  return page;
}

// The event stream is open: the dot turns green (its label is in the page's language).
export const waitLive = (page) => page.locator('#live-dot.on').waitFor({ timeout: 10_000 });

// The queue must be seen live, and a fast sale can be over before the page draws it (CI
// failed so twice): in step mode every holder keeps the lock after its commit (nothing sold
// changes) until 'stop', so the page has a holder and waiters to draw; then the sale runs on.
export async function stepMode(base, product, action) {
  const res = await fetch(`${base}/api/products/${product}/step`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ action }),
  });
  assert.equal(res.status, 202, `step ${action}: ${await res.text()}`);
}

// Every text a reader meets: the visible text nodes, the attributes shown on hover or read
// aloud, and the title. Code, identifiers (data-ident, translate="no": product names, node
// owners, paths, order ids, guard badges), the language switch and `skip` are left out.
function pageTexts(page, skip = '') {
  return page.evaluate((extra) => {
    const skipped = `code, kbd, pre, script, style, [data-ident], [translate="no"], .lang${extra ? `, ${extra}` : ''}`;
    const texts = [document.title];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      const text = node.textContent.trim();
      if (!text || el.closest(skipped)) continue;
      // An option shows when its select opens: it counts when its select is visible.
      if (!(el.closest('select') ?? el).checkVisibility()) continue;
      texts.push(text);
    }
    for (const el of document.querySelectorAll('[placeholder], [title], [aria-label]')) {
      if (el.closest(skipped) || el.closest('[hidden]')) continue;
      for (const name of ['placeholder', 'title', 'aria-label']) if (el.hasAttribute(name)) texts.push(el.getAttribute(name));
    }
    return texts;
  }, skip);
}

// Two Latin words of 3+ letters in a row: a sentence left in English.
const LATIN_SENTENCE = /[A-Za-z]{3,}[\s,.:;!?'-]+[A-Za-z]{3,}/;
// Chinese characters, and CJK and full-width punctuation.
const CJK = /[\u2E80-\u9FFF\u3000-\u303F\uFF00-\uFFEF]/;

// Names kept in Latin script in Chinese text, as Chinese developers write them, and the
// server's product names (data: the demo set's are English whatever the page's language).
async function latinAllowed(base) {
  return ['ZooKeeper', 'PostgreSQL', 'zk-herd', 'pg-atomic', ...(await productNames(base))];
}
// Longest first, so a name is cut out whole before any part of it.
async function productNames(base) {
  const list = await (await fetch(`${base}/api/products`)).json();
  return list.map((p) => p.name).sort((x, y) => y.length - x.length);
}

// The page's texts that match `pattern` once each allowed name is cut out ('·' joins no words).
async function textsMatching(page, pattern, allowed, skip) {
  const cut = (text) => allowed.reduce((s, name) => s.split(name).join('·'), text);
  return (await pageTexts(page, skip)).filter((text) => pattern.test(cut(text)));
}
export const leftInEnglish = async (page) => textsMatching(page, LATIN_SENTENCE, await latinAllowed(a));
// In English, Chinese only in the header's 秒杀 and the switch's 中文 (both skipped), and in
// product names created while the page was in Chinese (data).
export const leftInChinese = async (page) => textsMatching(page, CJK, await productNames(a), 'h1 .sub');

export async function setLanguage(page, lang) {
  await page.click(`.lang button[data-lang="${lang}"]`);
  await page.locator(`.lang button[data-lang="${lang}"][aria-pressed="true"]`).waitFor();
}
