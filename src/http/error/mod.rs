//! Every error answer, and the error policy of the API:
//!
//! - Client errors answer their status with a stable `error` code and a human `message`.
//! - Server-side trouble (database, ZooKeeper) is logged with its cause chain and answered
//!   503 `unavailable` or 500 `internal` with a fixed message: internals never leak.
//! - Every 503 and 429 carries `Retry-After`, so well-behaved clients back off.
//!
//! The domain's [`Error`] knows nothing of HTTP: its status is decided here, beside the
//! errors only the edge can have (auth, routing, body limits, connection caps).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use crate::error::Error;
use crate::lock::LockError;

mod types;
pub use types::{Problem, PROBLEMS};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The domain's answer: its status is [`status_of`].
    #[error(transparent)]
    Domain(#[from] Error),
    /// 401: the admin bearer token is missing or wrong.
    #[error("a valid admin bearer token is required")]
    Unauthorized,
    /// 403: the server runs without an admin token.
    #[error("admin endpoints are disabled: start the server with --admin-token")]
    AdminDisabled,
    /// 404: no such route.
    #[error("no such route")]
    RouteNotFound,
    /// 405
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// 429: this client sent more orders than `--orders-per-client-per-s` allows.
    #[error("too many orders from this client; slow down")]
    RateLimited,
    /// 503: this instance is at its limit of connections or event streams.
    #[error("this instance is at its limit of {0}; retry shortly")]
    Overloaded(&'static str),
    /// 413
    #[error("request body over {0} bytes")]
    PayloadTooLarge(usize),
    /// 415
    #[error("expected Content-Type: application/json")]
    UnsupportedMediaType,
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        ApiError::Domain(err.into())
    }
}

impl From<LockError> for ApiError {
    fn from(err: LockError) -> Self {
        ApiError::Domain(err.into())
    }
}

/// Every error answer's body: an RFC 9457 problem details object
/// (`application/problem+json`) that keeps the API's first shape, `error`, `message` and
/// `order_id`, as extension members, so clients written against it keep working.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody<'a> {
    /// `/problems/{code}`, relative to the API's address: `GET` it for the problem type.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    kind: String,
    /// The problem type's title, the same for every answer with this code.
    #[schema(value_type = String)]
    title: &'a str,
    /// The answer's HTTP status.
    status: u16,
    /// This occurrence, for people; may change.
    detail: &'a str,
    /// A stable code from [`PROBLEMS`]: match on this, not on the message.
    #[schema(value_type = String)]
    error: &'a str,
    /// The same as `detail` (the API's first shape).
    message: &'a str,
    /// The order the error happened to, when its row exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    order_id: Option<Uuid>,
}

/// A domain error's status.
pub fn status_of(error: &Error) -> StatusCode {
    use Error::*;
    match error {
        InvalidRequest(_) => StatusCode::BAD_REQUEST,
        PaymentFailed { .. } => StatusCode::PAYMENT_REQUIRED,
        DemoDisabled => StatusCode::FORBIDDEN,
        UnknownProduct(_) | OrderNotFound(_) | NoLock(..) | NoSemaphore => StatusCode::NOT_FOUND,
        SoldOut { .. }
        | PurchaseLimit { .. }
        | TooManyUnpaid
        | ReservationExpired { .. }
        | PaymentInProgress { .. }
        | NotPayable { .. }
        | IdempotencyInProgress => StatusCode::CONFLICT,
        IdempotencyMismatch | Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
        TooBusy | QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
        LockTimeout { .. }
        | LockLost { .. }
        | PaymentBusy { .. }
        | OutcomePending { .. }
        | Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::Domain(Error::invalid(message))
    }

    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            Domain(error) => status_of(error),
            Unauthorized => StatusCode::UNAUTHORIZED,
            AdminDisabled => StatusCode::FORBIDDEN,
            RouteNotFound => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }

    /// The stable, documented code clients match on.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            Domain(error) => error.code(),
            Unauthorized => "unauthorized",
            AdminDisabled => "admin_disabled",
            RouteNotFound => "not_found",
            MethodNotAllowed => "method_not_allowed",
            RateLimited => "rate_limited",
            Overloaded(_) => "too_busy",
            PayloadTooLarge(_) => "payload_too_large",
            UnsupportedMediaType => "unsupported_media_type",
        }
    }

    /// The JSON body, as sent.
    pub fn body(&self) -> String {
        self.body_as(self.status())
    }

    /// The body of an answer sent with `status` (the last net keeps a status our variant
    /// would not pick, 408 say: the body says the status sent).
    fn body_as(&self, status: StatusCode) -> String {
        match self {
            ApiError::Domain(error) => ApiError::domain_body(error, status),
            other => write_body(other.code(), &other.to_string(), None, status),
        }
    }

    /// A domain error's JSON body, as sent. Logs server-side causes once, here.
    pub fn body_of(error: &Error) -> String {
        ApiError::domain_body(error, status_of(error))
    }

    fn domain_body(error: &Error, status: StatusCode) -> String {
        match error {
            Error::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "unavailable")
            }
            Error::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "internal error")
            }
            _ => {}
        }
        write_body(error.code(), &error.to_string(), error.order_id(), status)
    }
}

