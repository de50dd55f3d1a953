//! The page's money demo and the provider's side of an order: `POST
//! /api/products/{id}/lost-answer` acts out a charge whose answer is lost (see
//! `orders::lost_answer`), and `GET /api/orders/{id}/charge` shows the provider's ledger line
//! for an order's key, beside what the shop knows.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde::Serialize;
use tracing::Instrument;

use super::error::{ApiError, ErrorBody};
use super::{parse_id, require_admin, require_demos, AppState, Json, Path};
use crate::error::Error;
use crate::orders::{intent_key, Order};
use crate::payment::Charge;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/products/{id}/lost-answer", post(lost_answer))
        .route("/api/orders/{id}/charge", get(charge))
}

/// Reserves one unit for a demo buyer and pays it while the provider loses every answer
/// under its key: the order stays `paying` with its intent pending until the sweep asks the
/// provider again and settles it (`GET /orders/{id}` shows each step). Answers at once; the
/// payment runs in the background.
#[utoipa::path(post, path = "/api/products/{id}/lost-answer", operation_id = "loseAnAnswer", tag = "teaching", security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 202, description = "Reserved; its payment is under way, and every answer to it will be lost", body = Order),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`, `demo_disabled` (no `--allow-unsafe-guards`)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 409, description = "`sold_out`, `too_many_unpaid`", body = ErrorBody<'static>),
        (status = 429, description = "`too_busy`", body = ErrorBody<'static>),
        (status = 503, description = "`unavailable` (among others: the provider takes no test controls), `lock_timeout`, `lock_lost`", body = ErrorBody<'static>),
    ))]
async fn lost_answer(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Order>), ApiError> {
    require_demos(&state.config, &headers)?;
    let product = parse_id(&id, "product id")?;
    let order = state.shop.reserve_for_lost_answer(product).await?;
    let (shop, id) = (state.shop.clone(), order.id);
    state.tasks.spawn(
        async move { shop.pay_losing_the_answer(id).await }.instrument(tracing::Span::current()),
    );
    Ok((StatusCode::ACCEPTED, Json(order)))
}

/// The provider's ledger line for an order's payment key.
#[derive(Serialize, utoipa::ToSchema)]
struct LedgerLine {
    /// The key the shop charges the order under.
    key: String,
    /// What the provider charged under it; `null`: nothing.
    charge: Option<Charge>,
}

/// What the payment provider's ledger says of an order's key — the provider's word, asked
/// now, beside the shop's (`GET /orders/{id}`). Admin: each call is a request to the provider.
#[utoipa::path(get, path = "/api/orders/{id}/charge", operation_id = "getOrderCharge", tag = "teaching", security(("admin" = [])),
    params(("id" = uuid::Uuid, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The provider's ledger line for the order's key", body = LedgerLine),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`", body = ErrorBody<'static>),
        (status = 404, description = "`order_not_found`", body = ErrorBody<'static>),
        (status = 503, description = "`unavailable` (the provider did not answer)", body = ErrorBody<'static>),
    ))]
async fn charge(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<LedgerLine>, ApiError> {
    require_admin(&state.config, &headers)?;
    let id = parse_id(&id, "order id")?;
    let charge = state
        .shop
        .charge_at_provider(id)
        .await?
        .ok_or(ApiError::Domain(Error::OrderNotFound(id)))?;
    let key = intent_key(id);
    Ok(Json(LedgerLine { key, charge }))
}
