// 2 · The flash-sale simulator, in headless Debian Chromium against two real seckill
// instances: a zk product sold exactly beside a none product overselling, with the queue live
// and buyers through the other instance too; only verdicts, results and the status announced
// during a sale; a lock per order beside a batched lock. Its rush at the opening is tested in
// line.test.mjs, its crowd's sign-in in identity.test.mjs.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { buyAll, createProduct, shots } from './harness.mjs';
import { a, b, consoleErrors, openPage, stepMode, useServers } from './page.mjs';

useServers('e2e-simulator-a', 'e2e-simulator-b');

test('the simulator sells a zk product exactly and shows a none product overselling, with the queue live', async () => {
  const zk = await createProduct(a, 20, 'zk', 1);
  const none = await createProduct(a, 20, 'none');
  const page = await openPage(a);
  await page.locator(`.product[data-product="${none}"]`).waitFor();
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(none));
  await page.selectOption('#queue-product', String(zk));
  await page.fill('#sim-buyers', '120');

  await stepMode(a, zk, 'start');
  // Buyers through the second instance too: one queue across instances.
  const elsewhere = buyAll(b, zk, 20, 'elsewhere');
  await page.click('#sim-run');
  await page.locator('#queue .ticket.waiting').first().waitFor({ timeout: 15_000 });
  await page.screenshot({ path: join(shots, 'queue-during-sale.png'), fullPage: true });
  await stepMode(a, zk, 'stop');
  await elsewhere;

  await page.locator('#lane-a[data-state="done"]').waitFor({ timeout: 60_000 });
  await page.locator('#lane-b[data-state="done"]').waitFor({ timeout: 60_000 });
  assert.match(await page.textContent('#lane-a .verdict'), /20 sold of 20 — 0 oversold, consistent/);
  assert.match(await page.textContent('#lane-b .verdict'), /OVERSOLD/);
  assert.ok(Number(await page.getAttribute('#lane-b', 'data-oversold')) > 0);
  assert.equal(await page.getAttribute('#lane-a', 'data-oversold'), '0');
  await page.locator(`.product[data-product="${none}"] .oversold`).waitFor();
  await page.screenshot({ path: join(shots, 'simulator.png'), fullPage: true });
  await page.close();
});

// What a screen reader is told: a change inside a live region (aria-live other than off, or a
// role that implies it: status, alert, log, marquee, timer; an <output> is a status).
const LIVE = '[aria-live]:not([aria-live="off"]), [role="status"], [role="alert"], [role="log"], [role="marquee"], [role="timer"], output';
// The lists a sale redraws many times a second: shown, never read aloud.
const LIVE_LISTS = ['#products', '#queue', '#log', '#sem-leases', '#sem-waiters', '#rw-holders', '#rw-waiters'];