fn write_body(code: &str, message: &str, order_id: Option<Uuid>, status: StatusCode) -> String {
    let problem = Problem::of(code).expect("every code is in PROBLEMS (tested)");
    let body = ErrorBody {
        kind: problem.uri(),
        title: problem.title,
        status: status.as_u16(),
        detail: message,
        error: code,
        message,
        order_id,
    };
    serde_json::to_string(&body).expect("error bodies serialise")
}

/// `json_errors`' answer: `error` in our shape with the status the response already had.
pub fn with_status(error: ApiError, status: StatusCode) -> Response {
    let retry = match &error {
        ApiError::Domain(e) => retry_after(e),
        _ => None,
    };
    json_response(status, error.body_as(status), retry)
}

/// An error response from its parts (`application/problem+json`); every 503 and 429 gets
/// `Retry-After`, and so does a
/// "try later" conflict (a key or a payment still in progress, too many unpaid
/// reservations), or clients poll it as fast as they can. `retry_after` is the answer's own
/// figure in seconds (a queue's time to be served), or 1.
pub fn json_response(status: StatusCode, body: String, retry_after: Option<u64>) -> Response {
    // A kept answer replayed through here may be a success (`POST /orders`' 201).
    let kind = if status.is_client_error() || status.is_server_error() {
        PROBLEM_JSON
    } else {
        "application/json"
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(kind))],
        body,
    )
        .into_response();
    let busy = status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS;
    if let Some(seconds) = retry_after.or(busy.then_some(1)) {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    }
    response
}

/// The `Retry-After` seconds of a "try later" answer (none for a final one).
pub fn retry_after(error: &Error) -> Option<u64> {
    error.is_transient().then(|| {
        error
            .retry_after()
            .map_or(1, |wait| wait.as_secs_f64().ceil() as u64)
    })
}

