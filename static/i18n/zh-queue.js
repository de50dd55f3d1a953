// 锁队列的中文文案 (the Chinese texts of the lock queue and its tickets), by the same keys
// and {placeholders} as static/i18n/en-queue.js; part of static/i18n/zh.js.

export default {
  'queue.heading': '3 · 实时锁队列',
  'queue.hint': '每个买家取一个号 — 即 ZooKeeper 中的一个临时顺序节点。号码最小的先办理；其他买家只监听紧挨在自己前面的那个号。批处理商品上，每个实例只取一个号，代表它那里排队的全部订单。',
  'queue.kept': '售卖批处理商品的实例，在该商品的订单持续到来时保持自己的节点，有别的实例排在后面时在一个上限之内把它交出；每订单加一次锁的商品、单步执行和演示仍然每个周期取一个节点，所以队列看得见。',
  'queue.product': '商品',
  'queue.label': '锁队列',
  'queue.pick': '请选择一个由 ZooKeeper 锁保护的商品。',
  'queue.empty': '没有人持有锁：队列为空。',
  'queue.crowd': '个买家在本实例，都在监听同一个节点',
  'queue.fair': '公平队列',
  'queue.herd': '羊群锁',
  'queue.all_nodes': '（共 {n} 个节点）',
  'queue.batched': ' · 批处理：每个实例一个节点，处理它那里排队的订单',
  'queue.stats': '{recipe}{all}{batched} · 本实例：加锁 {acquisitions} 次，监听唤醒 {wakeups} 次，订单 {orders} 单（每个加锁周期 {ratio} 单）。',
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
};
