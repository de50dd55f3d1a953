// Buyers are who they say they are (issue 47), on the page: a buyer signs in (`--buyer-auth
// demo`: the server issues a token for a name), buys as that buyer, and sees and pays only
// their own orders; a token that is altered or expired is signed in again by its name, or
// dropped and said so; the simulator's crowd signs in, each buyer with a token of its own;
// an `open` server (teaching only) says so and takes the name typed.
//
// Run by scripts/test after the files of the page's sections (shop.test.mjs...), with the same
// environment (see harness.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ADMIN, buyAs, createProduct, launchBrowser, shots, signIn, signInPage, startServer, stopServers } from './harness.mjs';

let browser;
let base;
const consoleErrors = [];

before(async () => {
  mkdirSync(shots, { recursive: true });
  base = await startServer('e2e-identity');
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  stopServers();
});

// A page in a browser context of its own (its own sessionStorage: another person's browser).
// `refusals`: a 401 is expected (a token refused), not an error.
async function openPage(url = base, { locale = 'en-US', refusals = false } = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale });
  const page = await context.newPage();
  const allowed = refusals ? /status of (401|409)/ : /status of 409/;
  page.on('console', (m) => {
    if (m.type() === 'error' && !(/^Failed to load resource/.test(m.text()) && allowed.test(m.text()))) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(url);
  await page.locator('#live-dot.on').waitFor({ timeout: 10_000 });
  return page;
}

const closePage = (page) => page.context().close();
const held = (page) => page.evaluate(() => ({
  token: sessionStorage.getItem('seckill-buyer-token'),
  name: sessionStorage.getItem('seckill-buyer-name'),
}));

// Whom the server takes `token` for (GET /api/session).
async function whom(token) {
  const res = await fetch(`${base}/api/session`, { headers: { Authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() };
}

// The token with its `sub` changed and its signature kept: a buyer trying to be someone else.
function tamper(token, sub) {
  const [header, payload, signature] = token.split('.');
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  return [header, Buffer.from(JSON.stringify({ ...claims, sub })).toString('base64url'), signature].join('.');
}

// The orders My orders lists, as drawn: id and status, newest first.
const listed = (page) =>
  page.$$eval('#my-orders li[data-order]', (items) => items.map((li) => ({ id: li.dataset.order, status: li.dataset.status })));

async function buyOnPage(page, product, { pay = true } = {}) {
  await page.locator(`#buy-product option[value="${product}"]`).waitFor({ state: 'attached' });
  await page.selectOption('#buy-product', String(product));
  await page.setChecked('#buy-pay', pay);
  await page.click('#buy button[type=submit]');
}

test('signing in as a name shows it, the tab keeps it across a reload, signing out forgets it', async () => {
  const page = await openPage();
  assert.equal(await page.getAttribute('#account', 'data-mode'), 'demo');
  await page.locator('#whoami', { hasText: 'Not signed in: sign in to buy.' }).waitFor();
  assert.match(await page.textContent('#account-note'), /^Demo sign-in: the server issues a short-lived token/);
  assert.equal(await page.textContent('#my-orders'), 'Sign in to see your orders.');
  assert.equal(await page.isDisabled('#sign-out'), true);

  await signInPage(page, 'id-alice');
  assert.equal(await page.textContent('#whoami'), 'Signed in as id-alice.');
  const { token, name } = await held(page);
  assert.equal(name, 'id-alice');
  assert.deepEqual(await whom(token), { status: 200, body: { buyer_auth: 'demo', buyer: 'id-alice', admin: false } });
  // Signed in, the name is who buys: it cannot be edited into another name.
  assert.equal(await page.getAttribute('#buy-user', 'readonly'), '');
  await page.locator('#my-orders', { hasText: 'No orders yet.' }).waitFor();

  await page.reload();
  await page.locator('#whoami[data-buyer="id-alice"]').waitFor();
  assert.equal((await held(page)).token, token);

  // In 中文 too: who you are, and the note of the mode.
  await page.click('.lang button[data-lang="zh"]');
  await page.locator('#whoami', { hasText: '已登录：id-alice。' }).waitFor();
  assert.match(await page.textContent('#account-note'), /^演示登录/);
  assert.equal(await page.textContent('#sign-out'), '退出登录');
  assert.equal(await page.textContent('#orders h3'), '我的订单');
  await page.screenshot({ path: join(shots, 'identity-signed-in-zh.png'), fullPage: true });
  await page.click('.lang button[data-lang="en"]');

  await page.click('#sign-out');
  await page.locator('#whoami', { hasText: 'Not signed in: sign in to buy.' }).waitFor();
  assert.deepEqual(await held(page), { token: null, name: null });
  assert.equal(await page.getAttribute('#buy-user', 'readonly'), null);
  await page.locator('#my-orders', { hasText: 'Sign in to see your orders.' }).waitFor();
  await closePage(page);
});

test('buying while signed in: the order is the buyer\'s, in My orders, and a reservation is paid from there', async () => {
  const product = await createProduct(base, 10, 'pg-atomic', undefined, { per_user_limit: 5 });
  const page = await openPage(base, { refusals: true });
  await page.locator(`.product[data-product="${product}"]`).waitFor();
  // Signed out, the order is refused by its code, in words.
  await buyOnPage(page, product);
  await page.locator('#buy-result.err', { hasText: /^401 unauthenticated: sign in first/ }).waitFor({ timeout: 10_000 });

  await signInPage(page, 'id-bob');
  await buyOnPage(page, product, { pay: false });
  await page.locator('#buy-result [data-status="reserved"]').waitFor({ timeout: 10_000 });
  await page.locator('#my-orders li[data-status="reserved"]').waitFor({ timeout: 10_000 });
  const [reserved] = await listed(page);
  // The server has it as id-bob's (the admin may read any order).
  const order = await (await fetch(`${base}/orders/${reserved.id}`, { headers: { Authorization: `Bearer ${ADMIN}` } })).json();
  assert.equal(order.user_id, 'id-bob');
  const item = page.locator(`#my-orders li[data-order="${reserved.id}"]`);
  assert.match(await item.textContent(), new RegExp(`^${reserved.id.slice(0, 8)}#${product} e2e pg-atomic× 1\\$9\\.99reservedPay$`));
  await page.screenshot({ path: join(shots, 'identity-my-orders.png'), fullPage: true });

  await item.locator('button[data-pay]').click();
  await page.locator(`#my-orders li[data-order="${reserved.id}"][data-status="paid"]`).waitFor({ timeout: 15_000 });
  assert.equal(await page.textContent('#orders-result'), `Order ${reserved.id.slice(0, 8)} paid.`);
  assert.equal(await item.locator('button').count(), 0);

  // Another purchase, paid at once: on top of the list.
  await buyOnPage(page, product);
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  await page.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 2);
  const after = await listed(page);
  assert.equal(after[1].id, reserved.id, 'newest first');
  assert.deepEqual(after.map((o) => o.status), ['paid', 'paid']);
  await closePage(page);
});

test('My orders pages with More; another buyer, in another browser, sees none of them', async () => {
  const product = await createProduct(base, 50, 'pg-atomic', undefined, { per_user_limit: 20 });
  const token = await signIn(base, 'id-gina');
  const ids = [];
  for (let i = 0; i < 12; i += 1) {
    const res = await buyAs(base, token, product);
    assert.equal(res.status, 201);
    ids.push((await res.json()).id);
  }
  const gina = await openPage();
  await signInPage(gina, 'id-gina');
  // Ten a page, newest first; More brings the rest.
  await gina.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 10);
  assert.deepEqual((await listed(gina)).map((o) => o.id), ids.slice(-10).reverse());
  await gina.click('#orders-more');
  await gina.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 12);
  assert.deepEqual((await listed(gina)).map((o) => o.id), [...ids].reverse());
  await gina.locator('#orders-more').waitFor({ state: 'hidden' });

  // Someone else, in a browser of their own: their own order only.
  const hank = await openPage();
  await hank.locator(`.product[data-product="${product}"]`).waitFor();
  await signInPage(hank, 'id-hank');
  await buyOnPage(hank, product);
  await hank.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  await hank.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 1);
  const [own] = await listed(hank);
  assert.ok(!ids.includes(own.id));
  // And the server keeps Gina's orders from Hank's token: as if there were none.
  const { token: hanks } = await held(hank);
  const peek = await fetch(`${base}/orders/${ids[0]}`, { headers: { Authorization: `Bearer ${hanks}` } });
  assert.equal(peek.status, 404);
  assert.equal((await peek.json()).error, 'order_not_found');
  // Gina's list, read again, has not got Hank's order.
  await gina.reload();
  await gina.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 10);
  assert.ok(!(await listed(gina)).some((o) => o.id === own.id));
  await closePage(gina);
  await closePage(hank);
});

