// The rush at the opening, as a model: the same crowd meets two shops, one with a line
// (js/line.js is the real one) and one without. Pure: no page, no server, no clock of its
// own: step() advances one tick of simulated time, so the page plays it at any speed and a
// test can run it to the end at once. Its numbers are a teaching model's, chosen to show the
// shape of the two sales, not to measure anything.

export const TICK_MS = 100;
export const BEFORE_MS = 10_000; // buyers arrive over the 10 s before the opening (T0)
export const STOCK = 50;
export const CAPACITY = 10; // orders the shop serves per tick: 100 a second
export const BOT_SHARE = 0.1;
// What turning an order away costs the shop, in orders it could have served instead: a
// refusal is cheaper than a sale, not free. The more it refuses, the less it sells.
const REFUSAL_COST = 0.5;
// Passes out at a time: three ticks of the shop's pace (the server: rate × 2 s), and never
// more than the units left, so that nobody let in finds the stock gone.
const WINDOW = 3 * CAPACITY;
// Loading the page (slow, in a rush), finding the button: a buyer who arrives late is not
// ready at T0, and the later, the less ready.
const LOADING_MS = 8000;
const GIVE_UP_MS = 60_000; // a sale not over a minute after T0 is called over

const FINAL = new Set(['bought', 'sold_out']);

/// A random number generator from a seed (mulberry32): the same seed, the same crowd.
export function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/// `n` buyers, numbered by when they arrive (0 first): arrival time (ms, before T0), bot or
/// not, how fast they react, how long they wait before trying again.
export function crowd(n, random) {
  const arrivals = Array.from({ length: n }, () => {
    const bot = random() < BOT_SHARE;
    // Bots are set up in advance: they are there in the first half of the ten seconds.
    return { bot, at: -BEFORE_MS * (bot ? 1 - 0.5 * random() : random()) };
  });
  arrivals.sort((x, y) => x.at - y.at);
  return arrivals.map(({ at, bot }, id) => ({
    id,
    at,
    bot,
    // When the buyer can click at the earliest: a bot at once; a person once the page has loaded.
    ready: bot ? at : at + LOADING_MS * (0.2 + 0.8 * random()),
    // A bot fires within milliseconds of T0 and again every tick; a person in a fraction of a
    // second, and again after a second or two.
    reaction: bot ? 2 + 20 * random() : 250 + 600 * random(),
    retry: bot ? TICK_MS : 800 + 1200 * random(),
  }));
}

// How many of `asked` orders the shop serves in a tick: its capacity, less what the refusals
// cost it.
function served(asked) {
  const over = Math.max(0, asked - CAPACITY);
  return Math.min(asked, Math.floor(CAPACITY / (1 + (over * REFUSAL_COST) / CAPACITY)));
}

/// One lane's sale: `line` true with a line, false without. Its fields are what the page draws.
export function lane(buyers, line, random) {
  const n = buyers.length;
  const s = {
    line,
    t: -BEFORE_MS,
    status: buyers.map(() => 'away'),
    order: buyers.map((b) => b.id), // how the lane is drawn: by arrival, then (line) by place
    drawn: false,
    next: buyers.map(() => Infinity), // when each buyer sends an order next
    servedAt: [], // buyer ids, in the order they were served
    stock: STOCK,
    sent: 0, // orders the shop was sent
    refused: 0, // orders it turned away (to be tried again)
    peak: 0, // the most orders it was sent in one tick
    soldOutAt: null,
    done: false,
  };
  let head = 0; // the next place to let in
  let outstanding = 0; // passes given, not yet spent

  const arrive = (b) => {
    s.status[b.id] = 'waiting';
    // Without a line, everyone clicks at T0, or as soon as they can after it.
    if (!line) s.next[b.id] = Math.max(0, b.ready) + b.reaction;
  };
  const draw = () => {
    // The line's draw: a uniformly random order of everyone who joined (Fisher–Yates).
    const order = s.order.filter((id) => s.status[id] !== 'away');
    for (let i = order.length - 1; i > 0; i -= 1) {
      const j = Math.floor(random() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    s.order = order;
    s.drawn = true;
  };
  const admit = (end) => {
    while (outstanding < Math.min(WINDOW, s.stock) && head < s.order.length) {
      const id = s.order[head];
      head += 1;
      s.status[id] = 'admitted';
      s.next[id] = end - TICK_MS + buyers[id].reaction;
      outstanding += 1;
    }
  };
  const soldOut = () => {
    s.soldOutAt = s.t;
    // A line tells everyone still in it; without one, each learns it at their next order.
    if (line) for (let id = 0; id < n; id += 1) if (!FINAL.has(s.status[id])) s.status[id] = 'sold_out';
  };

  s.step = () => {
    const end = s.t + TICK_MS;
    for (const b of buyers) if (s.status[b.id] === 'away' && b.at < end) arrive(b);
    // The draw ends the last tick before the opening: the page shows it on its own.
    if (line && !s.drawn && end >= 0) draw();
    if (end > 0) {
      if (line && s.stock > 0) admit(end);
      const asking = buyers.filter((b) => s.next[b.id] < end && !FINAL.has(s.status[b.id])).sort((x, y) => s.next[x.id] - s.next[y.id]);
      s.sent += asking.length;
      s.peak = Math.max(s.peak, asking.length);
      const take = Math.min(s.stock, served(asking.length));
      const left = s.stock - take;
      asking.forEach((b, i) => {
        if (i < take) {
          s.status[b.id] = 'bought';
          s.servedAt.push(b.id);
          outstanding -= 1;
        } else if (left === 0) {
          s.status[b.id] = 'sold_out';
        } else {
          // Turned away: tried again after the buyer's own wait, jittered.
          s.status[b.id] = 'refused';
          s.refused += 1;
          s.next[b.id] += b.retry * (0.75 + 0.5 * random());
        }
      });
      const hadStock = s.stock > 0;
      s.stock -= take;
      s.t = end;
      if (hadStock && s.stock === 0) soldOut();
    } else {
      s.t = end;
    }
    s.done = s.status.every((x) => FINAL.has(x)) || s.t >= GIVE_UP_MS;
  };
  return s;
}

/// Spearman's rank correlation between arrival order and order of service, everyone not
/// served tied last: 0, arriving early did not matter; 1, first come, first served.
export function fairness(n, servedAt) {
  const tied = (servedAt.length + 1 + n) / 2;
  const rank = Array.from({ length: n }, () => tied);
  servedAt.forEach((id, i) => {
    rank[id] = i + 1;
  });
  const mean = (n + 1) / 2;
  let cov = 0;
  let va = 0;
  let vb = 0;
  for (let id = 0; id < n; id += 1) {
    const a = id + 1 - mean;
    const b = rank[id] - mean;
    cov += a * b;
    va += a * a;
    vb += b * b;
  }
  return va && vb ? cov / Math.sqrt(va * vb) : 0;
}

/// What the page shows of a lane: its counters, and (once it is over) how fair it was.
export function results(s, buyers) {
  const bots = s.servedAt.filter((id) => buyers[id].bot).length;
  return {
    soldOutS: s.soldOutAt === null ? null : s.soldOutAt / 1000,
    sent: s.sent,
    refused: s.refused,
    peak: s.peak * (1000 / TICK_MS), // orders a second, in the busiest tick
    bots: s.servedAt.length ? bots / s.servedAt.length : 0,
    fairness: s.done ? fairness(buyers.length, s.servedAt) : null,
  };
}
