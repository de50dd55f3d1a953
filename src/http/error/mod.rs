//! Every error answer, and the error policy of the API:
//!
//! - Client errors answer their status with a stable `error` code and a human `message`.
//! - Server-side trouble (database, ZooKeeper) is logged with its cause chain and answered
//!   503 `unavailable` or 500 `internal` with a fixed message: internals never leak.
//! - Every answer says whether to ask again (`retryable`), and a retryable one carries
//!   `Retry-After`, so clients back off without a list of codes of their own.
//!
//! The domain's [`Error`] knows nothing of HTTP: it names its code, and the code's status and
//! retry rule come from one table here ([`PROBLEMS`]), beside the errors only the edge can
//! have (auth, routing, body limits, connection caps).

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
    /// 401: a buyer's bearer token is required and none was sent.
    #[error("a bearer token is required: sign in")]
    Unauthenticated,
    /// 401: the bearer token is not one to trust; the text says why.
    #[error("the bearer token is not valid: {0}")]
    InvalidToken(String),
    /// 403: the body names another buyer than the token.
    #[error("user_id names another buyer than your token")]
    NotYourAccount,
    /// 403: tokens are issued only in `--buyer-auth demo`.
    #[error("this server issues no tokens: sign in with your issuer (--buyer-auth is not demo)")]
    NoDemoIssuer,
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
    /// 503 `overloaded`: this instance is at its limit of connections or event streams.
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
    /// `not_open`: when the sale opens (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    opens_at: Option<String>,
    /// Whether the same request may succeed if sent again (with the same `Idempotency-Key`),
    /// after the `Retry-After` seconds a retryable answer carries. Fixed per code.
    retryable: bool,
}

/// A domain error's status: its code's, from [`PROBLEMS`].
pub fn status_of(error: &Error) -> StatusCode {
    Problem::known(error.code()).status
}

impl ApiError {
    /// The `Retry-After` seconds of this answer, when it is retryable.
    pub(in crate::http) fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Domain(e) => retry_after(e),
            other => Problem::known(other.code()).retryable.then_some(1),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::Domain(Error::invalid(message))
    }

    pub fn status(&self) -> StatusCode {
        Problem::known(self.code()).status
    }

    /// The stable, documented code clients match on.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            Domain(error) => error.code(),
            Unauthorized => "unauthorized",
            Unauthenticated => "unauthenticated",
            InvalidToken(_) => "invalid_token",
            NotYourAccount => "not_your_account",
            NoDemoIssuer => "no_demo_issuer",
            AdminDisabled => "admin_disabled",
            RouteNotFound => "not_found",
            MethodNotAllowed => "method_not_allowed",
            RateLimited => "rate_limited",
            Overloaded(_) => "overloaded",
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
        let message = error.to_string();
        let mut body = body(error.code(), &message, error.order_id(), status);
        if let Error::NotOpen { opens_at, .. } = error {
            body.opens_at = Some(opens_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        }
        serde_json::to_string(&body).expect("error bodies serialise")
    }
}

fn write_body(code: &str, message: &str, order_id: Option<Uuid>, status: StatusCode) -> String {
    serde_json::to_string(&body(code, message, order_id, status)).expect("error bodies serialise")
}

fn body<'a>(
    code: &'a str,
    message: &'a str,
    order_id: Option<Uuid>,
    status: StatusCode,
) -> ErrorBody<'a> {
    let problem = Problem::known(code);
    ErrorBody {
        kind: problem.uri(),
        title: problem.title,
        status: status.as_u16(),
        detail: message,
        error: code,
        message,
        order_id,
        opens_at: None,
        retryable: problem.retryable,
    }
}

/// `json_errors`' answer: `error` in our shape with the status the response already had.
pub fn with_status(error: ApiError, status: StatusCode) -> Response {
    let retry = error.retry_after();
    json_response(status, error.body_as(status), retry)
}

/// An error response from its parts (`application/problem+json`), with `Retry-After` when
/// the answer is retryable (`retry_after`: its seconds, at least 1).
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
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    }
    response
}

