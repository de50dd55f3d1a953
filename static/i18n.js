// The page's texts in English and Chinese, and the switch between them. Every user-visible
// string lives in the two dictionaries below, under the same stable key; index.html names
// keys in data-i18n* attributes, app.js calls t(key, params).
//
// Numbers, ids, guard names (zk, zk-herd, pg-atomic, none), product names, ZooKeeper paths,
// node owners and fencing tokens are identifiers: they come in as {placeholders} and are never
// translated. A placeholder with no matching param is left as written (the footer's
// /api/products/{id}/lock is one).
//
// Adding a string: add the key to both `en` and `zh` with the same placeholders (a browser
// test checks both dictionaries have the same keys and placeholders; only English may leave
// out or use {message}, the server's English message), then use it from the HTML
// (data-i18n="key") or from app.js (t('key', { name: value })).

const STORAGE_KEY = 'seckill-lang';

const en = {
  // ------------------------------------------------------------ page and header
  'page.title': 'seckill — a flash sale that never oversells',
  'page.description': 'Watch a flash sale, its ZooKeeper lock queue, and oversell happen — live.',
  'page.skip': 'Skip to content',
  'page.tagline':
    'A flash sale that never oversells: every stock update runs inside a <strong>fair ZooKeeper lock</strong>, and PostgreSQL checks the lock\'s <strong>fencing token</strong> on every write.',
  'lang.label': 'Language',
  'live.connecting': 'connecting…',
  'live.on': 'live',
  'live.reconnecting': 'reconnecting…',
  'footer':
    'API: <code>POST /orders</code>, <code>GET /api/products</code>, <code>GET /api/products/{id}/lock</code>, <code>GET /api/products/{id}/terms-lock</code>, <code>GET /api/payments/semaphore</code>, <code>GET /api/events</code> — see the README.',

  // ------------------------------------------------------------ 1 · the shop
  'shop.heading': '1 · The shop',
  'shop.hint': 'Stock and sales update live, from every server instance.',
  'shop.empty': 'No products yet: create one below (admin token), or run <code>scripts/demo</code>.',
  'product.sold_out': 'sold out',
  'product.bar': '{sold} of {total} sold',
  'product.line': '{price} · {stock} left · {sold} sold of {total}',
  'product.oversold': 'oversold by {n}',
  'product.option': '#{id} {name} ({guarding})',
  'buy.heading': 'Buy',
  'buy.product': 'Product',
  'buy.user': 'Your name',
  'buy.quantity': 'Quantity',
  'buy.pay': 'pay now',
  'buy.submit': 'Buy',
  'buy.ordering': 'ordering…',
  'buy.ok': 'Order {id}: {status} — {wait}{fence}{batch}.',
  'buy.no_lock': 'no lock',
  'buy.waited': 'waited {ms} ms for the lock',
  'buy.fence': ', fencing token {fence}',
  'buy.own_cycle': ', in its own {cycle}',
  'buy.shared_cycle': ', served in a {cycle} with {n} orders',
  'pay.none': 'No payment: nothing was sent to the provider.',
  'pay.line': 'Payment {key}: {outcome} — {by}.',
  'pay.outcome_pending': 'pending',
  'pay.outcome_succeeded': 'succeeded',
  'pay.outcome_failed': 'declined',
  'pay.by_answer': 'settled by the provider\'s answer to this order',
  'pay.by_sweep': 'settled by the sweep (the answer was lost; it asked again under the same key)',
  'pay.by_nobody': 'the provider\'s answer has not come back: the sweep will ask again under the same key, never charge twice',
  'pay.by_unrecorded': 'settled (by whom was not recorded: before this version)',
  'cycle.lock': 'lock cycle',
  'cycle.transaction': 'transaction',

  // How a product is guarded, batching included.
  'guarding.none': 'no lock: each order alone, racing the others',
  'guarding.lock_per_order': 'a lock per order',
  'guarding.transaction_per_order': 'a transaction per order',
  'guarding.batched': 'batched: up to {n} orders per {cycle}',
  'guarding.short_batched': '{guard}, batched ≤{n}',
  'guarding.short_lock_per_order': '{guard}, a lock per order',

  // Order statuses, as the API names them.
  'status.created': 'created',
  'status.reserved': 'reserved',
  'status.paying': 'paying',
  'status.paid': 'paid',
  'status.sold_out': 'sold out',
  'status.payment_failed': 'payment failed',
  'status.expired': 'expired',
  'status.failed': 'failed',

  // Error answers, by the API's stable `error` code. invalid_request and unprocessable say
  // what was wrong in the server's (English) message, so English shows it.
  'error.line': '{status} {code}: {message}',
  'error.no_answer': 'no answer from the server',
  'error.invalid_request': 'invalid request: {message}',
  'error.unauthorized': 'a valid admin token is required',
  'error.payment_failed': 'the payment was declined; the reserved stock was returned',
  'error.admin_disabled': 'admin endpoints are disabled: start the server with <code>--admin-token</code>',
  'error.demo_disabled': 'the none guard, the demos and the lock lab are disabled: start the server with <code>--allow-unsafe-guards</code>',
  'error.unknown_product': 'no such product',
  'error.order_not_found': 'no such order',
  'error.not_found': 'no such route',
  'error.no_lock': 'this product\'s guard takes no lock',
  'error.method_not_allowed': 'method not allowed on this route',
  'error.sold_out': 'sold out: not enough stock left for this order',
  'error.purchase_limit': 'purchase limit reached: this user may not hold more units of this product',
  'error.too_many_unpaid': 'unpaid reservations already hold this product\'s share of its stock; order with payment, or try later',
  'error.idempotency_in_progress': 'a request with this <code>Idempotency-Key</code> is still in progress; retry shortly',
  'error.reservation_expired': 'the reservation expired before payment; its stock went back on sale',
  'error.payment_in_progress': 'a payment for this order is already in progress',
  'error.order_not_payable': 'this order is not awaiting payment',
  'error.payload_too_large': 'the request is too large',
  'error.unsupported_media_type': 'expected <code>Content-Type: application/json</code>',
  'error.idempotency_mismatch': 'this <code>Idempotency-Key</code> was used with a different request',
  'error.unprocessable': 'not possible for this product: {message}',
  'error.too_busy': 'too busy: too many buyers are queued here; try again',
  'error.rate_limited': 'too many orders from this client; slow down',
  'error.lock_timeout': 'the product\'s lock was not granted in time; nothing changed, try again',
  'error.lock_lost': 'the product\'s lock was lost before the stock write; nothing changed, try again',
  'error.payment_busy':
    'the payment provider is at its limit of charges in flight; nothing was charged and the units stay reserved: pay again before the reservation expires',
  'error.outcome_pending':
    'the outcome is not known yet (a backing service did not answer in time); it is being settled: look the order up, or retry with the same key',
  'error.unavailable': 'a backing service is unavailable, try again',
  'error.internal': 'internal error',

  // ------------------------------------------------------------ 2 · the simulator
  'sim.heading': '2 · Flash-sale simulator',
  'sim.hint':
    'Launch many buyers at once from this page, on two products side by side. The <code>none</code> guard does the same read-check-write as <code>zk</code>, without the lock: watch it sell more than it has. A <em>batched</em> product serves many queued orders in one lock cycle: compare it with a lock per order.',
  'create.summary': 'Create a fresh product (admin)',
  'create.token': 'Admin token',
  'create.token_placeholder': 'printed by scripts/demo',
  'create.stock': 'Stock',
  'create.guard': 'Guard',
  'create.guard_zk': 'zk — fair lock + fence',
  'create.guard_zk_herd': 'zk-herd — naive lock (herd effect)',
  'create.guard_pg_atomic': 'pg-atomic — one conditional UPDATE',
  'create.guard_none': 'none — no lock (oversells)',
  'create.batch': 'Orders per lock cycle',
  'create.batch_placeholder': 'server default',
  'create.batch_title': 'batch_max: 1 = a lock per order',
  'create.submit': 'Create',
  'create.name': 'Flash sale {time}',
  'create.ok': 'Created product #{id} ({guard}, {guarding}).',
  'presets.label': 'presets',
  'presets.compare': 'Compare:',
  'presets.oversell': 'zk vs none',
  'presets.batching': 'a lock per order vs batched',
  'presets.missing': 'No product for one of the lanes: create one above (admin).',
  'lane.a': 'Product A',
  'lane.b': 'Product B',
  'sim.buyers': 'Buyers per product',
  'sim.run': 'Start the sale',
  'sim.running': 'Sale running…',
  'sim.note':
    'Orders per lock cycle: orders served ÷ lock acquisitions, from this instance\'s lock view, counted over this sale only. Orders/s: buyers answered per second. A browser sends about six requests at a time to one server, for both lanes together: batches stay small here and timings are rough. The load test (<code>loadtest/</code>) measures throughput.',
  'stats.paid': 'paid',
  'stats.sold_out': 'sold out',
  'stats.retried': 'retried',
  'stats.other': 'other',
  'stats.elapsed': 'elapsed',
  'stats.rate': 'orders/s',
  'stats.per_cycle': 'orders per lock cycle',
  'stats.progress': 'buyers answered',
  'stats.seconds': '{s} s',
  'stats.no_lock': 'no lock',
  'verdict.selling': 'selling…',
  'verdict.ok': '{sold} sold of {total} — 0 oversold, consistent',
  'verdict.oversold': 'OVERSOLD: {sold} sold of {total} — {oversold} oversold, books inconsistent',
  'verdict.inconsistent':
    '{sold} sold of {total} — 0 oversold yet, but INCONSISTENT: the stock went down by {taken} for {sold} sales ({lost} lost updates)',

  // ------------------------------------------------------------ 3 · the lock queue
  'queue.heading': '3 · The lock queue, live',
  'queue.hint':
    'Each buyer takes a number — an ephemeral-sequential node in ZooKeeper. The smallest number is served; every other buyer watches only the number just before its own. On a batched product each instance takes one number for all the orders queued on it.',
  'queue.product': 'Product',
  'queue.label': 'lock queue',
  'queue.pick': 'Pick a product guarded by a ZooKeeper lock.',
  'queue.empty': 'Nobody holds the lock: the queue is empty.',
  'queue.crowd': 'buyers here, all watching the one node',
  'queue.fair': 'Fair queue',
  'queue.herd': 'Herd lock',
  'queue.all_nodes': ' ({n} nodes in all)',
  'queue.batched': ' · batched: one node per instance, serving its queued orders',
  'queue.stats':
    '{recipe}{all}{batched} · this instance: {acquisitions} acquisitions, {wakeups} watch wake-ups, {orders} orders ({ratio} per lock cycle).',
  'ticket.lock': 'lock',
  'ticket.holds': 'holds the lock',
  'ticket.waiting': 'waiting',
  'ticket.watches': 'watches #{seq}',
  'ticket.owner': 'owner',
  'ticket.token': 'token {token}',
  'ticket.mark_read': 'R',
  'ticket.mark_write': 'W',
  'ticket.access_read': 'reader: shares the lock with the other readers',
  'ticket.access_write': 'writer: holds the lock alone',

  // ------------------------------------------------------------ 4 · herd vs fair
  'herd.heading': '4 · Herd vs fair',
  'herd.hint':
    'Run the simulator on a <code>zk</code> and a <code>zk-herd</code> product. A fair waiter wakes once, when its predecessor leaves; in the herd every release wakes everyone, though only one can win.',
  'herd.product': 'product',
  'herd.guard': 'guard',
  'herd.acquisitions': 'acquisitions',
  'herd.wakeups': 'watch wake-ups',
  'herd.per_acquisition': 'per acquisition',
  'herd.per_cycle': 'orders per lock cycle',
  'herd.empty': 'Run a sale on a zk or zk-herd product.',
  'herd.note': 'Counted by the instance serving this page, for its own buyers.',

  // ------------------------------------------------------------ 5 · crash and zombie
  'step.heading': 'Step through a sale',
  'step.hint':
    'Admin token and a server with <code>--allow-unsafe-guards</code>. Pick a product above, then <em>Hold each lock</em>: every holder of its lock keeps it after writing the stock, until you click <em>Next</em> (two minutes at most; what is sold does not change). Queue a few buyers, wait for the queue to stand still, and click <em>Next</em>: the fair lock wakes exactly one waiter, the one watching the holder; the herd lock wakes them all.',
  'step.start': 'Hold each lock',
  'step.buyers': 'Buyers',
  'step.queue': 'Queue buyers',
  'step.next': 'Next',
  'step.stop': 'Stop',
  'step.started': 'Product #{id}: every lock holder now waits for Next (for two minutes at most).',
  'step.queued': 'Queued {n} buyers for product #{id}: {answered} answered so far.',
  'step.released': 'Released the holder with fencing token {token}.',
  'step.nobody': 'Nobody held the lock: nothing to release.',
  'step.stopped': 'Step-through ended: holders release as usual.',
  'step.pick': 'Pick a product with a lock (zk or zk-herd) in the queue above.',
  'step.woke_fair': 'Click {click}: {woke} waiter woke (the one watching the released node); ticket #{seq} holds now. Woken over this step-through: {total}.',
  'step.woke_herd': 'Click {click}: {woke} waiters woke for one release; one of them holds now, the others watch again. Woken over this step-through: {total}.',
  'demo.heading': '5 · Crash and zombie',
  'demo.hint':
    'Needs the admin token and a server started with <code>--allow-unsafe-guards</code> (as <code>scripts/demo</code> does). Arm a demo, then start a sale on the same product. Use a product with a lock per order: on a batched one the next lock cycle is a whole batch, and only another instance can take over from a zombie.',
  'demo.product': 'Product',
  'demo.zombie': 'Arm zombie',
  'demo.crash': 'Arm crash',
  'demo.armed_zombie': 'Armed: the next buyer to hold product #{id}\'s lock will act out the zombie. Start a sale on it.',
  'demo.armed_crash': 'Armed: the next buyer to hold product #{id}\'s lock will act out the crash. Start a sale on it.',
  'demo.explain_zombie':
    '<strong>Zombie</strong>: the next lock holder stalls between reading and writing the stock until its session is gone and the next buyer holds the lock — then writes anyway. The fencing token refuses it.',
  'demo.explain_crash':
    '<strong>Crash</strong>: the next lock holder\'s session ends as it gets the lock. Its node disappears on its own; the queue moves on.',

  // ------------------------------------------------------------ 6 · money
  'money.heading': '6 · Money: the answer that never came',
  'money.hint':
    'The payment provider is another company\'s system, reached over the network. The most instructive failure of a sale\'s payments: the provider <em>charged</em>, but its answer never came back. The shop must not call that order failed (the money moved) nor charge it again. Admin token and a server with <code>--allow-unsafe-guards</code>; the provider must take test controls (<code>scripts/demo</code> starts it so).',
  'money.product': 'Product',
  'money.lose': 'Charge, then lose the answer',
  'money.shop': 'The shop\'s books (PostgreSQL)',
  'money.order': 'order',
  'money.status': 'status',
  'money.intent': 'payment intent',
  'money.settled_by': 'settled by',
  'money.ledger': 'The provider\'s ledger',
  'money.key': 'key',
  'money.charge': 'charge',
  'money.reference': 'reference',
  'money.amount': 'amount',
  'money.step_reserved': '<strong>Reserved</strong>: one unit is held for the demo\'s buyer, under the product\'s guard.',
  'money.step_pending':
    '<strong>Pending</strong>: the payment intent (its key) is committed before the charge is sent. The provider charges — its ledger has the line — but every answer is lost, so the shop\'s intent stays <em>pending</em>. The buyer is told 503 <code>outcome_pending</code>, never "failed".',
  'money.step_settled':
    '<strong>Settled</strong>: once the order\'s own attempt is surely over (its request\'s time and a margin), the sweep asks the provider again under the same key, hears "succeeded" and marks the order paid. One charge, one paid order.',
  'money.started': 'Product #{id}: one unit reserved, its payment under way; every answer to it will be lost.',
  'money.charge_succeeded': 'succeeded',
  'money.charge_declined': 'declined',
  'money.no_charge': 'nothing charged',
  'money.agree': 'The books agree: one charge in the ledger, one paid order, the same reference — {by}.',
  'money.disagree': 'The books disagree: the ledger and the order do not match — {by}.',

  // ------------------------------------------------------------ 7 · the lock lab
  'lab.heading': '7 · Lock lab: a semaphore and a read-write lock',
  'lab.hint':
    'Two more ZooKeeper recipes, in the node layouts of Apache Curator, live from ZooKeeper. The holders you add here are real: real payments and sales wait behind them, for a minute at most. Needs the admin token (in the simulator\'s admin form) and a server with <code>--allow-unsafe-guards</code>.',
  'lab.reentrant':
    '<strong>Reentrancy</strong>: an owner that already holds a lock and takes it again only counts one more hold — no new node, no wait — and lets go when its count is back to zero. The expiry sweep uses it to take each product\'s lock once per pass, however many of that product\'s reservations expired.',
  'lab.clear': 'Clear',
  'lab.nobody_waits': 'Nobody waits.',
  'sem.heading': 'Semaphore: the payment provider\'s cap',
  'sem.explain':
    'At most <em>N</em> holders at once, across every instance: here, charges in flight at the payment provider (<code>--payment-concurrency</code>). Each holder has a lease node; an acquirer whose lease node is over <em>N</em> waits, watching the leases, and acquirers take turns through a fair mutex. A crashed holder\'s lease vanishes with its session. A payment waits for a lease only until its request\'s deadline, and never holds a stock lock while it waits: its units are already reserved.',
  'sem.disabled':
    'This server runs without <code>--payment-concurrency</code>: payments are not bounded, so there is no semaphore to show or hold.',
  'sem.leases': 'Leases',
  'sem.waiters': 'Waiting for a lease, in turn',
  'sem.holds': 'holds a lease',
  'sem.free': 'free lease',
  'sem.no_leases': 'No leases.',
  'sem.watches_leases': 'watches the leases',
  'sem.acquire': '+ slow charge',
  'sem.release': 'End oldest charge',
  'sem.acquired': 'Started {label}: a charge that hangs, holding a lease (or waiting for one) until you end it, a minute at most.',
  'sem.released': 'Ended {label}: its lease is free for the next in turn.',
  'sem.release_sent': 'Ended the oldest lab charge.',
  'sem.nothing': 'No lab charge to end.',
  'sem.cleared': 'Ended every lab charge on this instance.',
  'rw.heading': 'Read-write lock: a product\'s terms',
  'rw.explain':
    'Readers share the lock; a writer holds it alone. Every sale lock cycle of a <code>zk</code> product reads the product\'s terms (price, limits, reservation time) under the read side while it queues for and holds the stock lock; changing the terms (<code>PUT /api/products/{id}/terms</code>) takes the write side, so no lock cycle decides under terms that are changing. An instance\'s cycles share one read node (the holder labelled <em>sale</em>), kept from cycle to cycle until a writer queues (a cycle that starts before the instance sees the writer is served first): two ZooKeeper writes per cycle, not four. A reader watches the first writer ahead of it, a writer the node just before its own. Readers that arrive behind a waiting writer wait too: a writer never starves.',
  'rw.product': 'Product',
  'rw.holders': 'Holding',
  'rw.waiters': 'Waiting, in queue order',
  'rw.reads': 'reads (shared)',
  'rw.writes': 'writes (alone)',
  'rw.free': 'Nobody holds the lock.',
  'rw.pick': 'Pick a product.',
  'rw.read': '+ reader',
  'rw.write': '+ writer',
  'rw.release': 'Release oldest',
  'rw.started_read': 'Started {label}: a reader of product #{id}\'s terms, holding the read side (or waiting for it) until released, a minute at most.',
  'rw.started_write': 'Started {label}: a writer of product #{id}\'s terms, holding the write side (or waiting for it) until released, a minute at most.',
  'rw.released': 'Released {label}.',
  'rw.release_sent': 'Released the oldest lab holder.',
  'rw.nothing': 'No lab holder of this lock to release.',
  'rw.cleared': 'Released every lab holder of product #{id}\'s terms lock on this instance.',

  // ------------------------------------------------------------ the event log
  'log.heading': 'Event log',
  'log.sold_out': 'Product #{id} sold out.',
  'log.oversold': 'Product #{id} oversold by {oversold}: {sold} sold of {total}.',
  'log.zombie_accepted':
    'Zombie on product #{id}: nobody took the lock over while it stalled, so its token {token} was still the newest and its write was accepted. Arm it again and start more buyers.',
  'log.zombie_rejected':
    'Zombie on product #{id}: it held token {stale}, its session ended, token {current} took over — its stock write was rejected by the fence. Nothing oversold.',
  'log.crash':
    'Crash on product #{id}: the holder with token {token} vanished with its session; its node was deleted and the queue moved on.',

  'explain.heading': 'What you are seeing',
};

