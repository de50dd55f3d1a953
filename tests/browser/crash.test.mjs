// 5 · Crash and zombie, in headless Debian Chromium against a real seckill instance: the
// zombie demo shows the fence rejecting the stale write, in the event log.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): zombie.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ADMIN, createProduct, shots } from './harness.mjs';
import { a, consoleErrors, openPage, useServers } from './page.mjs';

useServers('e2e-crash');

test('the zombie demo shows the fence rejecting the stale write', async () => {
  // A lock per order: on one instance, only another buyer's lock can take over from it.
  const zk = await createProduct(a, 20, 'zk', 1);
  const page = await openPage(a);
  await page.locator(`.product[data-product="${zk}"]`).waitFor();
  await page.click('summary');
  await page.fill('#admin-token', ADMIN);
  await page.selectOption('#demo-product', String(zk));
  await page.click('#demo-zombie');
  await page.locator('#demo-result.ok').waitFor();
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(zk)); // same product: runs once
  // Enough buyers that someone is queued behind the zombie to take over.
  await page.fill('#sim-buyers', '20');
  await page.click('#sim-run');
  await page.locator('#log li', { hasText: 'rejected by the fence' }).waitFor({ timeout: 30_000 });
  await page.locator('#lane-a[data-state="done"]').waitFor({ timeout: 60_000 });
  assert.match(await page.textContent('#lane-a .verdict'), /0 oversold, consistent/);
  await page.screenshot({ path: join(shots, 'zombie.png'), fullPage: true });
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
