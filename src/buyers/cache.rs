//! Tokens verified already, until they expire: a buyer sends the same token with every
//! request, and a signature check (tens of µs for RSA, more for ECDSA) on each would cost a
//! sale's hot path more than the rest of its edge.
//!
//! Keyed by the whole token, so only that exact token hits; bounded, so a flood of fresh
//! tokens costs memory no more than [`CAPACITY`] entries.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use super::Buyer;

/// The most tokens remembered (about 1 KiB each).
const CAPACITY: usize = 50_000;

#[derive(Default)]
pub(super) struct Cache(Mutex<HashMap<Box<str>, Entry>>);

struct Entry {
    buyer: Buyer,
    /// Past this (Unix seconds: `exp` and its leeway), the token is checked again, and refused.
    until: u64,
    /// The key set it was verified with: a rotation that withdrew the key forgets it.
    generation: u64,
}

impl Cache {
    pub fn get(&self, token: &str, generation: u64) -> Option<Buyer> {
        let entries = self.0.lock().expect("the token cache's lock");
        let entry = entries.get(token)?;
        (entry.generation == generation && now() < entry.until).then(|| entry.buyer.clone())
    }

    pub fn put(&self, token: &str, buyer: Buyer, until: u64, generation: u64) {
        let mut entries = self.0.lock().expect("the token cache's lock");
        if entries.len() >= CAPACITY {
            let now = now();
            entries.retain(|_, e| e.until > now && e.generation == generation);
            if entries.len() >= CAPACITY {
                // All still valid: start over rather than keep every one.
                entries.clear();
            }
        }
        entries.insert(
            token.into(),
            Entry {
                buyer,
                until,
                generation,
            },
        );
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
