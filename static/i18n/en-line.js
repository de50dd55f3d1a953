// The English texts of sale windows and the line: a product's sale state and countdown, the
// buyer's place in its line, and the refusals of both. Part of static/i18n/en.js (which takes
// them in), by the same rules. static/i18n/zh-line.js has the same keys.

export default {
  // ------------------------------------------------------------ the sale's window
  'sale.state_upcoming': 'upcoming',
  'sale.state_open': 'on sale',
  'sale.state_paused': 'paused',
  'sale.state_sold_out': 'sold out',
  'sale.state_closed': 'closed',
  'sale.opens_in': 'opens in {time}',
  'sale.opening': 'opening…',
  'sale.days': '{d} d {time}',
  'sale.opens_at': 'opens {time}',
  'sale.closes_at': 'closes {time}',

  // ------------------------------------------------------------ the line
  'line.join': 'Join the line',
  'line.joining': 'Joining…',
  'line.buy': 'Buy with my pass',
  'line.place': 'place',
  'line.ahead': 'ahead',
  'line.wait': 'wait',
  'line.drawn_at_opening': 'drawn at the opening',
  'line.wait_under_second': 'under a second',
  'line.wait_seconds': 'about {s} s',
  'line.wait_minutes': 'about {m} min',
  'line.state_out': 'This sale goes through a line: join it for a place. Whoever joins before the opening gets a place drawn at random then.',
  'line.state_waiting': 'You are in the line. Places are drawn at the opening: joining early gives no edge.',
  'line.state_in_line': 'You are in the line: you are let in when your place comes.',
  'line.state_admitted': 'Your turn! Let in at {at}: buy before {until}.',
  'line.state_bought': 'Bought with your pass: the line is done for you.',
  'line.state_sold_out': 'Sold out before your turn came.',
  'line.state_closed': 'The sale closed before your turn came.',
  'line.state_paused': 'The sale is paused: nobody is let in meanwhile, and your place is kept.',

  // ------------------------------------------------------------ refusals
  'error.not_open': 'the sale has not opened yet: wait for the countdown',
  'error.closed': 'the sale is closed',
  'error.paused': 'the sale is paused: try again in a moment',
  'error.not_admitted': 'this product sells through its line: join the line, and buy once you are let in',
  'error.invalid_pass': 'this pass is not valid here (expired, or another buyer\'s or product\'s): look at your place in the line again',
  'error.pass_used': 'this pass has already bought: a pass buys once',
  'error.no_line': 'this product has no line: buy it directly',
  'error.not_in_line': 'you are not in this product\'s line: join it first',
};
