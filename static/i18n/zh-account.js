// 买家身份的中文文案 (the Chinese texts of who buys), by the same keys and {placeholders} as
// static/i18n/en-account.js; part of static/i18n/zh.js.

export default {
  // ------------------------------------------------------------ who you are
  'account.heading': '你是谁',
  'account.token': '身份提供方签发的令牌',
  'account.sign_in': '登录',
  'account.sign_out': '退出登录',
  'account.note_demo': '演示登录：服务器为你输入的任意名字签发一个短期令牌，无需密码 —— 用来代替真实的身份提供方。你只能查看、支付自己的订单。',
  'account.note_jwks': '先在本部署的身份提供方登录，再把它签发的令牌（JWT）粘贴到这里：服务器用身份提供方的公钥校验它。你只能查看、支付自己的订单。',
  'account.note_open': '<strong>开放模式，仅供教学</strong>：无需登录，你输入的名字就是买家 —— 任何人都能以任何人的名义下单、查看订单。',
  'account.asking': '正在询问服务器买家如何登录…',
  'account.open': '未登录：订单记在上面的名字下。',
  'account.signed_out_demo': '未登录：登录后才能购买。',
  'account.signed_out_jwks': '未登录：粘贴令牌后才能购买。',
  'account.signed_in': '已登录：{name}。',

  // ------------------------------------------------------------ my orders
  'orders.heading': '我的订单',
  'orders.more': '更多',
  'orders.pay': '支付',
  'orders.paid': '订单 {id} 已支付。',
  'orders.quantity': '{n} 件',
  'orders.none': '还没有订单。',
  'orders.sign_in_first': '登录后即可查看你的订单。',
  'orders.name_first': '在上方输入名字即可查看其订单。',
  'verdict.signing_in': '买家登录中…',

  // ------------------------------------------------------------ errors of buyer identity
  'error.unauthenticated': '请先登录：此操作需要买家身份（见上方的<em>你是谁</em>）',
  'error.invalid_token': '登录已失效（过期或被篡改）：请重新登录',
  'error.not_your_account': '你登录的是另一个买家：订单只能记在已登录的买家名下',
  'error.no_demo_issuer': '此服务器不签发演示令牌（它的 <code>--buyer-auth</code> 不是 <code>demo</code>）',
};
