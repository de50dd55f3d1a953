// The English texts of who buys: signing in, the buyer's own orders, and the errors of buyer
// identity. Part of static/i18n/en.js (which takes them in), by the same rules; kept apart so
// that neither file passes 300 lines. static/i18n/zh-account.js has the same keys.

export default {
  // ------------------------------------------------------------ who you are
  'account.heading': 'Who you are',
  'account.token': 'Token from your identity provider',
  'account.sign_in': 'Sign in',
  'account.sign_out': 'Sign out',
  'account.note_demo': 'Demo sign-in: the server issues a short-lived token for any name you type, with no password — a stand-in for a real identity provider. You see and pay only your own orders.',
  'account.note_jwks': 'Sign in with this deployment\'s identity provider and paste the token (a JWT) it gives you: the server checks it against the provider\'s keys. You see and pay only your own orders.',
  'account.note_open': '<strong>Open mode, for teaching only</strong>: nobody signs in, and the name you type is who you buy as — anyone can buy, and see orders, as anyone.',
  'account.asking': 'Asking the server how buyers sign in…',
  'account.open': 'Not signed in: orders are placed for the name above.',
  'account.signed_out_demo': 'Not signed in: sign in to buy.',
  'account.signed_out_jwks': 'Not signed in: paste a token to buy.',
  'account.signed_in': 'Signed in as {name}.',

  // ------------------------------------------------------------ my orders
  'orders.heading': 'My orders',
  'orders.more': 'More',
  'orders.pay': 'Pay',
  'orders.paid': 'Order {id} paid.',
  'orders.quantity': '× {n}',
  'orders.none': 'No orders yet.',
  'orders.sign_in_first': 'Sign in to see your orders.',
  'orders.name_first': 'Type a name above to see its orders.',
  'verdict.signing_in': 'signing the buyers in…',

  // ------------------------------------------------------------ errors of buyer identity
  'error.unauthenticated': 'sign in first: this needs a buyer (<em>Who you are</em>, above)',
  'error.invalid_token': 'your sign-in is no longer valid (expired or altered): sign in again',
  'error.not_your_account': 'you are signed in as someone else: orders are placed for the signed-in buyer only',
  'error.no_demo_issuer': 'this server issues no demo tokens (its <code>--buyer-auth</code> is not <code>demo</code>)',
};
