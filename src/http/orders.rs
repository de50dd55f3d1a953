//! `/orders`: buying, paying a reservation, and looking an order up.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::caller::Caller;
use super::error::{json_response, retry_after, status_of, ApiError, ErrorBody};
use super::AppState;
use super::{parse_id, Arrived, Json, Path};
use crate::config::Config;
use crate::error::Error;
use crate::idempotency::{self, Kept};
use crate::orders::{Answer, NewOrder, Order, Payment, ProductOrder};

/// The header that makes a `POST /orders` safe to retry.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

pub fn router(config: &Config) -> Router<AppState> {
    let (create, of_product) = (post(create), post(create_of_product));
    let (create, of_product) = match super::limit::per_client(config) {
        Some(limiter) => {
            // One limiter for both ways of ordering: a client's orders count together.
            let limit = move |request: axum::extract::Request, next: axum::middleware::Next| {
                super::limit::check(limiter.clone(), request, next)
            };
            (
                create.route_layer(axum::middleware::from_fn(limit.clone())),
                of_product.route_layer(axum::middleware::from_fn(limit)),
            )
        }
        None => (create, of_product),
    };
    Router::new()
        .route("/orders", create.get(list))
        .route("/api/products/{id}/orders", of_product)
        .route("/orders/{id}", get(show))
        .route("/orders/{id}/pay", post(pay))
}

