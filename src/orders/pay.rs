//! Step 5, paying — each charge of a batch runs on its own after the commit, outside the
//! lock, and is recorded as its answer returns — and the way back: a declined payment or an
//! expired reservation returns its units through the same guard that took them.
//!
//! A payment is an **intent** first: its row (`payments`, outcome still NULL) is committed
//! before its charge is sent — for a `pay: true` order in its lock cycle's own commit, for a
//! reservation with its claim — under a key the provider sees on every try (`seckill-{order
//! id}`). An answer nobody heard (a timeout, a dropped connection, a crash, a database
//! outage while recording) leaves the intent pending and the buyer is told so (503
//! `outcome_pending`, with the order's id); the sweep then asks the provider under the same
//! key and settles from its answer. Nothing is declared failed without the provider's word.

use std::time::Duration;

use anyhow::anyhow;
use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;
use uuid::Uuid;

use super::intents::{self, Answered, Settler};
use super::model::{Answer, Order, OrderStatus};
use super::rules::ANSWER_MARGIN;
use super::shop::Shop;
use super::store::{self, advance};
use crate::database::Bound;
use crate::error::Error;
use crate::inventory::{self, Change, Outcome};
use crate::lock::{Lease, LockError, Session};
use crate::payment::{Charge, PAYMENT_SEMAPHORE};
use crate::telemetry::metrics;

/// The key a payment intent carries to the provider, on every try: one charge per order.
pub fn intent_key(order_id: Uuid) -> String {
    format!("seckill-{order_id}")
}

impl Shop {
    /// Pays a reservation (see [`pay`]) by `--request-timeout-ms` after its request
    /// `arrived`.
    pub async fn pay(&self, id: Uuid, arrived: std::time::Instant) -> Result<Order, Error> {
        pay(self, id, Instant::from_std(arrived)).await
    }

    /// How long one attempt at an order may run: its request's time, and the margin it keeps
    /// for recording and answering. An Idempotency-Key is "in progress" this long at most.
    pub fn attempt_window(&self) -> Duration {
        self.rules.request_timeout + ANSWER_MARGIN * 2
    }
}

/// Pays a reservation. The order is first claimed (`reserved` → `paying`, with its intent)
/// only if its reservation is still running, in one transaction; the expiry sweep moves
/// `reserved` → `expired` with the opposite condition. PostgreSQL serialises the two on the
/// order's row, so a payment racing the expiry ends in exactly one of them.
async fn pay(shop: &Shop, id: Uuid, arrived: Instant) -> Result<Order, Error> {
    let db = &shop.db;
    let claimed = match intents::claim_for_payment(db, id, &intent_key(id)).await {
        Ok(claimed) => claimed,
        // The claim was sent and its answer lost: it may have moved the order to `paying`
        // with its intent (which the sweep then charges). Not known: the buyer follows the
        // order rather than hearing it failed.
        Err(sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) => {
            return Err(Error::OutcomePending { order_id: Some(id) })
        }
        Err(e) => return Err(e.into()),
    };
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
    // From the request's arrival, as the HTTP layer's own bound runs: the answer keeps its
    // margin before that bound however long the claim took.
    let deadline = arrived + shop.rules.request_timeout;
    settle(shop, order, deadline, Claimed::Reservation).await
}

/// Where an order claimed for payment came from: what it goes back to without a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claimed {
    /// A reservation the buyer is paying (`POST /orders/{id}/pay`): it stays reserved.
    Reservation,
    /// A `pay: true` order its lock cycle wrote `paying`: reserved if the product's unpaid
    /// reservations have room, otherwise its units go back on sale.
    Sale,
}

/// Settles a batch's orders claimed for payment and answers each as its own charge settles.
/// Each order comes with its request's deadline.
pub(super) async fn settle_and_answer(
    shop: Shop,
    paying: Vec<(Order, oneshot::Sender<Answer>, std::time::Instant)>,
) {
    let settled = paying.into_iter().map(|(order, reply, deadline)| {
        let shop = &shop;
        async move {
            let deadline = Instant::from_std(deadline);
            let _ = reply.send(settle(shop, order, deadline, Claimed::Sale).await);
        }
    });
    join_all(settled).await;
}

