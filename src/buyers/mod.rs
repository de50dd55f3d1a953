//! Who buys: the buyer named by a verified bearer token (a JWT's `sub`), or — in the `open`
//! teaching mode only — whatever the body says.
//!
//! Three modes (`--buyer-auth`):
//! - `jwks`: tokens a real OIDC issuer signed, checked against its published keys ([`keys`]);
//! - `demo`: tokens this deployment signs itself ([`demo`]), checked the same way against its
//!   own published key, so a token one instance issued buys on every other;
//! - `open`: no tokens; anyone buys as anyone. For the teaching page and its lessons only.
//!
//! A verified token is remembered until it expires ([`cache`]): a buyer's every order would
//! otherwise pay for a signature check.

mod cache;
mod demo;
mod keys;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use jsonwebtoken::Validation;
use sqlx::PgPool;

pub use demo::Issued;

/// How buyers are told apart (`--buyer-auth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Tokens from an OIDC issuer, verified against its JWKS (`--buyer-jwks-url`).
    Jwks,
    /// Tokens this deployment issues itself at `POST /api/session`.
    Demo,
    /// No tokens: the body's `user_id` is the buyer. Teaching only.
    Open,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Jwks => "jwks",
            Mode::Demo => "demo",
            Mode::Open => "open",
        }
    }
}

/// The flags of buyer identity, flattened into the server's configuration.
#[derive(Clone, Debug, clap::Args)]
pub struct Settings {
    /// How buyers are identified: `jwks` (bearer tokens of an OIDC issuer), `demo` (tokens
    /// this deployment issues at `POST /api/session`) or `open` (the body's `user_id`: anyone
    /// buys as anyone, for teaching only). Required.
    #[arg(long, env = "SECKILL_BUYER_AUTH", value_enum)]
    pub buyer_auth: Option<Mode>,

    /// `jwks`: the issuer's JWKS URL (its public keys), fetched at start-up, every 5 min,
    /// and on a token whose `kid` it does not know.
    #[arg(long, env = "SECKILL_BUYER_JWKS_URL")]
    pub buyer_jwks_url: Option<String>,

    /// `jwks`: the `iss` a token must carry (the issuer's URL). Unchecked when unset.
    #[arg(long, env = "SECKILL_BUYER_ISSUER")]
    pub buyer_issuer: Option<String>,

    /// `jwks`: an `aud` a token must carry (the client id or API identifier). Unchecked
    /// when unset.
    #[arg(long, env = "SECKILL_BUYER_AUDIENCE")]
    pub buyer_audience: Option<String>,

    /// `jwks`: a token naming a key the JWKS lacks fetches it again at most this often (one
    /// fetch at a time), so forged `kid`s cannot make a fetch storm.
    #[arg(
        long,
        env = "SECKILL_BUYER_JWKS_MIN_REFRESH_MS",
        default_value_t = 5000,
        value_parser = clap::value_parser!(u64).range(100..)
    )]
    pub buyer_jwks_min_refresh_ms: u64,

    /// `demo`: how long a token issued at `POST /api/session` is valid.
    #[arg(long, env = "SECKILL_BUYER_TOKEN_TTL_S", default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(60..=86_400))]
    pub buyer_token_ttl_s: u64,
}

impl Settings {
    /// The mode, which has no default: a server without one stops, naming the three.
    pub fn mode(&self) -> anyhow::Result<Mode> {
        self.buyer_auth.ok_or_else(|| {
            anyhow::anyhow!(
                "--buyer-auth (SECKILL_BUYER_AUTH) is required: `jwks` (tokens of an OIDC \
                 issuer, with --buyer-jwks-url), `demo` (tokens this deployment issues at \
                 POST /api/session) or `open` (the body's user_id, anyone buys as anyone: \
                 teaching only)"
            )
        })
    }
}

/// The longest token looked at: real ID and access tokens are 1–2 KiB; anything past this
/// is refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 8192;

/// The clock skew tolerated on `exp` and `nbf`.
const LEEWAY_S: u64 = 30;

/// The longest buyer id (`sub`, `user_id`) an order can carry.
pub const MAX_BUYER_CHARS: usize = 64;

/// A buyer, as a verified token (or, in `open` mode, the body) names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buyer(Arc<str>);

impl Buyer {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a token was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The token is not one to trust: malformed, forged, expired, for someone else.
    #[error("{0}")]
    Invalid(String),
    /// The issuer's keys could not be read: not the buyer's fault, and passing.
    #[error("the issuer's keys cannot be read: {0}")]
    KeysUnavailable(String),
}

/// Names buyers: verifies their tokens (and issues them, in `demo` mode).
#[derive(Clone)]
pub struct Buyers(Arc<Inner>);

struct Inner {
    mode: Mode,
    keys: Option<Arc<keys::Keys>>,
    issuer: Option<demo::Issuer>,
    cache: cache::Cache,
    issuer_claim: Option<String>,
    audience: Option<String>,
}

