//! The step-through sale, for the teaching page (admin, `--allow-unsafe-guards`): while a
//! product is in step mode, each holder of its lock, once its stock write has committed,
//! keeps the lock until the page says "next". A person sees the queue frozen with one holder,
//! releases it, and sees who wakes: one waiter under the fair lock (the one watching the
//! holder's node), every waiter under the herd lock.
//!
//! It never changes what is sold: the wait comes after the commit, with the orders already
//! answered. It ends on its own: the mode lasts [`STEP_MODE`] at most, and a holder waits at
//! most until the mode ends, so a forgotten demo cannot stall a sale for long.
//!
//! Shared through ZooKeeper flags (the demo flags), so it works whichever instance holds the
//! lock: `{product}-step-until-{unix ms}` turns the mode on, `{product}-next-{fence}`
//! releases the holder whose fencing token that is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Teaching;
use crate::lock::{LockError, Recipe};

/// The longest a step-through lasts once started.
pub const STEP_MODE: Duration = Duration::from_secs(120);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn until_prefix(product_id: i64) -> String {
    format!("{product_id}-step-until-")
}

fn next_flag(product_id: i64, token: i64) -> String {
    format!("{product_id}-next-{token}")
}

/// The latest end among the product's step flags that is still ahead of `now`: a mode whose
/// time is up is off, whether or not anyone lowered its flag.
fn live_until(flags: &[String], product_id: i64, now: u64) -> Option<u64> {
    let prefix = until_prefix(product_id);
    flags
        .iter()
        .filter_map(|flag| flag.strip_prefix(&prefix)?.parse::<u64>().ok())
        .filter(|until| *until > now)
        .max()
}

impl Teaching {
    /// When the product's step mode ends (unix ms), if it is on.
    pub fn step_until(&self, product_id: i64) -> Option<u64> {
        live_until(&self.demo.all_raised(), product_id, now_ms())
    }

    /// Whether a holder of the product's lock should wait for "next" now.
    pub(super) fn stepping(&self, product_id: i64) -> bool {
        self.allow_unsafe && self.step_until(product_id).is_some()
    }

    /// Turns step mode on (afresh) for [`STEP_MODE`]; returns when it ends (unix ms).
    pub async fn step_start(&self, product_id: i64) -> u64 {
        self.lower_all(&[&until_prefix(product_id), &format!("{product_id}-next-")])
            .await;
        let until = now_ms() + STEP_MODE.as_millis() as u64;
        self.demo
            .raise(&format!("{}{until}", until_prefix(product_id)))
            .await;
        until
    }

    /// Ends step mode and lets the current holder go.
    pub async fn step_stop(
        &self,
        product_id: i64,
        recipe: Recipe,
    ) -> Result<Option<i64>, LockError> {
        self.lower_all(&[&until_prefix(product_id)]).await;
        self.step_next(product_id, recipe).await
    }

    /// Releases the product's current holder; its fencing token, if anyone held the lock.
    pub async fn step_next(
        &self,
        product_id: i64,
        recipe: Recipe,
    ) -> Result<Option<i64>, LockError> {
        let view = self
            .zk
            .queue(product_id, recipe)
            .await
            .map_err(|e| LockError::Unavailable(e.into()))?;
        let Some(holder) = view.holder else {
            return Ok(None);
        };
        self.demo.raise(&next_flag(product_id, holder.token)).await;
        Ok(Some(holder.token))
    }

    /// For a lock holder whose write committed: if the product is stepping, waits for "next"
    /// (or the mode's end), then lets the lock go.
    pub(super) async fn step_hold(&self, product_id: i64, token: i64) {
        let Some(until) = self.step_until(product_id) else {
            return;
        };
        let flag = next_flag(product_id, token);
        let left = Duration::from_millis(until.saturating_sub(now_ms()));
        tracing::info!(
            product = product_id,
            fence = token,
            "step-through: holding the lock until next"
        );
        tokio::select! {
            _ = self.demo.raised(&flag) => {}
            _ = tokio::time::sleep(left) => {}
        }
        self.demo.lower(&flag).await;
    }

    async fn lower_all(&self, prefixes: &[&str]) {
        for flag in self.demo.all_raised() {
            if prefixes.iter().any(|p| flag.starts_with(p)) {
                self.demo.lower(&flag).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_mode_ends_on_its_own_when_its_time_is_up() {
        let flags: Vec<String> = [
            "7-step-until-1000",
            "7-step-until-2000",
            "8-step-until-9000",
            "7-crash",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(live_until(&flags, 7, 500), Some(2000));
        assert_eq!(live_until(&flags, 7, 1500), Some(2000));
        assert_eq!(live_until(&flags, 7, 2000), None, "over at its end");
        assert_eq!(live_until(&flags, 9, 0), None, "another product's mode");
        assert_eq!(live_until(&flags, 8, 2000), Some(9000));
    }
}
