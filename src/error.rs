//! The one error type every handler returns, and the error policy:
//!
//! - Client errors answer their status with a stable `error` code and a human `message`.
//! - Server-side trouble (database, ZooKeeper) is logged with its cause chain and answered
//!   503 `unavailable` or 500 `internal` with a fixed message: internals never leak.
//! - Every 503 and 429 carries `Retry-After`, so well-behaved clients back off.
//! - Failures that happen after an order row exists name that order (`order_id`), so a
//!   client can look it up instead of guessing.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use crate::lock::LockError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// 400: the request is malformed or breaks a rule; the message says which.
    #[error("{0}")]
    InvalidRequest(String),
    /// 401: the admin bearer token is missing or wrong.
    #[error("a valid admin bearer token is required")]
    Unauthorized,
    /// 403: the `none` guard and the demo hooks need a server started with
    /// --allow-unsafe-guards.
    #[error("the unsafe guard and the demo hooks are disabled: start the server with --allow-unsafe-guards")]
    DemoDisabled,
    /// 403: the server runs without an admin token.
    #[error("admin endpoints are disabled: start the server with --admin-token")]
    AdminDisabled,
    /// 402: the payment was declined; the stock went back.
    #[error("the payment was declined; the reserved stock was returned")]
    PaymentFailed { order_id: Uuid },
    /// 404
    #[error("no product with id {0}")]
    UnknownProduct(i64),
    /// 404
    #[error("no order with id {0}")]
    OrderNotFound(Uuid),
    /// 404: the product's guard takes no lock, so it has no lock queue (or demo) to show.
    #[error("product {0} uses the {1} guard, which takes no lock")]
    NoLock(i64, &'static str),
    /// 404: the server bounds no payments (`--payment-concurrency` 0), so it has no
    /// semaphore to show or hold.
    #[error("this server has no payment semaphore: start it with --payment-concurrency N")]
    NoSemaphore,
    /// 422: well-formed, but against the product's terms or limits (a quantity over its
    /// `max_per_order`, a restock past its lifetime stock): the message says which.
    #[error("{0}")]
    Unprocessable(String),
    /// 404: no such route.
    #[error("no such route")]
    RouteNotFound,
    /// 405
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// 409: not enough stock left for the quantity asked. No order row when the sold-out
    /// flag answered before any work was done.
    #[error("sold out: not enough stock left for this order")]
    SoldOut { order_id: Option<Uuid> },
    /// 409: the user already holds the product's per-user limit.
    #[error("purchase limit reached: this user may not hold more units of this product")]
    PurchaseLimit { order_id: Option<Uuid> },
    /// 409: a reservation without payment, while unpaid reservations already hold the
    /// product's share (`--max-unpaid-share`) of its stock.
    #[error("unpaid reservations already hold this product's share of its stock; order with payment, or try later")]
    TooManyUnpaid,
    /// 409: the reservation ran out before it was paid; its stock went back on sale.
    #[error("the reservation expired before payment; its stock went back on sale")]
    ReservationExpired { order_id: Uuid },
    /// 409: a payment for this order is already under way.
    #[error("a payment for this order is already in progress")]
    PaymentInProgress { order_id: Uuid },
    /// 409: the order is not awaiting payment (sold out, failed, ...).
    #[error("this order is not awaiting payment")]
    NotPayable { order_id: Uuid },
    /// 409: the first request with this Idempotency-Key has not finished yet.
    #[error("a request with this Idempotency-Key is still in progress; retry shortly")]
    IdempotencyInProgress,
    /// 422: the Idempotency-Key was first used with a different request.
    #[error("this Idempotency-Key was used with a different request body")]
    IdempotencyMismatch,
    /// 429: too many buyers already queued for this product on this instance.
    #[error("too many buyers are queued for this product; try again")]
    TooBusy,
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
    /// 503: the product's lock was not granted within the lock timeout. Nothing changed.
    #[error("the product's lock was not granted in time; nothing changed, try again")]
    LockTimeout { order_id: Option<Uuid> },
    /// 503: the lock was lost (session expired, a newer holder fenced us out). Nothing changed.
    #[error("the product's lock was lost before the stock write; nothing changed, try again")]
    LockLost { order_id: Option<Uuid> },
    /// 503: no payment semaphore lease came free before the request's deadline
    /// (`--payment-concurrency`): nothing was charged, the units stay reserved.
    #[error("the payment provider is at its limit of charges in flight; nothing was charged and the units stay reserved: pay with POST /orders/{order_id}/pay before the reservation expires")]
    PaymentBusy { order_id: Uuid },
    /// 503: PostgreSQL or ZooKeeper is unreachable or too slow.
    #[error("a backing service is unavailable, try again")]
    Unavailable(#[source] anyhow::Error),
    /// 500: a bug. Logged in full, answered with a fixed message.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// Every error answer's body.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody<'a> {
    /// A stable code from [`CODES`]: match on this, not on the message.
    #[schema(value_type = String)]
    error: &'a str,
    /// For people; may change.
    message: String,
    /// The order the error happened to, when its row exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    order_id: Option<Uuid>,
}

/// Every code [`AppError::code`] can answer, in the README's order.
pub const CODES: [&str; 28] = [
    "invalid_request",
    "unauthorized",
    "payment_failed",
    "admin_disabled",
    "demo_disabled",
    "unknown_product",
    "order_not_found",
    "not_found",
    "no_lock",
    "method_not_allowed",
    "sold_out",
    "purchase_limit",
    "too_many_unpaid",
    "idempotency_in_progress",
    "reservation_expired",
    "payment_in_progress",
    "order_not_payable",
    "payload_too_large",
    "unsupported_media_type",
    "idempotency_mismatch",
    "unprocessable",
    "too_busy",
    "rate_limited",
    "lock_timeout",
    "lock_lost",
    "payment_busy",
    "unavailable",
    "internal",
];

impl AppError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest(message.into())
    }

    pub fn status(&self) -> StatusCode {
        use AppError::*;
        match self {
            InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Unauthorized => StatusCode::UNAUTHORIZED,
            PaymentFailed { .. } => StatusCode::PAYMENT_REQUIRED,
            AdminDisabled | DemoDisabled => StatusCode::FORBIDDEN,
            UnknownProduct(_) | OrderNotFound(_) | RouteNotFound | NoLock(..) | NoSemaphore => {
                StatusCode::NOT_FOUND
            }
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            SoldOut { .. }
            | PurchaseLimit { .. }
            | TooManyUnpaid
            | ReservationExpired { .. }
            | PaymentInProgress { .. }
            | NotPayable { .. }
            | IdempotencyInProgress => StatusCode::CONFLICT,
            IdempotencyMismatch | Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            TooBusy | RateLimited => StatusCode::TOO_MANY_REQUESTS,
            PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            LockTimeout { .. }
            | LockLost { .. }
            | PaymentBusy { .. }
            | Unavailable(_)
            | Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable, documented code clients match on.
    pub fn code(&self) -> &'static str {
        use AppError::*;
        match self {
            InvalidRequest(_) => "invalid_request",
            Unauthorized => "unauthorized",
            AdminDisabled => "admin_disabled",
            DemoDisabled => "demo_disabled",
            PaymentFailed { .. } => "payment_failed",
            UnknownProduct(_) => "unknown_product",
            OrderNotFound(_) => "order_not_found",
            RouteNotFound => "not_found",
            NoLock(..) | NoSemaphore => "no_lock",
            Unprocessable(_) => "unprocessable",
            MethodNotAllowed => "method_not_allowed",
            SoldOut { .. } => "sold_out",
            PurchaseLimit { .. } => "purchase_limit",
            TooManyUnpaid => "too_many_unpaid",
            ReservationExpired { .. } => "reservation_expired",
            PaymentInProgress { .. } => "payment_in_progress",
            NotPayable { .. } => "order_not_payable",
            IdempotencyInProgress => "idempotency_in_progress",
            IdempotencyMismatch => "idempotency_mismatch",
            TooBusy | Overloaded(_) => "too_busy",
            RateLimited => "rate_limited",
            PayloadTooLarge(_) => "payload_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            LockTimeout { .. } => "lock_timeout",
            LockLost { .. } => "lock_lost",
            PaymentBusy { .. } => "payment_busy",
            Unavailable(_) => "unavailable",
            Internal(_) => "internal",
        }
    }

    pub fn order_id(&self) -> Option<Uuid> {
        use AppError::*;
        match self {
            PaymentFailed { order_id }
            | ReservationExpired { order_id }
            | PaymentInProgress { order_id }
            | PaymentBusy { order_id }
            | NotPayable { order_id } => Some(*order_id),
            SoldOut { order_id }
            | PurchaseLimit { order_id }
            | LockTimeout { order_id }
            | LockLost { order_id } => *order_id,
            _ => None,
        }
    }

    /// The same error for another order of a batch that failed as a whole.
    pub fn again_for(&self, id: Uuid) -> AppError {
        use AppError::*;
        let again = match self {
            LockLost { .. } => LockLost { order_id: None },
            LockTimeout { .. } => LockTimeout { order_id: None },
            TooBusy => TooBusy,
            PurchaseLimit { .. } => PurchaseLimit { order_id: None },
            Unavailable(cause) => Unavailable(anyhow::anyhow!("{cause:#}")),
            Internal(cause) => Internal(anyhow::anyhow!("{cause:#}")),
            other => Internal(anyhow::anyhow!("a batch failed with {}", other.code())),
        };
        again.for_order(id)
    }

    /// Names the order the error happened to, on the errors that can carry one.
    pub fn for_order(mut self, id: Uuid) -> Self {
        use AppError::*;
        if let SoldOut { order_id }
        | PurchaseLimit { order_id }
        | LockTimeout { order_id }
        | LockLost { order_id } = &mut self
        {
            *order_id = Some(id);
        }
        self
    }

    /// Whether the outcome may differ on a retry (so it is not kept for idempotent replay).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.status(),
            StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::TOO_MANY_REQUESTS
                | StatusCode::INTERNAL_SERVER_ERROR
        ) || matches!(
            self,
            AppError::IdempotencyInProgress
                | AppError::PaymentInProgress { .. }
                // Room comes back as reservations are paid or expire: "try later" must work
                // with the same key.
                | AppError::TooManyUnpaid
        )
    }

    /// The JSON body, as sent. Logs server-side causes once, here.
    pub fn body(&self) -> String {
        match self {
            AppError::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "unavailable")
            }
            AppError::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "internal error")
            }
            _ => {}
        }
        let body = ErrorBody {
            error: self.code(),
            message: self.to_string(),
            order_id: self.order_id(),
        };
        serde_json::to_string(&body).expect("error bodies serialise")
    }
}

