//! `GET /metrics` in Prometheus' text format, and the timing of every request for it.
//! Metrics are named in `telemetry::metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::AppState;
use crate::telemetry::metrics;

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(render))
}

/// Every metric of this instance. The pool's gauges are read now; the rest were counted as
/// things happened.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain", body = String)))]
pub(super) async fn render(State(state): State<AppState>) -> Response {
    metrics::db_pool(
        state.db.size(),
        state.db.num_idle(),
        state.config.db_max_connections,
    );
    let body = metrics::handle().render();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// A request's timing, labelled by its route's template (never the raw path, which a client
/// could make unbounded) and, when it ends, its answer's status.
pub struct Timing {
    started: Instant,
    method: &'static str,
    route: Option<MatchedPath>,
}

impl Timing {
    pub fn start(request: &Request) -> Timing {
        let method = match *request.method() {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::HEAD => "HEAD",
            _ => "other",
        };
        Timing {
            started: Instant::now(),
            method,
            route: request.extensions().get::<MatchedPath>().cloned(),
        }
    }

    pub fn finish(self, response: &Response) {
        let route = self.route.as_ref().map_or("static", MatchedPath::as_str);
        metrics::http_request(
            self.method,
            route,
            response.status().as_u16(),
            self.started.elapsed(),
        );
    }
}
