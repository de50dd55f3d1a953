//! The HTTP edge: the one route table, and the pieces every route shares (JSON and path
//! extraction with our error shape, the body-size cap, admin auth, 404/405 fallbacks, and a
//! last net that gives any other error answer our JSON shape). Handlers parse, authorize,
//! call the domain and answer; the domain never sees this module.
//!
//! [`AppState`] is this layer's own: the domain's handles as the handlers need them, built
//! in `startup`. The domain takes the handles it uses, never this.

mod caller;
pub mod client;
pub mod error;
mod events;
mod health;
mod limit;
mod line;
mod metrics;
mod money;
pub mod openapi;
mod orders;
mod problems;
mod products;
mod recipes;
pub mod server;
mod session;
pub mod snapshot;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::error::Error;
use crate::events::Events;
use crate::flags::Flags;
use crate::inventory::Catalog;
use crate::lock::Zk;
use crate::orders::Shop;
use crate::teaching::Teaching;
use error::ApiError;

/// What the handlers use, behind one `Arc`. Axum clones the state for every request (the
/// router, each `State` extractor); a clone of a dozen handles would be a dozen atomic
/// increments, and as many decrements, on counters every core shares: before this `Arc`,
/// cloning and dropping the state took 10.5 % of an instance's CPU samples on `GET /healthz`
/// under wrk (perf).
#[derive(Clone)]
pub struct AppState(Arc<Handles>);

impl AppState {
    pub fn new(handles: Handles) -> AppState {
        AppState(Arc::new(handles))
    }
}

impl std::ops::Deref for AppState {
    type Target = Handles;

    fn deref(&self) -> &Handles {
        &self.0
    }
}

/// The handles in [`AppState`].
pub struct Handles {
    /// The order path: placing, paying, looking orders up.
    pub shop: Shop,
    /// Products, audits, orders by id.
    pub db: PgPool,
    /// The lock views and the terms lock.
    pub zk: Zk,
    /// Every product's terms, as this instance keeps them (a terms change forgets them).
    pub catalog: Catalog,
    /// Products sold out, by id (shown with each product).
    pub sold_out: Flags,
    /// Live updates for the teaching page.
    pub events: Events,
    /// The demos, step-through and lock lab.
    pub teaching: Teaching,
    /// Every task that carries orders: a handler's order task joins them.
    pub tasks: TaskTracker,
    /// Whether this instance's ZooKeeper ensemble guards the stock (readiness).
    pub standing: tokio::sync::watch::Receiver<crate::inventory::Standing>,
    /// Who buys: verifies buyers' tokens (and issues them in `demo` mode).
    pub buyers: crate::buyers::Buyers,
    /// The products' lines (waiting rooms).
    pub line: crate::line::Line,
    /// The public ZooKeeper views and readiness, read once per refresh for every asker.
    pub views: Arc<snapshot::Views>,
    pub config: Arc<Config>,
}

/// Largest request body any route accepts.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The route table. Each resource module owns its routes; this is where they meet.
pub fn router(state: AppState) -> Router {
    let request_timeout = std::time::Duration::from_millis(state.config.request_timeout_ms);
    let static_files = ServeDir::new(&state.config.static_dir).not_found_service(
        axum::handler::HandlerWithoutStateExt::into_service(not_found),
    );
    Router::new()
        .merge(orders::router(&state.config))
        .merge(products::router())
        .merge(line::router())
        .merge(recipes::router())
        .merge(money::router())
        .merge(health::router())
        .merge(events::router(&state.config))
        .merge(metrics::router())
        .merge(openapi::router())
        .merge(problems::router())
        .merge(session::router())
        .fallback_service(
            tower::ServiceBuilder::new()
                .map_request(no_nul)
                .service(static_files),
        )
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        // One stack, one layer: each `Router::layer` boxes its service's future for every
        // request, and each `from_fn` its inner service and future too. Nine layers were ~9 KB
        // and a dozen allocations held by every request in flight (heaptrack, 1,334
        // connections on one instance).
        .layer(
            tower::ServiceBuilder::new()
                .map_request(drop_odd_request_id)
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(TraceLayer::new_for_http().make_span_with(request_span))
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
                .layer(middleware::from_fn(move |request: Request, next: Next| {
                    edge(request, next, request_timeout)
                })),
        )
        .with_state(state)
}

