//! The background's own audit: every `--audit-interval-ms` each instance reads the books of
//! every product and the work the other loops should have done by now, and reports both as
//! gauges (`telemetry::metrics`), so an alert fires on an oversell or on a loop that fell
//! behind without anyone asking `GET /api/products/{id}/audit`.
//!
//! Read-only and database-wide: every instance reports the same numbers (the rules take their
//! maximum), and an outranked instance reports too, since reading guards nothing.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;

use super::shop::Shop;
use crate::telemetry::metrics;

/// How long past its deadline a reservation may wait for the returns loop (which runs every
/// `--expiry-interval-ms` and returns up to `returns::PER_CYCLE` per lock cycle) before it
/// counts as overdue.
const RETURN_GRACE: Duration = Duration::from_secs(30);

/// Audits every `interval` until aborted. A pass that panics is logged and counted as a
/// restart, and the next pass runs as usual: an audit that stopped would read as books
/// nobody checks (`seckill_audit_timestamp_seconds` stale).
pub async fn run(shop: Shop, interval: Duration) {
    loop {
        match AssertUnwindSafe(pass(&shop)).catch_unwind().await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the background audit failed; retrying next pass")
            }
            Err(_) => {
                tracing::error!("the background audit panicked; running it again next pass");
                metrics::worker_restarted("audit");
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// One pass: the books, then what is overdue.
async fn pass(shop: &Shop) -> sqlx::Result<()> {
    // The same sums `inventory::product::audit` checks for one product, for all at once.
    let books = sqlx::query!(
        r#"SELECT p.id AS "id!", p.stock AS "stock!",
                  (p.stock + COALESCE(s.sold, 0) = p.stocked_total
                   AND p.sold = COALESCE(s.sold, 0)) AS "consistent!",
                  p.guard = 'none' AS "unguarded!"
           FROM products p
           LEFT JOIN (SELECT product_id, SUM(quantity)::BIGINT AS sold FROM orders
                      WHERE status IN ('reserved', 'paying', 'paid') GROUP BY product_id) s
                  ON s.product_id = p.id"#
    )
    .fetch_all(&shop.db)
    .await?;
    // The `none` guard oversells on purpose (the teaching demo): not an alert.
    let inconsistent = books
        .iter()
        .filter(|b| !b.consistent && !b.unguarded)
        .count();
    let stock: Vec<(i64, i64)> = books.iter().map(|b| (b.id, i64::from(b.stock))).collect();
    if inconsistent > 0 {
        tracing::error!(
            products = inconsistent,
            "the audit found books that do not balance"
        );
    }
    metrics::audited(inconsistent, &stock);

    // Past the attempt window the order's own task is done; one sweep lease later the
    // settlement loop has had its try. Still `paying` then: the provider or the sweep is
    // in trouble, and the buyer still waits for a word.
    let window = (shop.attempt_window() + super::sweep::LEASE).as_secs_f64();
    let overdue = sqlx::query!(
        r#"SELECT
             (SELECT COUNT(*) FROM orders WHERE status = 'reserved'
                AND expires_at < now() - make_interval(secs => $1)) AS "returns!",
             (SELECT COUNT(*) FROM orders WHERE status = 'paying'
                AND updated_at < now() - make_interval(secs => $2)) AS "settlement!",
             (SELECT COUNT(*) FROM payments WHERE outcome IS NULL
                AND created_at < now() - make_interval(secs => $2)) AS "intents!""#,
        RETURN_GRACE.as_secs_f64(),
        window
    )
    .fetch_one(&shop.db)
    .await?;
    metrics::overdue("returns", overdue.returns);
    metrics::overdue("settlement", overdue.settlement);
    metrics::overdue("intents", overdue.intents);
    Ok(())
}
