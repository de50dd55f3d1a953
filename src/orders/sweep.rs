//! The background work every instance does, once a `--expiry-interval-ms`: return the stock
//! of reservations past their deadline, settle payments abandoned half way, and (once a
//! minute) forget old Idempotency-Keys. Safe on all instances at once: every move is
//! conditional on the order's status, so each happens once.

use std::time::{Duration, Instant};

use super::pay::release;
use super::{Order, OrderStatus};
use crate::idempotency;
use crate::state::AppState;

/// A payment that has not finished in this long was abandoned (its instance died, or the
/// database failed it half way); no charge takes anywhere near it.
pub const STALE_PAYMENT: Duration = Duration::from_secs(300);

/// Sweeps until the task is aborted (shutdown).
pub async fn run(state: AppState) {
    let interval = Duration::from_millis(state.config.expiry_interval_ms);
    let key_ttl = Duration::from_secs(state.config.idempotency_ttl_s);
    let mut purged_at: Option<Instant> = None;
    loop {
        tokio::time::sleep(interval).await;
        match expire_due(&state).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(expired = n, "returned the stock of unpaid reservations"),
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
        }
        if let Err(e) = settle_stale_payments(&state).await {
            tracing::warn!(error = %e, "settling stale payments failed");
        }
        if purged_at.is_none_or(|at| at.elapsed() > Duration::from_secs(60)) {
            purged_at = Some(Instant::now());
            if let Err(e) = idempotency::purge(&state.db, key_ttl).await {
                tracing::warn!(error = %e, "purging old idempotency keys failed");
            }
        }
    }
}

/// One pass of the expiry: returns the stock of reservations past their deadline.
pub async fn expire_due(state: &AppState) -> anyhow::Result<usize> {
    let due: Vec<Order> = sqlx::query_as(
        "SELECT * FROM orders WHERE status = 'reserved' AND expires_at <= now()
         ORDER BY expires_at LIMIT 100",
    )
    .fetch_all(&state.db)
    .await?;
    let mut expired = 0;
    for order in &due {
        match release(state, order, OrderStatus::Reserved, OrderStatus::Expired).await {
            Ok(true) => expired += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(order = %order.id, error = %e, "expiring a reservation failed")
            }
        }
    }
    Ok(expired)
}

/// Settles orders stuck in `paying`: `paid` if a succeeded payment was recorded (the charge
/// went through), otherwise `payment_failed` with the units back on sale. The moves are
/// conditional on `paying`, so a payment finishing at the same moment wins cleanly.
async fn settle_stale_payments(state: &AppState) -> anyhow::Result<()> {
    let stale: Vec<Order> = sqlx::query_as(
        "SELECT * FROM orders WHERE status = 'paying' AND updated_at < now() - make_interval(secs => $1)
         ORDER BY updated_at LIMIT 100",
    )
    .bind(STALE_PAYMENT.as_secs_f64())
    .fetch_all(&state.db)
    .await?;
    for order in stale {
        let charged: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM payments WHERE order_id = $1 AND outcome = 'succeeded')",
        )
        .bind(order.id)
        .fetch_one(&state.db)
        .await?;
        if charged {
            sqlx::query("UPDATE orders SET status = 'paid', updated_at = now() WHERE id = $1 AND status = 'paying'")
                .bind(order.id)
                .execute(&state.db)
                .await?;
            tracing::warn!(order = %order.id, "settled an abandoned payment: paid");
        } else if release(
            state,
            &order,
            OrderStatus::Paying,
            OrderStatus::PaymentFailed,
        )
        .await?
        {
            tracing::warn!(order = %order.id, "settled an abandoned payment: failed, units returned");
        }
    }
    Ok(())
}
