// The page's state, in one store: what it knows (products, lock views, the lab's views), what
// it shows (each result, verdict and status as data) and the language. Sections read it and
// subscribe to the keys they draw, so a language switch or a new answer redraws exactly those.

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
  lang: 'en',
  // connecting | live | reconnecting | away | back: the header's status (js/api.js sets it).
  conn: 'connecting',
  streamOpen: false,
  wasAway: false, // the server was away since the stream was last open
  adminToken: '',
  // Who the page buys as (js/account.js keeps it in sessionStorage): the server's mode (demo,
  // jwks, open; null until it says), the token held ('' none), the name it was issued for
  // (demo mode: signed in again by it when the token is refused), who the server says the
  // token names, and the problem that ended a token (refused, and not renewable).
  session: { mode: null, token: '', name: '', buyer: null, refused: null },
  // A sign-in again of the page's buyer on its way (js/api.js): the requests refused meanwhile wait for it.
  renewal: null,
  // The simulated buyers' tokens (demo mode), by name, for the page's life: name -> Promise of a token.
  crowdTokens: new Map(),
  products: new Map(), // id -> product, as the last answer or event had it
  serverOffset: 0, // the server's clock less this computer's, in ms (js/clock.js)
  // id -> the page's buyer in that product's line (js/line.js): who, the place the server
  // last gave (its LinePlace), when it let the buyer in, the problem of the last answer, and
  // the looks' bookkeeping (run, seq, timer, attempt, joining, looking).
  lines: new Map(),
  lockStats: new Map(), // id -> this instance's lock counters for the product
  log: [], // the event log, newest first: {key, params, bad, at}
});

/// Replaces one entry of a Map-valued key.
export const setEntry = (key, id, value) => store.set({ [key]: new Map(store.get()[key]).set(id, value) });

/// Merges `patch` into an object-valued key (created if missing).
export const patch = (key, changes) => store.set({ [key]: { ...store.get()[key], ...changes } });
