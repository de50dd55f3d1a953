// 1 · The shop, in headless Debian Chromium against a real seckill instance (and the real
// PostgreSQL and ZooKeeper behind it): the page lists products live and buys one. Who buys
// (signing in, My orders) is tested in identity.test.mjs; sale windows and lines in line.test.mjs.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): shop.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createProduct, shots, signInPage } from './harness.mjs';
import { a, consoleErrors, openPage, useServers } from './page.mjs';

useServers('e2e-shop');

test('the page loads, lists products live and buys one', async () => {
  const id = await createProduct(a, 5, 'zk', 64);
  const page = await openPage(a);
  await page.locator(`.product[data-product="${id}"]`).waitFor();
  await page.selectOption('#buy-product', String(id));
  await signInPage(page, 'e2e-alice');
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  assert.match(await page.textContent('#buy-result'), /fencing token \d+/);
  // Alone on a batched product: a lock cycle of one.
  assert.equal(await page.getAttribute('#buy-result [data-batch-size]', 'data-batch-size'), '1');
  assert.match(await page.textContent('#buy-result'), /in its own lock cycle/);
  assert.match(await page.textContent(`.product[data-product="${id}"] [data-k="guarding"]`), /batched: up to 64 orders per lock cycle/);
  // The card updates from the event stream: 4 left.
  await page.locator(`.product[data-product="${id}"] [data-k="stock"]`, { hasText: '4' }).waitFor({ timeout: 10_000 });
  await page.screenshot({ path: join(shots, 'shop.png'), fullPage: true });
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