/// Buys: reserves the units under the product's guard and, unless `"pay": false`, pays.
///
/// An admitted order runs in its own task so that a client hanging up, or the request
/// timeout, cannot cut it off between two writes; the task is only told (through
/// `client_gone`) so it can leave the lock queue, and it records the idempotent response
/// itself. (An order without a key that the checks refuse wrote nothing: it is answered
/// here.)
#[utoipa::path(post, path = "/orders", operation_id = "placeOrder", tag = "orders",
    request_body = NewOrder, security(("buyer" = []), ("admin" = [])),
    params(("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,128}$",
        description = "Makes the request safe to retry: the same key and body answer the first answer again, byte for byte, with `Idempotent-Replayed: true`")),
    responses(
        (status = 201, description = "The order: `paid`, or `reserved` with `expires_at`", body = Order,
            headers(("idempotent-replayed" = String, description = "`true` on a replayed answer"))),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthenticated` (no bearer token), `invalid_token`", body = ErrorBody<'static>),
        (status = 402, description = "`payment_failed`: declined, the stock went back", body = ErrorBody<'static>),
        (status = 403, description = "`not_your_account`: `user_id` names another buyer than the token; `not_admitted`: the product sells through its line and the order carries no `pass`; `invalid_pass`: forged, expired, another buyer's or another product's", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 409, description = "`sold_out`, `purchase_limit`, `too_many_unpaid`, `idempotency_in_progress`, `not_open` (with `opens_at`; `Retry-After` to it), `closed`, `paused`, `pass_used`", body = ErrorBody<'static>),
        (status = 422, description = "`idempotency_mismatch`, `unprocessable` (`quantity` over the product's `max_per_order`)", body = ErrorBody<'static>),
        (status = 429, description = "`too_busy` (this instance's queue for the product is full, or could not serve the order within the lock timeout at its recent pace: `Retry-After` is that wait), `rate_limited`", body = ErrorBody<'static>),
        (status = 503, description = "`lock_timeout`, `lock_lost`, `payment_busy` (no payment lease before the deadline: not charged, still `reserved`), `outcome_pending` (the payment provider's answer, or a commit's, did not come back: settled in the background; the key replays the final outcome), `unavailable`, `overloaded` (this instance is at its connection cap)", body = ErrorBody<'static>),
    ))]
async fn create(
    State(state): State<AppState>,
    Arrived(arrived): Arrived,
    caller: Caller,
    key: IdempotencyKey,
    Json(new): Json<NewOrder>,
) -> Result<Response, ApiError> {
    place(state, arrived, caller, key, new).await
}

/// Buys the product the path names, as `POST /orders` does: the same body without
/// `product_id`, the same answers. A load balancer can route by the path alone, so each
/// product's orders reach the instance that holds (and keeps) its lock (see
/// `deploy/nginx.conf`); any instance still serves any product correctly.
#[utoipa::path(post, path = "/api/products/{id}/orders", operation_id = "placeOrderOfProduct", tag = "orders",
    request_body = ProductOrder, security(("buyer" = []), ("admin" = [])),
    params(("id" = i64, Path, description = "The product's id"),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,128}$",
        description = "As for `POST /orders`")),
    responses(
        (status = 201, description = "The order, as `POST /orders` answers it", body = Order,
            headers(("idempotent-replayed" = String, description = "`true` on a replayed answer"))),
        (status = 400, description = "`invalid_request` (a malformed id; a body with `product_id`: the path names the product)", body = ErrorBody<'static>),
        (status = 401, description = "As for `POST /orders`", body = ErrorBody<'static>),
        (status = 402, description = "As for `POST /orders`", body = ErrorBody<'static>),
        (status = 403, description = "As for `POST /orders`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 409, description = "As for `POST /orders`", body = ErrorBody<'static>),
        (status = 422, description = "As for `POST /orders`", body = ErrorBody<'static>),
        (status = 429, description = "As for `POST /orders`", body = ErrorBody<'static>),
        (status = 503, description = "As for `POST /orders`", body = ErrorBody<'static>),
    ))]
async fn create_of_product(
    State(state): State<AppState>,
    Arrived(arrived): Arrived,
    caller: Caller,
    key: IdempotencyKey,
    Path(id): Path<String>,
    Json(order): Json<ProductOrder>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "product id")?;
    place(state, arrived, caller, key, order.of(id)).await
}

/// Places `new` for `caller`: parsed, admitted and, if admitted, placed in a task of its own.
async fn place(
    state: AppState,
    arrived: std::time::Instant,
    caller: Caller,
    IdempotencyKey(key): IdempotencyKey,
    mut new: NewOrder,
) -> Result<Response, ApiError> {
    // Parsed once, here: a request that can never be valid is not worth remembering.
    let buyer = caller.buyer(new.user_id.take())?;
    let request = new.parse(buyer)?;
    let (_client_here, client_gone) = oneshot::channel::<()>();
    let product_id = request.product_id();
    let task = match key {
        None => {
            // Refused by the checks that write nothing: answered in the request's own task.
            // The crowd after a sell-out, or beyond what a queue can serve in time, is most
            // of a flash sale's traffic, and costs no task of its own.
            let admitted = match state.shop.admit(&request, false, arrived).await {
                Ok(admitted) => admitted,
                Err(refused) => {
                    let answer = Err(refused);
                    state.shop.answered(product_id, &answer);
                    return Ok(respond(encode(&answer)));
                }
            };
            state.tasks.clone().spawn(
                async move {
                    let answer = state.shop.place(admitted, None, client_gone).await;
                    state.shop.answered(product_id, &answer);
                    encode(&answer)
                }
                .instrument(tracing::Span::current()),
            )
        }
        Some(key) => state.tasks.clone().spawn(
            async move {
                let (shop, db) = (&state.shop, &state.db);
                idempotency::place(shop, db, key, request, arrived, client_gone, encode).await
            }
            .instrument(tracing::Span::current()),
        ),
    };
    let kept = task
        .await
        .map_err(|e| ApiError::Domain(Error::Internal(e.into())))?;
    Ok(respond(kept))
}

/// The `Idempotency-Key` header, copied out of the request. Not the whole `HeaderMap`: its
/// values share the connection's read buffer with hyper, and an order waiting in its lock
/// queue while holding them makes the connection read into a second buffer (8 KiB each: with
/// an order waiting on each of 1,334 connections, ~10 MiB of an instance's memory).
struct IdempotencyKey(Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let key = parts
            .headers
            .get(IDEMPOTENCY_KEY)
            .map(|raw| idempotency::parse_key(raw.as_bytes()))
            .transpose()?;
        Ok(IdempotencyKey(key))
    }
}

/// An order's answer as it goes on the wire (and is kept for replay): 201 with the order,
/// or the error's status and body.
fn encode(answer: &Answer) -> Kept {
    let (status, body) = match answer {
        Ok(order) => (
            StatusCode::CREATED,
            serde_json::to_string(order).expect("orders serialise"),
        ),
        Err(e) => (status_of(e), ApiError::body_of(e)),
    };
    Kept {
        status: status.as_u16(),
        body,
        replayed: false,
        retry_after: answer.as_ref().err().and_then(retry_after),
    }
}

fn respond(kept: Kept) -> Response {
    let status = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, kept.body, kept.retry_after);
    if kept.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// Pays a reservation made with `"pay": false`. Paying a paid order again answers it as is.
#[utoipa::path(post, path = "/orders/{id}/pay", operation_id = "payOrder", tag = "orders",
    security(("buyer" = []), ("admin" = [])), params(("id" = uuid::Uuid, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The order, `paid`", body = Order),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthenticated`, `invalid_token`", body = ErrorBody<'static>),
        (status = 402, description = "`payment_failed`", body = ErrorBody<'static>),
        (status = 404, description = "`order_not_found`: no such order, or another buyer's", body = ErrorBody<'static>),
        (status = 409, description = "`reservation_expired`, `payment_in_progress`, `order_not_payable`", body = ErrorBody<'static>),
        (status = 503, description = "`payment_busy`: no payment lease before the deadline; not charged, still `reserved` with its deadline (`order_id`). `outcome_pending`: the provider's answer (or the claim's) did not come back; the charge is settled in the background (`order_id`)", body = ErrorBody<'static>),
    ))]
async fn pay(
    State(state): State<AppState>,
    Arrived(arrived): Arrived,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Order>, ApiError> {
    let id = parse_id(&id, "order id")?;
    if !matches!(caller, Caller::Admin | Caller::Anyone) {
        // Another buyer's order is answered as no order at all: its id tells nothing.
        let owned = state.shop.order(id).await?;
        if !owned.is_some_and(|order| caller.owns(&order.user_id)) {
            return Err(ApiError::Domain(Error::OrderNotFound(id)));
        }
    }
    let task = state.tasks.clone().spawn(
        async move { state.shop.pay(id, arrived).await }.instrument(tracing::Span::current()),
    );
    let order = task
        .await
        .map_err(|e| ApiError::Domain(Error::Internal(e.into())))??;
    Ok(Json(order))
}

/// An order and its payment, as `GET /orders/{id}` answers them.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct OrderWithPayment {
    #[serde(flatten)]
    order: Order,
    /// Its payment intent and how it was settled; `null` for an order never sent to pay.
    payment: Option<Payment>,
}

/// One order, with its payment.
#[utoipa::path(get, path = "/orders/{id}", operation_id = "getOrder", tag = "orders",
    security(("buyer" = []), ("admin" = [])), params(("id" = uuid::Uuid, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The order, with its payment intent (`pending`, then `succeeded` or `failed`) and who settled it (`answer` or `sweep`)", body = OrderWithPayment),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthenticated`, `invalid_token`", body = ErrorBody<'static>),
        (status = 404, description = "`order_not_found`: no such order, or another buyer's", body = ErrorBody<'static>),
    ))]
async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<OrderWithPayment>, ApiError> {
    let id = parse_id(&id, "order id")?;
    let (order, payment) = state
        .shop
        .order_with_payment(id)
        .await?
        // Another buyer's order is answered as no order at all: its id tells nothing.
        .filter(|(order, _)| caller.owns(&order.user_id))
        .ok_or(ApiError::Domain(Error::OrderNotFound(id)))?;
    Ok(Json(OrderWithPayment { order, payment }))
}

/// `GET /orders`' query.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct Page {
    /// Whose orders: the token's buyer (omit it, or repeat it). Required in `open` mode and
    /// for the admin.
    user_id: Option<String>,
    /// How many, 1 to 100 (20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

/// A page of a buyer's orders.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct Orders {
    /// Newest first.
    orders: Vec<Order>,
    /// Pass it as `cursor` for the next page; `null` on the last.
    next_cursor: Option<String>,
}

/// The caller's own orders, newest first, a page at a time.
#[utoipa::path(get, path = "/orders", operation_id = "listOrders", tag = "orders",
    security(("buyer" = []), ("admin" = [])), params(Page),
    responses(
        (status = 200, description = "A page of the buyer's orders", body = Orders),
        (status = 400, description = "`invalid_request` (a malformed cursor or limit)", body = ErrorBody<'static>),
        (status = 401, description = "`unauthenticated`, `invalid_token`", body = ErrorBody<'static>),
        (status = 403, description = "`not_your_account`: `user_id` names another buyer than the token", body = ErrorBody<'static>),
    ))]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<axum::extract::Query<Page>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Orders>, ApiError> {
    let axum::extract::Query(page) = query.map_err(|r| ApiError::invalid(r.body_text()))?;
    let buyer = caller.buyer(page.user_id)?;
    let limit = page.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::invalid("limit must be 1 to 100"));
    }
    let after = page.cursor.as_deref().map(cursor::parse).transpose()?;
    let orders = state.shop.orders_of(&buyer, after, limit).await?;
    let next_cursor = (orders.len() as i64 == limit)
        .then(|| orders.last().map(|o| cursor::of(o.created_at, o.id)))
        .flatten();
    Ok(Json(Orders {
        orders,
        next_cursor,
    }))
}

/// A page's end, as `next_cursor` says it: the last order's time (µs) and id. Opaque to
/// clients; only ever read back here.
mod cursor {
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    use super::ApiError;

    pub fn of(at: DateTime<Utc>, id: Uuid) -> String {
        format!("{}.{}", at.timestamp_micros(), id.simple())
    }

    pub fn parse(raw: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
        let bad = || ApiError::invalid("cursor is not a next_cursor this API gave");
        let (micros, id) = raw.split_once('.').ok_or_else(bad)?;
        let at = micros
            .parse::<i64>()
            .ok()
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(bad)?;
        Ok((at, Uuid::parse_str(id).map_err(|_| bad())?))
    }
}
