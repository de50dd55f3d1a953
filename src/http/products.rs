//! `/api/products`: setting up and restocking a sale (admin), reading products, the audit.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ErrorBody};
use super::AppState;
use super::{parse_id, require_admin, require_demos, Json, Path};
use crate::error::Error;
use crate::inventory::{self, Audit, NewProduct, Product};
use crate::lock::{QueueView, Recipe};
use crate::teaching::Demo;
use crate::telemetry::metrics;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/products", get(list).post(create))
        .route("/api/products/{id}", get(show))
        .route("/api/products/{id}/audit", get(audit))
        .route("/api/products/{id}/restock", post(restock))
        .route("/api/products/{id}/lock", get(lock))
        .route("/api/products/{id}/demo", post(demo))
        .route("/api/products/{id}/step", post(step))
}

/// The product as this instance sees it now: its sold-out flag, its state, its clock.
fn with_flag(state: &AppState, product: Product) -> Product {
    let flag = state.sold_out.is_raised(&product.id.to_string());
    product.seen_at(chrono::Utc::now(), flag)
}

/// Every product, with its live stock.
#[utoipa::path(get, path = "/api/products", operation_id = "listProducts", tag = "products",
    responses((status = 200, description = "Every product", body = Vec<Product>)))]
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Product>>, ApiError> {
    let products = inventory::list(&state.db).await?;
    Ok(Json(
        products.into_iter().map(|p| with_flag(&state, p)).collect(),
    ))
}

/// Puts a product on sale (admin).
#[utoipa::path(post, path = "/api/products", operation_id = "createProduct", tag = "products", security(("admin" = [])),
    request_body = NewProduct,
    responses(
        (status = 201, description = "The product", body = Product),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`, `demo_disabled` (guard `none` without `--allow-unsafe-guards`)", body = ErrorBody<'static>),
        (status = 422, description = "`unprocessable`: guard `none` with `batch_max` above 1; a `closes_at` not after `opens_at`", body = ErrorBody<'static>),
    ))]
async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(new): Json<NewProduct>,
) -> Result<(StatusCode, Json<Product>), ApiError> {
    require_admin(&state.config, &headers)?;
    new.validate(state.config.allow_unsafe_guards)?;
    let product = inventory::create(&state.db, &new, state.config.batch_max).await?;
    let product = with_flag(&state, product);
    tracing::info!(
        product = product.id,
        guard = product.guard.as_str(),
        stock = product.stock,
        "product created"
    );
    Ok((StatusCode::CREATED, Json(product)))
}

async fn find(state: &AppState, raw_id: &str) -> Result<Product, ApiError> {
    let id = parse_id(raw_id, "product id")?;
    let product = inventory::get(&state.db, id)
        .await?
        .ok_or(ApiError::Domain(Error::UnknownProduct(id)))?;
    Ok(with_flag(state, product))
}

/// One product.
#[utoipa::path(get, path = "/api/products/{id}", operation_id = "getProduct", tag = "products", params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The product", body = Product),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
    ))]
async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Product>, ApiError> {
    Ok(Json(find(&state, &id).await?))
}

/// Whether the product's books balance: `oversold = max(0, sold − stocked_total)`,
/// `consistent = (stock + sold == stocked_total and kept_sold == sold)`. `sold` is summed
/// from the orders here (the product views read `kept_sold`).
#[utoipa::path(get, path = "/api/products/{id}/audit", operation_id = "auditProduct", tag = "products", params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The audit", body = Audit),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
    ))]
async fn audit(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Audit>, ApiError> {
    let id = parse_id(&id, "product id")?;
    inventory::audit(&state.db, id)
        .await?
        .map(Json)
        .ok_or(ApiError::Domain(Error::UnknownProduct(id)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Restock {
    /// Units to put on sale; the product's lifetime stock stays within its limit (422).
    #[serde(deserialize_with = "crate::integer::whole")]
    quantity: i64,
}

/// Puts more units on sale (see [`inventory::restock`]).
#[utoipa::path(post, path = "/api/products/{id}/restock", operation_id = "restockProduct", tag = "products", security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    request_body = Restock,
    responses(
        (status = 200, description = "The product: stock and `stocked_total` raised, the sold-out flag cleared everywhere", body = Product),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 422, description = "`unprocessable`: past the product's lifetime stock limit", body = ErrorBody<'static>),
        (status = 429, description = "`too_busy`", body = ErrorBody<'static>),
        (status = 503, description = "`lock_timeout`, `lock_lost`, `unavailable`", body = ErrorBody<'static>),
    ))]
async fn restock(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(restock): Json<Restock>,
) -> Result<Json<Product>, ApiError> {
    require_admin(&state.config, &headers)?;
    let product = find(&state, &id).await?;
    let config = &state.config;
    let served = inventory::Product {
        guard: product.guard.sold_under(config.allow_unsafe_guards),
        ..product
    };
    inventory::restock(
        &state.db,
        &state.zk,
        &state.sold_out,
        &served,
        restock.quantity,
        config.lock_timeout(),
        config.stock_think(),
    )
    .await?;
    Ok(Json(find(&state, &id).await?))
}

/// The product's ZooKeeper lock: holder, waiters in order (each with the node it watches
/// and its owner), and what acquisitions cost this instance. ZooKeeper's part is a snapshot
/// at most `--view-refresh-ms` old.
#[utoipa::path(get, path = "/api/products/{id}/lock", operation_id = "getProductLock", tag = "teaching", params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "Holder and waiters in queue order, each with the node it watches", body = QueueView),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`, `no_lock` (its guard takes no lock)", body = ErrorBody<'static>),
    ))]