/// One order claimed for payment (`paying`, its intent pending): a lease if payments are
/// bounded, the charge (retried under its key until the deadline), its outcome recorded.
async fn settle(shop: &Shop, order: Order, deadline: Instant, from: Claimed) -> Answer {
    let answer_by = deadline - shop.rules.answer_margin();
    let lease = match lease(shop, &order, answer_by).await {
        Ok(lease) => lease,
        Err(e) => {
            tracing::info!(order = %order.id, error = %e, "no payment lease before the deadline; not charged");
            let busy = match &e {
                LockError::Timeout(_) | LockError::TooBusy => {
                    Error::PaymentBusy { order_id: order.id }
                }
                other => {
                    Error::Unavailable(anyhow!("order {}: no payment lease: {other}", order.id))
                }
            };
            return unclaim(shop, &order, busy, from).await;
        }
    };
    // A charge is sent only before the answer's deadline, and its tries are cut there (an
    // answer not heard by then is `outcome_pending`, with the order's id). Past it (a lock
    // cycle or a lease that took the order's time), nothing is sent and the order is given
    // back, as without a lease.
    if Instant::now() >= answer_by {
        drop(lease);
        tracing::info!(order = %order.id, "no time left for a charge; not charged");
        let late = Error::PaymentBusy { order_id: order.id };
        return unclaim(shop, &order, late, from).await;
    }
    // Marked sent before it leaves: an intent never marked was never sent, and the sweep
    // drops it instead of charging it.
    let key = intent_key(order.id);
    match mark_sent(shop, &order, &key, answer_by).await {
        Some(true) => {}
        // Settled or dropped meanwhile (a sweep took the order as never sent): not ours to
        // send. Or whether the mark landed is not known, so neither is whether the sweep will
        // charge it. Either way the buyer follows the order rather than hear "not charged".
        Some(false) | None => {
            return Err(Error::OutcomePending {
                order_id: Some(order.id),
            })
        }
    }
    let charged = shop
        .payment
        .charge(&key, order.amount_cents, answer_by)
        .await;
    drop(lease);
    match charged {
        Ok(charge) => record(shop, &order, &charge, deadline, Settler::Answer).await,
        Err(unknown) => {
            tracing::warn!(order = %order.id, error = %unknown, "payment outcome unknown; the intent stays pending for the sweep");
            metrics::payment_outcome("unknown");
            Err(Error::OutcomePending {
                order_id: Some(order.id),
            })
        }
    }
}

/// Marks the order's intent sent (see `intents::mark_sent`), retrying through a database
/// that is away until `by`: `None` if no answer came by then.
async fn mark_sent(shop: &Shop, order: &Order, key: &str, by: Instant) -> Option<bool> {
    let mut pause = Duration::from_millis(50);
    loop {
        let left = by.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, shop.recorder.mark_sent(key.to_string())).await {
            Ok(Ok(marked)) => return Some(marked),
            Ok(Err(e)) if Instant::now() + pause < by => {
                tracing::warn!(order = %order.id, error = %e, "marking a payment intent sent failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            _ => {
                tracing::warn!(order = %order.id, "a payment intent could not be marked sent in the order's time; not sent");
                return None;
            }
        }
    }
}

/// A payment lease when `--payment-concurrency` is set, waited for until `charge_by` less
/// one try at the provider, so the charge still fits in its request.
pub(super) async fn lease(
    shop: &Shop,
    order: &Order,
    charge_by: Instant,
) -> Result<Option<Lease>, LockError> {
    let max = shop.rules.payment_concurrency;
    if max == 0 {
        return Ok(None);
    }
    let left = charge_by
        .saturating_duration_since(Instant::now())
        .saturating_sub(shop.payment.timeout);
    let label = format!("order-{}", &order.id.simple().to_string()[..8]);
    let lease = shop
        .zk
        .acquire_lease(PAYMENT_SEMAPHORE, max, &label, left)
        .await?;
    metrics::payment_lease(lease.waited);
    Ok(Some(lease))
}

