//! What the order path is told by the configuration, read once at start-up.

use std::time::Duration;

use crate::config::Config;

/// What the order path is told by the configuration, read once at start-up.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// How long an order waits for its product's lock (`--lock-timeout-ms`).
    pub lock_timeout: Duration,
    /// How long a request may take (`--request-timeout-ms`): a payment's deadline.
    pub request_timeout: Duration,
    /// The pause between reading and writing the stock (`--stock-think-ms`).
    pub stock_think: Duration,
    /// Orders of one product one instance lets wait (`--max-waiters-per-product`).
    pub max_waiters_per_product: usize,
    /// Share of a product's stock unpaid reservations may hold (`--max-unpaid-share`).
    pub max_unpaid_share: f64,
    /// Charges in flight at the provider across instances (`--payment-concurrency`; 0: any).
    pub payment_concurrency: usize,
    /// Whether `none` products sell unguarded here (`--allow-unsafe-guards`).
    pub allow_unsafe_guards: bool,
}

impl Rules {
    pub fn of(config: &Config) -> Rules {
        Rules {
            lock_timeout: config.lock_timeout(),
            request_timeout: config.request_timeout(),
            stock_think: config.stock_think(),
            max_waiters_per_product: config.max_waiters_per_product,
            max_unpaid_share: config.max_unpaid_share,
            payment_concurrency: config.payment_concurrency,
            allow_unsafe_guards: config.allow_unsafe_guards,
        }
    }
}
