// The header's connection status, in headless Debian Chromium: a page whose server is killed
// mid-sale and restarted says so in both languages and carries on. Its instance is started by
// the test, behind a proxy, on a ZooKeeper root and a database of its own
// (E2E_SURVIVE_DATABASE_URL); the test counts its page's errors itself.
//
// Run by scripts/test, with the environment harness.mjs lists; page.mjs holds what the files of
// the page's sections share (the instances a file starts, the browser, a page opened on it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer } from 'node:net';
import { buyAs, createProduct, killServer, need, signIn, startServer } from './harness.mjs';
import { browser, setLanguage, useServers, waitLive } from './page.mjs';

useServers();

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
