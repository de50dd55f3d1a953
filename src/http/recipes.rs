//! The source material's other recipes over HTTP: changing a product's terms (under its terms
//! write lock), and the live views and lab holders of the terms lock and the payment
//! semaphore the page's lock lab draws.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use axum::Router;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ErrorBody};
use super::AppState;
use super::{parse_id, require_admin, require_demos, Json, Path};
use crate::error::Error;
use crate::inventory::{self, Product, TermsChange};
use crate::lock::{Access, RwLockView, SemaphoreView};
use crate::payment::PAYMENT_SEMAPHORE;
use crate::teaching::{Holder, Target};
use crate::telemetry::metrics;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/products/{id}/terms", put(change_terms))
        .route(
            "/api/products/{id}/terms-lock",
            get(terms_lock).post(terms_lab),
        )
        .route(
            "/api/payments/semaphore",
            get(semaphore).post(semaphore_lab),
        )
}

/// Changes a product's price, limits or reservation time, under its terms write lock: the
/// answer comes once no lock cycle on any instance is still deciding under the old terms.
#[utoipa::path(put, path = "/api/products/{id}/terms", operation_id = "changeTerms", tag = "products", security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    request_body = TermsChange,
    responses(
        (status = 200, description = "The product under its new terms (`terms_version` one more)", body = Product),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 422, description = "`unprocessable`: a `closes_at` not after `opens_at`", body = ErrorBody<'static>),
        (status = 503, description = "`lock_timeout`, `lock_lost`, `unavailable`", body = ErrorBody<'static>),
    ))]
async fn change_terms(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(change): Json<TermsChange>,
) -> Result<Json<Product>, ApiError> {
    require_admin(&state.config, &headers)?;
    let id = parse_id(&id, "product id")?;
    let lock_timeout = state.config.lock_timeout();
    let (db, zk, catalog) = (&state.db, &state.zk, &state.catalog);
    let product = inventory::change_terms(db, zk, catalog, id, &change, lock_timeout).await?;
    let flag = state.sold_out.is_raised(&id.to_string());
    Ok(Json(product.seen_at(chrono::Utc::now(), flag)))
}

/// A lock view with this instance's lab holders of that lock.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct TermsLockState {
    #[serde(flatten)]
    view: RwLockView,
    lab: Vec<Holder>,
    /// The lab holder a `release` let go of, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    released: Option<String>,
}

/// The product's terms lock: the readers sharing it (or its writer), then the waiters in
/// queue order, each with the node it watches; a snapshot at most `--view-refresh-ms` old.
#[utoipa::path(get, path = "/api/products/{id}/terms-lock", operation_id = "getTermsLock", tag = "teaching", params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "Holders and waiters of the product's terms lock", body = TermsLockState),
        (status = 400, description = "`invalid_request` (a malformed id)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
    ))]
