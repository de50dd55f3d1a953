// Sale windows and the line (issue 48), on the page: a product that opens a few seconds ahead
// on the server's clock shows its countdown; a buyer joins its line from the card before the
// opening (places are drawn then), is let in with a pass, buys with it through the Buy form and
// sees the order paid; the Buy form's refusals (not open yet, no pass) are said in words. And
// the simulator's rush at the opening, a simulation in the page alone, runs to its end and
// shows both lanes' results, in English and in 中文.
//
// Run by scripts/test with the same environment as the other browser tests (see harness.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ADMIN, createProduct, launchBrowser, shots, signInPage, startServer, stopServers } from './harness.mjs';

let browser;
let base;
const consoleErrors = [];

before(async () => {
  mkdirSync(shots, { recursive: true });
  base = await startServer('e2e-line');
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  stopServers();
});

// A page in a browser context of its own. The refusals this file provokes (403 not_admitted,
// 409 not_open) are answers, not errors; anything else logged as an error counts.
async function openPage(locale = 'en-US') {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource: the server responded with a status of (403|409)/.test(m.text())) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(base);
  await page.locator('#live-dot.on').waitFor({ timeout: 10_000 });
  return page;
}

// Now on the server's clock (ms): a product answer's `server_time`.
async function serverNow() {
  const id = await createProduct(base, 1, 'pg-atomic');
  const body = await (await fetch(`${base}/api/products/${id}`)).json();
  assert.ok(body.server_time, 'a product answer carries server_time');
  return Date.parse(body.server_time);
}

async function setLanguage(page, lang) {
  await page.click(`.lang button[data-lang="${lang}"]`);
  await page.locator(`.lang button[data-lang="${lang}"][aria-pressed="true"]`).waitFor();
}

test('a sale that opens on the server\'s clock: the countdown, the line, the pass, the paid order', async () => {
  const opensAt = new Date((await serverNow()) + 12_000).toISOString();
  const id = await createProduct(base, 3, 'pg-atomic', undefined, { opens_at: opensAt, line: true });
  const page = await openPage();
  const card = page.locator(`.product[data-product="${id}"]`);
  const line = card.locator('.line');
  const countdown = card.locator('[data-k="countdown"]');

  // Upcoming, counting down to the opening on the server's clock, second by second.
  await card.locator('.sale[data-state="upcoming"]').waitFor();
  assert.equal(await card.locator('[data-k="sale-state"]').textContent(), 'upcoming');
  assert.match(await countdown.textContent(), /^opens in 0:(0\d|1[0-2])$/);
  assert.match(await card.locator('[data-k="window"]').textContent(), /^opens \d\d:\d\d:\d\d/);
  const left = Number(await countdown.getAttribute('data-left'));
  assert.ok(left >= 1 && left <= 12, `${left} s left`);
  await page.waitForFunction(
    ([selector, was]) => Number(document.querySelector(selector).dataset.left) < was,
    [`.product[data-product="${id}"] [data-k="countdown"]`, left],
  );
  await line.locator('[data-k="said"]', { hasText: /^This sale goes through a line: join it for a place/ }).waitFor();

  // Before the opening the Buy form is refused, in words.
  await signInPage(page, 'line-alice');
  await page.selectOption('#buy-product', String(id));
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-result.err', { hasText: /^409 not_open: the sale has not opened yet/ }).waitFor({ timeout: 10_000 });

  // Joined before the opening: waiting, the place drawn at the opening, nothing to buy with yet.
  await line.locator('[data-k="join"]').click();
  await card.locator('.line[data-line-state="waiting"]').waitFor({ timeout: 10_000 });
  assert.equal(await line.locator('[data-k="place"]').textContent(), 'drawn at the opening');
  assert.match(await line.locator('[data-k="said"]').textContent(), /^You are in the line\. Places are drawn at the opening/);
  assert.equal(await line.locator('[data-k="join"]').isDisabled(), true);
  assert.equal(await line.locator('[data-k="buy"]').isDisabled(), true);
  // In 中文 too, the countdown still running.
  await setLanguage(page, 'zh');
  await line.locator('[data-k="said"]', { hasText: '位置在开售时抽签决定' }).waitFor();
  assert.equal(await line.locator('[data-k="place"]').textContent(), '开售时抽签');
  assert.equal(await card.locator('[data-k="sale-state"]').textContent(), '即将开售');
  assert.match(await countdown.textContent(), /^0:\d\d 后开售$|^正在开售…$/);
  await page.screenshot({ path: join(shots, 'line-waiting-zh.png'), fullPage: true });
  await setLanguage(page, 'en');

  // Let in after the opening: the moment is said, and Buy is offered.
  await card.locator('.line[data-line-state="admitted"]').waitFor({ timeout: 60_000 });
  const said = await line.locator('[data-k="said"]').textContent();
  assert.match(said, /^Your turn! Let in at \S.*: buy before \S.*\.$/);
  await card.locator('.sale[data-state="open"]').waitFor({ timeout: 10_000 });
  assert.equal(await countdown.textContent(), '');
  assert.match(await line.locator('[data-k="place"]').textContent(), /^\d+$/);
  await page.screenshot({ path: join(shots, 'line-admitted.png'), fullPage: true });

  // Bought with the pass, through the Buy form: paid, in My orders, and the line says so.
  await line.locator('[data-k="buy"]:not([disabled])').click();
  await page.locator('#buy-result [data-status="paid"]').waitFor({ timeout: 15_000 });
  const order = page.locator(`#my-orders li[data-product="${id}"][data-status="paid"]`);
  await order.waitFor({ timeout: 10_000 });
  const orderId = await order.getAttribute('data-order');
  const read = await (await fetch(`${base}/orders/${orderId}`, { headers: { Authorization: `Bearer ${ADMIN}` } })).json();
  assert.equal(read.user_id, 'line-alice');
  assert.equal(read.status, 'paid');
  await card.locator('.line[data-line-state="bought"]').waitFor({ timeout: 15_000 });
  assert.match(await line.locator('[data-k="said"]').textContent(), /^Bought with your pass/);
  assert.equal(await line.locator('[data-k="buy"]').isDisabled(), true);

  // The pass bought once: the Buy form has none to send now, and is told why in words.
  await page.click('#buy button[type=submit]');
  await page.locator('#buy-result.err', { hasText: /^403 not_admitted: this product sells through its line/ }).waitFor({ timeout: 10_000 });
  await setLanguage(page, 'zh');
  await page.locator('#buy-result.err', { hasText: '此商品须排队购买' }).waitFor();
  await line.locator('[data-k="said"]', { hasText: '已凭通行证购买' }).waitFor();
  await page.context().close();
});

