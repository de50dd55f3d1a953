//! The problem types: every error code with its status, whether a client should try again,
//! and its title — the one table error answers are written from (and `GET /problems/{code}`
//! describes). A new code is one line here plus its texts on the page.

use axum::http::StatusCode;

/// A problem type: a code, the status it is answered with, whether the same request may
/// succeed later (`retryable`, with `Retry-After`), and its title.
#[derive(Clone, Copy, Debug)]
pub struct Problem {
    pub code: &'static str,
    pub status: StatusCode,
    /// Whether the same request may succeed if sent again (with the same `Idempotency-Key`):
    /// what clients decide retries from, and what an idempotent replay does not keep.
    pub retryable: bool,
    pub title: &'static str,
}

/// A final answer: asking again gets the same one.
const FINAL: bool = false;
/// A passing one: ask again after `Retry-After`.
const RETRY: bool = true;

impl Problem {
    const fn new(code: &'static str, status: u16, retryable: bool, title: &'static str) -> Self {
        let status = match StatusCode::from_u16(status) {
            Ok(status) => status,
            Err(_) => panic!("a problem's status is an HTTP status"),
        };
        Problem {
            code,
            status,
            retryable,
            title,
        }
    }

    /// The problem type's URI, relative to the API's address.
    pub fn uri(&self) -> String {
        format!("/problems/{}", self.code)
    }

    pub fn of(code: &str) -> Option<&'static Problem> {
        PROBLEMS.iter().find(|p| p.code == code)
    }

    /// The problem of a code the error types answer (every one is in the table: tested).
    pub(crate) fn known(code: &str) -> &'static Problem {
        Problem::of(code).expect("every code is in PROBLEMS (tested)")
    }
}

/// Every code an answer can carry, in the order of the API page's table of codes
/// (docs/api.md, which a contract test holds to this table).
#[rustfmt::skip]
pub const PROBLEMS: [Problem; 42] = [
    Problem::new("invalid_request", 400, FINAL, "The request is malformed"),
    Problem::new("unauthorized", 401, FINAL, "An admin bearer token is required"),
    Problem::new("unauthenticated", 401, FINAL, "A bearer token is required"),
    Problem::new("invalid_token", 401, FINAL, "The bearer token is not valid"),
    Problem::new("payment_failed", 402, FINAL, "The payment was declined"),
    Problem::new("admin_disabled", 403, FINAL, "Admin endpoints are disabled"),
    Problem::new("demo_disabled", 403, FINAL, "Demos are disabled on this server"),
    Problem::new("not_your_account", 403, FINAL, "The order's buyer is not the token's"),
    Problem::new("no_demo_issuer", 403, FINAL, "This server issues no tokens"),
    Problem::new("not_admitted", 403, FINAL, "The sale lets buyers in through its line"),
    Problem::new("invalid_pass", 403, FINAL, "The pass is not valid"),
    Problem::new("unknown_product", 404, FINAL, "No such product"),
    Problem::new("order_not_found", 404, FINAL, "No such order"),
    Problem::new("not_found", 404, FINAL, "No such route"),
    Problem::new("no_lock", 404, FINAL, "The product's guard takes no such lock"),
    Problem::new("not_in_line", 404, FINAL, "You are not in this product's line"),
    Problem::new("method_not_allowed", 405, FINAL, "Method not allowed"),
    Problem::new("sold_out", 409, FINAL, "Sold out"),
    Problem::new("purchase_limit", 409, FINAL, "Over the purchase limit"),
    // Room comes back as reservations are paid or expire.
    Problem::new("too_many_unpaid", 409, RETRY, "Too many unpaid reservations"),
    Problem::new("idempotency_in_progress", 409, RETRY, "A request with this key is in progress"),
    Problem::new("reservation_expired", 409, FINAL, "The reservation expired"),
    Problem::new("payment_in_progress", 409, RETRY, "A payment for this order is in progress"),
    Problem::new("order_not_payable", 409, FINAL, "The order cannot be paid"),
    // The answer's Retry-After is the time left to the opening.
    Problem::new("not_open", 409, RETRY, "The sale has not opened yet"),
    Problem::new("closed", 409, FINAL, "The sale has closed"),
    Problem::new("paused", 409, RETRY, "The sale is paused"),
    Problem::new("pass_used", 409, FINAL, "The pass has already bought"),
    Problem::new("no_line", 409, FINAL, "The product has no line"),
    Problem::new("payload_too_large", 413, FINAL, "Request body too large"),
    Problem::new("unsupported_media_type", 415, FINAL, "Unsupported media type"),
    Problem::new("idempotency_mismatch", 422, FINAL, "This key was used for another request"),
    Problem::new("unprocessable", 422, FINAL, "The request cannot be processed"),
    Problem::new("too_busy", 429, RETRY, "Too busy: try again later"),
    Problem::new("rate_limited", 429, RETRY, "Too many requests from this client"),
    Problem::new("overloaded", 503, RETRY, "This instance is at its limit"),
    Problem::new("lock_timeout", 503, RETRY, "The product's lock was not acquired in time"),
    Problem::new("lock_lost", 503, RETRY, "The product's lock was lost"),
    Problem::new("payment_busy", 503, RETRY, "The payment provider is at its limit"),
    Problem::new("outcome_pending", 503, RETRY, "The outcome is not known yet"),
    Problem::new("unavailable", 503, RETRY, "Service unavailable"),
    // A bug may be passing (a connection in a state we did not foresee); the same key
    // never sells twice, so asking again is safe, as the big APIs advise for a 500.
    Problem::new("internal", 500, RETRY, "Internal error"),
];
