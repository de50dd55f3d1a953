//! The HTTP edge: shared state, the one route table, and the pieces every route shares
//! (JSON extraction with our error shape, the body-size cap, admin auth, 404/405 fallbacks).

mod events;
mod health;
mod orders;
mod products;

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use sqlx::PgPool;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use crate::config::Config;
use crate::error::AppError;
use crate::events::Events;
use crate::flags::Flags;
use crate::lock::Zk;
use crate::payment::Provider;

/// Largest request body any route accepts.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// What handlers share. Cheap to clone: every field is a handle.
#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    pub zk: Zk,
    pub payment: Provider,
    /// Products sold out, by id.
    pub sold_out: Flags,
    /// Armed teaching-page demos, `{product}-{mode}`.
    pub demo: Flags,
    /// Live updates for the teaching page.
    pub events: Events,
    pub config: Arc<Config>,
}

/// The route table. Each resource module owns its routes; this is where they meet.
pub fn router(state: AppState) -> Router {
    let request_timeout = state.config.request_timeout_ms;
    let static_files = ServeDir::new(&state.config.static_dir).not_found_service(
        axum::handler::HandlerWithoutStateExt::into_service(not_found),
    );
    Router::new()
        .merge(orders::router())
        .merge(products::router())
        .merge(health::router())
        .merge(events::router())
        .fallback_service(static_files)
        .method_not_allowed_fallback(|| async { AppError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(reject_large_bodies))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            time_limit(
                request,
                next,
                std::time::Duration::from_millis(request_timeout),
            )
        }))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

async fn not_found() -> AppError {
    AppError::RouteNotFound
}

/// Answers 413 from the declared length on every route, before any handler runs; bodies
/// without a length are capped by `DefaultBodyLimit` when a handler reads them.
async fn reject_large_bodies(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return AppError::PayloadTooLarge(MAX_BODY_BYTES).into_response();
    }
    next.run(request).await
}

/// Bounds every request. An order outlives its request (it runs in its own task), so a
/// timed-out buyer retries with the same Idempotency-Key to learn the outcome.
async fn time_limit(request: Request, next: Next, limit: std::time::Duration) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            AppError::Unavailable(anyhow::anyhow!("request took over {limit:?}")).into_response()
        }
    }
}

/// `axum::Json`, but its rejections answer in our error shape and codes.
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(AppError::UnsupportedMediaType),
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(AppError::PayloadTooLarge(MAX_BODY_BYTES))
            }
            Err(r) => Err(AppError::InvalidRequest(r.body_text())),
        }
    }
}

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Checks `Authorization: Bearer <admin token>`, comparing in constant time so the token
/// cannot be guessed byte by byte from response timings.
pub fn require_admin(config: &Config, headers: &HeaderMap) -> Result<(), AppError> {
    let Some(expected) = config.admin_token.as_deref() else {
        return Err(AppError::AdminDisabled);
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(AppError::Unauthorized)?;
    if constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(AppError::Unauthorized)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Path ids arrive as strings so a malformed one answers our 400, not axum's plain text.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &str) -> Result<T, AppError> {
    raw.parse()
        .map_err(|_| AppError::invalid(format!("{raw:?} is not a valid {what}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