/// A JSON response from its parts; every 503 and 429 gets `Retry-After`.
pub fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        json_response(self.status(), self.body())
    }
}

/// A lock not granted: the same answer for every caller (orders add their id with
/// [`AppError::for_order`]).
impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        match err {
            LockError::Timeout(_) => AppError::LockTimeout { order_id: None },
            LockError::Lost => AppError::LockLost { order_id: None },
            LockError::TooBusy => AppError::TooBusy,
            LockError::Unavailable(e) => AppError::Unavailable(e),
        }
    }
}

/// Database errors are the server's trouble, never the client's: a lost or slow connection
/// is 503 (retry), anything else a bug.
impl From<sqlx::Error> for AppError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                AppError::Unavailable(err.into())
            }
            sqlx::Error::Database(db) if db.code().is_some_and(|c| is_transient_sqlstate(&c)) => {
                AppError::Unavailable(err.into())
            }
            _ => AppError::Internal(err.into()),
        }
    }
}

/// 57014 statement_timeout, 08xxx connection exceptions, 57P0x shutdown, 40001/40P01
/// serialization failure or deadlock, 53300 too many connections, 55P03 lock not available:
/// all passing, all worth a retry.
fn is_transient_sqlstate(code: &str) -> bool {
    matches!(code, "57014" | "40001" | "40P01" | "53300" | "55P03")
        || code.starts_with("08")
        || code.starts_with("57P")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_for_the_api_description() {
        let id = Uuid::nil();
        let errors = [
            AppError::invalid("x"),
            AppError::Unauthorized,
            AppError::DemoDisabled,
            AppError::AdminDisabled,
            AppError::PaymentFailed { order_id: id },
            AppError::UnknownProduct(1),
            AppError::OrderNotFound(id),
            AppError::RouteNotFound,
            AppError::NoLock(1, "pg-atomic"),
            AppError::Unprocessable("x".into()),
            AppError::MethodNotAllowed,
            AppError::SoldOut { order_id: None },
            AppError::PurchaseLimit { order_id: None },
            AppError::TooManyUnpaid,
            AppError::ReservationExpired { order_id: id },
            AppError::PaymentInProgress { order_id: id },
            AppError::NotPayable { order_id: id },
            AppError::IdempotencyInProgress,
            AppError::IdempotencyMismatch,
            AppError::TooBusy,
            AppError::RateLimited,
            AppError::Overloaded("connections"),
            AppError::PayloadTooLarge(1),
            AppError::UnsupportedMediaType,
            AppError::LockTimeout { order_id: None },
            AppError::LockLost { order_id: None },
            AppError::PaymentBusy { order_id: id },
            AppError::NoSemaphore,
            AppError::Unavailable(anyhow::anyhow!("x")),
            AppError::Internal(anyhow::anyhow!("x")),
        ];
        for error in &errors {
            assert!(
                CODES.contains(&error.code()),
                "{} is not in CODES",
                error.code()
            );
        }
        let answered: std::collections::HashSet<_> = errors.iter().map(AppError::code).collect();
        assert_eq!(
            answered.len(),
            CODES.len(),
            "CODES lists a code no error answers"
        );
    }

    #[test]
    fn every_503_has_retry_after_and_a_code() {
        let id = Uuid::nil();
        for err in [
            AppError::LockTimeout { order_id: Some(id) },
            AppError::LockLost { order_id: None },
            AppError::PaymentBusy { order_id: id },
            AppError::Unavailable(anyhow::anyhow!("db down")),
        ] {
            let code = err.code();
            let response = err.into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{code}");
            assert_eq!(response.headers()[header::RETRY_AFTER], "1", "{code}");
        }
    }

    #[test]
    fn lock_errors_answer_alike_and_name_the_order_when_there_is_one() {
        let id = Uuid::nil();
        let timeout = AppError::from(LockError::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(
            (timeout.status().as_u16(), timeout.code()),
            (503, "lock_timeout")
        );
        assert_eq!(timeout.order_id(), None);
        assert_eq!(timeout.for_order(id).order_id(), Some(id));
        assert_eq!(AppError::from(LockError::Lost).code(), "lock_lost");
        assert_eq!(AppError::from(LockError::TooBusy).code(), "too_busy");
        // Errors that never concern an order stay without one.
        assert_eq!(AppError::TooBusy.for_order(id).order_id(), None);
    }

    #[test]
    fn server_errors_do_not_leak_their_cause() {
        let err = AppError::Internal(anyhow::anyhow!("password=hunter2"));
        assert_eq!(err.to_string(), "internal error");
        let err = AppError::Unavailable(anyhow::anyhow!("connect to 10.0.0.1 refused"));
        assert!(!err.to_string().contains("10.0.0.1"));
    }

    #[test]
    fn passing_database_trouble_is_retryable() {
        for code in [
            "57014", "40001", "40P01", "53300", "55P03", "08006", "57P01",
        ] {
            assert!(is_transient_sqlstate(code), "{code}");
        }
        for code in ["23505", "22003", "42P01"] {
            assert!(!is_transient_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn pool_timeouts_are_unavailable_not_internal() {
        assert_eq!(
            AppError::from(sqlx::Error::PoolTimedOut).code(),
            "unavailable"
        );
        assert_eq!(AppError::from(sqlx::Error::RowNotFound).code(), "internal");
    }
}
