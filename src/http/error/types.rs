//! The problem types: every error code with its title, the one table error answers are
//! written from (and `GET /problems/{code}` describes).

/// A problem type: a code and its title.
#[derive(Clone, Copy, Debug)]
pub struct Problem {
    pub code: &'static str,
    pub title: &'static str,
}

impl Problem {
    const fn new(code: &'static str, title: &'static str) -> Problem {
        Problem { code, title }
    }

    /// The problem type's URI, relative to the API's address.
    pub fn uri(&self) -> String {
        format!("/problems/{}", self.code)
    }

    pub fn of(code: &str) -> Option<&'static Problem> {
        PROBLEMS.iter().find(|p| p.code == code)
    }
}

/// Every code an answer can carry, with its title, in the order of the API page's table of
/// codes (docs/api.md).
pub const PROBLEMS: [Problem; 29] = [
    Problem::new("invalid_request", "The request is malformed"),
    Problem::new("unauthorized", "An admin bearer token is required"),
    Problem::new("payment_failed", "The payment was declined"),
    Problem::new("admin_disabled", "Admin endpoints are disabled"),
    Problem::new("demo_disabled", "Demos are disabled on this server"),
    Problem::new("unknown_product", "No such product"),
    Problem::new("order_not_found", "No such order"),
    Problem::new("not_found", "No such route"),
    Problem::new("no_lock", "The product's guard takes no such lock"),
    Problem::new("method_not_allowed", "Method not allowed"),
    Problem::new("sold_out", "Sold out"),
    Problem::new("purchase_limit", "Over the purchase limit"),
    Problem::new("too_many_unpaid", "Too many unpaid reservations"),
    Problem::new(
        "idempotency_in_progress",
        "A request with this key is in progress",
    ),
    Problem::new("reservation_expired", "The reservation expired"),
    Problem::new(
        "payment_in_progress",
        "A payment for this order is in progress",
    ),
    Problem::new("order_not_payable", "The order cannot be paid"),
    Problem::new("payload_too_large", "Request body too large"),
    Problem::new("unsupported_media_type", "Unsupported media type"),
    Problem::new(
        "idempotency_mismatch",
        "This key was used for another request",
    ),
    Problem::new("unprocessable", "The request cannot be processed"),
    Problem::new("too_busy", "Too busy: try again later"),
    Problem::new("rate_limited", "Too many requests from this client"),
    Problem::new(
        "lock_timeout",
        "The product's lock was not acquired in time",
    ),
    Problem::new("lock_lost", "The product's lock was lost"),
    Problem::new("payment_busy", "The payment provider is at its limit"),
    Problem::new("outcome_pending", "The outcome is not known yet"),
    Problem::new("unavailable", "Service unavailable"),
    Problem::new("internal", "Internal error"),
];
