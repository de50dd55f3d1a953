//! The domain's one error type: what went wrong with a sale, a product or a lock, with a
//! stable code and no HTTP. `crate::http::error` maps each variant to its status, and adds
//! the few errors only the HTTP edge can have (auth, routing, body limits).
//!
//! - Server-side trouble (database, ZooKeeper) is `Unavailable` (passing: retry) or
//!   `Internal` (a bug); their causes are logged, never shown.
//! - Failures that happen after an order row exists name that order (`order_id`), so a
//!   client can look it up instead of guessing.

use uuid::Uuid;

use crate::lock::LockError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed or breaks a rule; the message says which.
    #[error("{0}")]
    InvalidRequest(String),
    /// The `none` guard and the demo hooks need a server started with
    /// --allow-unsafe-guards.
    #[error("the unsafe guard and the demo hooks are disabled: start the server with --allow-unsafe-guards")]
    DemoDisabled,
    /// The payment was declined; the stock went back.
    #[error("the payment was declined; the reserved stock was returned")]
    PaymentFailed { order_id: Uuid },
    #[error("no product with id {0}")]
    UnknownProduct(i64),
    #[error("no order with id {0}")]
    OrderNotFound(Uuid),
    /// The product's guard takes no lock, so it has no lock queue (or demo) to show.
    #[error("product {0} uses the {1} guard, which takes no lock")]
    NoLock(i64, &'static str),
    /// The server bounds no payments (`--payment-concurrency` 0), so it has no semaphore to
    /// show or hold.
    #[error("this server has no payment semaphore: start it with --payment-concurrency N")]
    NoSemaphore,
    /// Well-formed, but against the product's terms or limits (a quantity over its
    /// `max_per_order`, a restock past its lifetime stock): the message says which.
    #[error("{0}")]
    Unprocessable(String),
    /// Not enough stock left for the quantity asked. No order row when the sold-out flag
    /// answered before any work was done.
    #[error("sold out: not enough stock left for this order")]
    SoldOut { order_id: Option<Uuid> },
    /// The user already holds the product's per-user limit.
    #[error("purchase limit reached: this user may not hold more units of this product")]
    PurchaseLimit { order_id: Option<Uuid> },
    /// A reservation without payment, while unpaid reservations already hold the product's
    /// share (`--max-unpaid-share`) of its stock.
    #[error("unpaid reservations already hold this product's share of its stock; order with payment, or try later")]
    TooManyUnpaid,
    /// The reservation ran out before it was paid; its stock went back on sale.
    #[error("the reservation expired before payment; its stock went back on sale")]
    ReservationExpired { order_id: Uuid },
    /// A payment for this order is already under way.
    #[error("a payment for this order is already in progress")]
    PaymentInProgress { order_id: Uuid },
    /// The order is not awaiting payment (sold out, failed, ...).
    #[error("this order is not awaiting payment")]
    NotPayable { order_id: Uuid },
    /// The first request with this Idempotency-Key has not finished yet.
    #[error("a request with this Idempotency-Key is still in progress; retry shortly")]
    IdempotencyInProgress,
    /// The Idempotency-Key was first used with a different request.
    #[error("this Idempotency-Key was used with a different request body")]
    IdempotencyMismatch,
    /// Too many buyers already queued for this product on this instance.
    #[error("too many buyers are queued for this product; try again")]
    TooBusy,
    /// This instance's queue for the product could not serve one more order within its
    /// lock timeout (or is full): refused before it queues. `retry_after` is the time the
    /// queue, as it stands, needs to be served (its length over the rate it is served at).
    #[error("this product's queue here cannot serve another order in time; retry in {}s", (retry_after.as_secs_f64().ceil() as u64).max(1))]
    QueueFull { retry_after: std::time::Duration },
    /// The product's lock was not granted within the lock timeout. Nothing changed.
    #[error("the product's lock was not granted in time; nothing changed, try again")]
    LockTimeout { order_id: Option<Uuid> },
    /// The lock was lost (session expired, a newer holder fenced us out). Nothing changed.
    #[error("the product's lock was lost before the stock write; nothing changed, try again")]
    LockLost { order_id: Option<Uuid> },
    /// No payment semaphore lease came free before the request's deadline
    /// (`--payment-concurrency`): nothing was charged, the units stay reserved.
    #[error("the payment provider is at its limit of charges in flight; nothing was charged and the units stay reserved: pay with POST /orders/{order_id}/pay before the reservation expires")]
    PaymentBusy { order_id: Uuid },
    /// The order's outcome is not known yet: a backing service (the payment provider, or
    /// PostgreSQL at a commit) did not answer in time. Nothing more needs doing: the order
    /// is settled in the background (a pending payment by asking the provider under its
    /// key); a retry with the same Idempotency-Key answers its final outcome.
    #[error("the order's outcome is not known yet (a backing service did not answer in time); it is being settled: retry with the same Idempotency-Key, or look the order up")]
    OutcomePending { order_id: Option<Uuid> },
    /// The sale has not opened yet (its window, on this instance's clock).
    #[error("the sale opens at {}", opens_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))]
    NotOpen {
        opens_at: chrono::DateTime<chrono::Utc>,
        now: chrono::DateTime<chrono::Utc>,
    },
    /// The sale's window has closed.
    #[error("the sale has closed")]
    Closed,
    /// An admin paused the sale.
    #[error("the sale is paused; try again later")]
    Paused { retry_after: std::time::Duration },
    /// The product sells through its line, and the order carries no pass.
    #[error("this sale lets buyers in through its line: join it (POST /api/products/{0}/line) and order with the pass it gives")]
    NotAdmitted(i64),
    /// The pass is not one this sale gave this buyer for this product, or it expired.
    #[error("the pass is not valid: {0}")]
    InvalidPass(&'static str),
    /// The pass already bought.
    #[error("this pass has already bought; a pass buys once")]
    PassUsed,
    /// The product has no line.
    #[error("product {0} has no line: order directly")]
    NoLine(i64),
    /// The buyer has not joined the product's line.
    #[error("you are not in this product's line: join it first")]
    NotInLine,
    /// PostgreSQL or ZooKeeper is unreachable or too slow.
    #[error("a backing service is unavailable, try again")]
    Unavailable(#[source] anyhow::Error),
    /// A bug. Logged in full, answered with a fixed message.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest(message.into())
    }

    /// The stable, documented code clients match on.
    pub fn code(&self) -> &'static str {
        use Error::*;
        match self {
            InvalidRequest(_) => "invalid_request",
            DemoDisabled => "demo_disabled",
            PaymentFailed { .. } => "payment_failed",
            UnknownProduct(_) => "unknown_product",
            OrderNotFound(_) => "order_not_found",
            NoLock(..) | NoSemaphore => "no_lock",
            Unprocessable(_) => "unprocessable",
            SoldOut { .. } => "sold_out",
            PurchaseLimit { .. } => "purchase_limit",
            TooManyUnpaid => "too_many_unpaid",
            ReservationExpired { .. } => "reservation_expired",
            PaymentInProgress { .. } => "payment_in_progress",
            NotPayable { .. } => "order_not_payable",
            IdempotencyInProgress => "idempotency_in_progress",
            IdempotencyMismatch => "idempotency_mismatch",
            TooBusy | QueueFull { .. } => "too_busy",
            LockTimeout { .. } => "lock_timeout",
            LockLost { .. } => "lock_lost",
            PaymentBusy { .. } => "payment_busy",
            OutcomePending { .. } => "outcome_pending",
            NotOpen { .. } => "not_open",
            Closed => "closed",
            Paused { .. } => "paused",
            NotAdmitted(_) => "not_admitted",
            InvalidPass(_) => "invalid_pass",
            PassUsed => "pass_used",
            NoLine(_) => "no_line",
            NotInLine => "not_in_line",
            Unavailable(_) => "unavailable",
            Internal(_) => "internal",
        }
    }

    pub fn order_id(&self) -> Option<Uuid> {
        use Error::*;
        match self {
            PaymentFailed { order_id }
            | ReservationExpired { order_id }
            | PaymentInProgress { order_id }
            | PaymentBusy { order_id }
            | NotPayable { order_id } => Some(*order_id),
            SoldOut { order_id }
            | PurchaseLimit { order_id }
            | LockTimeout { order_id }
            | LockLost { order_id }
            | OutcomePending { order_id } => *order_id,
            _ => None,
        }
    }

    /// The same error for another order of a batch that failed as a whole.
    pub fn again_for(&self, id: Uuid) -> Error {
        use Error::*;
        let again = match self {
            LockLost { .. } => LockLost { order_id: None },
            LockTimeout { .. } => LockTimeout { order_id: None },
            TooBusy => TooBusy,
            QueueFull { retry_after } => QueueFull {
                retry_after: *retry_after,
            },
            PurchaseLimit { .. } => PurchaseLimit { order_id: None },
            OutcomePending { .. } => OutcomePending { order_id: None },
            Unavailable(cause) => Unavailable(anyhow::anyhow!("{cause:#}")),
            Internal(cause) => Internal(anyhow::anyhow!("{cause:#}")),
            other => Internal(anyhow::anyhow!("a batch failed with {}", other.code())),
        };
        again.for_order(id)
    }

    /// Names the order the error happened to, on the errors that can carry one.
    pub fn for_order(mut self, id: Uuid) -> Self {
        use Error::*;
        if let SoldOut { order_id }
        | PurchaseLimit { order_id }
        | LockTimeout { order_id }
        | LockLost { order_id }
        | OutcomePending { order_id } = &mut self
        {
            *order_id = Some(id);
        }
        self
    }

    /// A refusal by the sale's rules or its load that wrote nothing and says nothing went
    /// wrong on our side: the floods a flash sale draws (sold out before any work, a full
    /// queue, a buyer over the limit, a malformed request). Counted, not logged one by one.
    pub fn is_refusal(&self) -> bool {
        use Error::*;
        matches!(
            self,
            SoldOut { order_id: None }
                | PurchaseLimit { order_id: None }
                | TooBusy
                | QueueFull { .. }
                | TooManyUnpaid
                | InvalidRequest(_)
                | UnknownProduct(_)
                | Unprocessable(_)
                | IdempotencyMismatch
                | IdempotencyInProgress
                | NotOpen { .. }
                | Closed
                | Paused { .. }
                | NotAdmitted(_)
                | InvalidPass(_)
                | PassUsed
        )
    }

    /// When a client should ask again, if this answer knows better than "shortly".
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::QueueFull { retry_after } | Error::Paused { retry_after } => Some(*retry_after),
            Error::NotOpen { opens_at, now } => (*opens_at - *now).to_std().ok(),
            _ => None,
        }
    }
}

