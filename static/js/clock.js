// The server's clock, as the page knows it: a sale opens by the server's clock, not by the
// buyer's computer. Every product read keeps `offset = server_time − Date.now()` at receipt
// (store `serverOffset`), so a countdown is `opens_at − (Date.now() + offset)`: a computer a
// minute wrong counts down like everyone else, off by no more than the answer's travel time.

import { locale } from './i18n.js';
import { store } from './state.js';

/// Notes the `server_time` of an answer just received.
export function noteServerTime(serverTime, receivedAt = Date.now()) {
  const at = Date.parse(serverTime ?? '');
  if (Number.isFinite(at)) store.set({ serverOffset: at - receivedAt });
}

/// Now, by the server's clock (ms since the epoch).
export const serverNow = () => Date.now() + (store.get().serverOffset ?? 0);

/// Milliseconds from now to `iso`, by the server's clock (null for no time).
export function until(iso) {
  const at = Date.parse(iso ?? '');
  return Number.isFinite(at) ? at - serverNow() : null;
}

const pad = (n) => String(n).padStart(2, '0');

/// A time left as a countdown shows it: 0:07, 12:30, 1:02:03; whole seconds, rounded up, so
/// that 0:00 is the opening itself. Days apart (`days`: '{d} d {time}' in the page's words).
export function countdown(ms, days) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const [d, h, m, sec] = [Math.floor(s / 86400), Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60, s % 60];
  const time = h || d ? `${h}:${pad(m)}:${pad(sec)}` : `${m}:${pad(sec)}`;
  return d ? days(d, time) : time;
}

/// An instant in the reader's time zone and language: the time alone today, else the date too.
/// `tenths`: with tenths of a second (the moment a buyer was let in).
export function when(iso, tenths = false) {
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return '';
  const today = at.toDateString() === new Date().toDateString();
  const time = { hour: '2-digit', minute: '2-digit', second: '2-digit', ...(tenths ? { fractionalSecondDigits: 1 } : {}) };
  return at.toLocaleString(locale(), today ? time : { year: 'numeric', month: 'short', day: 'numeric', ...time });
}
