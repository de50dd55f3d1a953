//! The `demo` mode's issuer: short-lived tokens signed with an Ed25519 key whose 32 random
//! bytes every instance of a deployment reads from its database (the first to need them makes
//! them), so a token one instance issued is accepted by all of them. Its public half is published as a JWKS
//! (`/.well-known/jwks.json`) and verified by the same code as a real issuer's tokens.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use sha2::Digest;
use sqlx::PgPool;

use super::Buyer;

/// The `iss` of the demo's tokens, checked on each.
pub const ISSUER: &str = "seckill-demo";
/// The `aud` of the demo's tokens, checked on each.
pub const AUDIENCE: &str = "seckill";

/// A PKCS#8 v1 Ed25519 private key is these 16 bytes, then the 32-byte seed (RFC 8410).
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

pub(super) struct Issuer {
    signing: EncodingKey,
    kid: String,
    /// The public key, base64url (the JWK's `x`).
    x: String,
    ttl: Duration,
}

/// A token as `POST /api/session` hands it out.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Issued {
    /// The bearer token (a JWT): send it as `Authorization: Bearer <token>`.
    pub token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Whom it names (its `sub`).
    pub buyer: String,
    /// Seconds it is valid for.
    pub expires_in: u64,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

impl Issuer {
    /// The deployment's issuer: its key from the database, made now if it is the first.
    pub async fn load(db: &PgPool, ttl: Duration) -> anyhow::Result<Issuer> {
        let mut fresh = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh)
            .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
        // The first instance's bytes win; every other reads them.
        sqlx::query!(
            "INSERT INTO demo_issuer (seed) VALUES ($1) ON CONFLICT (only_one) DO NOTHING",
            &fresh[..]
        )
        .execute(db)
        .await?;
        let seed = sqlx::query_scalar!("SELECT seed FROM demo_issuer")
            .fetch_one(db)
            .await?;
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| anyhow::anyhow!("demo_issuer.seed is not 32 bytes"))?;
        Ok(Issuer::new(seed, ttl))
    }

    fn new(seed: [u8; 32], ttl: Duration) -> Issuer {
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
            .expect("any 32 bytes seed an Ed25519 key");
        let public = ring::signature::KeyPair::public_key(&pair)
            .as_ref()
            .to_vec();
        let mut pkcs8 = PKCS8_ED25519_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        let kid = URL_SAFE_NO_PAD.encode(&sha2::Sha256::digest(&public)[..12]);
        Issuer {
            signing: EncodingKey::from_ed_der(&pkcs8),
            kid,
            x: URL_SAFE_NO_PAD.encode(public),
            ttl,
        }
    }

    /// The public key as a JWKS.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({"keys": [{
            "kty": "OKP", "crv": "Ed25519", "x": self.x, "kid": self.kid,
            "alg": "EdDSA", "use": "sig",
        }]})
    }

    pub fn issue(&self, buyer: &Buyer) -> Issued {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let exp = now + self.ttl.as_secs();
        let claims = serde_json::json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": buyer.as_str(),
            "iat": now, "nbf": now, "exp": exp,
        });
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, &self.signing)
            .expect("an Ed25519 key signs any claims");
        Issued {
            token,
            token_type: "Bearer",
            buyer: buyer.as_str().to_string(),
            expires_in: self.ttl.as_secs(),
            expires_at: chrono::DateTime::from_timestamp(exp as i64, 0).unwrap_or_default(),
        }
    }
}
