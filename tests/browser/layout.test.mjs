// The whole page's layout, in headless Debian Chromium: nothing moves while it loads and
// while its first product update arrives (wide and phone), it fits a phone screen, and long
// ZooKeeper paths and lock owners wrap there (an instance on a long root of its own, with a
// database of its own: E2E_OTHER_DATABASE_URL).
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): phone.png, phone-long-root.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { buyAll, buyAs, createProduct, need, shots, signIn, startServer } from './harness.mjs';
import { a, browser, consoleErrors, openPage, stepMode, useServers, waitLive } from './page.mjs';

useServers('e2e-layout');

// Nothing already on screen moves while the page loads and while its first product update
// arrives: the layout-shift entries (PerformanceObserver, those not caused by input) sum to
// at most 0.05, on a wide and on a phone screen.
for (const [name, viewport] of [['wide', { width: 1280, height: 900 }], ['phone', { width: 390, height: 844 }]]) {
  test(`no layout shift while the page loads and updates (${name})`, async (t) => {
    const id = await createProduct(a, 5, 'zk');
    const page = await browser.newPage({ viewport, locale: 'en-US' });
    page.on('pageerror', (e) => consoleErrors.push(String(e)));
    await page.addInitScript(() => {
      window.layoutShifts = [];
      new PerformanceObserver((list) => {
        for (const entry of list.getEntries()) {
          if (!entry.hadRecentInput) {
            window.layoutShifts.push({
              value: entry.value,
              sources: entry.sources.map((s) => s.node?.id || s.node?.className || s.node?.nodeName || '?'),
            });
          }
        }
      }).observe({ type: 'layout-shift', buffered: true });
    });
    await page.goto(a);
    await waitLive(page);
    const card = page.locator(`.product[data-product="${id}"] [data-k="stock"]`);
    await card.waitFor();
    // The first product update, from the event stream.
    const bought = await buyAs(a, await signIn(a, 'cls-buyer'), id);
    assert.equal(bought.status, 201);
    await page.locator(`.product[data-product="${id}"] [data-k="stock"]`, { hasText: '4' }).waitFor({ timeout: 10_000 });
    // Two frames: whatever that update laid out has been reported.
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const shifts = await page.evaluate(() => window.layoutShifts);
    const total = shifts.reduce((sum, s) => sum + s.value, 0);
    t.diagnostic(`cumulative layout shift ${total.toFixed(4)}`);
    assert.ok(total <= 0.05, `cumulative layout shift ${total.toFixed(3)} > 0.05: ${JSON.stringify(shifts)}`);
    await page.close();
  });
}

test('the page fits a phone screen', async () => {
  const page = await openPage(a, { width: 390, height: 844 });
  const wide = await page.evaluate(() =>
    [...document.querySelectorAll('body *')]
      .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
      .map((el) => `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${el.className}`)
      .slice(0, 5),
  );
  assert.deepEqual(wide, [], 'elements wider than the screen');
  await page.screenshot({ path: join(shots, 'phone.png'), fullPage: true });
  await page.close();
});

test('long ZooKeeper paths and lock owners wrap on a phone screen', async () => {
  // 60 characters without a break after /seckill-e2e/, like a CI job's root; the instance name
  // is the owner every ticket shows, just as unbroken.
  const root = `/seckill-e2e/${`long-root-${process.pid}-`.padEnd(60, '0123456789abcdef')}`;
  const phone = await startServer(`e2e-phone-${'0123456789'.repeat(4)}`, {
    zkRoot: root,
    databaseUrl: need('E2E_OTHER_DATABASE_URL'),
  });
  const zk = await createProduct(phone, 40, 'zk', 1);
  const page = await openPage(phone, { width: 375, height: 812 });
  await page.locator(`.product[data-product="${zk}"]`).waitFor();
  await page.selectOption('#queue-product', String(zk));
  await page.locator('#queue-path', { hasText: `${root}/locks/` }).waitFor({ timeout: 10_000 });

  // Buyers, so tickets with their owners join the path on screen.
  await stepMode(phone, zk, 'start');
  const buyers = buyAll(phone, zk, 40, 'phone');
  await page.locator('#queue .ticket.waiting').first().waitFor({ timeout: 15_000 });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  await page.screenshot({ path: join(shots, 'phone-long-root.png'), fullPage: true });
  await stepMode(phone, zk, 'stop');
  await buyers;
  assert.ok(width <= 375, `the page is ${width} px wide on a 375 px screen`);
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
