//! Tokens verified already, until they expire: a buyer sends the same token with every
//! request, and a signature check (tens of µs for RSA, more for ECDSA) on each would cost a
//! sale's hot path more than the rest of its edge.
//!
//! Keyed by the whole token, so only that exact token hits; bounded, so a flood of fresh
//! tokens costs memory no more than [`CAPACITY`] entries or [`MAX_BYTES`] of tokens.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use super::Buyer;

/// The most tokens remembered.
const CAPACITY: usize = 50_000;

/// The most bytes of tokens remembered: a real token is 1–2 KiB, but one may be 8 KiB.
const MAX_BYTES: usize = 32 << 20;

#[derive(Default)]
pub(super) struct Cache(Mutex<Held>);

#[derive(Default)]
struct Held {
    entries: HashMap<Box<str>, Entry>,
    /// The tokens' bytes.
    bytes: usize,
}

struct Entry {
    buyer: Buyer,
    /// Past this (Unix seconds: `exp` and its leeway), the token is checked again, and refused.
    until: u64,
    /// The key set it was verified with: a rotation that withdrew the key forgets it.
    generation: u64,
}

impl Cache {
    pub fn get(&self, token: &str, generation: u64) -> Option<Buyer> {
        let held = self.0.lock().expect("the token cache's lock");
        let entry = held.entries.get(token)?;
        (entry.generation == generation && now() < entry.until).then(|| entry.buyer.clone())
    }

    pub fn put(&self, token: &str, buyer: Buyer, until: u64, generation: u64) {
        let mut held = self.0.lock().expect("the token cache's lock");
        let full =
            |held: &Held| held.entries.len() >= CAPACITY || held.bytes + token.len() > MAX_BYTES;
        if full(&held) {
            let now = now();
            held.entries
                .retain(|_, e| e.until > now && e.generation == generation);
            held.recount();
        }
        if full(&held) {
            // All still valid: a quarter goes, whichever the map's (random) order puts last.
            // Not all: more live buyers than fit must not make every one miss.
            let mut keep = held.entries.len() * 3 / 4;
            held.entries.retain(|_, _| {
                keep = keep.saturating_sub(1);
                keep > 0
            });
            held.recount();
        }
        let entry = Entry {
            buyer,
            until,
            generation,
        };
        if held.entries.insert(token.into(), entry).is_none() {
            held.bytes += token.len();
        }
    }
}

impl Held {
    fn recount(&mut self) {
        self.bytes = self.entries.keys().map(|k| k.len()).sum();
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buyer(name: &str) -> Buyer {
        Buyer::named(name).unwrap()
    }

    #[test]
    fn a_token_is_remembered_until_it_expires_and_only_for_its_key_set() {
        let cache = Cache::default();
        cache.put("t1", buyer("alice"), now() + 60, 1);
        cache.put("t2", buyer("bob"), now() - 1, 1);
        assert_eq!(cache.get("t1", 1), Some(buyer("alice")));
        assert_eq!(
            cache.get("t2", 1),
            None,
            "an expired token is checked again"
        );
        assert_eq!(
            cache.get("t1", 2),
            None,
            "a rotation forgets what the old keys verified"
        );
        assert_eq!(cache.get("t3", 1), None);
    }

    #[test]
    fn big_tokens_are_bounded_by_their_bytes() {
        let cache = Cache::default();
        let big = "x".repeat(8000);
        for i in 0..(MAX_BYTES / 8000 + 10) {
            cache.put(&format!("{i}{big}"), buyer("b"), now() + 600, 1);
        }
        let held = cache.0.lock().unwrap();
        assert!(held.bytes <= MAX_BYTES, "{} bytes held", held.bytes);
        assert_eq!(
            held.bytes,
            held.entries.keys().map(|k| k.len()).sum::<usize>()
        );
    }

    #[test]
    fn a_full_cache_of_live_tokens_drops_a_quarter_not_everything() {
        let cache = Cache::default();
        let until = now() + 600;
        for i in 0..=CAPACITY {
            cache.put(&format!("token-{i}"), buyer("b"), until, 1);
        }
        let held = cache.0.lock().unwrap().entries.len();
        assert!(held > CAPACITY / 2 && held < CAPACITY, "{held} held");
        assert!(
            cache.get(&format!("token-{CAPACITY}"), 1).is_some(),
            "the newest is kept"
        );
    }
}
