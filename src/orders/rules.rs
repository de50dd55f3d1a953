//! What the order path is told by the configuration, read once at start-up.

use std::time::{Duration, Instant};

use super::model::Ticket;
use crate::config::Config;
use crate::database::Bound;
use crate::lock::Fairness;

/// What a payment keeps of its request's time for answering: the buyer hears the outcome
/// (or `payment_busy`, or `outcome_pending`) from us, not a bare timeout. (Its request
/// started a little before the order was placed: admission's checks.)
pub const ANSWER_MARGIN: Duration = Duration::from_secs(1);

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
    /// The client's bound on one database step of a lock cycle (`--db-statement-timeout-ms`
    /// and a margin): a step that does not answer by then is abandoned (`database`).
    pub db_step: Duration,
    /// How long a lock is kept between cycles, and the bound on anyone's wait behind it
    /// (`--lock-linger-ms`, `--lock-handover-ms`, `--lock-handover-cycles`).
    pub fairness: Fairness,
    /// Shared lock-cycle transactions at once (`--shared-transactions`).
    pub shared_transactions: u8,
}

impl Rules {
    /// What an order keeps of its request's time for answering: [`ANSWER_MARGIN`], or a
    /// quarter of a request timeout shorter than 4 s.
    pub fn answer_margin(&self) -> Duration {
        ANSWER_MARGIN.min(self.request_timeout / 4)
    }

    /// When an order whose request arrived at `arrived` must have its answer.
    pub fn answer_by(&self, arrived: Instant) -> Instant {
        arrived + self.request_timeout - self.answer_margin()
    }

    /// The bound on each database step of a lock cycle serving `tickets`: a step's own
    /// bound, and none past the answer's deadline of its earliest order (its request's time
    /// less the margin kept for answering, so that whatever the cycle comes to, the buyer
    /// hears it from us, with the order's id, never as a bare timeout).
    pub(super) fn cycle_bound<'a>(&self, tickets: impl IntoIterator<Item = &'a Ticket>) -> Bound {
        let steps = Bound::steps(self.db_step);
        match tickets.into_iter().map(|t| t.placed).min() {
            Some(placed) => Bound {
                by: self.answer_by(placed),
                ..steps
            },
            None => steps,
        }
    }

    /// Whether a lock cycle starting now may still serve the order: its answer's deadline
    /// has not come. One past it is never written (its request has all but run out: its
    /// buyer is told so, and may order again); one before it is written only within it
    /// (see [`Rules::cycle_bound`]).
    pub(super) fn still_servable(&self, ticket: &Ticket) -> bool {
        Instant::now() < self.answer_by(ticket.placed)
    }

    pub fn of(config: &Config) -> Rules {
        Rules {
            lock_timeout: config.lock_timeout(),
            request_timeout: config.request_timeout(),
            stock_think: config.stock_think(),
            max_waiters_per_product: config.max_waiters_per_product,
            max_unpaid_share: config.max_unpaid_share,
            payment_concurrency: config.payment_concurrency,
            allow_unsafe_guards: config.allow_unsafe_guards,
            db_step: config.db_timeouts().step(),
            fairness: config.fairness(),
            shared_transactions: config.shared_transactions,
        }
    }
}
