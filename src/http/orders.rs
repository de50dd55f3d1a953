//! `/orders`: buying, and looking an order up.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::oneshot;

use super::{parse_id, AppState, Json};
use crate::error::AppError;
use crate::orders::{self, NewOrder, Order};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orders", post(create))
        .route("/orders/{id}", get(show))
}

/// The order runs in its own task so that a client hanging up cannot cut it off between
/// two writes; the task is only told (through `client_gone`) so it can leave the lock queue.
async fn create(
    State(state): State<AppState>,
    Json(new): Json<NewOrder>,
) -> Result<(StatusCode, Json<Order>), AppError> {
    let (_client_here, client_gone) = oneshot::channel::<()>();
    let task = tokio::spawn(async move { orders::place(&state, new, client_gone).await });
    let order = task.await.map_err(|e| AppError::Internal(e.into()))??;
    Ok((StatusCode::CREATED, Json(order)))
}

async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Order>, AppError> {
    let id = parse_id(&id, "order id")?;
    let order = orders::get(&state.db, id)
        .await?
        .ok_or(AppError::OrderNotFound(id))?;
    Ok(Json(order))
}