test('a token altered or expired: signed in again by its name; with no name, dropped and said so', async () => {
  const product = await createProduct(base, 10, 'pg-atomic');
  const page = await openPage(base, { refusals: true });
  await page.locator(`.product[data-product="${product}"]`).waitFor();
  await signInPage(page, 'id-erin');
  const { token } = await held(page);
  const forged = tamper(token, 'id-mallory');
  assert.equal((await whom(forged)).status, 401, 'the server refuses the altered token');

  // The page's token goes bad while it is open (as when it expires): the order is refused,
  // the page signs in again as id-erin — never as the token's new sub — and the order goes through.
  await page.evaluate(async (bad) => {
    const { store } = await import('/js/state.js');
    store.set({ session: { ...store.get().session, token: bad } });
  }, forged);
  await buyOnPage(page, product);
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  const renewed = (await held(page)).token;
  assert.notEqual(renewed, forged);
  assert.equal((await whom(renewed)).body.buyer, 'id-erin');
  assert.equal(await page.getAttribute('#whoami', 'data-buyer'), 'id-erin');

  // Altered in storage, then the tab reloaded: signed in again by the name kept.
  await page.evaluate((bad) => sessionStorage.setItem('seckill-buyer-token', bad), forged);
  await page.reload();
  await page.locator('#whoami[data-buyer="id-erin"]').waitFor({ timeout: 10_000 });
  assert.equal((await whom((await held(page)).token)).body.buyer, 'id-erin');

  // No name kept: nothing to sign in again by. The token is dropped, and the page says why.
  await page.evaluate((bad) => {
    sessionStorage.setItem('seckill-buyer-token', bad);
    sessionStorage.removeItem('seckill-buyer-name');
  }, forged);
  await page.reload();
  await page.locator('#whoami.err', { hasText: /^401 invalid_token: your sign-in is no longer valid \(expired or altered\): sign in again$/ }).waitFor({ timeout: 10_000 });
  assert.equal(await page.getAttribute('#whoami', 'data-buyer'), '');
  assert.equal((await held(page)).token, null);
  // The page still works: products, and an order refused for want of a sign-in.
  await buyOnPage(page, product);
  await page.locator('#buy-result.err', { hasText: /^401 unauthenticated/ }).waitFor({ timeout: 10_000 });
  await page.screenshot({ path: join(shots, 'identity-refused.png'), fullPage: true });
  // In 中文, by its code.
  await page.click('.lang button[data-lang="zh"]');
  assert.match(await page.textContent('#whoami'), /^401 invalid_token：登录已失效/);
  // And signed in again, as anyone would.
  await page.click('.lang button[data-lang="en"]');
  await signInPage(page, 'id-erin');
  await closePage(page);
});

