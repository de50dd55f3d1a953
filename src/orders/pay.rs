//! Step 5, paying — a batch's charges run concurrently after its commit, outside the lock,
//! and are recorded in one statement — and the way back: a declined payment or an expired
//! reservation returns its units through the same guard that took them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use futures_util::future::join_all;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::model::{Answer, Order, OrderStatus};
use super::shop::Shop;
use super::store::{self, advance, Payment};
use crate::error::Error;
use crate::inventory::{self, Change, Outcome};
use crate::lock::{LockError, Owner, Session};
use crate::payment::{Charge, PAYMENT_SEMAPHORE};
use crate::telemetry::metrics;

/// Pays a reservation. The order is first claimed (`reserved` → `paying`) only if its
/// reservation is still running, in one conditional UPDATE; the expiry sweep moves
/// `reserved` → `expired` with the opposite condition. PostgreSQL serialises the two on the
/// order's row, so a payment racing the expiry ends in exactly one of them.
impl Shop {
    /// Pays a reservation (see [`pay`]).
    pub async fn pay(&self, id: Uuid) -> Result<Order, Error> {
        pay(self, id).await
    }
}

async fn pay(shop: &Shop, id: Uuid) -> Result<Order, Error> {
    let db = &shop.db;
    let claimed: Option<Order> = sqlx::query_as!(
        Order,
        "UPDATE orders SET status = 'paying', updated_at = now()
         WHERE id = $1 AND status = 'reserved' AND expires_at > now() RETURNING id AS \"id!\", product_id AS \"product_id!\", user_id AS \"user_id!\", quantity AS \"quantity!\", amount_cents AS \"amount_cents!\", status AS \"status!: OrderStatus\", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS \"created_at!\", updated_at AS \"updated_at!\"",
        id,
    )
    .fetch_optional(db)
    .await?;
    let Some(order) = claimed else {
        let current = store::get(db, id).await?.ok_or(Error::OrderNotFound(id))?;
        return match current.status {
            OrderStatus::Paid => Ok(current),
            // Past its deadline, expired or about to be: either way, not payable.
            OrderStatus::Reserved | OrderStatus::Expired => {
                Err(Error::ReservationExpired { order_id: id })
            }
            OrderStatus::Paying => Err(Error::PaymentInProgress { order_id: id }),
            _ => Err(Error::NotPayable { order_id: id }),
        };
    };
    let deadline = Instant::now() + shop.rules.request_timeout;
    settle(shop, vec![(order, deadline)])
        .await
        .pop()
        .unwrap_or_else(|| Err(Error::Internal(anyhow!("a settled payment went missing"))))
}

/// Settles a batch's orders claimed for payment and answers each. Each order comes with
/// its request's deadline, which bounds its wait for a payment lease.
pub(super) async fn settle_and_answer(
    shop: Shop,
    paying: Vec<(Order, oneshot::Sender<Answer>, Instant)>,
) {
    let (orders, replies): (Vec<(Order, Instant)>, Vec<_>) = paying
        .into_iter()
        .map(|(order, reply, deadline)| ((order, deadline), reply))
        .unzip();
    for (answer, reply) in settle(&shop, orders).await.into_iter().zip(replies) {
        let _ = reply.send(answer);
    }
}

