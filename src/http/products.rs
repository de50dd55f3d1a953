//! `/api/products`: setting up and restocking a sale (admin), reading products, the audit.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::{parse_id, require_admin, AppState, Json};
use crate::error::AppError;
use crate::inventory::{self, Audit, Change, NewProduct, Outcome, Product};
use crate::lock::LockError;
use crate::orders;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/products", get(list).post(create))
        .route("/api/products/{id}", get(show))
        .route("/api/products/{id}/audit", get(audit))
        .route("/api/products/{id}/restock", post(restock))
}

fn with_flag(state: &AppState, mut product: Product) -> Product {
    product.sold_out = state.sold_out.is_raised(&product.id.to_string());
    product
}

async fn list(State(state): State<AppState>) -> Result<Json<Vec<Product>>, AppError> {
    let products = inventory::list(&state.db).await?;
    Ok(Json(
        products.into_iter().map(|p| with_flag(&state, p)).collect(),
    ))
}

async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(new): Json<NewProduct>,
) -> Result<(StatusCode, Json<Product>), AppError> {
    require_admin(&state.config, &headers)?;
    new.validate(state.config.allow_unsafe_guards)
        .map_err(AppError::InvalidRequest)?;
    let product = inventory::create(&state.db, &new).await?;
    tracing::info!(
        product = product.id,
        guard = product.guard.as_str(),
        stock = product.stock,
        "product created"
    );
    Ok((StatusCode::CREATED, Json(product)))
}

async fn find(state: &AppState, raw_id: &str) -> Result<Product, AppError> {
    let id = parse_id(raw_id, "product id")?;
    let product = inventory::get(&state.db, id)
        .await?
        .ok_or(AppError::UnknownProduct(id))?;
    Ok(with_flag(state, product))
}

async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Product>, AppError> {
    Ok(Json(find(&state, &id).await?))
}

async fn audit(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Audit>, AppError> {
    Ok(Json(Audit::from(&find(&state, &id).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Restock {
    quantity: i64,
}

/// Puts more units on sale, through the product's guard like every stock change, and clears
/// the sold-out flag on every instance.
async fn restock(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(restock): Json<Restock>,
) -> Result<Json<Product>, AppError> {
    require_admin(&state.config, &headers)?;
    if !(1..=inventory::MAX_STOCK).contains(&restock.quantity) {
        return Err(AppError::invalid(format!(
            "quantity must be between 1 and {}",
            inventory::MAX_STOCK
        )));
    }
    let product = find(&state, &id).await?;
    let quantity = restock.quantity as i32;
    let (lock, protection) = orders::enter(&state, &product).await.map_err(|e| match e {
        LockError::TooBusy => AppError::TooBusy,
        e => AppError::Unavailable(e.into()),
    })?;
    let outcome = inventory::change_stock(
        &state.db,
        product.id,
        Change::Return(quantity),
        protection,
        state.config.stock_think(),
    )
    .await?;
    match outcome {
        Outcome::Applied(mut tx) => {
            inventory::add_stocked_total(&mut tx, product.id, quantity).await?;
            tx.commit().await?;
        }
        Outcome::Insufficient { .. } => {
            return Err(AppError::invalid(
                "restocking that much would overflow the stock",
            ))
        }
        Outcome::Fenced => {
            return Err(AppError::Unavailable(anyhow::anyhow!(
                "lock lost while restocking"
            )))
        }
    }
    drop(lock);
    state.sold_out.lower(&product.id.to_string()).await;
    tracing::info!(product = product.id, quantity, "restocked");
    Ok(Json(find(&state, &id).await?))
}
