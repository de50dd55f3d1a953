//! Liveness and readiness, for load balancers and the set-up scripts.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use super::Json;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The process is up and serving HTTP.
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Both backing services answer. 503 otherwise, naming the one that does not.
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let postgres = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.db),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    let zookeeper = state.zk.ping().await;
    let status = if postgres && zookeeper {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    let body = json!({
        "status": word(postgres && zookeeper),
        "postgres": word(postgres),
        "zookeeper": word(zookeeper),
        "instance": state.zk.instance(),
    });
    (status, Json(body))
}