const zh = {
  // ------------------------------------------------------------ page and header
  'page.title': 'seckill 秒杀 — 永不超卖',
  'page.description': '实时观看一场秒杀、它的 ZooKeeper 锁队列，以及超卖是怎么发生的。',
  'page.skip': '跳到正文',
  'page.tagline':
    '永不超卖的秒杀：每次扣减库存都在 <strong>ZooKeeper 公平锁</strong>内执行，PostgreSQL 在每次写入时都校验锁的<strong>围栏令牌</strong>。',
  'lang.label': '语言',
  'live.connecting': '连接中…',
  'live.on': '实时',
  'live.reconnecting': '重新连接中…',
  'footer':
    'API：<code>POST /orders</code>、<code>GET /api/products</code>、<code>GET /api/products/{id}/lock</code>、<code>GET /api/products/{id}/terms-lock</code>、<code>GET /api/payments/semaphore</code>、<code>GET /api/events</code> — 详见 README。',

  // ------------------------------------------------------------ 1 · the shop
  'shop.heading': '1 · 商店',
  'shop.hint': '库存和销量实时更新，汇总自每个服务实例。',
  'shop.empty': '还没有商品：在下方新建一个（需要管理员令牌），或运行 <code>scripts/demo</code>。',
  'product.sold_out': '已售罄',
  'product.bar': '已售 {sold} / {total}',
  'product.line': '{price} · 剩余 {stock} · 已售 {sold} / {total}',
  'product.oversold': '超卖 {n} 件',
  'product.option': '#{id} {name}（{guarding}）',
  'buy.heading': '购买',
  'buy.product': '商品',
  'buy.user': '用户名',
  'buy.quantity': '数量',
  'buy.pay': '立即支付',
  'buy.submit': '购买',
  'buy.ordering': '下单中…',
  'buy.ok': '订单 {id}：{status} — {wait}{fence}{batch}。',
  'buy.no_lock': '未加锁',
  'buy.waited': '等锁 {ms} ms',
  'buy.fence': '，围栏令牌 {fence}',
  'buy.own_cycle': '，独占一个{cycle}',
  'buy.shared_cycle': '，与其他订单在同一{cycle}中处理（共 {n} 单）',
  'pay.none': '无支付：没有向支付服务商发出扣款。',
  'pay.line': '支付 {key}：{outcome} — {by}。',
  'pay.outcome_pending': '待定',
  'pay.outcome_succeeded': '成功',
  'pay.outcome_failed': '被拒',
  'pay.by_answer': '由支付服务商对本订单的应答结算',
  'pay.by_sweep': '由后台清理任务结算（应答丢失；它用同一个幂等键重新询问）',
  'pay.by_nobody': '支付服务商的应答还没有回来：后台清理任务会用同一个幂等键重新询问，绝不重复扣款',
  'pay.by_unrecorded': '已结算（结算方未记录：早于这一版本）',
  'cycle.lock': '加锁周期',
  'cycle.transaction': '事务',

  'guarding.none': '不加锁：每个订单各自执行，相互竞争',
  'guarding.lock_per_order': '每单一把锁',
  'guarding.transaction_per_order': '每单一个事务',
  'guarding.batched': '批处理：每个{cycle}最多 {n} 单',
  'guarding.short_batched': '{guard}，批处理 ≤{n}',
  'guarding.short_lock_per_order': '{guard}，每单一把锁',

  'status.created': '已创建',
  'status.reserved': '已预留',
  'status.paying': '支付中',
  'status.paid': '已支付',
  'status.sold_out': '已售罄',
  'status.payment_failed': '支付失败',
  'status.expired': '已过期',
  'status.failed': '失败',

  // The server's message is English, so Chinese says it in its own words, by code.
  'error.line': '{status} {code}：{message}',
  'error.no_answer': '服务器无应答',
  'error.invalid_request': '请求无效：请检查填写的内容',
  'error.unauthorized': '需要有效的管理员令牌',
  'error.payment_failed': '支付被拒绝，预留的库存已退回',
  'error.admin_disabled': '管理接口未开启：启动服务时需加 <code>--admin-token</code>',
  'error.demo_disabled': 'none 模式、演示和锁实验室已禁用：启动服务时需加 <code>--allow-unsafe-guards</code>',
  'error.unknown_product': '商品不存在',
  'error.order_not_found': '订单不存在',
  'error.not_found': '接口不存在',
  'error.no_lock': '该商品的防护方式不加锁',
  'error.method_not_allowed': '该接口不支持此请求方法',
  'error.sold_out': '已售罄：库存不足',
  'error.purchase_limit': '已达限购数量：该用户不能再购买此商品',
  'error.too_many_unpaid': '未支付的预留已占满该商品的额度：请选择立即支付，或稍后再试',
  'error.idempotency_in_progress': '相同 <code>Idempotency-Key</code> 的请求仍在处理中，请稍后重试',
  'error.reservation_expired': '预留在支付前已过期，库存已重新上架',
  'error.payment_in_progress': '该订单正在支付中',
  'error.order_not_payable': '该订单不处于待支付状态',
  'error.payload_too_large': '请求体过大',
  'error.unsupported_media_type': '请求须为 <code>Content-Type: application/json</code>',
  'error.idempotency_mismatch': '该 <code>Idempotency-Key</code> 已用于另一个不同的请求',
  'error.unprocessable': '该商品不接受此请求：超出了它的限制',
  'error.too_busy': '服务繁忙：本实例排队的买家过多，请重试',
  'error.rate_limited': '下单过于频繁，请放慢速度',
  'error.lock_timeout': '未能及时获得商品的锁：未做任何更改，请重试',
  'error.lock_lost': '写库存前锁已丢失：未做任何更改，请重试',
  'error.payment_busy': '支付服务商同时进行的扣款已达上限：未扣款，商品仍为你预留；请在预留过期前重新支付',
  'error.outcome_pending': '结果尚未可知（某个后端服务未及时响应）；系统正在结清：请查询该订单，或用同一个键重试',
  'error.unavailable': '后端服务暂不可用，请重试',
  'error.internal': '服务器内部错误',

  // ------------------------------------------------------------ 2 · the simulator
  'sim.heading': '2 · 秒杀模拟器',
  'sim.hint':
    '在本页同时发起大量买家，两个商品并排对比。<code>none</code> 模式和 <code>zk</code> 一样“读—判断—写”，只是不加锁：看它卖出比库存更多的货。<em>批处理</em>商品在一个加锁周期内处理多个排队的订单：和每单一把锁对比一下。',
  'create.summary': '新建商品（管理员）',
  'create.token': '管理员令牌',
  'create.token_placeholder': '由 scripts/demo 打印',
  'create.stock': '库存',
  'create.guard': '防护方式',
  'create.guard_zk': 'zk — 公平锁 + 围栏令牌',
  'create.guard_zk_herd': 'zk-herd — 朴素锁（羊群效应）',
  'create.guard_pg_atomic': 'pg-atomic — 一条带条件的 UPDATE',
  'create.guard_none': 'none — 不加锁（会超卖）',
  'create.batch': '每个加锁周期的订单数',
  'create.batch_placeholder': '服务端默认值',
  'create.batch_title': 'batch_max：1 = 每单一把锁',
  'create.submit': '创建',
  'create.name': '秒杀 {time}',
  'create.ok': '已创建商品 #{id}（{guard}，{guarding}）。',
  'presets.label': '预设',
  'presets.compare': '对比：',
  'presets.oversell': 'zk 对比 none',
  'presets.batching': '每单一把锁 对比 批处理',
  'presets.missing': '有一条通道没有可用的商品：请先在上方新建（需要管理员）。',
  'lane.a': '商品 A',
  'lane.b': '商品 B',
  'sim.buyers': '每个商品的买家数',
  'sim.run': '开始秒杀',
  'sim.running': '秒杀进行中…',
  'sim.note':
    '每个加锁周期的订单数 = 处理的订单数 ÷ 加锁次数，取自本实例的锁视图，只统计本次秒杀。订单/秒：每秒得到应答的买家数。浏览器对同一服务器同时只发约 6 个请求（两条通道合计）：所以这里的批次较小，计时也只是粗略值。吞吐量请看压测（<code>loadtest/</code>）。',
  'stats.paid': '已支付',
  'stats.sold_out': '售罄',
  'stats.retried': '重试',
  'stats.other': '其他',
  'stats.elapsed': '耗时',
  'stats.rate': '订单/秒',
  'stats.per_cycle': '每周期订单数',
  'stats.progress': '已应答的买家',
  'stats.seconds': '{s} 秒',
  'stats.no_lock': '不加锁',
  'verdict.selling': '抢购中…',
  'verdict.ok': '卖出 {sold} / {total} 件 — 超卖 0 件，账目一致',
  'verdict.oversold': '超卖：卖出 {sold} / {total} 件 — 多卖了 {oversold} 件，账目不一致',
  'verdict.inconsistent':
    '卖出 {sold} / {total} 件 — 暂未超卖，但账目不一致：卖出 {sold} 件，库存只减少了 {taken} 件（丢失更新 {lost} 次）',

  // ------------------------------------------------------------ 3 · the lock queue
  'queue.heading': '3 · 实时锁队列',
  'queue.hint':
    '每个买家取一个号 — 即 ZooKeeper 中的一个临时顺序节点。号码最小的先办理；其他买家只监听紧挨在自己前面的那个号。批处理商品上，每个实例只取一个号，代表它那里排队的全部订单。',
  'queue.product': '商品',
  'queue.label': '锁队列',
  'queue.pick': '请选择一个由 ZooKeeper 锁保护的商品。',
  'queue.empty': '没有人持有锁：队列为空。',
  'queue.crowd': '个买家在本实例，都在监听同一个节点',
  'queue.fair': '公平队列',
  'queue.herd': '羊群锁',
  'queue.all_nodes': '（共 {n} 个节点）',
  'queue.batched': ' · 批处理：每个实例一个节点，处理它那里排队的订单',
  'queue.stats':
    '{recipe}{all}{batched} · 本实例：加锁 {acquisitions} 次，监听唤醒 {wakeups} 次，订单 {orders} 单（每个加锁周期 {ratio} 单）。',
  'ticket.lock': '锁',
  'ticket.holds': '持有锁',
  'ticket.waiting': '等待中',
  'ticket.watches': '监听 #{seq}',
  'ticket.owner': '持有者',
  'ticket.token': '令牌 {token}',
  'ticket.mark_read': '读',
  'ticket.mark_write': '写',
  'ticket.access_read': '读者：与其他读者共享锁',
  'ticket.access_write': '写者：独占锁',

  // ------------------------------------------------------------ 4 · herd vs fair
  'herd.heading': '4 · 羊群锁与公平锁',
  'herd.hint':
    '用模拟器分别对一个 <code>zk</code> 商品和一个 <code>zk-herd</code> 商品发起秒杀。公平锁的等待者只在前一个号离开时被唤醒一次；羊群锁每次释放都会唤醒所有人，却只有一个能抢到。',
  'herd.product': '商品',
  'herd.guard': '防护方式',
  'herd.acquisitions': '加锁次数',
  'herd.wakeups': '监听唤醒',
  'herd.per_acquisition': '每次加锁的唤醒',
  'herd.per_cycle': '每周期订单数',
  'herd.empty': '请对 zk 或 zk-herd 商品发起一次秒杀。',
  'herd.note': '由提供本页面的实例统计，只计它自己的买家。',

  // ------------------------------------------------------------ 5 · crash and zombie
  'step.heading': '单步秒杀',
  'step.hint':
    '需要管理员令牌，且服务端以 <code>--allow-unsafe-guards</code> 启动。先在上方选一个商品，再点<em>逐个持锁</em>：每个锁持有者写完库存后继续持锁，直到你点<em>下一个</em>（最长两分钟；卖出的结果不变）。排入几个买家，等队列静止，再点<em>下一个</em>：公平锁只唤醒一个等待者，即监听持有者节点的那一个；羊群锁则唤醒所有等待者。',
  'step.start': '逐个持锁',
  'step.buyers': '买家数',
  'step.queue': '排入买家',
  'step.next': '下一个',
  'step.stop': '结束',
  'step.started': '商品 #{id}：每个锁持有者现在都会等你点“下一个”（最长两分钟）。',
  'step.queued': '已为商品 #{id} 排入 {n} 个买家：目前已应答 {answered} 个。',
  'step.released': '已放走围栏令牌为 {token} 的持有者。',
  'step.nobody': '没有人持有锁：无可放行。',
  'step.stopped': '单步模式已结束：持有者照常释放锁。',
  'step.pick': '请在上方队列中选择一个带锁的商品（zk 或 zk-herd）。',
  'step.woke_fair': '第 {click} 次：唤醒了 {woke} 个等待者（监听被释放节点的那一个）；现在由 #{seq} 号持锁。本次单步共唤醒：{total}。',
  'step.woke_herd': '第 {click} 次：一次释放唤醒了 {woke} 个等待者；其中一个拿到锁，其余重新监听。本次单步共唤醒：{total}。',
  'demo.heading': '5 · 崩溃与僵尸',
  'demo.hint':
    '需要管理员令牌，且服务以 <code>--allow-unsafe-guards</code> 启动（<code>scripts/demo</code> 就是这样启动的）。先启用一个演示，再对同一商品发起秒杀。请选择每单一把锁的商品：批处理商品的下一个加锁周期是一整批，只有另一个实例才能从僵尸手里接管锁。',
  'demo.product': '商品',
  'demo.zombie': '启用僵尸演示',
  'demo.crash': '启用崩溃演示',
  'demo.armed_zombie': '已启用：下一个持有商品 #{id} 锁的买家将扮演僵尸。现在对它发起秒杀吧。',
  'demo.armed_crash': '已启用：下一个持有商品 #{id} 锁的买家将模拟崩溃。现在对它发起秒杀吧。',
  'demo.explain_zombie':
    '<strong>僵尸</strong>：下一个锁持有者在读库存和写库存之间停顿，直到它的会话失效、下一个买家拿到锁 — 然后照样写入。围栏令牌会拒绝这次写入。',
  'demo.explain_crash':
    '<strong>崩溃</strong>：下一个锁持有者一拿到锁，会话就结束了。它的节点自动消失，队列继续前进。',

  // ------------------------------------------------------------ 6 · money
  'money.heading': '6 · 钱：没有回来的应答',
  'money.hint':
    '支付服务商是另一家公司的系统，要经过网络访问。秒杀支付中最值得一看的故障是：服务商<em>已经扣款</em>，应答却没有回来。商店既不能把这个订单判为失败（钱已经动了），也不能再扣一次。需要管理员令牌，且服务以 <code>--allow-unsafe-guards</code> 启动；支付服务商须接受测试控制（<code>scripts/demo</code> 就是这样启动的）。',
  'money.product': '商品',
  'money.lose': '扣款，然后丢掉应答',
  'money.shop': '商店的账（PostgreSQL）',
  'money.order': '订单',
  'money.status': '状态',
  'money.intent': '支付意图',
  'money.settled_by': '结算方',
  'money.ledger': '支付服务商的账本',
  'money.key': '幂等键',
  'money.charge': '扣款',
  'money.reference': '流水号',
  'money.amount': '金额',
  'money.step_reserved': '<strong>已预留</strong>：在商品的守卫下，为演示买家预留一件。',
  'money.step_pending':
    '<strong>待定</strong>：支付意图（及其幂等键）在发出扣款之前就已提交。服务商扣了款 — 它的账本上有这一行 — 但每次应答都丢了，所以商店的支付意图仍是<em>待定</em>。买家得到的是 503 <code>outcome_pending</code>，而不是“失败”。',
  'money.step_settled':
    '<strong>已结算</strong>：等订单自己的尝试确定结束后（请求时限再加一段余量），后台清理任务用同一个幂等键再次询问服务商，得知“成功”，把订单标为已支付。一笔扣款，一个已支付订单。',
  'money.started': '商品 #{id}：已预留一件，支付进行中；它的每次应答都会丢失。',
  'money.charge_succeeded': '成功',
  'money.charge_declined': '被拒',
  'money.no_charge': '未扣款',
  'money.agree': '两边的账一致：账本上一笔扣款，一个已支付订单，流水号相同 — {by}。',
  'money.disagree': '两边的账不一致：账本与订单对不上 — {by}。',

  // ------------------------------------------------------------ 7 · the lock lab
  'lab.heading': '7 · 锁实验室：信号量与读写锁',
  'lab.hint':
    '另外两种 ZooKeeper 锁方案，沿用 <span lang="en" translate="no">Apache Curator</span> 的节点布局，实时取自 ZooKeeper。在这里添加的持有者是真实的：真实的支付和秒杀会排在它们后面等待，最长一分钟。需要管理员令牌（在模拟器的管理员表单中填写），且服务以 <code>--allow-unsafe-guards</code> 启动。',
  'lab.reentrant':
    '<strong>可重入</strong>：已持有锁的持有者再次加锁时只把持有次数加一 — 不创建新节点，也不等待 — 次数归零时才真正释放。过期清理任务借此在每一轮中对每个商品只加一次锁，无论该商品有多少预留过期。',
  'lab.clear': '清空',
  'lab.nobody_waits': '没有人在等待。',
  'sem.heading': '信号量：支付服务商的并发上限',
  'sem.explain':
    '跨所有实例，同时最多 <em>N</em> 个持有者：这里是支付服务商处同时进行的扣款数（<code>--payment-concurrency</code>）。每个持有者有一个租约节点；租约节点排在 <em>N</em> 之后的获取者等待，并监听全部租约；获取者通过一把公平互斥锁依次进行。持有者崩溃时，它的租约随会话一起消失。支付等租约最多等到请求的截止时间，等待期间从不持有库存锁：它的商品已经预留好了。',
  'sem.disabled': '本服务未以 <code>--payment-concurrency</code> 启动：支付不受并发限制，没有信号量可显示或持有。',
  'sem.leases': '租约',
  'sem.waiters': '等待租约（按顺序）',
  'sem.holds': '持有租约',
  'sem.free': '空闲租约',
  'sem.no_leases': '没有租约。',
  'sem.watches_leases': '监听全部租约',
  'sem.acquire': '+ 慢速扣款',
  'sem.release': '结束最早的扣款',
  'sem.acquired': '已发起 {label}：一笔卡住的扣款，持有一个租约（或等待租约），直到你结束它，最长一分钟。',
  'sem.released': '已结束 {label}：它的租约空出，留给下一个。',
  'sem.release_sent': '已结束最早的实验扣款。',
  'sem.nothing': '没有可结束的实验扣款。',
  'sem.cleared': '已结束本实例的全部实验扣款。',
  'rw.heading': '读写锁：商品的销售条款',
  'rw.explain':
    '读者共享锁；写者独占锁。<code>zk</code> 商品的每个加锁周期在排队和持有库存锁期间，都以读锁读取商品的条款（价格、限购、预留时长）；修改条款（<code>PUT /api/products/{id}/terms</code>）要拿写锁，所以不会有加锁周期按正在修改的条款做判定。同一实例的各个周期共用一个读节点（标为 <em>sale</em> 的持有者），从一个周期保留到下一个，直到有写者排队（在实例看到写者之前开始的周期先得到服务）：每个周期两次 ZooKeeper 写，而不是四次。读者监听排在它前面的第一个写者，写者监听紧挨在自己前面的节点。排在等待中的写者之后到达的读者也要等待：写者不会被饿死。',
  'rw.product': '商品',
  'rw.holders': '持有中',
  'rw.waiters': '等待中（按排队顺序）',
  'rw.reads': '读（共享）',
  'rw.writes': '写（独占）',
  'rw.free': '没有人持有锁。',
  'rw.pick': '请选择一个商品。',
  'rw.read': '+ 读者',
  'rw.write': '+ 写者',
  'rw.release': '释放最早的',
  'rw.started_read': '已发起 {label}：商品 #{id} 条款的读者，持有读锁（或等待读锁），直到被释放，最长一分钟。',
  'rw.started_write': '已发起 {label}：商品 #{id} 条款的写者，持有写锁（或等待写锁），直到被释放，最长一分钟。',
  'rw.released': '已释放 {label}。',
  'rw.release_sent': '已释放最早的实验持有者。',
  'rw.nothing': '这把锁没有可释放的实验持有者。',
  'rw.cleared': '已释放本实例在商品 #{id} 条款锁上的全部实验持有者。',

  // ------------------------------------------------------------ the event log
  'log.heading': '事件日志',
  'log.sold_out': '商品 #{id} 已售罄。',
  'log.oversold': '商品 #{id} 超卖 {oversold} 件：卖出 {sold} / {total} 件。',
  'log.zombie_accepted':
    '商品 #{id} 上的僵尸：它停顿期间没有人接管锁，所以它的令牌 {token} 仍是最新的，写入被接受了。请再次启用演示，并发起更多买家。',
  'log.zombie_rejected':
    '商品 #{id} 上的僵尸：它持有令牌 {stale}，会话结束后令牌 {current} 接管了锁 — 它的库存写入被围栏令牌拒绝。没有超卖。',
  'log.crash': '商品 #{id} 上的崩溃：令牌 {token} 的持有者随会话一起消失；它的节点被删除，队列继续前进。',

  'explain.heading': '你看到的是什么',
};

