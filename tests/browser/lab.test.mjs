// 7 · The lock lab, in headless Debian Chromium against two real seckill instances: the
// payment semaphore (N = 2: two slow charges hold the leases, a third waits; the other
// instance sees the same), a product's read-write terms lock, and the lab in 中文.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): lab-semaphore.png, lab-rwlock.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ADMIN, createProduct, shots } from './harness.mjs';
import { a, b, consoleErrors, leftInChinese, leftInEnglish, openPage, setLanguage, useServers } from './page.mjs';

useServers('e2e-lab-a', 'e2e-lab-b');

// A page whose admin form holds the token, as a reader would type it: the lab's buttons use it.
async function openLab(base) {
  const page = await openPage(base);
  await page.click('summary');
  await page.fill('#admin-token', ADMIN);
  return page;
}

// Clicks one of the lab's buttons and waits for the server's answer (the result counts them).
// Returns the label of the lab holder it started or let go ('' for none).
async function labClick(page, button, result) {
  const answers = Number((await page.getAttribute(result, 'data-answers')) ?? 0);
  await page.click(button);
  await page.locator(`${result}[data-answers="${answers + 1}"]`).waitFor();
  assert.match(await page.getAttribute(result, 'class'), /\bok\b/, await page.textContent(result));
  return page.getAttribute(result, 'data-label');
}

// The tickets a list draws: label, side, node and the node it watches, in order.
const drawn = (page, list) =>
  page.$$eval(`${list} .ticket[data-node]`, (els) =>
    els.map((el) => ({ label: el.dataset.label, access: el.dataset.access, node: el.dataset.node, watches: el.dataset.watches })),
  );

// Waits until the list draws exactly these labels, in this order (the views are polled: the
// page shows what ZooKeeper holds a moment later).
function waitLabels(page, list, labels) {
  return page.waitForFunction(
    ([list, labels]) =>
      JSON.stringify([...document.querySelectorAll(`${list} .ticket[data-node]`)].map((el) => el.dataset.label)) ===
      JSON.stringify(labels),
    [list, labels],
    { timeout: 10_000 },
  );
}

// Ends every lab holder of a lock, whatever a failed assertion left behind.
const labClear = (base, path) =>
  fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ action: 'clear' }),
  });

test('the lock lab\'s semaphore: two slow charges hold the two leases, a third waits for one', async () => {
  const page = await openLab(a);
  try {
    // N = 2 (--payment-concurrency): two free slots, nobody waiting.
    await page.locator('#sem-leases .ticket.free').nth(1).waitFor();
    assert.equal(await page.locator('#sem-leases .ticket').count(), 2);
    assert.match(await page.textContent('#sem-path'), /\/semaphores\/payment$/);
    assert.equal(await page.isVisible('#sem-off'), false);
    assert.equal(await page.isEnabled('#sem-acquire'), true);

    // One at a time, each drawn before the next: the first two take the leases, the third waits.
    const charges = [];
    for (const [leases, waiters] of [[1, 0], [2, 0], [2, 1]]) {
      charges.push(await labClick(page, '#sem-acquire', '#sem-result'));
      await waitLabels(page, '#sem-leases', charges.slice(0, leases));
      await waitLabels(page, '#sem-waiters', charges.slice(leases, leases + waiters));
    }
    assert.ok(charges.every((label) => /^lab-\d+$/.test(label)), charges.join());
    assert.equal(await page.locator('#sem-leases .ticket.free').count(), 0);
    assert.equal(await page.locator('#sem-leases .ticket.holding').count(), 2);
    const waiter = page.locator('#sem-waiters .ticket.waiting');
    assert.equal(await waiter.locator('.watch').textContent(), 'watches the leases');
    assert.match(await page.textContent('#sem-result'), new RegExp(`^Started ${charges[2]}: a charge that hangs`));
    // The leases are ZooKeeper's, not this instance's: the other instance sees the same.
    const other = await (await fetch(`${b}/api/payments/semaphore`)).json();
    assert.deepEqual(
      [other.leases.map((tk) => tk.label), other.waiters.map((tk) => tk.label), other.max_leases],
      [charges.slice(0, 2), charges.slice(2), 2],
    );
    await page.locator('#lab').screenshot({ path: join(shots, 'lab-semaphore.png') });

    // Ending the oldest charge frees its lease: the waiter takes it.
    assert.equal(await labClick(page, '#sem-release', '#sem-result'), charges[0]);
    await waitLabels(page, '#sem-leases', charges.slice(1));
    await waitLabels(page, '#sem-waiters', []);
    assert.match(await page.textContent('#sem-result'), new RegExp(`^Ended ${charges[0]}`));
    assert.equal(await page.textContent('#sem-waiters'), 'Nobody waits.');

    await labClick(page, '#sem-clear', '#sem-result');
    await waitLabels(page, '#sem-leases', []);
    assert.equal(await page.locator('#sem-leases .ticket.free').count(), 2);
  } finally {
    await labClear(a, '/api/payments/semaphore');
    await page.close();
  }
});