/// The request's span: every log line the request causes, in its order task and the lock
/// cycle that serves it, carries its `request_id`.
fn request_span(request: &Request) -> tracing::Span {
    let id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        request_id = id,
        method = %request.method(),
        path = request.uri().path(),
    )
}

const REQUEST_ID: &str = "x-request-id";

/// A client's `x-request-id` is kept if it is 1–128 visible ASCII characters (what log
/// pipelines and proxies pass along); anything else is replaced by a fresh one rather than
/// written into every log line.
fn drop_odd_request_id(mut request: Request) -> Request {
    let odd = request.headers().get(REQUEST_ID).is_some_and(|v| {
        v.is_empty() || v.len() > 128 || !v.as_bytes().iter().all(u8::is_ascii_graphic)
    });
    if odd {
        request.headers_mut().remove(REQUEST_ID);
    }
    request
}

async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

/// A NUL in a static path cannot name a file, but the file system refuses it with an error
/// that `ServeDir` answers 500: send such a request to a path that is simply not there.
fn no_nul(mut request: Request) -> Request {
    if request.uri().path().contains("%00") {
        *request.uri_mut() = axum::http::Uri::from_static("/-");
    }
    request
}

/// What every request goes through in its span: timed for `/metrics`, refused early if the
/// length it declares is over the cap, bounded in time, and any error answer given our JSON
/// shape.
async fn edge(mut request: Request, next: Next, limit: std::time::Duration) -> Response {
    request
        .extensions_mut()
        .insert(Arrived(std::time::Instant::now()));
    let timing = metrics::Timing::start(&request);
    let response = match declared_too_large(&request) {
        Some(refused) => refused,
        None => time_limit(async { json_errors(next.run(request).await).await }, limit).await,
    };
    timing.finish(&response);
    response
}

/// 413 from the declared length on every route, before any handler runs; bodies without a
/// length are capped by `DefaultBodyLimit` when a handler reads them.
fn declared_too_large(request: &Request) -> Option<Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    declared
        .is_some_and(|len| len > MAX_BODY_BYTES as u64)
        .then(|| ApiError::PayloadTooLarge(MAX_BODY_BYTES).into_response())
}

/// Bounds every request. An order outlives its request (it runs in its own task), so a
/// timed-out buyer retries with the same Idempotency-Key to learn the outcome.
///
/// An order answers a margin before this bound, with its id. After a pause of the whole
/// process (SIGSTOP, a stalled host) both expire at once; the order's answer is then due
/// within moments, and gets [`BOUND_GRACE`] to arrive before the bare 503, which names no
/// order (a buyer told that about an order that was paid cannot find it).
async fn time_limit(
    answer: impl std::future::Future<Output = Response>,
    limit: std::time::Duration,
) -> Response {
    let mut answer = std::pin::pin!(answer);
    if let Ok(response) = tokio::time::timeout(limit, &mut answer).await {
        return response;
    }
    match tokio::time::timeout(BOUND_GRACE, answer).await {
        Ok(response) => response,
        Err(_) => ApiError::Domain(Error::Unavailable(anyhow::anyhow!(
            "request took over {limit:?}"
        )))
        .into_response(),
    }
}

/// How long past its bound a request may still get the answer that was due before it.
const BOUND_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The last net: an error answer that is not JSON yet (from the static files, or a rejection
/// no extractor of ours saw) gets our shape, with the same status.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            // Ours (problem details), or a JSON document of its own (`/readyz`'s 503).
            let v = v.as_bytes();
            v.starts_with(error::PROBLEM_JSON.as_bytes()) || v.starts_with(b"application/json")
        });
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    // Such bodies are short texts (or empty); anything longer is not worth quoting.
    let text = match axum::body::to_bytes(response.into_body(), 1024).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let error = match status {
        StatusCode::NOT_FOUND => ApiError::RouteNotFound,
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(MAX_BODY_BYTES),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType,
        s if s.is_client_error() => ApiError::Domain(Error::InvalidRequest(message)),
        _ => ApiError::Domain(Error::Internal(anyhow::anyhow!("{status}: {message}"))),
    };
    // Keep the status even where our variant would pick a neighbour (e.g. 408, 422).
    error::with_status(error, status)
}

