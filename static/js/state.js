// The page's state, in one store: what it knows (products, lock views, the lab's views), what
// it shows (each result, verdict and status as data) and the language. Sections read it and
// subscribe to the keys they draw, so a language switch or a new answer redraws exactly those.
// Every key is declared below, up front, each with the modules that write it (js/…): a
// section tells another something only through a key the other subscribes to, never by
// reaching into its elements (tests/browser/modules.test.mjs holds both).

/// A store of named values. set() replaces values (never mutate one in place: a Map is
/// copied, then set) and calls each subscriber whose keys changed, in subscription order.
export function createStore(initial) {
  let state = { ...initial };
  const subscribers = [];
  return {
    get: () => state,
    set(patch) {
      const changed = Object.keys(patch).filter((key) => !Object.is(state[key], patch[key]));
      if (!changed.length) return;
      state = { ...state, ...patch };
      for (const { keys, listener } of subscribers) {
        if (keys.some((key) => changed.includes(key))) listener(state);
      }
    },
    /// Subscribes and draws once now, from the state as it is.
    subscribe(keys, listener) {
      subscribers.push({ keys, listener });
      listener(state);
    },
  };
}

export const store = createStore({
  // ---------------------------------------------------------------- the whole page
  lang: 'en', // js/i18n.js: the page's language (en, zh)
  // connecting | live | reconnecting | away | back: the header's status (js/api.js sets it).
  conn: 'connecting',
  streamOpen: false, // js/api.js: the event stream is open
  wasAway: false, // js/api.js: the server was away since the stream was last open
  adminToken: '', // js/main.js: the admin token, as typed
  // Who the page buys as (js/account.js keeps it in sessionStorage; js/api.js renews or drops
  // a refused token): the server's mode (demo, jwks, open; null until it says), the token held
  // ('' none), the name it was issued for (demo mode: signed in again by it when the token is
  // refused), who the server says the token names, and the problem that ended a token (refused,
  // and not renewable).
  session: { mode: null, token: '', name: '', buyer: null, refused: null },
  // A sign-in again of the page's buyer on its way (js/api.js): the requests refused meanwhile wait for it.
  renewal: null,
  // The simulated buyers' tokens (demo mode), by name, for the page's life: name -> Promise of
  // a token (js/api.js).
  crowdTokens: new Map(),
  products: new Map(), // js/products.js: id -> product, as the last answer or event had it
  serverOffset: 0, // js/clock.js: the server's clock less this computer's, in ms
  // id -> the page's buyer in that product's line (js/line.js): who, the place the server
  // last gave (its LinePlace), when it let the buyer in, the problem of the last answer, and
  // the looks' bookkeeping (run, seq, timer, attempt, joining, looking).
  lines: new Map(),
  lockStats: new Map(), // js/widgets.js: id -> this instance's lock counters for the product
  log: [], // js/state.js's log(), for any module: the event log, newest first: {key, params, bad, at}

  // ---------------------------------------------------------------- 1 · the shop
  accountSaid: null, // js/account.js: what signing in last said ({problem}), or null
  accountBusy: false, // js/account.js: a sign-in on its way
  // js/shop.js: the Buy form's last order: {} while it is on its way, then {order} or {problem}.
  buy: null,
  followed: null, // js/shop.js: the id of the order whose payment the Buy form follows
  payment: null, // js/shop.js: that order's payment, as last read ({payment})
  created: null, // js/shop.js: what the admin form's last product said ({created} or {problem})
  myOrders: null, // js/orders.js: My orders as last read: {owner, orders, next}
  ordersRead: 0, // js/orders.js: the reads of My orders, numbered (an overtaken answer is dropped)
  ordersSaid: null, // js/orders.js: what My orders last said (a payment, a problem)

  // ---------------------------------------------------------------- 2 · the simulator
  preset: null, // js/simulator.js: what the last preset said (null: it found both products)
  // js/simulator.js: each lane's sale: {state, buyers, answered, stats, verdict, seconds, cycles}.
  'lane.a': null,
  'lane.b': null, // js/simulator.js: as lane.a
  selling: false, // js/simulator.js: a sale is on
  rush: null, // js/rush.js: the rush at the opening's last run, as drawn (a snapshot per tick)
  rushing: false, // js/rush.js: the rush is playing

  // ---------------------------------------------------------------- 3 · the lock queue, 4 · herd
  queueProduct: null, // js/queue.js: the id of the product the queue shows
  queueView: null, // js/queue.js, js/widgets.js: that product's lock view, as last read or sent
  // js/queue.js: {id} of the product the reader last picked in the queue (a new object each
  // pick); js/lab.js's terms lock follows it.
  queuePicked: null,
  // js/herd.js: the step-through on the queue's product: {product, click, released, base,
  // start, pending} (js/herd.js says what each is), or null.
  step: null,
  stepSaid: null, // js/herd.js: what the step-through's last button said
  stepWoke: null, // js/herd.js: who woke at the last Next: {click, woke, total, seq, recipe}
  stepQueued: null, // js/herd.js: the buyers queued for the step-through: {id, n, answered}

  // ---------------------------------------------------------------- 5 · crash and zombie
  demoSaid: null, // js/crash.js: what arming a demo said

  // ---------------------------------------------------------------- 6 · money
  money: null, // js/money.js: the run's books: {state, order, line, seenPendingCharged}, or null
  moneyRun: 0, // js/money.js: the runs, numbered (a newer run stops the one before)
  moneySaid: null, // js/money.js: what the last run's start said

  // ---------------------------------------------------------------- 7 · the lock lab
  semView: null, // js/lab.js: the payment semaphore's view, as last read
  rwView: null, // js/lab.js: the chosen product's terms lock view, as last read
  labPolling: false, // js/lab.js: the lab's views are being polled
  semSaid: null, // js/lab.js: what the semaphore's last button said
  rwSaid: null, // js/lab.js: what the terms lock's last button said
});

/// Replaces one entry of a Map-valued key.
export const setEntry = (key, id, value) => store.set({ [key]: new Map(store.get()[key]).set(id, value) });

/// Merges `patch` into an object-valued key (created if missing).
export const patch = (key, changes) => store.set({ [key]: { ...store.get()[key], ...changes } });

const LOG_KEEP = 100;

/// Logs a line in the event log (js/log.js draws it), kept as key and params so that a
/// language switch redraws it. Any module logs through here.
export function log(key, params, bad = false) {
  store.set({ log: [{ key, params, bad, at: new Date() }, ...store.get().log].slice(0, LOG_KEEP) });
}
