// 6 · Money, in headless Debian Chromium: the Buy form shows an order's payment, and the
// money demo a lost answer pending beside the ledger's charge, then settled by the sweep. On
// an instance of its own (started by the test: its requests live 4 s).
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): money-pending.png,
// money-settled-zh.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ADMIN, createProduct, shots, signInPage, startServer } from './harness.mjs';
import { consoleErrors, openPage, useServers } from './page.mjs';

useServers();

// The money demo: the provider charges and every answer is lost. On an instance whose
// requests live 4 s, so the sweep settles within seconds (the page says nothing of time).
test('money on the page: an order shows its payment; a lost answer is seen pending beside the ledger\'s charge, then settled by the sweep', async () => {
  const base = await startServer('e2e-money', { requestTimeoutMs: 4000 });
  const id = await createProduct(base, 5, 'pg-atomic');
  const page = await openPage(base);
  await page.locator(`.product[data-product="${id}"]`).waitFor();
  await page.selectOption('#buy-product', String(id));
  await signInPage(page, 'e2e-payer');
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-payment[data-settled-by="answer"] [data-outcome="succeeded"]').waitFor({ timeout: 10_000 });
  assert.match(await page.textContent('#buy-payment'), /Payment seckill-[0-9a-f-]{36}: succeeded — settled by the provider's answer/);

  await page.click('summary');
  await page.fill('#admin-token', ADMIN);
  await page.selectOption('#money-product', String(id));
  await page.click('#money-lose');
  // The lesson: the provider's ledger has the charge while the shop's intent is pending.
  await page.locator('#money[data-seen-pending-charged="true"]').waitFor({ timeout: 30_000 }).catch(async (e) => {
    throw new Error(`${e.message}; the page says: ${await page.textContent('#money')}`);
  });
  await page.screenshot({ path: join(shots, 'money-pending.png'), fullPage: true });
  await page.locator('#money[data-state="settled"]').waitFor({ timeout: 60_000 });
  assert.equal(await page.getAttribute('#money-shop', 'data-settled-by'), 'sweep');
  assert.equal(await page.getAttribute('#money-shop', 'data-status'), 'paid');
  assert.equal(await page.getAttribute('#money-ledger', 'data-charge'), 'succeeded');
  assert.match(await page.textContent('#money-verdict'), /The books agree: one charge in the ledger, one paid order, the same reference — settled by the sweep/);
  await page.click('.lang [data-lang="zh"]');
  assert.match(await page.textContent('#money-verdict'), /两边的账一致/);
  await page.screenshot({ path: join(shots, 'money-settled-zh.png'), fullPage: true });
  const audit = await (await fetch(`${base}/api/products/${id}/audit`)).json();
  assert.deepEqual([audit.sold, audit.consistent], [2, true], 'two orders, two units, the books balanced');
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
