// What the browser test files share: the seckill instances they start (on the database
// scripts/test gives them), the admin's and the buyers' requests made without the page, and
// the browser. page.mjs adds what the files of the page's sections share (a page on it).
//
// Run by scripts/test, which provides:
//   SECKILL_BIN              the server binary
//   E2E_DATABASE_URL         a fresh database for this run
//   E2E_OTHER_DATABASE_URL   another, for the instance with a long ZooKeeper root
//   E2E_SURVIVE_DATABASE_URL another, for the instance that is killed and restarted
//   SECKILL_ZK               ZooKeeper connect string
//   CHROMIUM                 the browser [/usr/bin/chromium]
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const here = dirname(fileURLToPath(import.meta.url));
export const shots = join(here, 'screenshots');
export const ADMIN = 'e2e-admin-token-0';

export function need(name) {
  const value = process.env[name];
  assert.ok(value, `${name} must be set (run scripts/test)`);
  return value;
}

// Every test file's instances on one ZooKeeper root, named after the run's database: a
// database is guarded by one ensemble's identity, and the files run in processes of their own.
const defaultRoot = () => `/seckill-e2e/${new URL(need('E2E_DATABASE_URL')).pathname.slice(1) || process.pid}`;

// The instance serving each base URL: a test that stops one finds it here.
const running = new Map();
const servers = [];

/// Starts one instance on a free loopback port; resolves with its base URL. Buyers sign in
/// (`--buyer-auth demo`: the server issues their tokens) unless `buyerAuth` says otherwise
/// (`args`: more flags, such as jwks mode's). Another `zkRoot` is another ZooKeeper ensemble's
/// identity: it needs a `databaseUrl` of its own, since an instance whose ensemble does not
/// guard its database sells nothing.
export function startServer(instance, { zkRoot = defaultRoot(), requestTimeoutMs = 60_000, databaseUrl = need('E2E_DATABASE_URL'), buyerAuth = 'demo', args = [] } = {}) {
  const child = spawn(
    need('SECKILL_BIN'),
    [
      '--listen', '127.0.0.1:0',
      '--database-url', databaseUrl,
      '--zk', need('SECKILL_ZK'),
      '--zk-root', zkRoot,
      '--admin-token', ADMIN,
      // ZooKeeper closed to strangers, as scripts/demo runs it.
      '--zk-auth', 'seckill:e2e-zk-credentials',
      '--buyer-auth', buyerAuth,
      '--allow-unsafe-guards',
      // The source material's sleep: a browser sends only ~6 requests at a time, and the
      // race (and the queue) must still show.
      '--stock-think-ms', '20',
      // The payment semaphore the lock lab draws: every instance must agree on N.
      '--payment-concurrency', '2',
      // A step-through's waiting orders live as long as their requests (its lock timeout is
      // the request's): on a busy machine three Nexts and the page's redraws took longer
      // than the default 15 s, the waiters left, and the wake-ups the test counts with them.
      '--request-timeout-ms', String(requestTimeoutMs),
      '--shutdown-grace-ms', String(requestTimeoutMs + 2000),
      '--static-dir', join(here, '..', '..', 'static'),
      '--instance', instance,
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RUST_LOG: 'warn' } },
  );
  servers.push(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${instance} did not start in 30 s`)), 30_000);
    child.on('exit', (code) => reject(new Error(`${instance} exited with ${code}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const base = line.replace('seckill listening on ', '').trim();
      running.set(base, child);
      resolve(base);
    });
  });
}

/// Kills the instance serving `base` at once (no graceful shutdown: a crash, as a page meets
/// it) and resolves when it has exited.
export function killServer(base) {
  const child = running.get(base);
  running.delete(base);
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  return exited;
}

/// Stops every instance this file started.
export function stopServers() {
  for (const child of servers) child.kill('SIGTERM');
}

/// `batchMax` 1 gives every order a lock of its own (one queue node per buyer, the queue and
/// demo lessons); left out, the server's default batches. `terms`: more of the product's
/// fields (per_user_limit...).
export async function createProduct(base, stock, guard, batchMax, terms = {}) {
  const batch = batchMax === undefined ? {} : { batch_max: batchMax };
  const res = await fetch(`${base}/api/products`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ name: `e2e ${guard} ${batchMax ?? ''}`.trim(), price_cents: 999, stock, guard, ...batch, ...terms }),
  });
  assert.equal(res.status, 201);
  return (await res.json()).id;
}

/// A demo token for `name`, as the page gets one.
export async function signIn(base, name) {
  const res = await fetch(`${base}/api/session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ name }),
  });
  const body = await res.json();
  assert.equal(res.status, 201, JSON.stringify(body));
  assert.equal(body.buyer, name);
  return body.token;
}

/// `name` orders one unit of `product` with its own token, without the page.
export const buyAs = (base, token, product) =>
  fetch(`${base}/orders`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ product_id: product }),
  });

/// `count` buyers named `{prefix}-{i}` sign in, then order one unit each, all at once,
/// without the page.
export async function buyAll(base, product, count, prefix) {
  const tokens = await Promise.all(Array.from({ length: count }, (_, i) => signIn(base, `${prefix}-${i}`)));
  return Promise.all(tokens.map((token) => buyAs(base, token, product)));
}

export function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
  });
}

/// Signs the page in as `name` (demo mode), as a reader would: the name, then Sign in; resolves
/// once the page says who it is signed in as.
export async function signInPage(page, name) {
  await page.locator('#account[data-mode="demo"] #sign-in:not([disabled])').waitFor();
  await page.fill('#buy-user', name);
  await page.click('#sign-in');
  await page.locator(`#whoami[data-buyer="${name}"]`).waitFor({ timeout: 10_000 });
}
