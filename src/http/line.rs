//! A product's line over HTTP: joining it, a buyer's place, the line at a glance; and the
//! admin's pause and resume of a sale.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use chrono::Utc;
use serde::Deserialize;

use super::caller::Caller;
use super::error::{ApiError, ErrorBody};
use super::AppState;
use super::{parse_id, require_admin, Json, Path};
use crate::inventory::{self, Product, TermsChange};
use crate::line::{Place, Summary};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/products/{id}/line", get(summary).post(join))
        .route("/api/products/{id}/line/me", get(look))
        .route("/api/products/{id}/pause", post(pause))
        .route("/api/products/{id}/resume", post(resume))
}

/// Who is in line, in `open` mode (a buyer with a token is the token's).
#[derive(Deserialize, Default, utoipa::ToSchema, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct Who {
    /// The buyer: omit it with a buyer token (or repeat it); required in `open` mode.
    user_id: Option<String>,
}

/// Joins the product's line: once per buyer (joining again answers the same place, 200).
/// Who joins before the opening is placed by the draw at it; who joins after, behind
/// everyone before them.
#[utoipa::path(post, path = "/api/products/{id}/line", operation_id = "joinLine", tag = "line",
    security(("buyer" = []), ("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    request_body(content = Option<Who>, description = "`open` mode only: `{\"user_id\"}`"),
    responses(
        (status = 201, description = "Joined: the buyer's place", body = Place),
        (status = 200, description = "In line already: the same place", body = Place),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthenticated`, `invalid_token`", body = ErrorBody<'static>),
        (status = 403, description = "`not_your_account`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 409, description = "`no_line`, `closed`, `sold_out`", body = ErrorBody<'static>),
    ))]
async fn join(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "product id")?;
    // No body at all, or JSON `null`: nobody named (a buyer with a token is the token's).
    let who: Option<Who> = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(e.to_string()))?
    };
    let who = who.unwrap_or_default();
    let buyer = caller.buyer(who.user_id)?;
    crate::buyers::Buyer::named(&buyer)
        .map_err(|why| ApiError::invalid(format!("user_id {why}")))?;
    let (place, created) = state.line.join(id, &buyer, Utc::now()).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(with_next_look(status, place))
}

/// The buyer's place: how many are ahead, the wait, and once let in, the pass that buys.
/// Look again after `next_look_ms` (the `Retry-After`), not sooner: it grows with the
/// distance from the head.
#[utoipa::path(get, path = "/api/products/{id}/line/me", operation_id = "myPlace", tag = "line",
    security(("buyer" = []), ("admin" = [])), params(("id" = i64, Path, description = "The product's id"), Who),
    responses(
        (status = 200, description = "The buyer's place", body = Place,
            headers(("retry-after" = u64, description = "When to look again, in seconds"))),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthenticated`, `invalid_token`", body = ErrorBody<'static>),
        (status = 403, description = "`not_your_account`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`, `not_in_line`", body = ErrorBody<'static>),
        (status = 409, description = "`no_line`", body = ErrorBody<'static>),
    ))]
async fn look(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<Who>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "product id")?;
    let Query(who) = query.map_err(|r| ApiError::invalid(r.body_text()))?;
    let buyer = caller.buyer(who.user_id)?;
    let place = state.line.look(id, &buyer, Utc::now()).await?;
    Ok(with_next_look(StatusCode::OK, place))
}

fn with_next_look(status: StatusCode, place: Place) -> Response {
    let seconds = place.next_look_ms.div_ceil(1000).max(1);
    let mut response = (status, Json(place)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The line at a glance: who joined, how many the draw placed, how far it has let in, and
/// the pace it measured.
#[utoipa::path(get, path = "/api/products/{id}/line", operation_id = "getLine", tag = "line",
    params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The line", body = Summary),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 409, description = "`no_line`", body = ErrorBody<'static>),
    ))]
async fn summary(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Summary>, ApiError> {
    let id = parse_id(&id, "product id")?;
    Ok(Json(state.line.summary(id, Utc::now()).await?))
}

/// Pauses a sale (admin): once answered, no order anywhere is decided as open, and its line
/// lets nobody in, until `resume`. A terms change: under the terms write lock, versioned.
#[utoipa::path(post, path = "/api/products/{id}/pause", operation_id = "pauseSale", tag = "products",
    security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The product, `paused`", body = Product),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 503, description = "`lock_timeout`, `lock_lost`, `unavailable`", body = ErrorBody<'static>),
    ))]
async fn pause(
    state: State<AppState>,
    headers: HeaderMap,
    id: Path<String>,
) -> Result<Json<Product>, ApiError> {
    set_paused(state, headers, id, true).await
}

/// Resumes a paused sale (admin).
#[utoipa::path(post, path = "/api/products/{id}/resume", operation_id = "resumeSale", tag = "products",
    security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The product, no longer `paused`", body = Product),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 503, description = "`lock_timeout`, `lock_lost`, `unavailable`", body = ErrorBody<'static>),
    ))]
async fn resume(
    state: State<AppState>,
    headers: HeaderMap,
    id: Path<String>,
) -> Result<Json<Product>, ApiError> {
    set_paused(state, headers, id, false).await
}

async fn set_paused(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    paused: bool,
) -> Result<Json<Product>, ApiError> {
    require_admin(&state.config, &headers)?;
    let id = parse_id(&id, "product id")?;
    let (db, zk, catalog) = (&state.db, &state.zk, &state.catalog);
    let change = TermsChange::pause(paused);
    let product =
        inventory::change_terms(db, zk, catalog, id, &change, state.config.lock_timeout()).await?;
    let flag = state.sold_out.is_raised(&id.to_string());
    Ok(Json(product.seen_at(Utc::now(), flag)))
}
