// 开售时间与排队的中文文案 (the Chinese texts of sale windows and the line), by the same keys
// and {placeholders} as static/i18n/en-line.js; part of static/i18n/zh.js.

export default {
  // ------------------------------------------------------------ the sale's window
  'sale.state_upcoming': '即将开售',
  'sale.state_open': '在售',
  'sale.state_paused': '已暂停',
  'sale.state_sold_out': '已售罄',
  'sale.state_closed': '已结束',
  'sale.opens_in': '{time} 后开售',
  'sale.opening': '正在开售…',
  'sale.days': '{d} 天 {time}',
  'sale.opens_at': '{time} 开售',
  'sale.closes_at': '{time} 截止',

  // ------------------------------------------------------------ the line
  'line.join': '加入排队',
  'line.joining': '正在加入…',
  'line.buy': '凭通行证购买',
  'line.place': '位置',
  'line.ahead': '前面',
  'line.wait': '预计等待',
  'line.drawn_at_opening': '开售时抽签',
  'line.wait_under_second': '不到一秒',
  'line.wait_seconds': '约 {s} 秒',
  'line.wait_minutes': '约 {m} 分钟',
  'line.state_out': '此商品须排队购买：加入排队即可得到位置。开售前加入的人，位置在开售时随机抽取。',
  'line.state_waiting': '你已在队中。位置在开售时抽签决定：来得早没有优势。',
  'line.state_in_line': '你已在队中：轮到你的位置时就会放行。',
  'line.state_admitted': '轮到你了！{at} 放行：请在 {until} 前购买。',
  'line.state_bought': '已凭通行证购买：你的排队到此结束。',
  'line.state_sold_out': '还没轮到你就已售罄。',
  'line.state_closed': '还没轮到你，销售就已结束。',
  'line.state_paused': '销售已暂停：暂停期间不放行任何人，你的位置保留。',

  // ------------------------------------------------------------ refusals
  'error.not_open': '尚未开售：请等倒计时结束',
  'error.closed': '销售已结束',
  'error.paused': '销售已暂停：请稍后再试',
  'error.not_admitted': '此商品须排队购买：请先加入排队，放行后再购买',
  'error.invalid_pass': '此通行证在这里无效（已过期，或属于别的买家、别的商品）：请重新查看你的排队位置',
  'error.pass_used': '此通行证已经买过：一张通行证只能买一次',
  'error.no_line': '此商品无需排队：直接购买即可',
  'error.not_in_line': '你不在此商品的队列中：请先加入排队',
};