/// A lock not granted: the same answer for every caller (orders add their id with
/// [`Error::for_order`]).
impl From<LockError> for Error {
    fn from(err: LockError) -> Self {
        match err {
            LockError::Timeout(_) => Error::LockTimeout { order_id: None },
            LockError::Lost => Error::LockLost { order_id: None },
            LockError::TooBusy => Error::TooBusy,
            LockError::Unavailable(e) => Error::Unavailable(e),
        }
    }
}

/// Database errors are the server's trouble, never the client's: a lost or slow connection
/// is `Unavailable` (retry), anything else a bug.
impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            // The connection broke, or could not be made. With TLS (`sslmode=prefer`, the
            // default), a connection dropped while sqlx asks for TLS reads as a protocol error
            // (the answer's one byte reads 0) or a TLS one: the database is away, not the
            // service broken. The cause is logged either way.
            sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Error::Unavailable(err.into()),
            sqlx::Error::Database(db) if db.code().is_some_and(|c| is_transient_sqlstate(&c)) => {
                Error::Unavailable(err.into())
            }
            _ => Error::Internal(err.into()),
        }
    }
}

/// 57014 statement_timeout, 08xxx connection exceptions, 57P0x shutdown, 40001/40P01
/// serialization failure or deadlock, 53300 too many connections, 55P03 lock not available,
/// 25P03 a transaction ended by `idle_in_transaction_session_timeout` (a client starved of
/// CPU between two statements looks to PostgreSQL like one gone silent): all passing, all
/// worth a retry.
fn is_transient_sqlstate(code: &str) -> bool {
    matches!(
        code,
        "57014" | "40001" | "40P01" | "53300" | "55P03" | "25P03"
    ) || code.starts_with("08")
        || code.starts_with("57P")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_away_is_unavailable_and_a_query_bug_internal() {
        let code = |e: sqlx::Error| Error::from(e).code();
        // What a connection cut during the TLS request gives (sqlx reads a 0 byte).
        let cut = sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".into());
        assert_eq!(code(cut), "unavailable");
        assert_eq!(code(sqlx::Error::Tls("handshake".into())), "unavailable");
        assert_eq!(code(sqlx::Error::PoolTimedOut), "unavailable");
        assert_eq!(code(sqlx::Error::ColumnNotFound("x".into())), "internal");
    }

    #[test]
    fn lock_errors_answer_alike_and_name_the_order_when_there_is_one() {
        let id = Uuid::nil();
        let timeout = Error::from(LockError::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(timeout.code(), "lock_timeout");
        assert_eq!(timeout.order_id(), None);
        assert_eq!(timeout.for_order(id).order_id(), Some(id));
        assert_eq!(Error::from(LockError::Lost).code(), "lock_lost");
        assert_eq!(Error::from(LockError::TooBusy).code(), "too_busy");
        // Errors that never concern an order stay without one.
        assert_eq!(Error::TooBusy.for_order(id).order_id(), None);
    }

    #[test]
    fn server_errors_do_not_leak_their_cause() {
        let err = Error::Internal(anyhow::anyhow!("password=hunter2"));
        assert_eq!(err.to_string(), "internal error");
        let err = Error::Unavailable(anyhow::anyhow!("connect to 10.0.0.1 refused"));
        assert!(!err.to_string().contains("10.0.0.1"));
    }

    #[test]
    fn passing_database_trouble_is_retryable() {
        for code in [
            "57014", "40001", "40P01", "53300", "55P03", "08006", "57P01", "25P03",
        ] {
            assert!(is_transient_sqlstate(code), "{code}");
        }
        for code in ["23505", "22003", "42P01"] {
            assert!(!is_transient_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn pool_timeouts_are_unavailable_not_internal() {
        assert_eq!(Error::from(sqlx::Error::PoolTimedOut).code(), "unavailable");
        assert_eq!(Error::from(sqlx::Error::RowNotFound).code(), "internal");
    }

    #[test]
    fn a_refusal_wrote_nothing_and_nothing_went_wrong_on_our_side() {
        assert!(Error::SoldOut { order_id: None }.is_refusal());
        assert!(Error::TooBusy.is_refusal());
        assert!(Error::UnknownProduct(1).is_refusal());
        let row = Some(Uuid::new_v4());
        // An order row exists: its line stays.
        assert!(!Error::SoldOut { order_id: row }.is_refusal());
        assert!(!Error::PurchaseLimit { order_id: row }.is_refusal());
        // Trouble on our side is never a mere refusal.
        assert!(!Error::LockTimeout { order_id: None }.is_refusal());
        assert!(!Error::Unavailable(anyhow::anyhow!("down")).is_refusal());
        assert!(!Error::Internal(anyhow::anyhow!("bug")).is_refusal());
    }
}