test('the lock lab\'s read-write lock: readers share, a writer waits for them, a later reader waits for the writer', async () => {
  const id = await createProduct(a, 10, 'zk', 1);
  const page = await openLab(a);
  const path = `/api/products/${id}/terms-lock`;
  try {
    await page.locator(`#rw-product option[value="${id}"]`).waitFor({ state: 'attached' });
    await page.selectOption('#rw-product', String(id));
    await page.locator('#rw-path', { hasText: new RegExp(`/locks/terms/${id}$`) }).waitFor();
    await page.locator('#rw-holders .empty').waitFor();

    // Two readers: both hold, side by side.
    const r1 = await labClick(page, '#rw-read', '#rw-result');
    await waitLabels(page, '#rw-holders', [r1]);
    const r2 = await labClick(page, '#rw-read', '#rw-result');
    await waitLabels(page, '#rw-holders', [r1, r2]);
    const readers = await drawn(page, '#rw-holders');
    assert.deepEqual(readers.map((tk) => tk.access), ['read', 'read']);
    assert.equal(await page.locator('#rw-holders .ticket.holding .access', { hasText: /^R$/ }).count(), 2);

    // A writer waits for them, watching the node just before its own: the second reader's.
    const w = await labClick(page, '#rw-write', '#rw-result');
    await waitLabels(page, '#rw-waiters', [w]);
    const [writer] = await drawn(page, '#rw-waiters');
    assert.deepEqual([writer.access, writer.watches], ['write', readers[1].node]);
    assert.match(await page.textContent('#rw-waiters .ticket .num'), /^W #\d+$/);

    // A reader after the waiting writer does not join the readers: it waits, watching the writer.
    const r3 = await labClick(page, '#rw-read', '#rw-result');
    await waitLabels(page, '#rw-waiters', [w, r3]);
    const late = (await drawn(page, '#rw-waiters'))[1];
    assert.deepEqual([late.access, late.watches], ['read', writer.node]);
    await waitLabels(page, '#rw-holders', [r1, r2]);
    await page.locator('#lab').screenshot({ path: join(shots, 'lab-rwlock.png') });

    // The readers go, oldest first: then the writer holds alone, and the late reader still waits.
    assert.equal(await labClick(page, '#rw-release', '#rw-result'), r1);
    await waitLabels(page, '#rw-holders', [r2]);
    assert.equal(await labClick(page, '#rw-release', '#rw-result'), r2);
    await waitLabels(page, '#rw-holders', [w]);
    await waitLabels(page, '#rw-waiters', [r3]);
    assert.deepEqual((await drawn(page, '#rw-holders')).map((tk) => tk.access), ['write']);
    assert.match(await page.textContent('#rw-holders .ticket'), /writes \(alone\)/);
    assert.equal((await drawn(page, '#rw-waiters'))[0].watches, writer.node);

    // The writer goes: the reader holds.
    assert.equal(await labClick(page, '#rw-release', '#rw-result'), w);
    await waitLabels(page, '#rw-holders', [r3]);
    await waitLabels(page, '#rw-waiters', []);
    assert.deepEqual((await drawn(page, '#rw-holders')).map((tk) => tk.access), ['read']);

    await labClick(page, '#rw-clear', '#rw-result');
    await waitLabels(page, '#rw-holders', []);
    assert.equal(await page.textContent('#rw-holders'), 'Nobody holds the lock.');
  } finally {
    await labClear(a, path);
    await page.close();
  }
});

test('the lock lab in 中文: its texts, and what it draws from the locks', async () => {
  // A lockless guard: its terms have a lock all the same.
  const id = await createProduct(a, 10, 'pg-atomic');
  const page = await openLab(a);
  try {
    await setLanguage(page, 'zh');
    const zh = await page.evaluate(async () => (await import('/js/i18n.js')).dictionaries.zh);
    const texts = {
      '#lab-h': 'lab.heading',
      '#sem-h': 'sem.heading',
      '#rw-h': 'rw.heading',
      '#sem-acquire': 'sem.acquire',
      '#sem-release': 'sem.release',
      '#sem-clear': 'lab.clear',
      '#rw-read': 'rw.read',
      '#rw-write': 'rw.write',
      '#rw-release': 'rw.release',
      '#rw-clear': 'lab.clear',
    };
    for (const [selector, key] of Object.entries(texts)) {
      assert.equal(await page.textContent(selector), zh[key], selector);
    }
    assert.match(await page.textContent('#lab-h'), /锁实验室/);
    assert.match(await page.textContent('#lab'), /读者共享锁；写者独占锁/);

    // Drawn from the locks: a slow charge holding a lease, a writer holding the terms.
    await page.locator(`#rw-product option[value="${id}"]`).waitFor({ state: 'attached' });
    await page.selectOption('#rw-product', String(id));
    await page.locator('#rw-path', { hasText: new RegExp(`/locks/terms/${id}$`) }).waitFor();
    const charge = await labClick(page, '#sem-acquire', '#sem-result');
    assert.match(await page.textContent('#sem-result'), new RegExp(`^已发起 ${charge}：`));
    await waitLabels(page, '#sem-leases', [charge]);
    assert.match(await page.textContent('#sem-leases .ticket.holding'), /持有租约/);
    assert.equal(await page.textContent('#sem-leases .ticket.free'), `–${zh['sem.free']}`);
    const writer = await labClick(page, '#rw-write', '#rw-result');
    await waitLabels(page, '#rw-holders', [writer]);
    assert.equal(await page.textContent('#rw-holders .ticket .access'), zh['ticket.mark_write']);
    assert.match(await page.textContent('#rw-holders .ticket'), /写（独占）/);
    assert.equal(await page.textContent('#rw-waiters'), zh['lab.nobody_waits']);
    assert.deepEqual(await leftInEnglish(page), [], 'English sentences left in 中文');

    // Switched back, what was drawn is redrawn in English.
    await setLanguage(page, 'en');
    assert.equal(await page.textContent('#sem-acquire'), '+ slow charge');
    assert.match(await page.textContent('#sem-leases .ticket.holding'), /holds a lease/);
    assert.match(await page.textContent('#rw-holders .ticket'), /writes \(alone\)/);
    assert.match(await page.textContent('#sem-result'), new RegExp(`^Started ${charge}: `));
    assert.deepEqual(await leftInChinese(page), [], 'Chinese left in English');

    await labClick(page, '#sem-clear', '#sem-result');
    await labClick(page, '#rw-clear', '#rw-result');
    await waitLabels(page, '#sem-leases', []);
    await waitLabels(page, '#rw-holders', []);
  } finally {
    await labClear(a, '/api/payments/semaphore');
    await labClear(a, `/api/products/${id}/terms-lock`);
    await page.close();
  }
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
