//! The background work every instance does, once a `--expiry-interval-ms`, in three loops
//! of their own so that none waits behind another (a provider that hangs for minutes must
//! not keep lapsed units off sale):
//! - **returns**: reservations past their deadline go back on sale, up to
//!   `returns::PER_CYCLE` per lock cycle (see `returns`);
//! - **settlement**: payments abandoned half way are settled from the provider's word,
//!   several at once, each charge under a payment lease when `--payment-concurrency` is set;
//! - **upkeep**: orders left `created` are closed, intents left pending without a `paying`
//!   order are settled, and sold-out flags the stock contradicts are lowered.
//!
//! Safe on all instances at once, and nothing stays stuck: returns take turns at the
//! product's lock and take only rows still due; settlement **takes** its rows
//! (`sweep_after` moved a lease into the future, `FOR UPDATE SKIP LOCKED`); every move is
//! conditional on the order's status, so a lease that runs out while its instance is slow
//! costs a repeated attempt, never a repeated effect. An instance whose ZooKeeper ensemble
//! is outranked (a stray on another ZooKeeper) does none of it: the guarding fleet does.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::intents::{self, Settler};
use super::model::{Order, OrderStatus};
use super::pay::{intent_key, lease, record, release, Intent};
use super::returns;
use super::shop::Shop;
use crate::telemetry::metrics;

/// How long a row taken by one instance's settlement is left alone by the others; also how
/// long an order that could not be settled waits before the next try.
pub(super) const LEASE: Duration = Duration::from_secs(30);

/// Rows one pass takes per question.
const PASS: i64 = 100;

/// Products whose lapsed reservations one instance returns at once (each waits for its own
/// lock; more would only queue more lock nodes).
const PRODUCTS_AT_ONCE: usize = 4;

/// Payments one instance settles at once (each may wait seconds on the provider).
const SETTLING_AT_ONCE: usize = 8;

/// The background loops, each on its own.
#[derive(Clone, Copy, Debug)]
enum Loop {
    Returns,
    Settlement,
    Upkeep,
}

impl Loop {
    fn name(self) -> &'static str {
        match self {
            Loop::Returns => "sweep-returns",
            Loop::Settlement => "sweep-settlement",
            Loop::Upkeep => "sweep-upkeep",
        }
    }

    /// Runs this loop's pass every `interval`, except while another ensemble guards the
    /// database, until aborted.
    async fn run(self, shop: Shop, interval: Duration) {
        let shop = &shop;
        loop {
            tokio::time::sleep(interval).await;
            if shop.outranked() {
                continue;
            }
            match self {
                Loop::Returns => return_lapsed(shop).await,
                Loop::Settlement => settle_payments(shop).await,
                Loop::Upkeep => upkeep(shop).await,
            }
        }
    }
}

/// Runs the three loops every `interval`, each a task of its own (a panic in one is logged
/// and that loop starts again; the others go on), until aborted (shutdown: dropping the set
/// aborts them).
pub async fn run(shop: Shop, interval: Duration) {
    let mut loops = tokio::task::JoinSet::new();
    let mut which = std::collections::HashMap::new();
    for each in [Loop::Returns, Loop::Settlement, Loop::Upkeep] {
        let id = loops.spawn(each.run(shop.clone(), interval)).id();
        which.insert(id, each);
    }
    while let Some(ended) = loops.join_next_with_id().await {
        let Err(e) = ended else { continue };
        let Some(each) = which.remove(&e.id()) else {
            continue;
        };
        tracing::error!(worker = each.name(), error = %e, "a background loop ended; starting it again");
        metrics::worker_restarted(each.name());
        let id = loops.spawn(each.run(shop.clone(), interval)).id();
        which.insert(id, each);
    }
}

/// Gives back every reservation past its deadline, product by product, a lock cycle of up
/// to `returns::PER_CYCLE` at a time until none is left due.
async fn return_lapsed(shop: &Shop) {
    let products = match super::store::products_due(&shop.db, PASS).await {
        Ok(products) => products,
        Err(e) => return tracing::warn!(error = %e, "finding lapsed reservations failed"),
    };
    let each = futures_util::stream::iter(products).for_each_concurrent(
        PRODUCTS_AT_ONCE,
        |product| async move {
            loop {
                match returns::return_due(shop, product).await {
                    Ok(n) => {
                        if n > 0 {
                            metrics::sweep("expired", n as u64);
                            tracing::info!(
                                product,
                                expired = n,
                                "returned the stock of unpaid reservations"
                            );
                        }
                        if (n as i64) < returns::PER_CYCLE {
                            return;
                        }
                    }
                    Err(e) => {
                        metrics::sweep("skipped", 1);
                        tracing::warn!(
                            product,
                            error = format!("{e:#}"),
                            "returning lapsed reservations failed; retrying next pass"
                        );
                        return;
                    }
                }
            }
        },
    );
    each.await;
}

/// Closing abandoned orders and lowering contradicted flags: nothing here waits on the
/// provider.
async fn upkeep(shop: &Shop) {
    match close_abandoned(shop).await {
        Ok(0) => {}
        Ok(n) => {
            metrics::sweep("closed_abandoned", n);
            tracing::warn!(orders = n, "closed orders left `created` (nothing sold)")
        }
        Err(e) => tracing::warn!(error = %e, "closing abandoned orders failed"),
    }
    if let Err(e) = settle_orphans(shop).await {
        tracing::warn!(
            error = format!("{e:#}"),
            "settling orphaned payment intents failed"
        );
    }
    if let Err(e) = lower_contradicted_flags(shop).await {
        tracing::warn!(error = %e, "checking sold-out flags against the stock failed");
    }
}