impl Buyers {
    /// Ready to verify: in `jwks` mode the issuer's keys are fetched first (a failure is
    /// logged and retried, and `/readyz` says so); in `demo` mode the deployment's key is
    /// read from the database.
    pub async fn start(settings: &Settings, db: &PgPool) -> anyhow::Result<Buyers> {
        let mode = settings.mode()?;
        let min_refresh = Duration::from_millis(settings.buyer_jwks_min_refresh_ms);
        let (keys, issuer, issuer_claim, audience) = match mode {
            Mode::Open => {
                tracing::warn!(
                    "--buyer-auth open: the buyer is whatever the body says, so anyone buys \
                     as anyone and reads anyone's orders. A teaching mode: never for a real sale"
                );
                (None, None, None, None)
            }
            Mode::Demo => {
                let ttl = Duration::from_secs(settings.buyer_token_ttl_s);
                let issuer = demo::Issuer::load(db, ttl)
                    .await
                    .context("reading the demo issuer's key")?;
                let keys = keys::Keys::fixed(&issuer.jwks())?;
                let (iss, aud) = (
                    Some(demo::ISSUER.to_string()),
                    Some(demo::AUDIENCE.to_string()),
                );
                (Some(keys), Some(issuer), iss, aud)
            }
            Mode::Jwks => {
                let Some(url) = settings.buyer_jwks_url.as_deref() else {
                    anyhow::bail!("--buyer-auth jwks needs --buyer-jwks-url (SECKILL_BUYER_JWKS_URL): the issuer's JWKS URL");
                };
                if settings.buyer_audience.is_none() || settings.buyer_issuer.is_none() {
                    tracing::warn!(
                        "--buyer-auth jwks without --buyer-issuer or --buyer-audience: a token \
                         the issuer signed for any other application buys here too"
                    );
                }
                let keys = keys::Keys::remote(url, min_refresh)?;
                if let Err(why) = keys.refresh().await {
                    tracing::error!(%why, url, "the issuer's keys cannot be read: no token can be verified until they can");
                }
                let (iss, aud) = (
                    settings.buyer_issuer.clone(),
                    settings.buyer_audience.clone(),
                );
                (Some(keys), None, iss, aud)
            }
        };
        Ok(Buyers(Arc::new(Inner {
            mode,
            keys,
            issuer,
            cache: cache::Cache::default(),
            issuer_claim,
            audience,
        })))
    }

    pub fn mode(&self) -> Mode {
        self.0.mode
    }

    /// The buyer a bearer token names, if its signature, times, issuer and audience hold.
    pub async fn verify(&self, token: &str) -> Result<Buyer, Refused> {
        let Some(keys) = &self.0.keys else {
            return Err(Refused::Invalid(
                "this server takes no buyer tokens (--buyer-auth open)".into(),
            ));
        };
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refused::Invalid(format!(
                "the token is over {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let generation = keys.generation();
        if let Some(buyer) = self.0.cache.get(token, generation) {
            return Ok(buyer);
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refused::Invalid(format!("the token is malformed: {e}")))?;
        let key = keys.find(header.kid.as_deref()).await?;
        if header.alg != key.algorithm {
            return Err(Refused::Invalid(format!(
                "the token is signed with {:?}, its key is for {:?}",
                header.alg, key.algorithm
            )));
        }
        let mut validation = Validation::new(key.algorithm);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if let Some(iss) = &self.0.issuer_claim {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        match &self.0.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation)
            .map_err(|e| Refused::Invalid(format!("the token is not valid: {e}")))?
            .claims;
        let buyer =
            Buyer::named(&claims.sub).map_err(|why| Refused::Invalid(format!("its sub {why}")))?;
        self.0.cache.put(
            token,
            buyer.clone(),
            claims.exp.saturating_add(LEEWAY_S),
            key.generation,
        );
        Ok(buyer)
    }

    /// A fresh token for `name` (`demo` mode only: `None` otherwise).
    pub fn issue(&self, name: &Buyer) -> Option<Issued> {
        self.0.issuer.as_ref().map(|issuer| issuer.issue(name))
    }

    /// The public keys of this deployment's own tokens, as a JWKS (`demo` mode only).
    pub fn published_keys(&self) -> Option<serde_json::Value> {
        self.0.issuer.as_ref().map(demo::Issuer::jwks)
    }

    /// Whether tokens can be verified now (`jwks`: the issuer's keys have been read).
    pub fn ready(&self) -> bool {
        self.0.keys.as_ref().is_none_or(|keys| keys.loaded())
    }
}

impl Buyer {
    /// A buyer id as orders keep it: 1 to 64 characters, not only white space, no control
    /// characters.
    pub fn named(id: &str) -> Result<Buyer, &'static str> {
        let len = id.chars().count();
        if id.trim().is_empty() || len > MAX_BUYER_CHARS {
            return Err("must be 1 to 64 characters");
        }
        if id.chars().any(char::is_control) {
            return Err("must not contain control characters");
        }
        Ok(Buyer(id.into()))
    }
}

/// What is read from a verified token (the rest is checked by `jsonwebtoken`).
#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
}
