// The English texts of the lock queue (section 3 of the page, js/queue.js) and of its
// tickets (js/widgets.js), which the lock lab draws too. Part of static/i18n/en.js (which
// takes them in), by the same rules. static/i18n/zh-queue.js has the same keys.

export default {
  'queue.heading': '3 · The lock queue, live',
  'queue.hint': 'Each buyer takes a number — an ephemeral-sequential node in ZooKeeper. The smallest number is served; every other buyer watches only the number just before its own. On a batched product each instance takes one number for all the orders queued on it.',
  'queue.kept': 'An instance selling a batched product keeps its node while the product\'s orders keep coming to it, and hands it over within a bound when another instance waits behind it; a product with a lock per order, the step-through and the demos still take one node per cycle, so the queue shows.',
  'queue.product': 'Product',
  'queue.label': 'lock queue',
  'queue.pick': 'Pick a product guarded by a ZooKeeper lock.',
  'queue.empty': 'Nobody holds the lock: the queue is empty.',
  'queue.crowd': 'buyers here, all watching the one node',
  'queue.fair': 'Fair queue',
  'queue.herd': 'Herd lock',
  'queue.all_nodes': ' ({n} nodes in all)',
  'queue.batched': ' · batched: one node per instance, serving its queued orders',
  'queue.stats': '{recipe}{all}{batched} · this instance: {acquisitions} acquisitions, {wakeups} watch wake-ups, {orders} orders ({ratio} per lock cycle).',
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
};
