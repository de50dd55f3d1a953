//! The keys tokens are checked against: an issuer's JWKS, fetched over HTTP(S) and kept
//! fresh, or this deployment's own (`demo`), fixed.
//!
//! Fetching is guarded against a storm: one fetch at a time, and a token naming a key the set
//! lacks (a forger can invent `kid`s at will) fetches again at most every `min_refresh`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::Refused;

/// How often the issuer's keys are read again whatever the tokens say: an issuer rotating
/// its keys publishes the new one ahead of use, and withdraws the old one after.
const REFRESH_EVERY: Duration = Duration::from_secs(300);

/// How often keys never read yet (the issuer down at start-up) are tried again.
const RETRY_UNREAD: Duration = Duration::from_secs(5);

/// How long one fetch of the JWKS may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest JWKS read (real ones are a few KiB).
const MAX_JWKS_BYTES: usize = 1 << 20;

/// A verification key and the one algorithm it verifies.
pub(super) struct Key {
    pub decoding: DecodingKey,
    pub algorithm: Algorithm,
    /// The set it came from: a token verified with a key since withdrawn is forgotten.
    pub generation: u64,
}

pub(super) struct Keys {
    remote: Option<Remote>,
    set: RwLock<Arc<KeySet>>,
    generation: AtomicU64,
    /// Held while fetching (one fetch at a time); when the last fetch began.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    min_refresh: Duration,
}

struct Remote {
    client: reqwest::Client,
    url: String,
}

#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    /// Keys published without a `kid`: usable only by a token naming none, when alone.
    unnamed: Vec<Arc<Key>>,
    /// The JWKS's keys as read, to tell a changed set from the same one read again.
    source: String,
    loaded: bool,
}

impl Keys {
    /// A set that never changes (this deployment's own keys).
    pub fn fixed(jwks: &serde_json::Value) -> anyhow::Result<Arc<Keys>> {
        let set = KeySet::parse(jwks, 1).ok_or_else(|| anyhow::anyhow!("not a JWKS"))?;
        Ok(Arc::new(Keys {
            remote: None,
            set: RwLock::new(Arc::new(set)),
            generation: AtomicU64::new(1),
            fetching: tokio::sync::Mutex::new(None),
            min_refresh: Duration::MAX,
        }))
    }

    /// An issuer's JWKS at `url`, read again every [`REFRESH_EVERY`] by a task that ends
    /// with the set.
    pub fn remote(url: &str, min_refresh: Duration) -> anyhow::Result<Arc<Keys>> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            // The keys are the URL's own: a redirect elsewhere is no JWKS of the issuer's.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| anyhow::anyhow!("building the JWKS client: {e}"))?;
        let keys = Arc::new(Keys {
            remote: Some(Remote {
                client,
                url: url.to_string(),
            }),
            set: RwLock::new(Arc::new(KeySet::default())),
            generation: AtomicU64::new(0),
            fetching: tokio::sync::Mutex::new(None),
            min_refresh,
        });
        tokio::spawn(refresh_on_timer(Arc::downgrade(&keys)));
        Ok(keys)
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether a fetch began within `span` (a token's, or the timer's).
    fn fetched_within(&self, span: Duration) -> bool {
        self.fetching
            .try_lock()
            .map_or(true, |last| last.is_some_and(|at| at.elapsed() < span))
    }

    pub fn loaded(&self) -> bool {
        self.current().loaded
    }

    fn current(&self) -> Arc<KeySet> {
        self.set.read().expect("the key set's lock").clone()
    }

    /// The key a token's header names, fetching the set again (within the bounds above) if
    /// it names one we do not have.
    pub async fn find(&self, kid: Option<&str>) -> Result<Arc<Key>, Refused> {
        let seen = self.generation();
        if let Some(key) = self.current().find(kid) {
            return Ok(key);
        }
        if self.remote.is_some() {
            let mut last = self.fetching.lock().await;
            // Another token's fetch may have brought it while this one waited.
            let fetched_meanwhile = self.generation() != seen;
            let due = last.is_none_or(|at| at.elapsed() >= self.min_refresh);
            if !fetched_meanwhile && due {
                *last = Some(Instant::now());
                if let Err(why) = self.fetch().await {
                    tracing::warn!(%why, "could not read the issuer's keys");
                    if !self.loaded() || kid.is_some() {
                        return Err(Refused::KeysUnavailable(why.to_string()));
                    }
                }
            }
            drop(last);
            if let Some(key) = self.current().find(kid) {
                return Ok(key);
            }
            if !self.loaded() {
                return Err(Refused::KeysUnavailable(
                    "the issuer's keys have not been read yet".into(),
                ));
            }
        }
        Err(Refused::Invalid(match kid {
            Some(kid) => format!("the issuer has no key {kid:?}"),
            None => "the token names no key (kid) and the issuer has not exactly one".into(),
        }))
    }

    /// Reads the set now (start-up, the timer), one fetch at a time.
    pub async fn refresh(&self) -> anyhow::Result<()> {
        let mut last = self.fetching.lock().await;
        *last = Some(Instant::now());
        self.fetch().await
    }

