// The page's two languages, in headless Debian Chromium against a real seckill instance:
// both dictionaries have every text, the page opens in the browser's language, a choice is
// remembered, and with every kind of text on screen no English sentence is left in 中文 nor
// Chinese in English, on a wide and on a phone screen.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): page-en.png and page-zh.png (and
// their -phone versions, 390 px wide) show the whole page in each language.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ADMIN, createProduct, shots, signInPage } from './harness.mjs';
import {
  a, consoleErrors, leftInChinese, leftInEnglish, openPage, setLanguage, stepMode, useServers, waitLive,
} from './page.mjs';

useServers('e2e-languages');

async function language(page) {
  return {
    lang: await page.getAttribute('html', 'lang'),
    heading: await page.textContent('#shop-h'),
    stored: await page.evaluate(() => localStorage.getItem('seckill-lang')),
  };
}

// Elements reaching past the right edge of the screen (the phone layout tests' check).
function tooWide(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll('body *')]
      .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
      .map((el) => `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${el.className}: ${el.textContent.slice(0, 40)}`)
      .slice(0, 5),
  );
}

test('both languages have every text: the same keys and placeholders, every error code and order status', async () => {
  const page = await openPage(a);
  // The server's own list of codes and statuses, so a new one fails here until translated.
  const api = await (await fetch(`${a}/openapi.json`)).json();
  const codes = api.components.schemas.Error.properties.error.enum;
  const statuses = api.components.schemas.OrderStatus.enum;
  assert.ok(codes.length >= 27 && statuses.length >= 8, 'the codes and statuses from /openapi.json');
  const problems = await page.evaluate(
    async ({ codes, statuses }) => {
      const { dictionaries } = await import('/js/i18n.js');
      const { en, zh } = dictionaries;
      const found = [];
      const slots = (text) => new Set([...text.matchAll(/\{(\w+)\}/g)].map((m) => m[1]));
      for (const key of new Set([...Object.keys(en), ...Object.keys(zh)])) {
        if (!(key in en) || !(key in zh)) {
          found.push(`${key}: only in ${key in en ? 'en' : 'zh'}`);
          continue;
        }
        // {message} is the server's English message: only English may show it.
        const [e, z] = [slots(en[key]), slots(zh[key])];
        e.delete('message');
        z.delete('message');
        if ([...e].sort().join() !== [...z].sort().join()) found.push(`${key}: placeholders {${[...e]}} vs {${[...z]}}`);
      }
      for (const code of codes) if (!(`error.${code}` in en && `error.${code}` in zh)) found.push(`error code ${code} untranslated`);
      for (const status of statuses) if (!(`status.${status}` in en && `status.${status}` in zh)) found.push(`order status ${status} untranslated`);
      // Every key the page names exists.
      const named = [
        ...[...document.querySelectorAll('[data-i18n]')].map((el) => el.dataset.i18n),
        ...[...document.querySelectorAll('[data-i18n-html]')].map((el) => el.dataset.i18nHtml),
        ...[...document.querySelectorAll('[data-i18n-attr]')].flatMap((el) => el.dataset.i18nAttr.split(',').map((p) => p.split(':')[1].trim())),
      ];
      for (const key of named) if (!(key in en)) found.push(`the page names ${key}, which no dictionary has`);
      return found;
    },
    { codes, statuses },
  );
  assert.deepEqual(problems, []);
  await page.close();
});

test('the page opens in the browser\'s language: 中文 for zh-CN, English for en-US', async () => {
  const zh = await openPage(a, undefined, 'zh-CN');
  assert.deepEqual(await language(zh), { lang: 'zh-CN', heading: '1 · 商店', stored: null });
  assert.equal(await zh.getAttribute('.lang button[data-lang="zh"]', 'aria-pressed'), 'true');
  assert.equal(await zh.textContent('#live-text'), '实时');
  assert.match(await zh.title(), /永不超卖/);
  await zh.close();
  const en = await openPage(a, undefined, 'en-US');
  assert.deepEqual(await language(en), { lang: 'en', heading: '1 · The shop', stored: null });
  assert.equal(await en.getAttribute('.lang button[data-lang="en"]', 'aria-pressed'), 'true');
  assert.equal(await en.textContent('#live-text'), 'live');
  assert.equal(await en.isVisible('[data-text="zh"]'), false);
  await en.close();
});