/// RFC 9457's media type.
pub const PROBLEM_JSON: &str = "application/problem+json";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = match &self {
            ApiError::Domain(e) => retry_after(e),
            _ => None,
        };
        let overloaded = matches!(self, ApiError::Overloaded(_));
        let mut response = json_response(self.status(), self.body(), retry);
        // A refusal for want of room must free the room it took: a connection kept alive
        // after it would hold the socket the refusal was about (a flood of refused event
        // streams would lock every other client out).
        if overloaded {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_for_the_api_description() {
        let id = Uuid::nil();
        let domain = [
            Error::invalid("x"),
            Error::DemoDisabled,
            Error::PaymentFailed { order_id: id },
            Error::UnknownProduct(1),
            Error::OrderNotFound(id),
            Error::NoLock(1, "pg-atomic"),
            Error::Unprocessable("x".into()),
            Error::SoldOut { order_id: None },
            Error::PurchaseLimit { order_id: None },
            Error::TooManyUnpaid,
            Error::ReservationExpired { order_id: id },
            Error::PaymentInProgress { order_id: id },
            Error::NotPayable { order_id: id },
            Error::IdempotencyInProgress,
            Error::IdempotencyMismatch,
            Error::TooBusy,
            Error::QueueFull {
                retry_after: std::time::Duration::from_secs(3),
            },
            Error::LockTimeout { order_id: None },
            Error::LockLost { order_id: None },
            Error::PaymentBusy { order_id: id },
            Error::OutcomePending { order_id: Some(id) },
            Error::NoSemaphore,
            Error::Unavailable(anyhow::anyhow!("x")),
            Error::Internal(anyhow::anyhow!("x")),
        ];
        let mut errors: Vec<ApiError> = domain.into_iter().map(ApiError::from).collect();
        errors.extend([
            ApiError::Unauthorized,
            ApiError::AdminDisabled,
            ApiError::RouteNotFound,
            ApiError::MethodNotAllowed,
            ApiError::RateLimited,
            ApiError::Overloaded("connections"),
            ApiError::PayloadTooLarge(1),
            ApiError::UnsupportedMediaType,
        ]);
        for error in &errors {
            assert!(
                Problem::of(error.code()).is_some(),
                "{} is not in PROBLEMS",
                error.code()
            );
            let body: serde_json::Value = serde_json::from_str(&error.body()).unwrap();
            assert_eq!(body["type"], format!("/problems/{}", error.code()));
            assert_eq!(body["status"], error.status().as_u16());
            assert_eq!(body["detail"], body["message"]);
            assert_eq!(body["error"], error.code());
            assert!(!body["title"].as_str().unwrap().is_empty());
        }
        let answered: std::collections::HashSet<_> = errors.iter().map(ApiError::code).collect();
        assert_eq!(
            answered.len(),
            PROBLEMS.len(),
            "PROBLEMS lists a code no error answers"
        );
    }

    #[test]
    fn every_503_has_retry_after_and_a_code() {
        let id = Uuid::nil();
        for err in [
            Error::LockTimeout { order_id: Some(id) },
            Error::LockLost { order_id: None },
            Error::PaymentBusy { order_id: id },
            Error::OutcomePending { order_id: Some(id) },
            Error::Unavailable(anyhow::anyhow!("db down")),
        ] {
            let code = err.code();
            let response = ApiError::from(err).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{code}");
            assert_eq!(response.headers()[header::RETRY_AFTER], "1", "{code}");
        }
        // The conflicts that end on their own say when to ask again; final ones do not.
        for (err, retry) in [
            (Error::IdempotencyInProgress, true),
            (Error::PaymentInProgress { order_id: id }, true),
            (Error::TooManyUnpaid, true),
            (Error::SoldOut { order_id: None }, false),
        ] {
            let code = err.code();
            let response = ApiError::from(err).into_response();
            assert_eq!(response.status(), StatusCode::CONFLICT, "{code}");
            assert_eq!(
                response.headers().get(header::RETRY_AFTER).is_some(),
                retry,
                "{code}"
            );
        }
    }

    #[test]
    fn lock_errors_answer_503_and_too_busy_429() {
        let timeout = ApiError::from(LockError::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(
            (timeout.status().as_u16(), timeout.code()),
            (503, "lock_timeout")
        );
        assert_eq!(ApiError::from(LockError::TooBusy).status().as_u16(), 429);
    }

    #[test]
    fn transient_errors_are_the_ones_answered_503_429_or_500() {
        // The domain decides what an idempotent replay keeps without knowing statuses: both
        // must agree, or a kept answer could be a passing one.
        let id = Uuid::nil();
        for err in [
            Error::invalid("x"),
            Error::SoldOut { order_id: None },
            Error::PaymentFailed { order_id: id },
            Error::LockLost { order_id: None },
            Error::TooBusy,
            Error::Internal(anyhow::anyhow!("x")),
            Error::PaymentBusy { order_id: id },
            Error::UnknownProduct(1),
        ] {
            let status = status_of(&err).as_u16();
            assert_eq!(
                err.is_transient(),
                matches!(status, 503 | 429 | 500),
                "{}",
                err.code()
            );
        }
    }
}