/// Takes up to [`SETTLING_AT_ONCE`] orders stale in `paying` for `age` that no other sweep
/// holds, oldest first, for [`LEASE`]: no more than it works on at once, so none waits out
/// its lease in a queue here while another instance could settle it.
async fn take_stale_payments(shop: &Shop, age: Duration) -> sqlx::Result<Vec<Order>> {
    let pass = SETTLING_AT_ONCE as i64;
    let (lease, age) = (LEASE.as_secs_f64(), age.as_secs_f64());
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

/// Settles orders stuck in `paying` (then orphaned intents): `paid` if a succeeded payment was recorded (the charge
/// went through), otherwise `payment_failed` with the units back on sale. The moves are
/// conditional on `paying`, so a payment finishing at the same moment wins cleanly.
async fn settle_payments(shop: &Shop) {
    // Past its attempt's window the order's own task has finished (or died): what is still
    // `paying` waits for us. Taken a handful at a time, until none is left.
    loop {
        let stale = match take_stale_payments(shop, shop.attempt_window()).await {
            Ok(stale) => stale,
            Err(e) => break tracing::warn!(error = %e, "settling stale payments failed"),
        };
        let taken = stale.len();
        let each = futures_util::stream::iter(stale).for_each_concurrent(SETTLING_AT_ONCE, |order| async move {
            if let Err(e) = settle(shop, &order).await {
                metrics::sweep("skipped", 1);
                tracing::warn!(order = %order.id, error = format!("{e:#}"), "settling a payment failed; retrying later");
            }
        });
        each.await;
        if taken < SETTLING_AT_ONCE {
            break;
        }
    }
    if let Err(e) = settle_orphans(shop).await {
        tracing::warn!(
            error = format!("{e:#}"),
            "settling orphaned payment intents failed"
        );
    }
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
        Some(Some(_)) => return unpaid(shop, order, Intent::Keep).await,
        // Never sent (no lease, no time, the database away when it was given back): its
        // buyer was told it was not charged, and it never will be.
        Some(None) if intent.as_ref().is_some_and(|i| !i.sent) => {
            return unpaid(shop, order, Intent::DropUnsent).await
        }
        Some(None) => {
            // A charge like any other: within `--payment-concurrency`.
            let _lease = lease(shop, order, deadline).await?;
            shop.payment
                .charge(&key, order.amount_cents, deadline)
                .await?
        }
        None => match shop.payment.lookup(&key, deadline).await? {
            Some(charge) => charge,
            // Never sent, so never charged.
            None => return unpaid(shop, order, Intent::Keep).await,
        },
    };
    // Its own time to record and, for a decline, to give the units back: the charge may
    // have used up the time it was given.
    let record_by = Instant::now() + shop.payment.timeout * 2;
    let settled = record(shop, order, &charge, record_by, Settler::Sweep).await;
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
/// (Its intent, one never sent, dropped in the same transaction with `Intent::DropUnsent`.)
async fn unpaid(shop: &Shop, order: &Order, intent: Intent) -> anyhow::Result<()> {
    let to = OrderStatus::PaymentFailed;
    if release(shop, order, OrderStatus::Paying, to, intent).await? {
        metrics::sweep("settled_failed", 1);
        tracing::warn!(order = %order.id, ?intent, "settled a payment that charged nothing: units returned");
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

/// Settles intents left pending on orders that are not `paying` (none should be: every path
/// that gives up an order settles or removes its intent in the same transaction; this
/// catches any that an older version or a bug left). The provider is asked under the
/// intent's key: a charge it made is recorded (and logged loudly: money taken for an order
/// that is not being paid, to be refunded by hand), an intent it never saw is removed.
async fn settle_orphans(shop: &Shop) -> anyhow::Result<()> {
    let orphans = intents::orphans(&shop.db, shop.attempt_window(), PASS).await?;
    for order in orphans {
        // Never sent: nothing to ask the provider about.
        if intents::drop_unsent(&shop.db, order.id).await? {
            metrics::sweep("orphan_dropped", 1);
            tracing::warn!(order = %order.id, "removed a payment intent never sent, on an order not being paid");
            continue;
        }
        let key = intent_key(order.id);
        let deadline = Instant::now() + shop.payment.timeout * 2;
        match shop.payment.lookup(&key, deadline).await? {
            Some(charge) => {
                let approved = charge.approved();
                let record_by = Instant::now() + shop.payment.timeout * 2;
                // Its answer is for no buyer: what matters is the intent's outcome, recorded.
                let _ = record(shop, &order, &charge, record_by, Settler::Sweep).await;
                if approved {
                    tracing::error!(order = %order.id, status = order.status.as_str(), "a charge was made for an order that is not being paid: refund it");
                }
                metrics::sweep("orphan_settled", 1);
            }
            None => {
                intents::drop_uncharged(&shop.db, order.id).await?;
                metrics::sweep("orphan_dropped", 1);
                tracing::warn!(order = %order.id, "removed a payment intent the provider never saw, on an order not being paid");
            }
        }
    }
    Ok(())
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
