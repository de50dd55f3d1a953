// End-to-end tests of the teaching page in headless Debian Chromium, against two real
// seckill instances (and the real PostgreSQL and ZooKeeper behind them), plus a third with a
// long ZooKeeper root for the phone layout test.
//
// Run by scripts/test, which provides:
//   SECKILL_BIN      the server binary
//   E2E_DATABASE_URL a fresh database for this run
//   SECKILL_ZK       ZooKeeper connect string
// Screenshots go to tests/browser/screenshots/ (git-ignored).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const shots = join(here, 'screenshots');
const ADMIN = 'e2e-admin-token-0';
const servers = [];
let browser;
let consoleErrors = [];

function need(name) {
  const value = process.env[name];
  assert.ok(value, `${name} must be set (run scripts/test)`);
  return value;
}

// Starts one instance on a free loopback port; resolves with its base URL.
function startServer(instance, { zkRoot = `/seckill-e2e/${process.pid}` } = {}) {
  const child = spawn(
    need('SECKILL_BIN'),
    [
      '--listen', '127.0.0.1:0',
      '--database-url', need('E2E_DATABASE_URL'),
      '--zk', need('SECKILL_ZK'),
      '--zk-root', zkRoot,
      '--admin-token', ADMIN,
      '--allow-unsafe-guards',
      // The source material's sleep: a browser sends only ~6 requests at a time, and the
      // race (and the queue) must still show.
      '--stock-think-ms', '20',
      '--static-dir', join(here, '..', '..', 'static'),
      '--instance', instance,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RUST_LOG: 'warn' } },
  );
  servers.push(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${instance} did not start in 30 s`)), 30_000);
    child.on('exit', (code) => reject(new Error(`${instance} exited with ${code}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      resolve(line.replace('seckill listening on ', '').trim());
    });
  });
}

// `batchMax` 1 gives every order a lock of its own (one queue node per buyer, the queue and
// demo lessons); left out, the server's default batches.
async function createProduct(base, stock, guard, batchMax) {
  const batch = batchMax === undefined ? {} : { batch_max: batchMax };
  const res = await fetch(`${base}/api/products`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ name: `e2e ${guard} ${batchMax ?? ''}`.trim(), price_cents: 999, stock, guard, ...batch }),
  });
  assert.equal(res.status, 201);
  return (await res.json()).id;
}

async function openPage(base, viewport = { width: 1280, height: 900 }) {
  const page = await browser.newPage({ viewport });
  // Chromium logs every non-2xx fetch as "Failed to load resource"; a 409 sold_out is an
  // answer, not an error. Anything else logged as an error counts.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource: the server responded with a status of (409|429|503)/.test(m.text())) {
      consoleErrors.push(m.text());
    }
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(base);
  await page.locator('#live-text', { hasText: 'live' }).waitFor({ timeout: 10_000 });
  return page;
}

let a;
let b;

before(async () => {
  mkdirSync(shots, { recursive: true });
  [a, b] = await Promise.all([startServer('e2e-a'), startServer('e2e-b')]);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  for (const child of servers) child.kill('SIGTERM');
});

// `count` buyers named `{prefix}-{i}` order one unit each, all at once, without the page.
function buyAll(base, product, count, prefix) {
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      fetch(`${base}/orders`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ product_id: product, user_id: `${prefix}-${i}` }),
      }),
    ),
  );
}

test('the page loads, lists products live and buys one', async () => {
  const id = await createProduct(a, 5, 'zk', 64);
  const page = await openPage(a);
  await page.locator(`.product[data-product="${id}"]`).waitFor();
  await page.selectOption('#buy-product', String(id));
  await page.fill('#buy-user', 'e2e-alice');
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

test('the simulator sells a zk product exactly and shows a none product overselling, with the queue live', async () => {
  const zk = await createProduct(a, 20, 'zk', 1);
  const none = await createProduct(a, 20, 'none');
  const page = await openPage(a);
  await page.locator(`.product[data-product="${none}"]`).waitFor();
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(none));
  await page.selectOption('#queue-product', String(zk));
  await page.fill('#sim-buyers', '120');

  // Buyers through the second instance too: one queue across instances.
  const elsewhere = buyAll(b, zk, 20, 'elsewhere');
  await page.click('#sim-run');
  await page.locator('#queue .ticket.waiting').first().waitFor({ timeout: 15_000 });
  await page.screenshot({ path: join(shots, 'queue-during-sale.png'), fullPage: true });
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
  const phone = await startServer(`e2e-phone-${'0123456789'.repeat(4)}`, { zkRoot: root });
  const zk = await createProduct(phone, 40, 'zk', 1);
  const page = await openPage(phone, { width: 375, height: 812 });
  await page.locator(`.product[data-product="${zk}"]`).waitFor();
  await page.selectOption('#queue-product', String(zk));
  await page.locator('#queue-path', { hasText: `${root}/locks/` }).waitFor({ timeout: 10_000 });

  // Buyers, so tickets with their owners join the path on screen.
  const buyers = buyAll(phone, zk, 40, 'phone');
  await page.locator('#queue .ticket').first().waitFor({ timeout: 15_000 });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  await page.screenshot({ path: join(shots, 'phone-long-root.png'), fullPage: true });
  await buyers;
  assert.ok(width <= 375, `the page is ${width} px wide on a 375 px screen`);
  await page.close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