/// Charges orders claimed for payment (`paying`), all at once, and records every outcome in
/// one statement: `paid`, or declined and the units back. One answer per order, in order.
/// With `--payment-concurrency`, each charge first waits for a lease, until its deadline;
/// an order that gets none is not charged and goes back to `reserved`.
async fn settle(shop: &Shop, orders: Vec<(Order, Instant)>) -> Vec<Answer> {
    let attempts = join_all(
        orders
            .iter()
            .map(|(order, deadline)| charge(shop, order, *deadline)),
    )
    .await;
    let orders: Vec<Order> = orders.into_iter().map(|(order, _)| order).collect();
    let mut charged: Vec<(&Order, Charge)> = Vec::new();
    // The orders not charged, by their place in `orders`, with their answers.
    let mut answers: Vec<(usize, Answer)> = Vec::new();
    let mut unclaimed = Vec::new();
    for (at, (order, attempt)) in orders.iter().zip(attempts).enumerate() {
        match attempt {
            Ok(charge) => charged.push((order, charge)),
            Err(e) => {
                tracing::info!(order = %order.id, error = %e, "no payment lease before the deadline; not charged, still reserved");
                unclaimed.push(order.id);
                let answer = match e {
                    LockError::Timeout(_) | LockError::TooBusy => {
                        Error::PaymentBusy { order_id: order.id }
                    }
                    other => {
                        Error::Unavailable(anyhow!("order {}: no payment lease: {other}", order.id))
                    }
                };
                answers.push((at, Err(answer)));
            }
        }
    }
    if !unclaimed.is_empty() {
        // Left `paying`, the sweep would settle them as failed in 5 minutes; as `reserved`
        // they stay payable until their deadline.
        if let Err(e) = store::unclaim(&shop.db, &unclaimed).await {
            tracing::warn!(error = %e, "could not give uncharged orders back their reservation");
            // Not payable again yet: say what is true (nothing charged, try again later).
            for (_, answer) in &mut answers {
                if let Err(Error::PaymentBusy { order_id }) = answer {
                    let order_id = *order_id;
                    *answer = Err(Error::Unavailable(anyhow!(
                        "order {order_id}: not charged, and its reservation could not be restored yet"
                    )));
                }
            }
        }
    }
    let (orders, charges): (Vec<&Order>, Vec<Charge>) = charged.into_iter().unzip();
    let payments: Vec<Payment> = orders
        .iter()
        .zip(&charges)
        .map(|(order, charge)| Payment {
            order_id: order.id,
            amount_cents: order.amount_cents,
            succeeded: charge.approved,
            reference: &charge.reference,
            started_at: charge.started_at,
            ended_at: charge.ended_at,
        })
        .collect();
    let mut settled = record_and_answer(shop, &orders, &payments)
        .await
        .into_iter();
    let mut answers = answers.into_iter().peekable();
    (0..orders.len() + unclaimed.len())
        .map(|at| match answers.peek() {
            Some((busy, _)) if *busy == at => answers.next().expect("peeked").1,
            _ => settled.next().expect("an answer per charged order"),
        })
        .collect()
}

/// What a payment keeps of its request's time for answering after its wait for a lease:
/// the buyer hears `payment_busy` from us, not a bare timeout. (Its request started a
/// little before the order was placed: admission's checks.)
pub const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// One charge, under a payment lease when `--payment-concurrency` is set: the lease is
/// waited for until `deadline` less the provider's own time and [`ANSWER_MARGIN`], so the
/// answer still makes it within the request's time limit.
async fn charge(shop: &Shop, order: &Order, deadline: Instant) -> Result<Charge, LockError> {
    let max = shop.rules.payment_concurrency;
    let _lease = if max > 0 {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(shop.payment.latency + ANSWER_MARGIN);
        let label = format!("order-{}", &order.id.simple().to_string()[..8]);
        let lease = shop
            .zk
            .acquire_lease(PAYMENT_SEMAPHORE, max, &label, left)
            .await?;
        metrics::payment_lease(lease.waited);
        Some(lease)
    } else {
        None
    };
    Ok(shop.payment.charge(order.amount_cents).await)
}

