//! The simulated payment provider: a configurable delay and decline rate, standing in for a
//! real gateway so the order flow has its third step and its failure path.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Provider {
    /// How long a charge takes.
    pub latency: Duration,
    /// Share of charges declined, 0.0 to 1.0.
    pub failure_rate: f64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Charge {
    Approved { reference: String },
    Declined { reference: String },
}

impl Provider {
    pub async fn charge(&self, amount_cents: i64) -> Charge {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let reference = format!("sim_{:016x}", fastrand::u64(..));
        tracing::debug!(amount_cents, %reference, "simulated charge");
        // `<` so that rate 0.0 never declines and 1.0 always does.
        if fastrand::f64() < self.failure_rate {
            Charge::Declined { reference }
        } else {
            Charge::Approved { reference }
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
            assert!(matches!(always.charge(100).await, Charge::Approved { .. }));
            assert!(matches!(never.charge(100).await, Charge::Declined { .. }));
        }
    }
}
