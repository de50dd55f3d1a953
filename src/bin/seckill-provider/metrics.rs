//! What the provider reports on `GET /metrics` (open, as `/healthz`: counts, no ledger data),
//! so its own failures show beside the shop's: a shop that hears `unknown` and a provider
//! that says it answered 500 tell one story from two sides.

use std::time::Instant;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const CHARGES: &str = "provider_charges_total";
pub const CHARGE_DURATION: &str = "provider_charge_duration_seconds";
pub const IN_FLIGHT: &str = "provider_charges_in_flight";

/// From a charge answered at once to one slower than any caller waits.
const SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the recorder; its handle renders `GET /metrics`.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(CHARGE_DURATION.into()), SECONDS)?
        .install_recorder()?;
    describe_counter!(CHARGES, "Charge requests answered, by outcome (succeeded, declined, failed: a 5xx with nothing charged, lost: charged and the answer dropped, conflict: a key reused for another amount, invalid)");
    describe_histogram!(
        CHARGE_DURATION,
        metrics::Unit::Seconds,
        "Time to answer a POST /v1/charges"
    );
    describe_gauge!(IN_FLIGHT, "Charge requests being answered now");
    seckill::telemetry::metrics::keep_up(handle.clone());
    Ok(handle)
}

/// One charge request, from arrival to answer: in flight while it lives.
pub struct Charging(Instant);

impl Charging {
    pub fn start() -> Charging {
        gauge!(IN_FLIGHT).increment(1.0);
        Charging(Instant::now())
    }

    /// Its answer's outcome.
    pub fn answered(self, outcome: &'static str) {
        counter!(CHARGES, "outcome" => outcome).increment(1);
        histogram!(CHARGE_DURATION).record(self.0.elapsed().as_secs_f64());
    }
}

impl Drop for Charging {
    // A caller that hung up drops the request mid-way: it is no longer in flight either.
    fn drop(&mut self) {
        gauge!(IN_FLIGHT).decrement(1.0);
    }
}