test('the simulator\'s crowd signs in before the sale, each buyer with a token of its own', async () => {
  const zk = await createProduct(base, 10, 'zk', 1);
  const page = await openPage();
  await page.locator(`.product[data-product="${zk}"]`).waitFor();
  await page.selectOption('#lane-a .lane-product', String(zk));
  await page.selectOption('#lane-b .lane-product', String(zk)); // same product: runs once
  await page.fill('#sim-buyers', '30');
  await page.click('#sim-run');
  await page.locator('#lane-a[data-state="done"]').waitFor({ timeout: 60_000 });
  assert.match(await page.textContent('#lane-a .verdict'), /^10 sold of 10 — 0 oversold, consistent$/);
  // Every buyer was answered as a buyer: 10 paid, 20 sold out, none refused.
  const stats = await page.$$eval('#lane-a .stats dd[data-k]', (dds) => Object.fromEntries(dds.map((dd) => [dd.dataset.k, dd.textContent])));
  assert.deepEqual([stats.paid, stats.sold_out, stats.other], ['10', '20', '0']);
  // Thirty names, thirty tokens, each naming its buyer.
  const crowd = await page.evaluate(async () => {
    const { store } = await import('/js/state.js');
    const entries = [...store.get().crowdTokens.entries()];
    return Promise.all(entries.map(async ([name, token]) => [name, await token]));
  });
  assert.equal(crowd.length, 30);
  assert.equal(new Set(crowd.map(([, token]) => token)).size, 30);
  for (const [name, token] of crowd.slice(0, 3)) assert.equal((await whom(token)).body.buyer, name);
  // The orders are theirs: one of the crowd's, read by the admin.
  const [someone] = crowd[0];
  const theirs = await (await fetch(`${base}/orders?user_id=${encodeURIComponent(someone)}`, { headers: { Authorization: `Bearer ${ADMIN}` } })).json();
  assert.equal(theirs.orders.length, 1);
  assert.equal(theirs.orders[0].user_id, someone);
  await closePage(page);
});