export const dictionaries = { en, zh };
export const languages = Object.keys(dictionaries);

// A choice made on this page wins; otherwise the browser's language.
function detect() {
  try {
    const saved = localStorage.getItem(STORAGE_KEY);
    if (languages.includes(saved)) return saved;
  } catch {
    // Storage can be off (privacy settings): fall back to the browser's language.
  }
  return (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

let current = detect();
const listeners = [];

export const language = () => current;
// For dates, times and money: the page's language, not the browser's.
export const locale = () => (current === 'zh' ? 'zh-CN' : 'en-US');
export const has = (key) => key in dictionaries[current];

/// The text for `key` in the current language, with each {name} replaced by params[name].
export function t(key, params = {}) {
  const text = dictionaries[current][key] ?? en[key];
  if (text === undefined) {
    console.warn(`i18n: no text for ${key}`);
    return key;
  }
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

export const escapeHtml = (s) =>
  String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

// Markup a caller built (and escaped) itself, to pass through tHtml unescaped.
class Markup {
  constructor(html) {
    this.html = html;
  }
}
export const markup = (html) => new Markup(html);

/// t() for innerHTML: the dictionary's markup is kept, params are escaped unless markup().
export function tHtml(key, params = {}) {
  const safe = {};
  for (const [name, value] of Object.entries(params)) safe[name] = value instanceof Markup ? value.html : escapeHtml(value);
  return t(key, safe);
}

/// Writes the current language into the static page: data-i18n (text), data-i18n-html
/// (text with markup), data-i18n-attr ("attr:key,attr:key"), the long-form [data-text]
/// blocks, the switch's state and <html lang>.
export function applyTexts(root = document) {
  for (const el of root.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll('[data-i18n-html]')) el.innerHTML = t(el.dataset.i18nHtml);
  for (const el of root.querySelectorAll('[data-i18n-attr]')) {
    for (const pair of el.dataset.i18nAttr.split(',')) {
      const [attr, key] = pair.split(':').map((s) => s.trim());
      el.setAttribute(attr, t(key));
    }
  }
  for (const block of root.querySelectorAll('[data-text]')) block.hidden = block.dataset.text !== current;
  for (const button of root.querySelectorAll('button[data-lang]')) {
    button.setAttribute('aria-pressed', String(button.dataset.lang === current));
  }
  document.documentElement.lang = current === 'zh' ? 'zh-CN' : 'en';
}

/// Calls `listener(lang)` after every switch, for the texts drawn from data.
export function onLanguageChange(listener) {
  listeners.push(listener);
}

/// Switches the whole page live, and remembers the choice for the next visit.
export function setLanguage(lang) {
  if (!languages.includes(lang)) return;
  current = lang;
  try {
    localStorage.setItem(STORAGE_KEY, lang);
  } catch {
    // Not remembered, still switched.
  }
  applyTexts();
  for (const listener of listeners) listener(lang);
}

/// The first pass over the page, and the switch's buttons.
export function initI18n() {
  applyTexts();
  for (const button of document.querySelectorAll('button[data-lang]')) {
    button.addEventListener('click', () => setLanguage(button.dataset.lang));
  }
}
