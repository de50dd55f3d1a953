//! Who is asking: the admin (the admin bearer token), a buyer (a verified buyer token), or —
//! in `open` mode, where buyers carry no token — anyone.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};

use super::error::ApiError;
use super::AppState;
use crate::buyers::{Buyer, Mode, Refused};
use crate::config::Config;
use crate::error::Error;

pub enum Caller {
    Admin,
    Buyer(Buyer),
    /// `open` mode, no admin token: the body (or the query) says who.
    Anyone,
}

impl Caller {
    /// Whether this caller may see and pay an order of `buyer`'s.
    pub fn owns(&self, buyer: &str) -> bool {
        match self {
            Caller::Admin | Caller::Anyone => true,
            Caller::Buyer(b) => b.as_str() == buyer,
        }
    }

    /// The buyer an order (or a list) is for: the token's, which a `user_id` given too must
    /// name; the admin, and anyone in `open` mode, say it in `user_id`.
    pub fn buyer(&self, user_id: Option<String>) -> Result<String, ApiError> {
        match (self, user_id) {
            (Caller::Buyer(b), Some(named)) if named != b.as_str() => Err(ApiError::NotYourAccount),
            (Caller::Buyer(b), _) => Ok(b.as_str().to_string()),
            (_, Some(named)) => Ok(named),
            (Caller::Admin, None) => Err(ApiError::invalid(
                "user_id is required: the admin names the buyer",
            )),
            (Caller::Anyone, None) => Err(ApiError::invalid(
                "user_id is required (--buyer-auth open: the buyer is the body's user_id)",
            )),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let mode = state.buyers.mode();
        let Some(token) = bearer(&parts.headers)? else {
            return match mode {
                Mode::Open => Ok(Caller::Anyone),
                Mode::Jwks | Mode::Demo => Err(ApiError::Unauthenticated),
            };
        };
        if is_admin(&state.config, token) {
            return Ok(Caller::Admin);
        }
        if mode == Mode::Open {
            // Buyers carry no tokens here; one that does is not refused for it.
            return Ok(Caller::Anyone);
        }
        match state.buyers.verify(token).await {
            Ok(buyer) => Ok(Caller::Buyer(buyer)),
            Err(Refused::Invalid(why)) => Err(ApiError::InvalidToken(why)),
            Err(Refused::KeysUnavailable(why)) => Err(ApiError::Domain(Error::Unavailable(
                anyhow::anyhow!("buyer tokens cannot be verified: {why}"),
            ))),
        }
    }
}

/// The bearer token of `Authorization`, if there is one; a header that is not
/// `Bearer <token>` is refused rather than ignored.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        // The scheme's name is case-insensitive (RFC 9110 § 11.1).
        .and_then(|v| {
            v.get(..7)
                .filter(|s| s.eq_ignore_ascii_case("bearer "))
                .map(|_| &v[7..])
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(Some)
        .ok_or_else(|| ApiError::InvalidToken("Authorization must be `Bearer <token>`".to_string()))
}

/// Whether `token` is the admin token, compared in constant time so it cannot be guessed
/// byte by byte from response timings.
pub fn is_admin(config: &Config, token: &str) -> bool {
    config
        .admin_token
        .as_deref()
        .is_some_and(|expected| constant_time_eq(token.as_bytes(), expected.as_bytes()))
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