test('an open server (teaching only) says so, and buys for the name typed', async () => {
  const open = await startServer('e2e-open', { buyerAuth: 'open' });
  const product = await createProduct(open, 5, 'pg-atomic');
  const page = await openPage(open);
  await page.locator('#account[data-mode="open"]').waitFor();
  await page.locator(`.product[data-product="${product}"]`).waitFor();
  assert.match(await page.textContent('#account-note'), /^Open mode, for teaching only: nobody signs in/);
  assert.equal(await page.isVisible('#account-note'), true);
  assert.equal(await page.isVisible('#sign-in'), false);
  assert.equal(await page.textContent('#whoami'), 'Not signed in: orders are placed for the name above.');
  await page.fill('#buy-user', 'id-ivan');
  await page.dispatchEvent('#buy-user', 'change');
  await page.locator('#my-orders', { hasText: 'No orders yet.' }).waitFor();
  await buyOnPage(page, product);
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  await page.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 1);
  assert.equal(await page.getAttribute('#my-orders', 'data-owner'), 'id-ivan');
  await page.screenshot({ path: join(shots, 'identity-open.png'), fullPage: true });
  // Another name, another list.
  await page.fill('#buy-user', 'id-judy');
  await page.dispatchEvent('#buy-user', 'change');
  await page.locator('#my-orders[data-owner="id-judy"]', { hasText: 'No orders yet.' }).waitFor();
  await closePage(page);
});

// A jwks server trusts an issuer's keys: here the demo instance's, so its tokens stand in
// for an identity provider's. The page takes a token pasted, and says whom it names.
test('a jwks server: the page takes a token from the issuer, pasted, and refuses an altered one', async () => {
  const jwks = await startServer('e2e-jwks', { buyerAuth: 'jwks', args: ['--buyer-jwks-url', `${base}/.well-known/jwks.json`] });
  const product = await createProduct(jwks, 5, 'pg-atomic');
  const page = await openPage(jwks, { refusals: true });
  await page.locator('#account[data-mode="jwks"]').waitFor();
  assert.match(await page.textContent('#account-note'), /paste the token \(a JWT\) it gives you/);
  assert.deepEqual([await page.isVisible('#buyer-token'), await page.isVisible('#buy-user')], [true, false]);
  assert.equal(await page.textContent('#whoami'), 'Not signed in: paste a token to buy.');
  const token = await signIn(base, 'id-kate');

  // Altered: refused, and said so.
  await page.fill('#buyer-token', tamper(token, 'id-mallory'));
  await page.click('#sign-in');
  await page.locator('#whoami.err', { hasText: /^401 invalid_token/ }).waitFor({ timeout: 10_000 });
  assert.equal((await held(page)).token, null);

  // As issued: whom it names is who buys.
  await page.fill('#buyer-token', token);
  await page.click('#sign-in');
  await page.locator('#whoami[data-buyer="id-kate"]').waitFor({ timeout: 10_000 });
  await page.locator(`.product[data-product="${product}"]`).waitFor();
  await buyOnPage(page, product);
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 10_000 });
  await page.waitForFunction(() => document.querySelectorAll('#my-orders li[data-order]').length === 1);
  assert.equal(await page.getAttribute('#my-orders', 'data-owner'), 'id-kate');
  await closePage(page);
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
