//! The background work every instance does, once a `--expiry-interval-ms`: return the stock
//! of reservations past their deadline, settle payments abandoned half way, close orders left
//! `created`, and lower sold-out flags that the stock contradicts.
//!
//! Safe on all instances at once, and nothing stays stuck:
//! - an instance **takes** the rows it works on (`sweep_after` moved a lease into the future,
//!   `FOR UPDATE SKIP LOCKED`), so the others work on other rows instead of the same ones;
//! - every move is still conditional on the order's status, so a lease that runs out while
//!   its instance is slow costs a repeated attempt, never a repeated effect;
//! - an order that cannot be settled is logged and left to its lease: the next pass takes
//!   the rows behind it rather than stopping at it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::intents::{self, Settler};
use super::model::{Order, OrderStatus};
use super::pay::{intent_key, record, release};
use super::shop::Shop;
use crate::inventory;
use crate::lock::{Owner, Session, StockLock};
use crate::telemetry::metrics;

/// How long a row taken by one instance's sweep is left alone by the others; also how long
/// an order that could not be settled waits before the next try.
const LEASE: Duration = Duration::from_secs(30);

/// Rows one pass takes per question.
const PASS: i64 = 100;

/// Reservations of one product the expiry returns under one hold of its lock.
const RETURNS_PER_HOLD: usize = 10;

/// Sweeps every `interval` until the task is aborted (shutdown).
pub async fn run(shop: Shop, interval: Duration) {
    let shop = &shop;
    loop {
        tokio::time::sleep(interval).await;
        match expire_due(shop).await {
            Ok(0) => {}
            Ok(n) => {
                metrics::sweep("expired", n as u64);
                tracing::info!(expired = n, "returned the stock of unpaid reservations")
            }
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
        }
        if let Err(e) = settle_stale_payments(shop).await {
            tracing::warn!(error = %e, "settling stale payments failed");
        }
        match close_abandoned(shop).await {
            Ok(0) => {}
            Ok(n) => {
                metrics::sweep("closed_abandoned", n);
                tracing::warn!(orders = n, "closed orders left `created` (nothing sold)")
            }
            Err(e) => tracing::warn!(error = %e, "closing abandoned orders failed"),
        }
        if let Err(e) = lower_contradicted_flags(shop).await {
            tracing::warn!(error = %e, "checking sold-out flags against the stock failed");
        }
    }
}

/// What a pass takes: reservations past their deadline, or payments stale for `age`.
#[derive(Clone, Copy)]
enum Due {
    Reservations,
    Payments,
}