async fn terms_lock(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<TermsLockState>, ApiError> {
    let id = known_product(&state, &id).await?;
    let zk = state.zk.clone();
    let view = state
        .views
        .terms_lock
        .get(id, move || async move {
            metrics::view_refreshed("terms_lock");
            zk.terms_lock_view(id).await
        })
        .await
        .map_err(|e| ApiError::Domain(Error::Unavailable(anyhow::anyhow!(e))))?;
    Ok(Json(terms_lock_state(&state, id, RwLockView::clone(&view))))
}

/// The view read now: for the lab's admin actions, which show what they changed.
async fn terms_lock_now(state: &AppState, id: i64) -> Result<TermsLockState, ApiError> {
    let view = state
        .zk
        .terms_lock_view(id)
        .await
        .map_err(|e| ApiError::Domain(Error::Unavailable(e.into())))?;
    Ok(terms_lock_state(state, id, view))
}

fn terms_lock_state(state: &AppState, id: i64, view: RwLockView) -> TermsLockState {
    let lab = state
        .teaching
        .lab()
        .holders(Target::Terms(id, Access::Read));
    TermsLockState {
        view,
        lab,
        released: None,
    }
}

/// The product's id, if it exists: from this instance's copy of the terms, so a flood of
/// views costs PostgreSQL nothing once the product is known here.
async fn known_product(state: &AppState, raw_id: &str) -> Result<i64, ApiError> {
    let id = parse_id(raw_id, "product id")?;
    match state.catalog.terms(&state.db, id).await? {
        Some(_) => Ok(id),
        None => Err(ApiError::Domain(Error::UnknownProduct(id))),
    }
}

/// What the lock lab asks of a terms lock.
#[derive(Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum TermsAction {
    /// A lab reader takes the read side and keeps it (60 s at most).
    Read,
    /// A lab writer takes the write side and keeps it (60 s at most): the product's sale
    /// waits meanwhile, as it would for a terms change.
    Write,
    /// The oldest lab holder that holds lets go (or the oldest waiting, if none holds).
    Release,
    /// Every lab holder of this lock lets go.
    Clear,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TermsLab {
    action: TermsAction,
}

/// The lock lab's holders of the product's terms lock (admin, `--allow-unsafe-guards`).
#[utoipa::path(post, path = "/api/products/{id}/terms-lock", operation_id = "termsLockLab", tag = "teaching", security(("admin" = [])), params(("id" = i64, Path, description = "The product's id")),
    request_body = TermsLab,
    responses(
        (status = 202, description = "The lock and its lab holders after the action (a new holder may still be waiting)", body = TermsLockState),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`, `demo_disabled` (no `--allow-unsafe-guards`)", body = ErrorBody<'static>),
        (status = 404, description = "`unknown_product`", body = ErrorBody<'static>),
        (status = 429, description = "`too_busy`: the lab has its most holders", body = ErrorBody<'static>),
    ))]
async fn terms_lab(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(lab): Json<TermsLab>,
) -> Result<(StatusCode, Json<TermsLockState>), ApiError> {
    require_demos(&state.config, &headers)?;
    let id = known_product(&state, &id).await?;
    let target = |access| Target::Terms(id, access);
    match lab.action {
        TermsAction::Read => drop(state.teaching.lab_take(target(Access::Read))?),
        TermsAction::Write => drop(state.teaching.lab_take(target(Access::Write))?),
        TermsAction::Release => drop(state.teaching.lab().release(target(Access::Read))),
        TermsAction::Clear => drop(state.teaching.lab().clear(target(Access::Read))),
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(terms_lock_now(&state, id).await?),
    ))
}

/// The payment semaphore with this instance's lab holders of it.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct SemaphoreState {
    /// Whether this server bounds payments (`--payment-concurrency` above 0).
    enabled: bool,
    #[serde(flatten)]
    view: SemaphoreView,
    lab: Vec<Holder>,
    /// The lab charge a `release` ended, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    released: Option<String>,
}

/// The payment provider's semaphore: the leases held and the acquirers waiting, a snapshot
/// at most `--view-refresh-ms` old.
#[utoipa::path(get, path = "/api/payments/semaphore", operation_id = "getPaymentSemaphore", tag = "teaching",
    responses((status = 200, description = "Leases and waiters (`enabled` false without `--payment-concurrency`)", body = SemaphoreState)))]
async fn semaphore(State(state): State<AppState>) -> Result<Json<SemaphoreState>, ApiError> {
    let max = state.config.payment_concurrency;
    let zk = state.zk.clone();
    let view = state
        .views
        .semaphore
        .get((), move || async move {
            metrics::view_refreshed("semaphore");
            zk.semaphore_view(PAYMENT_SEMAPHORE, max).await
        })
        .await
        .map_err(|e| ApiError::Domain(Error::Unavailable(anyhow::anyhow!(e))))?;
    Ok(Json(semaphore_state(&state, SemaphoreView::clone(&view))))
}

/// The view read now, for the lab's admin actions.
async fn semaphore_now(state: &AppState) -> Result<SemaphoreState, ApiError> {
    let max = state.config.payment_concurrency;
    let view = state
        .zk
        .semaphore_view(PAYMENT_SEMAPHORE, max)
        .await
        .map_err(|e| ApiError::Domain(Error::Unavailable(e.into())))?;
    Ok(semaphore_state(state, view))
}

fn semaphore_state(state: &AppState, view: SemaphoreView) -> SemaphoreState {
    let max = state.config.payment_concurrency;
    SemaphoreState {
        enabled: max > 0,
        view,
        lab: state.teaching.lab().holders(Target::Lease),
        released: None,
    }
}

/// What the lock lab asks of the payment semaphore.
#[derive(Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum LeaseAction {
    /// A lab charge takes a lease and keeps it (60 s at most): a provider call that hangs.
    Acquire,
    /// The oldest lab charge that holds a lease ends (or the oldest waiting, if none holds).
    Release,
    /// Every lab charge ends.
    Clear,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SemaphoreLab {
    action: LeaseAction,
}

/// The lock lab's charges on the payment semaphore (admin, `--allow-unsafe-guards`, and
/// `--payment-concurrency`): real leases, which real payments then wait behind.
#[utoipa::path(post, path = "/api/payments/semaphore", operation_id = "semaphoreLab", tag = "teaching", security(("admin" = [])),
    request_body = SemaphoreLab,
    responses(
        (status = 202, description = "The semaphore and its lab charges after the action (a new one may still be waiting)", body = SemaphoreState),
        (status = 400, description = "`invalid_request`", body = ErrorBody<'static>),
        (status = 401, description = "`unauthorized`", body = ErrorBody<'static>),
        (status = 403, description = "`admin_disabled`, `demo_disabled` (no `--allow-unsafe-guards`)", body = ErrorBody<'static>),
        (status = 404, description = "`no_lock`: no `--payment-concurrency`, so no semaphore", body = ErrorBody<'static>),
        (status = 429, description = "`too_busy`: the lab has its most holders", body = ErrorBody<'static>),
    ))]
async fn semaphore_lab(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(lab): Json<SemaphoreLab>,
) -> Result<(StatusCode, Json<SemaphoreState>), ApiError> {
    require_demos(&state.config, &headers)?;
    if state.config.payment_concurrency == 0 {
        return Err(ApiError::Domain(Error::NoSemaphore));
    }
    let released = match lab.action {
        LeaseAction::Acquire => state.teaching.lab_take(Target::Lease).map(|_| None)?,
        LeaseAction::Release => state.teaching.lab().release(Target::Lease),
        LeaseAction::Clear => {
            state.teaching.lab().clear(Target::Lease);
            None
        }
    };
    let answer = SemaphoreState {
        released,
        ..semaphore_now(&state).await?
    };
    Ok((StatusCode::ACCEPTED, Json(answer)))
}