// Counts, from now on, the text changes (nodes added or removed, text changed: what a live
// region announces by default) inside each live region, and the changes inside each list.
function countAnnouncements(page) {
  return page.evaluate(([live, lists]) => {
    const kind = (region) =>
      region.matches('.verdict') ? 'verdict'
        : region.matches('output') ? 'result'
        : region.querySelector('#live-text') ? 'status'
        : 'other';
    const name = (region) => {
      const tag = `${region.tagName.toLowerCase()}${region.classList.length ? `.${region.classList[0]}` : ''}`;
      const owner = region.closest('[id]');
      return region.id ? `${tag}#${region.id}` : `${owner ? `#${owner.id} ` : ''}${tag}`;
    };
    window.announced = {}; // region -> {kind, changes}
    window.listChanges = {}; // list -> changes
    new MutationObserver((records) => {
      for (const record of records) {
        const el = record.target.nodeType === Node.ELEMENT_NODE ? record.target : record.target.parentElement;
        if (!el) continue;
        const region = el.closest(live);
        if (region) {
          const entry = (window.announced[name(region)] ??= { kind: kind(region), changes: 0 });
          entry.changes += 1;
        }
        for (const list of lists) if (el.closest(list)) window.listChanges[list] = (window.listChanges[list] ?? 0) + 1;
      }
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  }, [LIVE, LIVE_LISTS]);
}

test('announcements, not floods: during a sale only verdicts, results and the status are live, a few changes each', async (t) => {
  const zk = await createProduct(a, 20, 'zk', 1);
  const none = await createProduct(a, 20, 'none');
  const page = await openPage(a);
  await page.locator(`.product[data-product="${none}"]`).waitFor();
  // Not announced: no list is a live region, nor inside one.
  const liveLists = await page.evaluate(
    ([live, lists]) => lists.filter((list) => document.querySelector(list)?.closest(live)),
    [LIVE, LIVE_LISTS],
  );
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(none));
  await page.selectOption('#queue-product', String(zk));
  await page.fill('#sim-buyers', '120');
  await countAnnouncements(page);

  await stepMode(a, zk, 'start');
  await page.click('#sim-run');
  await page.locator('#queue .ticket.waiting').first().waitFor({ timeout: 15_000 });
  await stepMode(a, zk, 'stop');
  await page.locator('#lane-a[data-state="done"]').waitFor({ timeout: 60_000 });
  await page.locator('#lane-b[data-state="done"]').waitFor({ timeout: 60_000 });
  await page.locator('#sim-run:not([disabled])').waitFor();
  const { announced, listChanges } = await page.evaluate(() => ({ announced: window.announced, listChanges: window.listChanges }));
  const told = Object.entries(announced).map(([region, { kind, changes }]) => `${region} (${kind}): ${changes}`);
  await page.close();
  t.diagnostic(`announced during the sale: ${told.join(', ')}; list changes: ${JSON.stringify(listChanges)}`);
  // Nothing but verdicts, results and the connection status speaks, and each only a few times.
  assert.deepEqual(Object.entries(announced).filter(([, { changes }]) => changes > 6).map(([region]) => region), [], `flooded; announced: ${told}`);
  assert.deepEqual(Object.entries(announced).filter(([, { kind }]) => kind === 'other').map(([region]) => region), [], `announced: ${told}`);
  assert.deepEqual(liveLists, [], 'lists a screen reader would read out at every redraw');
  // The sale's verdicts were announced: each lane's, selling then its result.
  assert.ok(announced['#lane-a p.verdict']?.changes > 0 && announced['#lane-b p.verdict']?.changes > 0, `no verdict announced: ${told}`);
  // The lists did update, unannounced.
  for (const list of ['#products', '#queue', '#log']) assert.ok(listChanges[list] > 0, `${list} did not change during the sale`);
});

test('the simulator compares a lock per order with a batched lock, side by side', async () => {
  const single = await createProduct(a, 30, 'zk', 1);
  const batched = await createProduct(a, 30, 'zk', 64);
  const page = await openPage(a);
  await page.locator(`.product[data-product="${batched}"]`).waitFor();
  assert.match(await page.textContent(`.product[data-product="${single}"] [data-k="guarding"]`), /a lock per order/);
  await page.click('#preset-batching');
  // The preset takes the newest products with stock left: these two.
  assert.equal(await page.inputValue('#lane-a .lane-product'), String(single));
  assert.equal(await page.inputValue('#lane-b .lane-product'), String(batched));
  await page.fill('#sim-buyers', '60');
  await page.click('#sim-run');

  await page.locator('#lane-a[data-state="done"]').waitFor({ timeout: 60_000 });
  await page.locator('#lane-b[data-state="done"]').waitFor({ timeout: 60_000 });
  for (const lane of ['#lane-a', '#lane-b']) {
    assert.match(await page.textContent(`${lane} .verdict`), /30 sold of 30 — 0 oversold, consistent/);
    assert.match(await page.textContent(`${lane} [data-k="elapsed"]`), /^\d+\.\d\d s$/);
    assert.match(await page.textContent(`${lane} [data-k="rate"]`), /^\d+\.\d$/);
  }
  // Every order of a batch_max 1 product takes the lock for itself: exactly 1.
  assert.equal(await page.getAttribute('#lane-a', 'data-per-cycle'), '1');
  assert.equal(await page.textContent('#lane-a [data-k="per_cycle"]'), '1');
  // How many orders share a cycle depends on timing: only that it is shown, and at least 1.
  const perCycle = Number(await page.getAttribute('#lane-b', 'data-per-cycle'));
  assert.ok(perCycle >= 1, `orders per lock cycle ${perCycle}`);
  assert.match(await page.textContent('#lane-b [data-k="per_cycle"]'), /^\d+(\.\d\d)?$/);
  // The herd table's column, for both products.
  await page.locator(`#herd-rows tr[data-product="${single}"] [data-k="per_cycle"]`, { hasText: /^1$/ }).waitFor();
  await page.locator(`#herd-rows tr[data-product="${batched}"] [data-k="per_cycle"]`, { hasText: /^\d/ }).waitFor();
  await page.screenshot({ path: join(shots, 'lanes-batched.png'), fullPage: true });
  await page.click('.lang button[data-lang="zh"]');
  await page.locator('[data-text="zh"] h3', { hasText: '合并下单' }).waitFor();
  await page.screenshot({ path: join(shots, 'lanes-batched-zh.png'), fullPage: true });
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