async fn lock(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<QueueView>, ApiError> {
    let id = parse_id(&id, "product id")?;
    // This instance's copy of the terms, not the product row: a flood of views costs
    // PostgreSQL nothing once the product is known here (a guard never changes).
    let terms = state
        .catalog
        .terms(&state.db, id)
        .await?
        .ok_or(ApiError::Domain(Error::UnknownProduct(id)))?;
    let Some(recipe) = terms.guard.recipe() else {
        return Err(ApiError::Domain(Error::NoLock(id, terms.guard.as_str())));
    };
    let zk = state.zk.clone();
    let view = state
        .views
        .lock
        .get(id, move || async move {
            metrics::view_refreshed("lock");
            zk.queue(id, recipe).await
        })
        .await
        .map_err(|e| ApiError::Domain(Error::Unavailable(anyhow::anyhow!(e))))?;
    // ZooKeeper's part from the snapshot; this instance's own counts are free to read now.
    let mut view = QueueView::clone(&view);
    view.waiting_here = state.zk.waiting_here(id);
    view.stats = state.zk.stats(id);
    Ok(Json(view))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ArmDemo {
    mode: Demo,
}

/// The product a teaching hook (demo, step-through) acts on, and its lock's recipe: admin
/// only, on a server that allows unsafe demos, and a product whose guard takes a lock.
async fn demo_target(
    state: &AppState,
    headers: &HeaderMap,
    raw_id: &str,
) -> Result<(Product, Recipe), ApiError> {
    require_demos(&state.config, headers)?;
    let product = find(state, raw_id).await?;
    match product.guard.recipe() {
        Some(recipe) => Ok((product, recipe)),
        None => Err(ApiError::Domain(Error::NoLock(
            product.id,
            product.guard.as_str(),
        ))),
    }
}

/// Arms a one-shot demo for the product's next lock holder, on whichever instance it runs.
#[utoipa::path(post, path = "/api/products/{id}/demo", operation_id = "armDemo", tag = "teaching", security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    request_body = ArmDemo,
    responses(
        (status = 202, description = "Armed: the next holder of the product's lock acts it out", body = Object),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`, `demo_disabled` (no `--allow-unsafe-guards`)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`, `no_lock` (not a `zk` or `zk-herd` product)", body = ErrorBody<'static>),
    ))]
async fn demo(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(arm): Json<ArmDemo>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let (product, _) = demo_target(&state, &headers, &id).await?;
    state.teaching.arm(product.id, arm.mode).await;
    let body = serde_json::json!({ "product_id": product.id, "armed": arm.mode });
    Ok((StatusCode::ACCEPTED, Json(body)))
}

/// What the page asks of a step-through sale.
#[derive(Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum StepAction {
    /// Hold every lock of the product after its write, until `next` (for 120 s at most).
    Start,
    /// Let the current holder go.
    Next,
    /// End the mode and let the current holder go.
    Stop,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StepRequest {
    action: StepAction,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct StepState {
    product_id: i64,
    /// Whether holders now wait for `next`.
    stepping: bool,
    /// When step mode ends on its own (unix ms), while it is on.
    until: Option<u64>,
    /// The fencing token of the holder this request let go, if one held the lock.
    released: Option<i64>,
}

/// The step-through sale (see `teaching::step`): every instance's holders of the product's
/// lock keep it after their write until the page says next.
#[utoipa::path(post, path = "/api/products/{id}/step", operation_id = "stepSale", tag = "teaching",
    security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    request_body = StepRequest,
    responses(
        (status = 202, description = "The step-through's state after the action", body = StepState),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`, `demo_disabled` (no `--allow-unsafe-guards`)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`, `no_lock` (not a `zk` or `zk-herd` product)", body = ErrorBody<'static>),
    ))]
async fn step(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(request): Json<StepRequest>,
) -> Result<(StatusCode, Json<StepState>), ApiError> {
    let (product, recipe) = demo_target(&state, &headers, &id).await?;
    let released = match request.action {
        StepAction::Start => {
            state.teaching.step_start(product.id).await;
            None
        }
        StepAction::Next => state.teaching.step_next(product.id, recipe).await?,
        StepAction::Stop => state.teaching.step_stop(product.id, recipe).await?,
    };
    let until = state.teaching.step_until(product.id);
    let body = StepState {
        product_id: product.id,
        stepping: until.is_some(),
        until,
        released,
    };
    Ok((StatusCode::ACCEPTED, Json(body)))
}
