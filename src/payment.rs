//! The simulated payment provider: a configurable delay and decline rate, standing in for a
//! real gateway so the order flow has its third step and its failure path.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::telemetry::metrics;

/// The payment provider's semaphore (`--payment-concurrency`), under `{root}/semaphores/`.
pub const PAYMENT_SEMAPHORE: &str = "payment";

#[derive(Clone, Debug)]
pub struct Provider {
    /// How long a charge takes.
    pub latency: Duration,
    /// Share of charges declined, 0.0 to 1.0.
    pub failure_rate: f64,
}

/// The provider's answer to one charge, with when it started and ended at the provider:
/// kept with the payment, they give the provider's concurrency after the fact (a test
/// checks `--payment-concurrency` with them).
#[derive(Debug)]
pub struct Charge {
    pub approved: bool,
    pub reference: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

impl Provider {
    pub async fn charge(&self, amount_cents: i64) -> Charge {
        let started_at = Utc::now();
        metrics::payments_in_flight(1.0);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        metrics::payments_in_flight(-1.0);
        let reference = format!("sim_{:016x}", fastrand::u64(..));
        tracing::debug!(amount_cents, %reference, "simulated charge");
        Charge {
            // `<` so that rate 0.0 never declines and 1.0 always does.
            approved: fastrand::f64() >= self.failure_rate,
            reference,
            started_at,
            ended_at: Utc::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rates_zero_and_one_are_exact() {
        let always = Provider {
            latency: Duration::ZERO,
            failure_rate: 0.0,
        };
        let never = Provider {
            latency: Duration::ZERO,
            failure_rate: 1.0,
        };
        for _ in 0..100 {
            assert!(always.charge(100).await.approved);
            assert!(!never.charge(100).await.approved);
        }
    }
}
