//! `/api/session`: who the server takes the caller for, and — in `demo` mode — a token for a
//! name; `/.well-known/jwks.json`: the demo tokens' public key.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::caller::Caller;
use super::error::{ApiError, ErrorBody};
use super::{AppState, Json};
use crate::buyers::{Buyer, Issued, Mode};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/session", get(whoami).post(sign_in))
        .route("/.well-known/jwks.json", get(jwks))
}

/// A name to sign in as (`demo` mode).
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SignIn {
    /// 1 to 64 characters, not only white space, no control characters: the buyer's id.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F-\x9F]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F]*$"
    )]
    name: String,
}

/// Signs in as `name` (`--buyer-auth demo` only): a short-lived token naming that buyer,
/// accepted by every instance of this deployment. Anyone may sign in as anyone: a demo.
#[utoipa::path(post, path = "/api/session", operation_id = "signIn", tag = "buyers",
    request_body = SignIn,
    responses(
        (status = 201, description = "The token: send it as `Authorization: Bearer <token>`", body = Issued),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 403, description = "`no_demo_issuer`: the server runs `--buyer-auth jwks` or `open`", body = ErrorBody<'static>),
    ))]
pub(super) async fn sign_in(
    State(state): State<AppState>,
    Json(sign_in): Json<SignIn>,
) -> Result<Response, ApiError> {
    let buyer =
        Buyer::named(&sign_in.name).map_err(|why| ApiError::invalid(format!("name {why}")))?;
    let issued = state.buyers.issue(&buyer).ok_or(ApiError::NoDemoIssuer)?;
    let mut response = (StatusCode::CREATED, Json(issued)).into_response();
    // A token is a credential: no cache keeps it.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Who the server takes the caller for.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct Session {
    /// How buyers are identified: `jwks`, `demo` or `open`.
    #[schema(value_type = String)]
    buyer_auth: Mode,
    /// The buyer the bearer token names; `null` without one (and always in `open` mode).
    buyer: Option<String>,
    /// Whether the bearer token is the admin token.
    admin: bool,
}

/// How this server identifies buyers, and whom the bearer token (if any) names. A token
/// that is not valid answers 401 `invalid_token`: a page learns its token has expired.
#[utoipa::path(get, path = "/api/session", operation_id = "getSession", tag = "buyers",
    security((), ("buyer" = [])),
    responses(
        (status = 200, description = "The mode, and the token's buyer", body = Session),
        (status = 401, description = "`invalid_token`", body = ErrorBody<'static>),
    ))]
pub(super) async fn whoami(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
) -> Result<Json<Session>, ApiError> {
    let caller = match caller {
        Err(ApiError::Unauthenticated) => Caller::Anyone,
        other => other?,
    };
    Ok(Json(Session {
        buyer_auth: state.buyers.mode(),
        buyer: match &caller {
            Caller::Buyer(buyer) => Some(buyer.as_str().to_string()),
            _ => None,
        },
        admin: matches!(caller, Caller::Admin),
    }))
}

/// The public key of the demo's tokens, as a JWKS (`--buyer-auth demo` only): what any
/// verifier, this server included, checks them against.
#[utoipa::path(get, path = "/.well-known/jwks.json", operation_id = "jwks", tag = "buyers",
    responses(
        (status = 200, description = "A JWK Set of one Ed25519 key", content_type = "application/json", body = Object),
        (status = 404, description = "`not_found`: the server issues no tokens", body = ErrorBody<'static>),
    ))]
pub(super) async fn jwks(State(state): State<AppState>) -> Result<Response, ApiError> {
    let keys = state
        .buyers
        .published_keys()
        .ok_or(ApiError::RouteNotFound)?;
    Ok(Json(keys).into_response())
}
