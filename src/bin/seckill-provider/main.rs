//! `seckill-provider`: a payment provider of its own, run as a separate process with its
//! ledger in its own PostgreSQL database — a stand-in for a real gateway (Stripe, Alipay,
//! WeChat Pay), shaped like Stripe's idempotent API, so that a charge can be checked against
//! a ledger the shop does not control.
//!
//! - `POST /v1/charges` with an `Idempotency-Key` header and `{"amount_cents": N}`: the same
//!   key always answers the same charge (another amount under it: 409 `key_reused`).
//! - `GET /v1/charges/{key}`: the charge made under a key, or 404 `no_such_charge`.
//! - `GET /v1/charges`: the whole ledger, oldest first, for audits.
//! - `PUT /v1/settings` (only with `--test-controls`): its faults, changed while it runs.
//!
//! Every `/v1` route wants `Authorization: Bearer <--api-key>` (a gateway's secret key);
//! without it, 401 `unauthorized`. `/healthz` is open. `--tls-cert/--tls-key` serve https.
//! SIGTERM or Ctrl-C: in-flight requests finish, then it exits.
//!
//! Its faults are the ones a real integration meets: latency, declines, 5xx answers (nothing
//! charged), answers slower than the caller waits, and a charge made whose answer is lost
//! (the connection drops after the ledger has it).

mod ledger;
mod metrics;
mod settings;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use clap::Parser;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use settings::{Faults, Settings};

// No Debug: it holds the API key.
#[derive(Parser)]
#[command(
    name = "seckill-provider",
    about = "A payment provider with its own ledger, for seckill's tests and demo",
    after_help = "Every secret's variable may instead name a file: PROVIDER_DATABASE_URL_FILE, PROVIDER_DATABASE_PASSWORD_FILE, PROVIDER_API_KEY_FILE."
)]
struct Config {
    /// Address to listen on.
    #[arg(long, env = "PROVIDER_LISTEN", default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// The ledger's own database (a provider is another company's system).
    #[arg(long, env = "PROVIDER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The ledger database's password, in place of the URL's. Never printed.
    #[arg(long, env = "PROVIDER_DATABASE_PASSWORD", hide_env_values = true)]
    database_password: Option<String>,
    #[command(flatten)]
    faults: Faults,
    /// Accept `PUT /v1/settings` (tests, the chaos sale and the page's demo change faults
    /// while it runs).
    #[arg(long, env = "PROVIDER_TEST_CONTROLS")]
    test_controls: bool,
    /// The secret key every `/v1` request must carry as `Authorization: Bearer <key>`
    /// (seckill's `--payment-api-key`). Never printed.
    #[arg(long, env = "PROVIDER_API_KEY", hide_env_values = true,
          value_parser = seckill::config::Secret(seckill::config::api_key_rule))]
    api_key: String,
    /// Serve https with this PEM certificate chain (with --tls-key).
    #[arg(long, env = "PROVIDER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key (with --tls-cert).
    #[arg(long, env = "PROVIDER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

const SECRETS: &[seckill::config::SecretVar] = &[
    ("PROVIDER_DATABASE_URL", "--database-url"),
    ("PROVIDER_DATABASE_PASSWORD", "--database-password"),
    ("PROVIDER_API_KEY", "--api-key"),
];

#[derive(Clone)]
struct AppState {
    db: PgPool,
    /// Charges are written through it, many to a statement.
    ledger: ledger::Ledger,
    settings: Arc<Settings>,
    test_controls: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Each secret's variable may instead name a file (`PROVIDER_API_KEY_FILE`: Docker secrets).
    let args =
        seckill::config::with_secret_files(std::env::args_os(), SECRETS, |v| std::env::var_os(v))
            .map_err(anyhow::Error::msg)?;
    let config = Config::parse_from(args);
    let recorder = metrics::install()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut options: sqlx::postgres::PgConnectOptions = config
        .database_url
        .parse()
        .context("parsing --database-url")?;
    if let Some(password) = &config.database_password {
        options = options.password(password);
    }
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await
        .context("connecting to the ledger's database")?;
    sqlx::migrate!("./migrations/provider")
        .run(&db)
        .await
        .context("migrating the ledger")?;
    let state = AppState {
        ledger: ledger::ledger(db.clone()),
        db,
        settings: Arc::new(Settings::new(config.faults)),
        test_controls: config.test_controls,
    };
    let key = Arc::new(ApiKey::new(&config.api_key));
    let app = Router::new()
        .route("/v1/charges", post(charge).get(ledger_all))
        .route("/v1/charges/{key}", get(one))
        .route("/v1/settings", put(change_settings).get(show_settings))
        .route_layer(axum::middleware::from_fn_with_state(key, authorized))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/metrics", get(move || async move { recorder.render() }))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let stop = seckill::shutdown_signal();
    match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            let acceptor = tls::acceptor(cert, key)?;
            // On stdout, alone: scripts and tests read the address from this line.
            println!("seckill-provider listening on https://{addr}");
            serve(tls::TlsListener::new(listener, acceptor)?, app, stop).await
        }
        _ => {
            println!("seckill-provider listening on http://{addr}");
            serve(listener, app, stop).await
        }
    }
}