test('the language chosen is remembered across visits, over the browser\'s', async () => {
  const page = await openPage(a, undefined, 'en-US');
  await setLanguage(page, 'zh');
  // Live, without a reload: static texts, the status line and the explainer.
  assert.deepEqual(await language(page), { lang: 'zh-CN', heading: '1 · 商店', stored: 'zh' });
  assert.equal(await page.textContent('#live-text'), '实时');
  assert.equal(await page.isVisible('[data-text="zh"]'), true);
  assert.equal(await page.isVisible('[data-text="en"]'), false);
  await page.reload();
  await waitLive(page);
  assert.deepEqual(await language(page), { lang: 'zh-CN', heading: '1 · 商店', stored: 'zh' });
  await setLanguage(page, 'en');
  await page.reload();
  await waitLive(page);
  assert.deepEqual(await language(page), { lang: 'en', heading: '1 · The shop', stored: 'en' });
  await page.close();

  // A Chinese browser whose reader chose English keeps English.
  const zh = await openPage(a, undefined, 'zh-CN');
  await setLanguage(zh, 'en');
  await zh.reload();
  await waitLive(zh);
  assert.deepEqual(await language(zh), { lang: 'en', heading: '1 · The shop', stored: 'en' });
  await zh.close();
});

test('in 中文 no English sentence is left, and in English no Chinese, with every kind of text on screen', async () => {
  const zk = await createProduct(a, 20, 'zk', 1);
  const none = await createProduct(a, 20, 'none');
  const page = await openPage(a, undefined, 'zh-CN');
  await page.locator(`.product[data-product="${none}"]`).waitFor();
  const left = new Set(); // every English sentence seen in 中文, at any step
  const check = async () => {
    for (const text of await leftInEnglish(page)) left.add(text);
  };
  await page.click('summary'); // the admin form counts too
  await check();

  // A purchase: its order line, with status, lock wait, fencing token and batch.
  await page.selectOption('#buy-product', String(zk));
  await signInPage(page, 'e2e-zh');
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  assert.match(await page.textContent('#buy-result'), /已支付.*围栏令牌 \d+/);
  // A product created from the page, and a crash armed on the lane's product: the log's lines.
  await page.fill('#admin-token', ADMIN);
  await page.fill('#new-stock', '5');
  await page.click('#create button[type=submit]');
  await page.locator('#create-result.ok').waitFor();
  await page.selectOption('#demo-product', String(zk));
  await page.click('#demo-crash');
  await page.locator('#demo-result.ok').waitFor();
  await check();

  // A sale on both lanes, watched in the queue while it runs.
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(none));
  await page.selectOption('#queue-product', String(zk));
  await page.fill('#sim-buyers', '60');
  await stepMode(a, zk, 'start');
  await page.click('#sim-run');
  await page.locator('#queue .ticket.waiting').first().waitFor({ timeout: 15_000 });
  await check();
  await stepMode(a, zk, 'stop');
  await page.locator('#lane-a[data-state="done"]').waitFor({ timeout: 60_000 });
  await page.locator('#lane-b[data-state="done"]').waitFor({ timeout: 60_000 });
  await page.locator('#log li', { hasText: '崩溃' }).waitFor({ timeout: 30_000 });
  await page.locator('#sim-run:not([disabled])').waitFor();
  assert.match(await page.textContent('#lane-a .verdict'), /^卖出 20 \/ 20 件 — 超卖 0 件，账目一致$/);
  assert.match(await page.textContent('#lane-b .verdict'), /超卖/);
  await check();
  // An error, by its code: the product is sold out now.
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-result.err').waitFor({ timeout: 10_000 });
  assert.match(await page.textContent('#buy-result'), /^409 sold_out：已售罄/);
  await check();
  assert.deepEqual([...left], [], 'English sentences left in 中文');
  await page.screenshot({ path: join(shots, 'page-zh.png'), fullPage: true });

  // The same page switched live: what was drawn from data is redrawn in English.
  await setLanguage(page, 'en');
  assert.deepEqual(await leftInChinese(page), [], 'Chinese left in English');
  assert.match(await page.textContent('#lane-a .verdict'), /^20 sold of 20 — 0 oversold, consistent$/);
  assert.match(await page.textContent('#buy-result'), /^409 sold_out: sold out/);
  await page.locator('#log li', { hasText: 'Crash on product' }).first().waitFor();
  assert.equal(await page.locator('#log li', { hasText: '崩溃' }).count(), 0);
  await page.screenshot({ path: join(shots, 'page-en.png'), fullPage: true });

  // And on a phone, in both languages: nothing reaches past the screen's edge.
  await page.setViewportSize({ width: 390, height: 844 });
  assert.deepEqual(await tooWide(page), [], 'elements wider than the screen, in English');
  await page.screenshot({ path: join(shots, 'page-en-phone.png'), fullPage: true });
  await setLanguage(page, 'zh');
  assert.deepEqual(await tooWide(page), [], 'elements wider than the screen, in 中文');
  assert.deepEqual(await leftInEnglish(page), [], 'English sentences left in 中文, switched back');
  await page.screenshot({ path: join(shots, 'page-zh-phone.png'), fullPage: true });
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
