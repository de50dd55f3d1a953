// End-to-end tests of the teaching page in headless Debian Chromium, against two real
// seckill instances (and the real PostgreSQL and ZooKeeper behind them), plus others on
// ZooKeeper roots of their own: a long one for the phone layout test, one killed and restarted.
// Buyers sign in (the instances run `--buyer-auth demo`); identity.test.mjs tests who buys.
//
// Run by scripts/test, with the environment harness.mjs lists.
// Screenshots go to tests/browser/screenshots/ (git-ignored); page-en.png and page-zh.png (and
// their -phone versions, 390 px wide) show the whole page in each language, lab-semaphore.png
// and lab-rwlock.png the lock lab.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import {
  ADMIN, buyAll, buyAs, createProduct, killServer, launchBrowser, need, shots, signIn, signInPage, startServer, stopServers,
} from './harness.mjs';

let browser;
let consoleErrors = [];

// A TCP proxy on a free loopback port to `proxy.backend` (a base URL, or null): one address for
// a page whose server dies and comes back on a fresh port (its old one may be taken by then).
// Each connection goes to the backend of the moment; without one, or refused, it is dropped.
async function startProxy(backend) {
  const proxy = { backend, url: '', close: null };
  const sockets = new Set();
  const server = createServer((client) => {
    const target = proxy.backend && new URL(proxy.backend);
    if (!target) {
      client.destroy();
      return;
    }
    const upstream = connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    }
    // An error on either side drops the other, as a dead server would; an end is passed on.
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${server.address().port}`;
  proxy.close = () => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(resolve));
  };
  return proxy;
}

// A page in a fresh context (its own localStorage, so no remembered language), in the given
// browser locale: en-US unless a test says otherwise, so the English assertions stay stable.
async function openPage(base, viewport = { width: 1280, height: 900 }, locale = 'en-US') {
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
const waitLive = (page) => page.locator('#live-dot.on').waitFor({ timeout: 10_000 });

let a;
let b;

before(async () => {
  mkdirSync(shots, { recursive: true });
  [a, b] = await Promise.all([startServer('e2e-a'), startServer('e2e-b')]);
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  stopServers();
});

// The queue must be seen live, and a fast sale can be over before the page draws it (CI
// failed so twice): in step mode every holder keeps the lock after its commit (nothing sold
// changes) until 'stop', so the page has a holder and waiters to draw; then the sale runs on.
async function stepMode(base, product, action) {
  const res = await fetch(`${base}/api/products/${product}/step`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ action }),
  });
  assert.equal(res.status, 202, `step ${action}: ${await res.text()}`);
}

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

// A page whose server goes away mid-sale (killed: no goodbye) and comes back: the page says
// so, in the reader's language, keeps no verdict from a read that failed, and carries on once
// the server answers again. The page's address is a proxy's, so the server can come back on
// any free port. Its own ZooKeeper root and database: the dead session's leases (held until
// ZooKeeper expires it) hold up no other test.
test('a page that survives its server: stopped mid-sale and restarted, it says so in both languages and carries on', async () => {
  const options = { zkRoot: `/seckill-e2e/survive-${process.pid}`, databaseUrl: need('E2E_SURVIVE_DATABASE_URL') };
  const proxy = await startProxy(await startServer('e2e-survive', options));
  const base = proxy.url;
  // A lock per order and think time: the sale lasts seconds, long enough to be cut short.
  const zk = await createProduct(base, 300, 'zk', 1);
  const later = await createProduct(base, 5, 'pg-atomic');
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, locale: 'en-US' });
  // A server that is gone makes the browser log every refused connection; anything else
  // logged, and any exception the page leaves uncaught, counts.
  const errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !/net::ERR_|^Failed to load resource: the server responded with a status of (409|429|503)/.test(m.text())) errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    await survive(page, proxy, zk, later, async () => {
      proxy.backend = await startServer('e2e-survive', options);
    });
  } finally {
    await page.close();
    await proxy.close();
  }
  assert.deepEqual(errors, [], 'errors on the page');
});

// The steps of the test above, on its page (closed whatever happens), through `proxy`.
async function survive(page, proxy, zk, later, restart) {
  const base = proxy.url;
  await page.goto(base);
  await waitLive(page);
  await page.locator(`.product[data-product="${zk}"]`).waitFor();
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(zk)); // same product: runs once
  await page.fill('#sim-buyers', '300');
  await page.click('#sim-run');
  await page.waitForFunction(() => document.querySelector('#lane-a progress').value >= 5, null, { timeout: 15_000 });

  // The proxy lets go of the backend first: its port, free once it dies, may be anyone's.
  const dead = proxy.backend;
  proxy.backend = null;
  await killServer(dead);
  // Said, in English: the server is away and the page keeps trying.
  await page.locator('#live-text', { hasText: /server unreachable/i }).waitFor({ timeout: 15_000 });
  assert.equal(await page.isVisible('#live-text'), true);
  // The sale ends without its audit: "could not read", never a verdict.
  await page.locator('#lane-a .verdict', { hasText: /could not read/i }).waitFor({ timeout: 30_000 });
  assert.doesNotMatch(await page.textContent('#lane-a .verdict'), /consistent|oversold/i);
  assert.equal(await page.getAttribute('#lane-a', 'data-oversold'), null);
  await page.locator('#sim-run:not([disabled])').waitFor();
  // A purchase meanwhile: the failed request is shown, and the button is back.
  await page.selectOption('#buy-product', String(later));
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-result.err', { hasText: /unreachable/i }).waitFor({ timeout: 15_000 });
  assert.equal(await page.isEnabled('#buy button[type=submit]'), true);
  // And in 中文, switched while the server is away.
  await setLanguage(page, 'zh');
  assert.match(await page.textContent('#live-text'), /无法连接服务器/);
  assert.match(await page.textContent('#lane-a .verdict'), /无法读取/);
  assert.match(await page.textContent('#buy-result'), /无法连接服务器/);

  // Back on another port, the same root and database: the page says so (in 中文, then in English).
  await restart();
  await page.locator('#live-dot.on').waitFor({ timeout: 30_000 });
  await page.locator('#live-text', { hasText: /已恢复/ }).waitFor();
  await setLanguage(page, 'en');
  assert.match(await page.textContent('#live-text'), /live again/i);
  // And carries on: a sale made now shows on its card, from the event stream.
  const bought = await buyAs(base, await signIn(base, 'e2e-after-restart'), later);
  assert.equal(bought.status, 201, await bought.text());
  await page.locator(`.product[data-product="${later}"] [data-k="stock"]`, { hasText: /^4$/ }).waitFor({ timeout: 10_000 });
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

// ---------------------------------------------------------------- languages

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
const leftInEnglish = async (page) => textsMatching(page, LATIN_SENTENCE, await latinAllowed(a));
// In English, Chinese only in the header's 秒杀 and the switch's 中文 (both skipped), and in
// product names created while the page was in Chinese (data).
const leftInChinese = async (page) => textsMatching(page, CJK, await productNames(a), 'h1 .sub');

async function setLanguage(page, lang) {
  await page.click(`.lang button[data-lang="${lang}"]`);
  await page.locator(`.lang button[data-lang="${lang}"][aria-pressed="true"]`).waitFor();
}

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

// ---------------------------------------------------------------- the lock lab

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