    async fn fetch(&self) -> anyhow::Result<()> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        let mut response = remote.client.get(&remote.url).send().await?;
        if !response.status().is_success() {
            anyhow::bail!("{} answered {}", remote.url, response.status());
        }
        // Read a chunk at a time: a body without a length must not grow without bound.
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                anyhow::bail!("{}'s JWKS is over {MAX_JWKS_BYTES} bytes", remote.url);
            }
            body.extend_from_slice(&chunk);
        }
        let jwks: serde_json::Value = serde_json::from_slice(&body)?;
        let source = jwks["keys"].to_string();
        if self.current().loaded && self.current().source == source {
            return Ok(());
        }
        let generation = self.generation() + 1;
        let set = KeySet::parse(&jwks, generation)
            .ok_or_else(|| anyhow::anyhow!("{} is not a JWKS (no `keys`)", remote.url))?;
        tracing::info!(
            keys = set.by_kid.len() + set.unnamed.len(),
            generation,
            "read the issuer's keys"
        );
        *self.set.write().expect("the key set's lock") = Arc::new(set);
        self.generation.store(generation, Ordering::Release);
        Ok(())
    }
}

/// Reads the keys again every [`REFRESH_EVERY`]; until they have been read once, every
/// [`RETRY_UNREAD`]: an instance that is not ready gets no traffic, so no token would ask.
async fn refresh_on_timer(keys: Weak<Keys>) {
    let mut wait = RETRY_UNREAD;
    loop {
        tokio::time::sleep(wait).await;
        let Some(keys) = keys.upgrade() else { return };
        wait = if keys.loaded() {
            REFRESH_EVERY
        } else {
            RETRY_UNREAD
        };
        if wait == REFRESH_EVERY && keys.fetched_within(REFRESH_EVERY / 2) {
            continue;
        }
        if let Err(why) = keys.refresh().await {
            tracing::warn!(%why, "could not read the issuer's keys; keeping the ones read before");
        }
    }
}

impl KeySet {
    /// The signing keys of a JWKS document; keys for encryption, symmetric keys (a public
    /// document cannot hold a secret) and keys of kinds not known here are left out.
    fn parse(jwks: &serde_json::Value, generation: u64) -> Option<KeySet> {
        let listed = jwks.get("keys")?.as_array()?;
        let mut set = KeySet {
            source: jwks["keys"].to_string(),
            loaded: true,
            ..KeySet::default()
        };
        for raw in listed {
            let Ok(jwk) = serde_json::from_value::<Jwk>(raw.clone()) else {
                continue;
            };
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                continue;
            }
            let Some(algorithm) = algorithm_of(&jwk) else {
                continue;
            };
            let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            let key = Arc::new(Key {
                decoding,
                algorithm,
                generation,
            });
            match jwk.common.key_id {
                Some(kid) => {
                    set.by_kid.insert(kid, key);
                }
                None => set.unnamed.push(key),
            }
        }
        Some(set)
    }

    fn find(&self, kid: Option<&str>) -> Option<Arc<Key>> {
        match kid {
            Some(kid) => self.by_kid.get(kid).cloned(),
            None if self.unnamed.len() + self.by_kid.len() == 1 => self
                .unnamed
                .iter()
                .chain(self.by_kid.values())
                .next()
                .cloned(),
            None => None,
        }
    }
}

/// The one algorithm a key verifies: the one it names, or its kind's usual one. Never an
/// HMAC one (with a public key as its secret, anyone could sign: the key-confusion attack).
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    use Algorithm::*;
    let usual = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => ES256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P384 => ES384,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => EdDSA,
        _ => return None,
    };
    let Some(named) = jwk.common.key_algorithm else {
        return Some(usual);
    };
    let named = match named {
        KeyAlgorithm::RS256 => RS256,
        KeyAlgorithm::RS384 => RS384,
        KeyAlgorithm::RS512 => RS512,
        KeyAlgorithm::PS256 => PS256,
        KeyAlgorithm::PS384 => PS384,
        KeyAlgorithm::PS512 => PS512,
        KeyAlgorithm::ES256 => ES256,
        KeyAlgorithm::ES384 => ES384,
        KeyAlgorithm::EdDSA => EdDSA,
        _ => return None,
    };
    // A key naming an algorithm of another kind is no key of ours.
    let fits = match usual {
        RS256 => matches!(named, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
        other => named == other,
    };
    fits.then_some(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_signing_keys_of_known_kinds_are_kept_each_with_its_one_algorithm() {
        let ed = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": "ed",
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let jwks = serde_json::json!({"keys": [
            ed,
            // A symmetric key published by mistake: with it anyone could sign.
            {"kty": "oct", "kid": "oct", "k": "c2VjcmV0"},
            // An encryption key, and a key naming an algorithm of another kind.
            {"kty": "OKP", "crv": "Ed25519", "kid": "enc", "use": "enc",
             "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "OKP", "crv": "Ed25519", "kid": "mixed", "alg": "RS256",
             "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "weird", "kid": "weird"},
        ]});
        let set = KeySet::parse(&jwks, 7).unwrap();
        let mut kids: Vec<_> = set.by_kid.keys().cloned().collect();
        kids.sort();
        assert_eq!(kids, ["ed"]);
        let key = set.find(Some("ed")).unwrap();
        assert_eq!((key.algorithm, key.generation), (Algorithm::EdDSA, 7));
        // A token naming no key is taken only when the set has exactly one.
        assert!(set.find(None).is_some());
        assert!(set.find(Some("oct")).is_none());
        assert!(KeySet::parse(&serde_json::json!({"no": "keys"}), 1).is_none());
    }
}
