//! `/api/products`: setting up a sale (admin), reading products, and the audit.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Router;

use super::{parse_id, require_admin, AppState, Json};
use crate::error::AppError;
use crate::inventory::{self, Audit, NewProduct, Product};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/products", get(list).post(create))
        .route("/api/products/{id}", get(show))
        .route("/api/products/{id}/audit", get(audit))
}

async fn list(State(state): State<AppState>) -> Result<Json<Vec<Product>>, AppError> {
    Ok(Json(inventory::list(&state.db).await?))
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
    inventory::get(&state.db, id)
        .await?
        .ok_or(AppError::UnknownProduct(id))
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