/// When the request arrived, as the edge's time bound counts it: an order's deadline runs
/// from here, so the order answers within its margin before that bound, however long its
/// admission took (a busy pool, a slow upload), never cut off by a bare 503.
#[derive(Clone, Copy)]
pub struct Arrived(pub std::time::Instant);

impl<S: Send + Sync> FromRequestParts<S> for Arrived {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Arrived>()
            .copied()
            .unwrap_or(Arrived(std::time::Instant::now())))
    }
}

/// `axum::extract::Path`, but its rejections (a segment that is not valid UTF-8, say) answer
/// 400 in our error shape.
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    axum::extract::Path<T>: FromRequestParts<S, Rejection = PathRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(r) => Err(ApiError::Domain(Error::InvalidRequest(r.body_text()))),
        }
    }
}

/// `axum::Json`, but its rejections answer in our error shape and codes, and a body must be a
/// JSON object: serde would also build a struct from an array of its fields in order
/// (`[null, null]`), which no client means and the API description does not allow.
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    axum::Json<Object<T>>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<Object<T>>::from_request(req, state).await {
            Ok(axum::Json(Object(value))) => Ok(Json(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::UnsupportedMediaType),
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::PayloadTooLarge(MAX_BODY_BYTES))
            }
            Err(r) => Err(ApiError::Domain(Error::InvalidRequest(r.body_text()))),
        }
    }
}

/// `T`, deserialised from a JSON object only.
pub struct Object<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);

        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = T;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(Fields(std::marker::PhantomData))
            .map(Object)
    }
}

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// The teaching hooks that act on real locks and payments (demos, step-through, lock lab,
/// the money demo): the admin, on a server started with `--allow-unsafe-guards` only.
pub fn require_demos(config: &Config, headers: &HeaderMap) -> Result<(), ApiError> {
    require_admin(config, headers)?;
    if !config.allow_unsafe_guards {
        return Err(ApiError::Domain(crate::error::Error::DemoDisabled));
    }
    Ok(())
}

/// Checks `Authorization: Bearer <admin token>` (compared in constant time).
pub fn require_admin(config: &Config, headers: &HeaderMap) -> Result<(), ApiError> {
    if config.admin_token.is_none() {
        return Err(ApiError::AdminDisabled);
    }
    // The same reading of `Authorization` as a buyer's (one rule for the scheme's name).
    match caller::bearer(headers) {
        Ok(Some(given)) if caller::is_admin(config, given) => Ok(()),
        _ => Err(ApiError::Unauthorized),
    }
}

/// Path ids arrive as strings so a malformed one answers our 400, not axum's plain text.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &str) -> Result<T, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::invalid(format!("{raw:?} is not a valid {what}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn constant_time_eq_compares_whole_tokens() {
        use caller::constant_time_eq;
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_due_as_the_bound_expires_is_sent_not_a_bare_503() {
        // An order's own answer is due a margin before the edge's bound. A pause of the whole
        // process (SIGSTOP, a stalled host) can let both expire while nothing runs: on waking,
        // the named answer (402 here, an order's `outcome_pending` in the chaos sale that found
        // this) must win over the bound's 503, which names no order.
        let answer = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(40)).await;
            StatusCode::PAYMENT_REQUIRED.into_response()
        });
        let mut bounded = Box::pin(time_limit(
            async move { answer.await.unwrap() },
            Duration::from_millis(60),
        ));
        assert!(futures::poll!(&mut bounded).is_pending());
        // The answer's task starts its wait, then the pause: both deadlines pass.
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(bounded.await.status(), StatusCode::PAYMENT_REQUIRED);
    }
}