/// The `Retry-After` seconds of a retryable answer (none for a final one): the error's own
/// figure (a queue's time to be served), or 1.
pub fn retry_after(error: &Error) -> Option<u64> {
    Problem::known(error.code()).retryable.then(|| {
        error
            .retry_after()
            .map_or(1, |wait| wait.as_secs_f64().ceil() as u64)
    })
}

/// RFC 9457's media type.
pub const PROBLEM_JSON: &str = "application/problem+json";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = self.retry_after();
        let overloaded = matches!(self, ApiError::Overloaded(_));
        // RFC 6750: a 401 names the scheme to use, and why a token sent was refused.
        let challenge = match &self {
            ApiError::Unauthenticated | ApiError::Unauthorized => Some(r#"Bearer realm="seckill""#),
            ApiError::InvalidToken(_) => Some(r#"Bearer realm="seckill", error="invalid_token""#),
            _ => None,
        };
        let mut response = json_response(self.status(), self.body(), retry);
        if let Some(challenge) = challenge {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
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
            Error::NotOpen {
                opens_at: chrono::Utc::now(),
                now: chrono::Utc::now(),
            },
            Error::Closed,
            Error::Paused {
                retry_after: std::time::Duration::from_secs(5),
            },
            Error::NotAdmitted(1),
            Error::InvalidPass("x"),
            Error::PassUsed,
            Error::NoLine(1),
            Error::NotInLine,
            Error::Unavailable(anyhow::anyhow!("x")),
            Error::Internal(anyhow::anyhow!("x")),
        ];
        let mut errors: Vec<ApiError> = domain.into_iter().map(ApiError::from).collect();
        errors.extend([
            ApiError::Unauthorized,
            ApiError::Unauthenticated,
            ApiError::InvalidToken("x".into()),
            ApiError::NotYourAccount,
            ApiError::NoDemoIssuer,
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
    fn a_retryable_answer_says_so_and_carries_retry_after_and_a_final_one_neither() {
        let id = Uuid::nil();
        for (err, retryable) in [
            (Error::LockTimeout { order_id: Some(id) }, true),
            (Error::LockLost { order_id: None }, true),
            (Error::PaymentBusy { order_id: id }, true),
            (Error::OutcomePending { order_id: Some(id) }, true),
            (Error::Unavailable(anyhow::anyhow!("db down")), true),
            (Error::Internal(anyhow::anyhow!("a bug")), true),
            (Error::TooBusy, true),
            // The conflicts that end on their own say when to ask again; final ones do not.
            (Error::IdempotencyInProgress, true),
            (Error::PaymentInProgress { order_id: id }, true),
            (Error::TooManyUnpaid, true),
            (Error::SoldOut { order_id: None }, false),
            (Error::PaymentFailed { order_id: id }, false),
            (Error::invalid("x"), false),
        ] {
            let code = err.code();
            let error = ApiError::from(err);
            let body: serde_json::Value = serde_json::from_str(&error.body()).unwrap();
            assert_eq!(body["retryable"], retryable, "{code}");
            let response = error.into_response();
            let wait = response.headers().get(header::RETRY_AFTER);
            assert_eq!(wait.is_some(), retryable, "{code}");
            if retryable {
                assert_eq!(wait.unwrap(), "1", "{code}");
            }
        }
        // A queue's own wait, rounded up; an edge refusal, retryable too.
        let full = ApiError::from(Error::QueueFull {
            retry_after: std::time::Duration::from_millis(2100),
        })
        .into_response();
        assert_eq!(full.headers()[header::RETRY_AFTER], "3");
        let overloaded = ApiError::Overloaded("connections").into_response();
        assert_eq!(overloaded.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(overloaded.headers()[header::RETRY_AFTER], "1");
        assert!(ApiError::Unauthorized
            .into_response()
            .headers()
            .get(header::RETRY_AFTER)
            .is_none());
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
    fn every_503_429_and_500_is_retryable() {
        // A client that only knows statuses (a proxy, a generic HTTP library) retries these:
        // the table must not tell it otherwise.
        for problem in &PROBLEMS {
            if matches!(problem.status.as_u16(), 503 | 429 | 500) {
                assert!(problem.retryable, "{}", problem.code);
            }
        }
    }
}
