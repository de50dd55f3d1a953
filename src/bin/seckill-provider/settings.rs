//! The provider's faults: rates for a sale under chaos, one-shot counts for tests that need a
//! fault to hit exactly the next charge, and keys whose every answer is lost for a while (the
//! page's money demo).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Fault rates, from the command line (and changed with `PUT /v1/settings`).
#[derive(clap::Args, Clone, Debug, Default, Serialize)]
pub struct Faults {
    /// How long a charge takes.
    #[arg(long, env = "PROVIDER_LATENCY_MS", default_value_t = 0)]
    pub latency_ms: u64,
    /// Share of charges declined, 0.0 to 1.0.
    #[arg(long, env = "PROVIDER_DECLINE_RATE", default_value_t = 0.0)]
    pub decline_rate: f64,
    /// Share of requests answered 500 before anything is charged.
    #[arg(long, env = "PROVIDER_ERROR_RATE", default_value_t = 0.0)]
    pub error_rate: f64,
    /// Share of charges answered only after `--slow-ms` more (beyond a caller's timeout).
    #[arg(long, env = "PROVIDER_SLOW_RATE", default_value_t = 0.0)]
    pub slow_rate: f64,
    #[arg(long, env = "PROVIDER_SLOW_MS", default_value_t = 10_000)]
    pub slow_ms: u64,
    /// Share of charges made whose answer is then lost (the connection drops).
    #[arg(long, env = "PROVIDER_LOSE_RATE", default_value_t = 0.0)]
    pub lose_rate: f64,
}

/// A change of settings: each rate given replaces the current one; counts make exactly the
/// next N requests fail, or the next N charges lose their answer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Change {
    pub latency_ms: Option<u64>,
    pub decline_rate: Option<f64>,
    pub error_rate: Option<f64>,
    pub slow_rate: Option<f64>,
    pub slow_ms: Option<u64>,
    pub lose_rate: Option<f64>,
    pub fail_next: u32,
    pub lose_next: u32,
    /// Every charge under this key is made, and its answer lost, until `answer_again`
    /// names it or [`LOSING_AT_MOST`] has passed: a network that drops one payment's answers
    /// for a while (the page's money demo, where the shop's retries must all go unanswered).
    pub lose_answers_of: Option<String>,
    pub answer_again: Option<String>,
}

#[derive(Default, Serialize)]
struct Now {
    #[serde(flatten)]
    faults: Faults,
    fail_next: u32,
    lose_next: u32,
    /// Keys whose answers are lost, until when.
    #[serde(serialize_with = "keys_only")]
    losing_answers_of: BTreeMap<String, Instant>,
}

/// The longest a key's answers are lost: a forgotten fault heals on its own, so nothing
/// stays unsettled because its demo stopped half way.
pub const LOSING_AT_MOST: Duration = Duration::from_secs(120);

fn keys_only<S: serde::Serializer>(
    keys: &BTreeMap<String, Instant>,
    to: S,
) -> Result<S::Ok, S::Error> {
    to.collect_seq(keys.keys())
}

pub struct Settings {
    now: Mutex<Now>,
}

/// What happens to one charge request.
pub struct Plan {
    pub fail: bool,
    pub latency: Duration,
    pub decline: bool,
    pub slow: Duration,
    pub lose: bool,
}

impl Settings {
    pub fn new(faults: Faults) -> Settings {
        Settings {
            now: Mutex::new(Now {
                faults,
                ..Now::default()
            }),
        }
    }

    pub fn change(&self, change: Change) {
        let mut now = self.now.lock().expect("settings poisoned");
        let faults = &mut now.faults;
        faults.latency_ms = change.latency_ms.unwrap_or(faults.latency_ms);
        faults.decline_rate = change.decline_rate.unwrap_or(faults.decline_rate);
        faults.error_rate = change.error_rate.unwrap_or(faults.error_rate);
        faults.slow_rate = change.slow_rate.unwrap_or(faults.slow_rate);
        faults.slow_ms = change.slow_ms.unwrap_or(faults.slow_ms);
        faults.lose_rate = change.lose_rate.unwrap_or(faults.lose_rate);
        now.fail_next += change.fail_next;
        now.lose_next += change.lose_next;
        let at = Instant::now();
        now.losing_answers_of.retain(|_, until| *until > at);
        if let Some(key) = change.lose_answers_of {
            now.losing_answers_of.insert(key, at + LOSING_AT_MOST);
        }
        if let Some(key) = change.answer_again {
            now.losing_answers_of.remove(&key);
        }
    }

    pub fn show(&self) -> serde_json::Value {
        serde_json::to_value(&*self.now.lock().expect("settings poisoned"))
            .expect("settings serialise")
    }

    /// Draws the faults of a request to charge under `key`.
    pub fn plan(&self, key: &str) -> Plan {
        let mut now = self.now.lock().expect("settings poisoned");
        let chance = |rate: f64| fastrand::f64() < rate;
        let fail = if now.fail_next > 0 {
            now.fail_next -= 1;
            true
        } else {
            chance(now.faults.error_rate)
        };
        let lose = !fail
            && if now
                .losing_answers_of
                .get(key)
                .is_some_and(|until| Instant::now() < *until)
            {
                true
            } else if now.lose_next > 0 {
                now.lose_next -= 1;
                true
            } else {
                chance(now.faults.lose_rate)
            };
        Plan {
            fail,
            latency: Duration::from_millis(now.faults.latency_ms),
            decline: chance(now.faults.decline_rate),
            slow: if chance(now.faults.slow_rate) {
                Duration::from_millis(now.faults.slow_ms)
            } else {
                Duration::ZERO
            },
            lose,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_hit_exactly_the_next_requests_and_rates_stay() {
        let settings = Settings::new(Faults {
            latency_ms: 5,
            ..Faults::default()
        });
        settings.change(Change {
            fail_next: 1,
            lose_next: 2,
            ..Change::default()
        });
        let plans: Vec<(bool, bool)> = (0..4)
            .map(|_| settings.plan("k"))
            .map(|p| (p.fail, p.lose))
            .collect();
        // A failed request charges nothing, so it does not use up a lost answer.
        assert_eq!(
            plans,
            [(true, false), (false, true), (false, true), (false, false)]
        );
        assert_eq!(
            settings.plan("k").latency,
            Duration::from_millis(5),
            "a count leaves the rates"
        );
        settings.change(Change {
            decline_rate: Some(1.0),
            ..Change::default()
        });
        assert!(settings.plan("k").decline);
        assert_eq!(settings.plan("k").latency, Duration::from_millis(5));
    }

    #[test]
    fn a_keys_answers_are_lost_until_it_is_answered_again() {
        let settings = Settings::new(Faults::default());
        settings.change(Change {
            lose_answers_of: Some("a".into()),
            ..Change::default()
        });
        let lost = |key| settings.plan(key).lose;
        assert_eq!([lost("a"), lost("a"), lost("b")], [true, true, false]);
        settings.change(Change {
            answer_again: Some("a".into()),
            ..Change::default()
        });
        assert!(!lost("a"));
    }
}