/// Takes up to [`PASS`] orders that are `due` and that no other sweep holds, oldest first,
/// for [`LEASE`]. (Two statements, not one with a column chosen at run time: each is
/// checked at compile time and matches its own partial index.)
async fn take(shop: &Shop, due: Due, age: Duration) -> sqlx::Result<Vec<Order>> {
    let (lease, pass, age) = (LEASE.as_secs_f64(), PASS, age.as_secs_f64());
    match due {
        Due::Reservations => {
            sqlx::query_as!(
                Order,
                "UPDATE orders SET sweep_after = now() + make_interval(secs => $1)
                 WHERE id IN (SELECT o.id FROM orders o
                              WHERE o.status = 'reserved'
                                AND o.expires_at <= now() - make_interval(secs => $3)
                                AND (o.sweep_after IS NULL OR o.sweep_after <= now())
                              ORDER BY o.expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                 RETURNING id AS \"id!\", product_id AS \"product_id!\", user_id AS \"user_id!\", quantity AS \"quantity!\", amount_cents AS \"amount_cents!\", status AS \"status!: OrderStatus\", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS \"created_at!\", updated_at AS \"updated_at!\"",
                lease,
                pass,
                age
            )
            .fetch_all(&shop.db)
            .await
        }
        Due::Payments => {
            sqlx::query_as!(
                Order,
                "UPDATE orders SET sweep_after = now() + make_interval(secs => $1)
                 WHERE id IN (SELECT o.id FROM orders o
                              WHERE o.status = 'paying'
                                AND o.updated_at <= now() - make_interval(secs => $3)
                                AND (o.sweep_after IS NULL OR o.sweep_after <= now())
                              ORDER BY o.updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                 RETURNING id AS \"id!\", product_id AS \"product_id!\", user_id AS \"user_id!\", quantity AS \"quantity!\", amount_cents AS \"amount_cents!\", status AS \"status!: OrderStatus\", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS \"created_at!\", updated_at AS \"updated_at!\"",
                lease,
                pass,
                age
            )
            .fetch_all(&shop.db)
            .await
        }
    }
}

/// One pass of the expiry: returns the stock of reservations past their deadline.
///
/// Per product, the pass takes the product's lock once as its [`Owner`] for up to
/// [`RETURNS_PER_HOLD`] returns, and each return re-enters it by counting: one lock node and
/// one queue turn for them, not one per expired order (each return still commits on its own,
/// fenced by the same token). Between holds the product's buyers get their turns.
pub(super) async fn expire_due(shop: &Shop) -> anyhow::Result<usize> {
    let due = take(shop, Due::Reservations, Duration::ZERO).await?;
    let mut by_product: BTreeMap<i64, Vec<&Order>> = BTreeMap::new();
    for order in &due {
        by_product.entry(order.product_id).or_default().push(order);
    }
    let mut expired = 0;
    // A few returns per hold: sales of the product wait while the sweep holds its lock.
    let mut holds: Vec<(i64, &[&Order])> = Vec::new();
    for (product, orders) in &by_product {
        holds.extend(
            orders
                .chunks(RETURNS_PER_HOLD)
                .map(|chunk| (*product, chunk)),
        );
    }
    for (product, orders) in holds {
        let owner = Owner::new();
        let _pass = hold_for_pass(shop, &owner, product).await;
        for order in orders {
            let released = release(
                shop,
                order,
                OrderStatus::Reserved,
                OrderStatus::Expired,
                Some(&owner),
            );
            match released.await {
                Ok(true) => expired += 1,
                Ok(false) => {}
                Err(e) => {
                    metrics::sweep("skipped", 1);
                    tracing::warn!(order = %order.id, error = %e, "expiring a reservation failed; retrying later")
                }
            }
        }
    }
    Ok(expired)
}

/// The product's lock, taken by `owner` for a pass (`None` for a guard without a lock, or if
/// it cannot be had now: each return then tries on its own, and fails or not as it would).
async fn hold_for_pass(shop: &Shop, owner: &Owner, product: i64) -> Option<StockLock> {
    let terms = shop.terms(product).await.ok()??;
    let timeout = shop.rules.lock_timeout;
    let entered = inventory::enter_as(
        &shop.zk,
        Some(owner),
        product,
        terms.guard,
        Session::Shared,
        timeout,
    );
    entered.await.ok()?.0
}

/// Settles orders stuck in `paying`: `paid` if a succeeded payment was recorded (the charge
/// went through), otherwise `payment_failed` with the units back on sale. The moves are
/// conditional on `paying`, so a payment finishing at the same moment wins cleanly.
async fn settle_stale_payments(shop: &Shop) -> anyhow::Result<()> {
    // Past its attempt's window the order's own task has finished (or died): what is still
    // `paying` waits for us.
    let stale = take(shop, Due::Payments, shop.attempt_window()).await?;
    for order in stale {
        if let Err(e) = settle(shop, &order).await {
            metrics::sweep("skipped", 1);
            tracing::warn!(order = %order.id, error = %e, "settling a payment failed; retrying later");
        }
    }
    Ok(())
}

/// Settles one order left `paying`, from what is known of its charge — never by assuming:
/// an outcome recorded on its intent is applied; a pending intent's charge is sent again
/// under its original key (the provider charges at most once per key, and answers the
/// charge it made, if it made one); an order with no intent was never sent, and the
/// provider is asked to be sure. Still unknown (the provider does not answer): left for the
/// next pass.
async fn settle(shop: &Shop, order: &Order) -> anyhow::Result<()> {
    let intent = intents::of_order(&shop.db, order.id).await?;
    let deadline = Instant::now() + shop.payment.timeout * 2;
    let key = intent_key(order.id);
    let charge = match intent.as_ref().map(|i| i.outcome.as_deref()) {
        Some(Some("succeeded")) => {
            intents::paid(&shop.db, order.id).await?;
            metrics::sweep("settled_paid", 1);
            return Ok(());
        }
        Some(Some(_)) => return unpaid(shop, order).await,
        Some(None) => {
            shop.payment
                .charge(&key, order.amount_cents, deadline)
                .await?
        }
        None => match shop.payment.lookup(&key, deadline).await? {
            Some(charge) => charge,
            // Never sent, so never charged.
            None => return unpaid(shop, order).await,
        },
    };
    let settled = record(shop, order, &charge, deadline, Settler::Sweep).await;
    let outcome = if charge.approved() {
        "settled_paid"
    } else {
        "settled_failed"
    };
    metrics::sweep(outcome, 1);
    tracing::warn!(order = %order.id, outcome, answer = ?settled.as_ref().map(|o| o.status), "settled a payment from the provider's answer");
    Ok(())
}

/// A payment that charged nothing (declined, or never sent): the units go back on sale.
async fn unpaid(shop: &Shop, order: &Order) -> anyhow::Result<()> {
    let to = OrderStatus::PaymentFailed;
    if release(shop, order, OrderStatus::Paying, to, None).await? {
        metrics::sweep("settled_failed", 1);
        tracing::warn!(order = %order.id, "settled a payment that charged nothing: units returned");
    }
    Ok(())
}

/// Closes orders left `created` longer than any order can run (lock timeout + request
/// timeout): their process died before the sale decided them, so nothing was sold. They end
/// `failed` (`abandoned`), and their Idempotency-Key is free for a retry. (This version
/// writes no `created` rows; earlier ones did, and an upgrade may find some.)
async fn close_abandoned(shop: &Shop) -> sqlx::Result<u64> {
    let age = shop.rules.lock_timeout + shop.rules.request_timeout;
    let closed = sqlx::query!(
        "UPDATE orders SET status = 'failed', failure = 'abandoned', updated_at = now()
         WHERE status = 'created' AND created_at < now() - make_interval(secs => $1)",
        age.as_secs_f64()
    )
    .execute(&shop.db)
    .await?;
    Ok(closed.rows_affected())
}

/// Lowers each sold-out flag whose product has stock: raised by a crash between a sale's
/// commit and the re-read that lowers it, or left by anything else, a flag would otherwise
/// answer 409 `sold_out` on every instance while units are on sale. A sale that leaves the
/// stock at 0 raises it again.
async fn lower_contradicted_flags(shop: &Shop) -> sqlx::Result<()> {
    let flagged: Vec<i64> = shop
        .sold_out
        .all_raised()
        .iter()
        .filter_map(|flag| flag.parse().ok())
        .collect();
    if flagged.is_empty() {
        return Ok(());
    }
    let in_stock: Vec<i64> = sqlx::query_scalar!(
        "SELECT id FROM products WHERE id = ANY($1) AND stock > 0",
        &flagged
    )
    .fetch_all(&shop.db)
    .await?;
    for product in in_stock {
        tracing::warn!(
            product,
            "sold-out flag raised while the product has stock; lowering it"
        );
        shop.sold_out.lower(&product.to_string()).await;
        shop.events.touch(product);
        metrics::sweep("lowered_flag", 1);
    }
    Ok(())
}