test('the rush at the opening runs to its end and shows both lanes, in English and 中文', async () => {
  const page = await openPage();
  await page.click('#rush summary');
  await page.locator('#rush-clock', { hasText: /^Run it: ten seconds of arrivals/ }).waitFor();
  await page.click('#rush-run');
  // Buyers arrive, the line is drawn (its dots by place), and the sale runs to its end.
  await page.locator('#rush[data-state="before"]').waitFor();
  await page.locator('#rush-line [data-k="dots"][data-order="place"]').waitFor({ timeout: 20_000 });
  assert.equal(await page.getAttribute('#rush-crowd [data-k="dots"]', 'data-order'), 'arrival');
  await page.locator('#rush[data-state="done"]').waitFor({ timeout: 90_000 });
  await page.locator('#rush-run:not([disabled])', { hasText: 'Run the rush' }).waitFor();
  assert.equal(await page.locator('#rush-line [data-k="dots"] .b').count(), 200);

  const lanes = {};
  for (const key of ['line', 'crowd']) {
    const root = page.locator(`#rush-${key}`);
    const verdict = await root.locator('.verdict').textContent();
    assert.match(verdict, /^Sold out in \d+\.\d s: \d+ orders sent, \d+ turned away; ρ = -?\d\.\d\d; bots, \d+% of the buyers, got \d+% of the units\.$/, verdict);
    assert.match(await root.locator('[data-k="sold_out_in"]').textContent(), /^\d+\.\d s$/);
    assert.match(await root.locator('[data-k="fairness"]').textContent(), /^-?\d\.\d\d$/);
    // Back in order of arrival at the end: where the units went.
    assert.equal(await root.locator('[data-k="dots"]').getAttribute('data-order'), 'arrival');
    assert.equal(await root.locator('.b[data-s="bought"]').count(), 50);
    lanes[key] = await root.evaluate((el) => ({ ...el.dataset }));
  }
  // The line's shop is sent about an order per unit; the crowd's, many more, and turns many away.
  assert.ok(Number(lanes.crowd.sent) > Number(lanes.line.sent), JSON.stringify(lanes));
  assert.ok(Number(lanes.crowd.refused) > Number(lanes.line.refused), JSON.stringify(lanes));
  await page.screenshot({ path: join(shots, 'rush-en.png'), fullPage: true });

  await setLanguage(page, 'zh');
  await page.locator('#rush-clock', { hasText: /^在 T0 \+ \d+\.\d 秒结束/ }).waitFor();
  assert.equal(await page.textContent('#rush-line h4'), '有排队');
  assert.equal(await page.textContent('#rush-crowd h4'), '无排队');
  assert.equal(await page.textContent('#rush-run'), '开始抢购');
  for (const key of ['line', 'crowd']) {
    const verdict = await page.textContent(`#rush-${key} .verdict`);
    assert.match(verdict, /^\d+\.\d 秒售罄：发出 \d+ 个订单，\d+ 个被拒；ρ = -?\d\.\d\d；机器人占买家的 \d+%，买到了 \d+% 的商品。$/, verdict);
  }
  // No English sentence left in the rush, in 中文 (code aside).
  const left = await page.evaluate(() => {
    const found = [];
    const walker = document.createTreeWalker(document.querySelector('#rush'), NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest('code')) continue;
      if (/[A-Za-z]{3,}[\s,.:;!?'-]+[A-Za-z]{3,}/.test(node.textContent)) found.push(node.textContent);
    }
    return found;
  });
  assert.deepEqual(left, []);
  await page.screenshot({ path: join(shots, 'rush-zh.png'), fullPage: true });
  await page.context().close();
});

test('no console errors on any page', () => {
  assert.deepEqual(consoleErrors, []);
});
