//! A pass: what the line gives a buyer it lets in, and what `POST /orders` asks of a line's
//! buyer. Signed (HMAC-SHA256) with a key every instance shares, so any instance checks a
//! pass another gave without a query; it names the product, the buyer, the place and when
//! it stops being valid. That it buys once is the database's to know (`Line::spend`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A pass is short; anything longer is not one of ours, and is not worth a signature check.
const MAX_PASS_BYTES: usize = 512;

/// What a pass says, once its signature is checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pass {
    #[serde(rename = "p")]
    pub product_id: i64,
    #[serde(rename = "b")]
    pub buyer: String,
    #[serde(rename = "n")]
    pub place: i64,
    /// Unix seconds.
    #[serde(rename = "e")]
    pub expires: i64,
}

/// The deployment's pass key.
#[derive(Clone)]
pub struct Key(hmac::Key);

impl Key {
    pub fn new(secret: &[u8]) -> Key {
        Key(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The pass for `pass`, as the buyer carries it: its claims, then their signature.
    pub fn sign(&self, pass: &Pass) -> String {
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(pass).expect("passes serialise"));
        let tag = hmac::sign(&self.0, claims.as_bytes());
        format!("{claims}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// The pass `raw` is, if this deployment signed it for `product_id` and `buyer` and it is
    /// still valid at `now`; else why not.
    pub fn verify(
        &self,
        raw: &str,
        product_id: i64,
        buyer: &str,
        now: DateTime<Utc>,
    ) -> Result<Pass, Error> {
        let forged = Error::InvalidPass("this sale did not give it");
        if raw.len() > MAX_PASS_BYTES {
            return Err(forged);
        }
        let (claims, tag) = raw.split_once('.').ok_or(Error::InvalidPass("malformed"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Error::InvalidPass("malformed"))?;
        hmac::verify(&self.0, claims.as_bytes(), &tag).map_err(|_| forged)?;
        let pass: Pass = URL_SAFE_NO_PAD
            .decode(claims)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or(Error::InvalidPass("malformed"))?;
        if pass.product_id != product_id {
            return Err(Error::InvalidPass("it is for another product"));
        }
        if pass.buyer != buyer {
            return Err(Error::InvalidPass("it is another buyer's"));
        }
        if pass.expires <= now.timestamp() {
            return Err(Error::InvalidPass("it expired"));
        }
        Ok(pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass() -> Pass {
        Pass {
            product_id: 7,
            buyer: "alice".into(),
            place: 12,
            expires: 1_800_000_120,
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    #[test]
    fn a_pass_is_good_for_its_product_its_buyer_and_its_time_only() {
        let key = Key::new(&[1; 32]);
        let raw = key.sign(&pass());
        let now = at(1_800_000_000);
        assert_eq!(key.verify(&raw, 7, "alice", now).unwrap(), pass());
        let why = |r: Result<Pass, Error>| r.unwrap_err().to_string();
        assert!(why(key.verify(&raw, 8, "alice", now)).contains("another product"));
        assert!(why(key.verify(&raw, 7, "bob", now)).contains("another buyer"));
        assert!(why(key.verify(&raw, 7, "alice", at(1_800_000_120))).contains("expired"));
        // Another deployment's key, or claims changed under the signature: forged.
        let other = Key::new(&[2; 32]).sign(&pass());
        assert!(why(key.verify(&other, 7, "alice", now)).contains("did not give"));
        let (_, tag) = raw.split_once('.').unwrap();
        let richer = Pass { place: 1, ..pass() };
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&richer).unwrap());
        let tampered = format!("{claims}.{tag}");
        assert!(why(key.verify(&tampered, 7, "alice", now)).contains("did not give"));
        for junk in ["", "x", "a.b.c", &"a".repeat(600)] {
            assert_eq!(
                key.verify(junk, 7, "alice", now).unwrap_err().code(),
                "invalid_pass"
            );
        }
    }
}