async fn serve<L>(
    listener: L,
    app: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    Ok(())
}

/// The key's digest: comparing digests takes the same time however much of a guess is right.
struct ApiKey([u8; 32]);

impl ApiKey {
    fn new(key: &str) -> ApiKey {
        ApiKey(Sha256::digest(key.as_bytes()).into())
    }

    fn admits(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| ApiKey::new(given).0 == self.0)
    }
}

/// Charges, the ledger and the test controls are a gateway's secret-key API.
async fn authorized(State(key): State<Arc<ApiKey>>, request: Request, next: Next) -> Response {
    if !key.admits(request.headers()) {
        let mut refused = error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send the provider's API key as Authorization: Bearer <key>",
        );
        refused.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            "Bearer".parse().expect("a header"),
        );
        return refused;
    }
    next.run(request).await
}

/// A problem-details answer (RFC 9457), as the shop's own errors are: its `error` code, and
/// whether the same request may be sent again (`retryable`, with `Retry-After` when it may).
/// A client stops at a final answer instead of retrying it until its deadline.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let retryable = status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "error": code,
        "message": message,
        "detail": message,
        "retryable": retryable,
    });
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/problem+json"),
    );
    if retryable {
        headers.insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

#[derive(Deserialize)]
struct NewCharge {
    amount_cents: i64,
}

/// Charges once per key, counted by outcome.
async fn charge(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Option<Json<NewCharge>>,
) -> Response {
    let charging = metrics::Charging::start();
    let (outcome, response) = charge_once(state, headers, body).await;
    charging.answered(outcome);
    response
}

/// The ledger has the charge before any answer leaves: a lost answer or a caller that gave
/// up changes nothing about what was charged.
async fn charge_once(
    state: AppState,
    headers: HeaderMap,
    body: Option<Json<NewCharge>>,
) -> (&'static str, Response) {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 255)
        .map(str::to_string)
    else {
        let refused = error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Idempotency-Key is required",
        );
        return ("invalid", refused);
    };
    let Some(Json(new)) = body.filter(|b| b.0.amount_cents >= 0) else {
        let refused = error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "amount_cents must be a non-negative integer",
        );
        return ("invalid", refused);
    };
    let plan = state.settings.plan(&key);
    if plan.fail {
        // A 5xx before anything is charged: the caller must retry under the same key.
        let failed = error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "provider_error",
            "try again",
        );
        return ("failed", failed);
    }
    let started_at = chrono::Utc::now();
    if !plan.latency.is_zero() {
        tokio::time::sleep(plan.latency).await;
    }
    let charged = ledger::charge(
        &state.ledger,
        &key,
        new.amount_cents,
        plan.decline,
        started_at,
    )
    .await;
    let charge = match charged {
        Ok(Some(charge)) => charge,
        Ok(None) => {
            let conflict = error(
                StatusCode::CONFLICT,
                "key_reused",
                "this Idempotency-Key was used for another amount",
            );
            return ("conflict", conflict);
        }
        Err(e) => {
            tracing::warn!(error = %e, "ledger unavailable");
            let failed = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "provider_unavailable",
                "try again",
            );
            return ("failed", failed);
        }
    };
    if !plan.slow.is_zero() {
        tokio::time::sleep(plan.slow).await;
    }
    if plan.lose {
        tracing::info!(key, "charged; dropping the answer");
        return ("lost", lost_answer());
    }
    let outcome = if charge.status == "succeeded" {
        "succeeded"
    } else {
        "declined"
    };
    (outcome, Json(charge).into_response())
}

/// An answer that never arrives whole: the headers go, then the connection drops before the
/// body, so the caller cannot tell what happened.
fn lost_answer() -> Response {
    let body = futures_util::stream::once(async {
        Err::<axum::body::Bytes, _>(std::io::Error::other("answer lost"))
    });
    (StatusCode::OK, Body::from_stream(body)).into_response()
}

async fn one(State(state): State<AppState>, Path(key): Path<String>) -> Response {
    match ledger::get(&state.db, &key).await {
        Ok(Some(charge)) => Json(charge).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "no_such_charge",
            "nothing was charged under this key",
        ),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_unavailable",
            "try again",
        ),
    }
}

async fn ledger_all(State(state): State<AppState>) -> Response {
    match ledger::all(&state.db).await {
        Ok(charges) => Json(json!({ "charges": charges })).into_response(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_unavailable",
            "try again",
        ),
    }
}

async fn change_settings(
    State(state): State<AppState>,
    Json(change): Json<settings::Change>,
) -> Response {
    if !state.test_controls {
        return error(
            StatusCode::FORBIDDEN,
            "disabled",
            "start the provider with --test-controls",
        );
    }
    state.settings.change(change);
    Json(state.settings.show()).into_response()
}

async fn show_settings(State(state): State<AppState>) -> Response {
    Json(state.settings.show()).into_response()
}