/// Records the charges' outcomes and answers each charged order.
async fn record_and_answer(
    shop: &Shop,
    orders: &[&Order],
    payments: &[Payment<'_>],
) -> Vec<Answer> {
    let recorded = record(shop, payments).await;
    let unrecorded = recorded.is_err();
    let mut paid: HashMap<Uuid, Order> = match recorded {
        Ok(paid) => paid.into_iter().map(|o| (o.id, o)).collect(),
        Err(e) => {
            // Nothing recorded: charged orders stay `paying` (the sweep settles them); the
            // declined ones still give their units back.
            tracing::warn!(orders = orders.len(), error = %e, "could not record payments");
            HashMap::new()
        }
    };
    let answers = orders.iter().zip(payments).map(|(order, payment)| {
        let paid = paid.remove(&order.id);
        async move {
            if !payment.succeeded {
                give_back(shop, order).await;
                return Err(Error::PaymentFailed { order_id: order.id });
            }
            match paid {
                Some(paid) => Ok(paid),
                None if unrecorded => Err(Error::Unavailable(anyhow!(
                    "the payment of order {} could not be recorded",
                    order.id
                ))),
                // Moved on under us (settled by a sweep as abandoned): answer it as it is.
                None => match store::get(&shop.db, order.id).await {
                    Ok(Some(current)) if current.status == OrderStatus::Paid => Ok(current),
                    Ok(_) => Err(Error::NotPayable { order_id: order.id }),
                    Err(e) => Err(e.into()),
                },
            }
        }
    });
    join_all(answers).await
}

/// Records the charges' outcomes, retrying through a database outage for up to a minute:
/// the provider has answered, so its answer must reach the order. Left unrecorded, a charged
/// order would wait in `paying` for the sweep, which finds no succeeded payment and returns
/// its units: the buyer charged, the order failed.
async fn record(shop: &Shop, payments: &[Payment<'_>]) -> Result<Vec<Order>, sqlx::Error> {
    let mut pause = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    loop {
        match store::record_payments(&shop.db, payments).await {
            Err(e) if waited < Duration::from_secs(60) => {
                tracing::warn!(orders = payments.len(), error = %e, "recording payments failed; retrying");
                tokio::time::sleep(pause).await;
                waited += pause;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            done => return done,
        }
    }
}

/// A declined payment gives the units back. Retried a few times: if it still cannot (lock
/// queue jammed, database down) the order stays `paying` — the audit stays balanced, the
/// units are just not back on sale yet; the sweep's stale-payment pass retries it.
async fn give_back(shop: &Shop, order: &Order) {
    for attempt in 1..=3 {
        match release(
            shop,
            order,
            OrderStatus::Paying,
            OrderStatus::PaymentFailed,
            None,
        )
        .await
        {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(order = %order.id, attempt, error = %e, "returning stock failed");
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
        }
    }
    tracing::error!(order = %order.id, "stock not returned yet; the order keeps its units");
}

/// Puts an order's units back on sale and moves it `from` → `to`, both in one transaction
/// under the product's guard. `Ok(false)` if the order had already left `from` (for
/// `reserved`, also: not yet due), which rolls the stock back: another instance's sweep or a
/// payment got there first. An `owner` holding the product's lock already re-enters it.
pub(super) async fn release(
    shop: &Shop,
    order: &Order,
    from: OrderStatus,
    to: OrderStatus,
    owner: Option<&Owner>,
) -> anyhow::Result<bool> {
    let product = shop
        .catalog
        .terms(&shop.db, order.product_id)
        .await?
        .ok_or_else(|| anyhow!("product {} vanished", order.product_id))?;
    let (lock, protection) = inventory::enter_as(
        &shop.zk,
        owner,
        product.id,
        product.guard,
        Session::Shared,
        shop.rules.lock_timeout,
    )
    .await?;
    let outcome = inventory::change_stock(
        &shop.db,
        product.id,
        Change::Return(order.quantity),
        protection,
        inventory::think(shop.rules.stock_think),
    )
    .await?;
    let mut tx = match outcome {
        Outcome::Applied(tx) => tx,
        Outcome::Insufficient { .. } => return Err(anyhow!("stock would overflow")),
        Outcome::Fenced => return Err(anyhow!("lock lost while returning stock")),
    };
    if !advance(&mut tx, order.id, from, to).await? {
        tx.rollback().await?; // and the stock with it
        return Ok(false);
    }
    store::release_units(&mut tx, order).await?;
    tx.commit().await?;
    drop(lock);
    shop.sold_out.lower(&product.id.to_string()).await;
    Ok(true)
}
