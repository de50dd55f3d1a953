//! Liveness and readiness, for load balancers and the set-up scripts.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use serde::Serialize;

use super::AppState;
use super::Json;
use crate::inventory::Standing;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// How long `/readyz` waits for PostgreSQL or the payment provider: under the probes' own
/// timeouts (Docker's 3 s here), so a slow answer reads as not ready rather than no answer.
const CHECK_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `ok` or `unavailable`.
#[derive(Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Status {
    Ok,
    Unavailable,
}

impl Status {
    fn of(ok: bool) -> Status {
        if ok {
            Status::Ok
        } else {
            Status::Unavailable
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Health {
    status: Status,
}

/// Whether this instance's ZooKeeper ensemble guards the stock.
#[derive(Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Ensemble {
    /// Its tokens can claim stock rows.
    Guarding,
    /// Another ensemble, alive, guards this database (is this instance pointed at the right
    /// ZooKeeper?): it sells nothing until that one has been silent for a few session
    /// timeouts, as a wiped ZooKeeper's old identity is.
    Outranked,
    /// Not known yet: PostgreSQL did not answer.
    Unknown,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Readiness {
    /// `ok` when every backing service answers and our ensemble guards the stock.
    status: Status,
    postgres: Status,
    zookeeper: Status,
    /// Whether the payment provider answers and takes this instance's API key: without it no
    /// order can be paid (the log says why).
    payment_provider: Status,
    ensemble: Ensemble,
    /// The ensemble that guards the stock instead of ours, when `ensemble` is `outranked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = Uuid)]
    guarding: Option<uuid::Uuid>,
    /// This instance's name, as written into its lock nodes.
    instance: String,
    /// How buyers are identified (`--buyer-auth`).
    #[schema(value_type = String)]
    buyer_auth: crate::buyers::Mode,
    /// Whether buyers' tokens can be verified: `unavailable` while the issuer's keys
    /// (`jwks`) have not been read.
    buyer_keys: Status,
    /// Said in `open` mode: anyone buys as anyone.
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<&'static str>,
}

/// The process is up and serving HTTP.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations",
    responses((status = 200, description = "The process is up", body = Health)))]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health { status: Status::Ok })
}

/// The backing services answer (PostgreSQL, ZooKeeper, the payment provider with our key)
/// and this instance's ZooKeeper ensemble guards the stock. 503 otherwise, naming what is
/// wrong. PostgreSQL's and the provider's answers are at most `--view-refresh-ms` old;
/// ZooKeeper's is the session's state.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations",
    responses(
        (status = 200, description = "PostgreSQL, ZooKeeper and the payment provider answer", body = Readiness),
        (status = 503, description = "One of them does not (the payment provider: or it refuses the API key), or this instance's ZooKeeper ensemble is `outranked` (pointed at another ZooKeeper than the fleet's): the body names it", body = Readiness),
    ))]
pub(super) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    // Probes are unauthenticated and may come by the thousand: PostgreSQL is asked once per
    // refresh interval for all of them, and ZooKeeper not at all (the session's own state:
    // its heartbeats already tell whether the ensemble answers).
    // Both asked at once: a probe waits for the slower, not for both in turn.
    let db = state.db.clone();
    let postgres = state.views.postgres.get((), move || async move {
        let ping = sqlx::query_scalar!(r#"SELECT 1 AS "one!""#).fetch_one(&db);
        let answered = tokio::time::timeout(CHECK_LIMIT, ping).await;
        Ok::<_, std::convert::Infallible>(answered.is_ok_and(|r| r.is_ok()))
    });
    let shop = state.shop.clone();
    let payment_provider = state.views.payment_provider.get((), move || async move {
        let checked = shop.payment().check(CHECK_LIMIT).await;
        if let Err(why) = &checked {
            tracing::warn!(%why, "not ready: the payment provider cannot be used");
        }
        Ok::<_, std::convert::Infallible>(checked)
    });
    let (postgres, payment_provider) = tokio::join!(postgres, payment_provider);
    let postgres = postgres.is_ok_and(|ok| *ok);
    let payment_provider = payment_provider.is_ok_and(|checked| checked.is_ok());
    let zookeeper = state.zk.connected();
    let (ensemble, guarding) = match *state.standing.borrow() {
        Standing::Guarding => (Ensemble::Guarding, None),
        Standing::Outranked { guarding } => (Ensemble::Outranked, Some(guarding)),
        Standing::Unknown => (Ensemble::Unknown, None),
    };
    let buyer_keys = state.buyers.ready();
    let ready = postgres
        && zookeeper
        && payment_provider
        && buyer_keys
        && matches!(ensemble, Ensemble::Guarding);
    // For alerts: the probes (compose's health check, a balancer's) ask every few seconds.
    crate::telemetry::metrics::ready(ready);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Readiness {
        status: Status::of(ready),
        postgres: Status::of(postgres),
        zookeeper: Status::of(zookeeper),
        payment_provider: Status::of(payment_provider),
        ensemble,
        guarding,
        instance: state.zk.instance().to_string(),
        buyer_auth: state.buyers.mode(),
        buyer_keys: Status::of(buyer_keys),
        warning: (state.buyers.mode() == crate::buyers::Mode::Open).then_some(
            "--buyer-auth open: the buyer is whatever the body says; anyone buys as anyone. For teaching only",
        ),
    };
    (status, Json(body))
}
