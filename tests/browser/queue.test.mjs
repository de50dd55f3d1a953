// 3 · The lock queue's step-through sale (js/herd.js), in headless Debian Chromium against a
// real seckill instance: each Next wakes exactly one waiter under the fair lock, every waiter
// under the herd lock (in 中文). The queue drawn live during a sale is tested in
// simulator.test.mjs, its long paths on a phone in layout.test.mjs.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
// Screenshots go to tests/browser/screenshots/ (git-ignored): step-*.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ADMIN, createProduct, shots } from './harness.mjs';
import { a, consoleErrors, openPage, useServers } from './page.mjs';

useServers('e2e-queue');

// The step-through sale: hold each lock, queue four buyers, click Next three times. `woken`
// is how many waiters each click must wake; the page shows each click's count (waited for),
// and the instance's settled total must be exactly their sum (a lock that wakes more fails,
// whenever the extra wakes come).
async function watchingIs(id, n) {
  const deadline = Date.now() + 15_000;
  let view;
  while (Date.now() < deadline) {
    view = await (await fetch(`${a}/api/products/${id}/lock`)).json();
    if (view.stats.watching === n) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`waited 15 s for ${n} waiters watching; the lock view: ${JSON.stringify(view)}`);
}

// A step-through wait that timed out, with what the page showed and what the instance's
// lock view says now (a page left with a stale lock view was once the cause).
function explainStep(page, id, what) {
  return async (e) => {
    const shown = await page.evaluate(() => ({
      queue: document.querySelector('#queue').innerText,
      result: document.querySelector('#step-result').textContent,
      woke: { ...document.querySelector('#step-woke').dataset },
      queued: document.querySelector('#step-queued').textContent,
    }));
    const view = await (await fetch(`${a}/api/products/${id}/lock`)).json();
    throw new Error(`${what}: the page showed ${JSON.stringify(shown)}; the lock view: ${JSON.stringify(view)}; ${e}`);
  };
}

async function stepThrough(guard, woken, lang) {
  const id = await createProduct(a, 10, guard, 1);
  const page = await openPage(a);
  if (lang === 'zh') await page.click('.lang [data-lang="zh"]');
  await page.locator(`.product[data-product="${id}"]`).waitFor();
  await page.click('summary');
  await page.fill('#admin-token', ADMIN);
  await page.selectOption('#queue-product', String(id));
  await page.click('#step-start');
  await page.locator('#step-result.ok').waitFor();
  await page.fill('#step-buyers', '4');
  await page.click('#step-queue');
  // Frozen: one holder, three waiting (fair: three tickets; herd: a crowd of three).
  await page.locator('#queue .ticket.holding').waitFor({ timeout: 15_000 });
  if (guard === 'zk') {
    await page.waitForFunction(() => document.querySelectorAll('#queue .ticket.waiting').length === 3);
  } else {
    await page.locator('#queue .ticket.herd .num', { hasText: '3' }).waitFor({ timeout: 15_000 })
      .catch(explainStep(page, id, 'the frozen crowd of 3'));
  }
  await page.screenshot({ path: join(shots, `step-${guard}-${lang}-frozen.png`), fullPage: true });
  for (let click = 1; click <= 3; click += 1) {
    // A release wakes only waiters whose watch is set: one still between its create and its
    // watch would find the lock free and take it unwoken. So each Next waits until every
    // waiter left (3, 2, 1) is watching, as the instance counts them.
    await watchingIs(id, 4 - click);
    await page.click('#step-next');
    await page.waitForFunction(
      ([c, n]) => {
        const out = document.querySelector('#step-woke');
        return out.dataset.click === String(c) && Number(out.dataset.woke) >= n;
      },
      [click, woken[click - 1]],
      { timeout: 15_000 },
    ).catch(explainStep(page, id, `click ${click}`));
  }
  const shown = await page.textContent('#step-woke');
  await page.screenshot({ path: join(shots, `step-${guard}-${lang}.png`), fullPage: true });
  await page.click('#step-stop');
  await page.locator('#step-queued[data-answered="4"]').waitFor({ timeout: 15_000 });
  const view = await (await fetch(`${a}/api/products/${id}/lock`)).json();
  assert.equal(view.stats.wakeups, woken.reduce((x, y) => x + y), 'wake-ups over the three clicks');
  const audit = await (await fetch(`${a}/api/products/${id}/audit`)).json();
  assert.deepEqual([audit.sold, audit.consistent], [4, true], 'stepping changed nothing sold');
  await page.close();
  return shown;
}

test('step-through on a zk product: each Next wakes exactly one waiter', async () => {
  const shown = await stepThrough('zk', [1, 1, 1], 'en');
  assert.match(shown, /Click 3: 1 waiter woke/);
});

test('step-through on a zk-herd product, in 中文: each Next wakes every waiter', async () => {
  const shown = await stepThrough('zk-herd', [3, 2, 1], 'zh');
  assert.match(shown, /第 3 次：一次释放唤醒了 1 个等待者/);
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