/// Nothing was sent (no lease, or no time left before the deadline), so the order goes back
/// to where it was claimed from with its intent removed, in one transaction: a reservation
/// stays reserved with its deadline (the buyer hears `why`, `payment_busy`); a sale's
/// `paying` order becomes a reservation if the product's unpaid reservations have room
/// (`--max-unpaid-share`), otherwise its units go back on sale (`failed`, 409
/// `too_many_unpaid`) and its intent with them. If the database cannot be reached, the
/// intent stays unsent, and the sweep drops it and returns the units: "not charged" stays
/// true.
async fn unclaim(shop: &Shop, order: &Order, why: Error, from: Claimed) -> Answer {
    let share = match from {
        Claimed::Reservation => None,
        Claimed::Sale => Some(shop.rules.max_unpaid_share),
    };
    let key = intent_key(order.id);
    let unclaimed = intents::unclaim(&shop.db, order.id, &key, share);
    match Bound::steps(shop.rules.db_step).run(unclaimed).await {
        Ok(true) => Err(why),
        Ok(false) => {
            // Not room for another unpaid reservation: give the units back instead.
            let to = OrderStatus::Failed;
            match release(shop, order, OrderStatus::Paying, to, Intent::DropUnsent).await {
                Ok(_) => Err(Error::TooManyUnpaid),
                Err(e) => Err(Error::Unavailable(e.context(format!(
                    "order {}: not charged, and its units could not be returned yet",
                    order.id
                )))),
            }
        }
        Err(e) => {
            tracing::warn!(order = %order.id, error = %e, "could not give an uncharged order back its reservation");
            // Not payable again yet: say what is true (nothing charged, try again later).
            Err(Error::Unavailable(anyhow!(
                "order {}: not charged, and its reservation could not be restored yet",
                order.id
            )))
        }
    }
}

/// Records the provider's answer (heard `by` the order's attempt or the sweep) on the intent
/// and the order, retrying through a database outage until the request's deadline (then the
/// intent stays pending: the sweep records it from the provider's ledger), and answers the
/// buyer.
pub(super) async fn record(
    shop: &Shop,
    order: &Order,
    charge: &Charge,
    deadline: Instant,
    by: Settler,
) -> Answer {
    let key = intent_key(order.id);
    let mut pause = Duration::from_millis(50);
    // Each try, and the retries, stop a margin before the deadline: the buyer hears that the
    // outcome is pending from us, not a bare timeout (a database that is down can make one
    // try wait for a connection for seconds).
    let answer_by = deadline - shop.rules.answer_margin();
    let recorded = loop {
        let left = answer_by.saturating_duration_since(Instant::now());
        let answered = Answered {
            order: order.clone(),
            key: key.clone(),
            charge: charge.clone(),
            by,
        };
        let attempt = tokio::time::timeout(left, shop.recorder.record(answered));
        match attempt.await {
            Ok(Err(e)) if Instant::now() + pause < answer_by => {
                tracing::warn!(order = %order.id, error = %e, "recording a payment failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Ok(done) => break done.map_err(|e| anyhow!("{e}")),
            Err(_) => break Err(anyhow!("no database answer before the deadline")),
        }
    };
    let paid = match recorded {
        Ok(paid) => paid,
        Err(e) => {
            tracing::warn!(order = %order.id, error = %e, "payment not recorded; the intent stays pending for the sweep");
            return Err(Error::OutcomePending {
                order_id: Some(order.id),
            });
        }
    };
    if !charge.approved() {
        metrics::payment_outcome("declined");
        // The buyer hears the decline, with the order's id, by the answer's deadline: a lock
        // queue jammed past it must not turn the answer into a bare 503. Cut short before its
        // commit, the return rolls back whole (the order stays `paying`, its intent `failed`,
        // and the sweep's payment pass gives the units back); cut short during it, it may have
        // committed, and only the sold-out flag's lowering is left to the sweep.
        let left = answer_by.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, give_back(shop, order))
            .await
            .is_err()
        {
            tracing::warn!(order = %order.id, "declined; its units not back yet at the answer's deadline: the sweep returns them");
        }
        return Err(Error::PaymentFailed { order_id: order.id });
    }
    metrics::payment_outcome("succeeded");
    match paid {
        Some(paid) => Ok(paid),
        // Moved on under us (settled by a sweep): answer it as it is.
        None => match store::get(&shop.db, order.id).await {
            Ok(Some(current)) if current.status == OrderStatus::Paid => Ok(current),
            Ok(_) => Err(Error::NotPayable { order_id: order.id }),
            Err(e) => Err(e.into()),
        },
    }
}

/// A declined payment gives the units back. Retried a few times: if it still cannot (lock
/// queue jammed, database down) the order stays `paying` — the audit stays balanced, the
/// units are just not back on sale yet; the sweep's payment pass retries it (the intent
/// says `failed`).
pub(super) async fn give_back(shop: &Shop, order: &Order) {
    for attempt in 1..=3 {
        match release(
            shop,
            order,
            OrderStatus::Paying,
            OrderStatus::PaymentFailed,
            Intent::Keep,
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

/// What a return does with the order's payment intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Intent {
    /// Leaves it: settled already (a decline), or there is none.
    Keep,
    /// Removes it while still pending: its charge was never sent (no payment lease).
    DropUnsent,
}

/// Puts an order's units back on sale and moves it `from` → `to`, both in one transaction
/// under the product's guard (with the order's `intent`, see [`Intent`]). `Ok(false)` if the
/// order had already left `from`, which rolls the stock back: another instance's sweep or a
/// payment got there first. A failed commit is decided by PostgreSQL (see `commit`).
pub(super) async fn release(
    shop: &Shop,
    order: &Order,
    from: OrderStatus,
    to: OrderStatus,
    intent: Intent,
) -> anyhow::Result<bool> {
    let product = shop
        .terms(order.product_id)
        .await?
        .ok_or_else(|| anyhow!("product {} vanished", order.product_id))?;
    let (lock, protection) = inventory::enter(
        &shop.zk,
        product.id,
        product.guard,
        Session::Shared,
        shop.rules.lock_timeout,
    )
    .await?;
    // Each step bounded on our side, as a lock cycle's: a return holds the product's lock.
    // (The read-check-write takes the configured think time between its two statements.)
    let bound = Bound::steps(shop.rules.db_step);
    let change = inventory::change_stock(
        &shop.db,
        product.id,
        Change::Return(order.quantity),
        protection,
        inventory::think(shop.rules.stock_think),
    );
    let outcome = Bound::steps(shop.rules.db_step * 2 + shop.rules.stock_think)
        .run(change)
        .await?;
    let mut written = match outcome {
        Outcome::Applied(written) => written,
        Outcome::Insufficient { .. } => return Err(anyhow!("stock would overflow")),
        Outcome::Fenced => return Err(anyhow!("lock lost while returning stock")),
    };
    if !bound
        .run(advance(&mut written.tx, order.id, from, to))
        .await?
    {
        bound.run(written.tx.rollback()).await?; // and the stock with it
        return Ok(false);
    }
    bound
        .run(store::release_units(&mut written.tx, order))
        .await?;
    if intent == Intent::DropUnsent {
        bound
            .run(intents::drop_unsent(&mut *written.tx, order.id))
            .await?;
    }
    written.commit(&shop.db, bound).await?;
    drop(lock);
    shop.sold_out.lower(&product.id.to_string()).await;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intents_key_is_the_one_a_lock_cycle_writes_in_sql() {
        // `store::insert` writes `'seckill-' || id::text`: PostgreSQL's text of a uuid is the
        // hyphenated lower-case form, as Rust's.
        let id = Uuid::parse_str("6F9619FF-8B86-D011-B42D-00C04FC964FF").unwrap();
        assert_eq!(
            intent_key(id),
            "seckill-6f9619ff-8b86-d011-b42d-00c04fc964ff"
        );
    }
}
