//! The order flow of the source material — create the order, reduce the stock under the
//! product's guard, release, then pay — with the rules of a real flash sale: one sold-out
//! flag for every instance, a per-customer limit, and reservations that expire unpaid.
//! Each step leaves the order in a status that says how far it got, so none is ever lost:
//!
//! ```text
//! created ──reserve──> reserved ──pay──> paying ──> paid
//!    │                    │                 └──declined──> payment_failed (stock returned)
//!    │                    └──unpaid past expires_at──> expired (stock returned)
//!    ├──not enough stock──> sold_out
//!    └──lock timeout / lock lost / limit / client gone / outage──> failed (nothing sold)
//! ```
//!
//! An order has no row until its fate is decided: the lock cycle that serves it writes its
//! row in its final status in the same transaction as the stock (`created` is no longer
//! written). A hot product's orders are **combined**: they queue per instance ([`combiner`])
//! and one lock cycle serves up to `batch_max` of them ([`batch`]) — the ZooKeeper lock and
//! the fence claim are paid once per batch, not once per order. A product with `batch_max`
//! 1, or guard `none`, serves each order in a lock cycle of its own.
//!
//! Every stock change, in either direction, goes through [`inventory::enter`] (the product's
//! guard) and [`inventory::read_stock`], and moves the orders in the same transaction.
//!
//! - [`batch`]: one lock cycle's decisions and writes.
//! - [`combiner`]: the per-product queue whose worker runs the lock cycles.
//! - [`pay`]: paying (per batch), and giving units back (declines, expiries).
//! - [`sweep`]: the background pass that expires reservations and settles stale payments.
//! - [`demo`]: what a lock holder may do between its read and its write besides thinking.
//! - [`step`]: the step-through sale: holders keep the lock after their write until "next".
//! - `store`: the order's SQL.

pub mod batch;
pub mod combiner;
pub mod demo;
mod pay;
pub mod step;
mod store;
pub mod sweep;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tracing::Instrument;
use uuid::Uuid;

use crate::error::AppError;
use crate::inventory::{self, Protection, Terms};
use crate::lock::{Session, StockLock};
use crate::state::AppState;
use crate::telemetry::metrics;
use batch::Ticket;
use demo::Demo;
pub use pay::{pay, ANSWER_MARGIN, PAYMENT_SEMAPHORE};
pub use store::get;

/// A buyer's request. Serialised again (defaults filled in) as the Idempotency-Key fingerprint.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    #[serde(deserialize_with = "crate::integer::whole")]
    pub product_id: i64,
    /// Who buys: 1 to 64 characters, not only white space, no control characters.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F-\x9F]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F]*$"
    )]
    pub user_id: String,
    /// Units, at least 1 and at most the product's `max_per_order`.
    #[serde(default = "one", deserialize_with = "crate::integer::whole")]
    #[schema(minimum = 1, maximum = 1000)]
    pub quantity: i64,
    /// `false` stops after the reservation; pay later with `POST /orders/{id}/pay`.
    #[serde(default = "yes")]
    pub pay: bool,
}

fn one() -> i64 {
    1
}

fn yes() -> bool {
    true
}

impl NewOrder {
    /// The checks that need no database: who buys, and a positive quantity.
    pub fn validate(&self) -> Result<(), String> {
        let len = self.user_id.chars().count();
        if self.user_id.trim().is_empty() || len > 64 {
            return Err("user_id must be 1 to 64 characters".into());
        }
        if self.user_id.chars().any(char::is_control) {
            return Err("user_id must not contain control characters".into());
        }
        if self.quantity < 1 {
            return Err("quantity must be at least 1".into());
        }
        Ok(())
    }

    /// The quantity, once we know the product's per-order cap.
    pub fn quantity_for(&self, terms: &Terms) -> Result<i32, String> {
        if self.quantity > i64::from(terms.max_per_order) {
            return Err(format!(
                "quantity must be at most {} for this product",
                terms.max_per_order
            ));
        }
        Ok(self.quantity as i32)
    }
}

/// Where an order stands (see the diagram at the top). Stored as its snake_case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    Created,
    Reserved,
    Paying,
    Paid,
    SoldOut,
    PaymentFailed,
    Expired,
    Failed,
}

impl OrderStatus {
    pub const ALL: [OrderStatus; 8] = [
        OrderStatus::Created,
        OrderStatus::Reserved,
        OrderStatus::Paying,
        OrderStatus::Paid,
        OrderStatus::SoldOut,
        OrderStatus::PaymentFailed,
        OrderStatus::Expired,
        OrderStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Created => "created",
            OrderStatus::Reserved => "reserved",
            OrderStatus::Paying => "paying",
            OrderStatus::Paid => "paid",
            OrderStatus::SoldOut => "sold_out",
            OrderStatus::PaymentFailed => "payment_failed",
            OrderStatus::Expired => "expired",
            OrderStatus::Failed => "failed",
        }
    }
}

impl TryFrom<String> for OrderStatus {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        OrderStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| format!("unknown order status {s:?}"))
    }
}

#[derive(Clone, Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Order {
    pub id: Uuid,
    pub product_id: i64,
    pub user_id: String,
    pub quantity: i32,
    pub amount_cents: i64,
    #[sqlx(try_from = "String")]
    pub status: OrderStatus,
    /// The lock token the stock write carried (`zk` guards only).
    pub fence: Option<i64>,
    /// Time from placing the order to its lock cycle holding the lock (`zk` guards only).
    pub lock_wait_ms: Option<i32>,
    /// How many orders the lock cycle (or guarded transaction) that decided it served.
    pub batch_size: Option<i32>,
    /// Why a `failed` order failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Until when a reservation waits for its payment.
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An order's outcome, as its HTTP answer will say it.
pub type Answer = Result<Order, AppError>;

/// A ticket, and where its answer goes.
pub struct Waiting {
    pub ticket: Ticket,
    pub reply: oneshot::Sender<Answer>,
    /// The order's span (inside its request's): the lock cycle that serves it logs there
    /// too, so the order's `request_id` leads to the cycle's ZooKeeper and Postgres lines.
    pub span: tracing::Span,
}

impl Waiting {
    pub fn new(ticket: Ticket, reply: oneshot::Sender<Answer>) -> Waiting {
        Waiting {
            ticket,
            reply,
            span: tracing::Span::current(),
        }
    }
}

/// Numbers lock cycles (per process) so log lines of one cycle can be found together.
static CYCLES: AtomicU64 = AtomicU64::new(0);

/// One lock cycle, for the logs: its number, and its span (acquiring the guard, the stock's
/// transaction, the release; `fence` is recorded once the lock is held).
pub(crate) struct CycleSpan {
    pub number: u64,
    pub span: tracing::Span,
}

impl CycleSpan {
    /// Inside the current span (a lone order's), or with `root`, a span of its own (a
    /// combined cycle serves many requests).
    pub(crate) fn new(terms: &Terms, root: bool) -> CycleSpan {
        let number = CYCLES.fetch_add(1, Ordering::Relaxed) + 1;
        let span = if root {
            tracing::info_span!(parent: None, "lock_cycle", cycle = number, product = terms.id, guard = terms.guard.as_str(), fence = tracing::field::Empty)
        } else {
            tracing::info_span!(
                "lock_cycle",
                cycle = number,
                product = terms.id,
                guard = terms.guard.as_str(),
                fence = tracing::field::Empty
            )
        };
        CycleSpan { number, span }
    }
}

/// An order that passed every check made before anything is written.
pub struct Admitted {
    terms: Arc<Terms>,
    user_id: String,
    quantity: i32,
    amount_cents: i64,
    pay: bool,
}

/// The checks made before anything is written: the order's own fields, the product, the
/// sold-out flag, room in this instance's queue for the product and, with `check_limit`,
/// the buyer's per-customer limit (one read). A rejection here costs PostgreSQL no write: the
/// flood after a sale, and a script replaying a buyer who is at the limit, end here.
pub async fn admit(
    state: &AppState,
    new: &NewOrder,
    check_limit: bool,
) -> Result<Admitted, AppError> {
    new.validate().map_err(AppError::InvalidRequest)?;
    // The flood after a sale ends here: no lock, no write, no order row.
    if state.sold_out.is_raised(&new.product_id.to_string()) {
        return Err(AppError::SoldOut { order_id: None });
    }
    let mut terms = state
        .catalog
        .terms(&state.db, new.product_id)
        .await?
        .ok_or(AppError::UnknownProduct(new.product_id))?;
    // A refusal on this instance's copy of the terms is checked against the row first: the
    // terms may have changed through another instance (a lock cycle would catch up, but a
    // refused order never reaches one).
    if new.quantity_for(&terms).is_err() {
        terms = fresh_terms(state, new.product_id).await?;
    }
    let quantity = new.quantity_for(&terms).map_err(AppError::Unprocessable)?;
    let amount_cents = terms
        .price_cents
        .checked_mul(quantity.into())
        .ok_or_else(|| AppError::invalid("the order's amount is too large"))?;
    if !has_room(state, &terms) {
        return Err(AppError::TooBusy);
    }
    if check_limit {
        let held: Option<i32> = sqlx::query_scalar(
            "SELECT units FROM purchases WHERE product_id = $1 AND user_id = $2",
        )
        .bind(terms.id)
        .bind(&new.user_id)
        .fetch_optional(&state.db)
        .await?;
        if held.unwrap_or(0) + quantity > terms.per_user_limit {
            terms = fresh_terms(state, terms.id).await?;
            if held.unwrap_or(0) + quantity > terms.per_user_limit {
                return Err(AppError::PurchaseLimit { order_id: None });
            }
        }
    }
    Ok(Admitted {
        terms,
        user_id: new.user_id.clone(),
        quantity,
        amount_cents,
        pay: new.pay,
    })
}

/// The product's terms from its row (see [`inventory::Catalog::reload`]).
async fn fresh_terms(state: &AppState, id: i64) -> Result<Arc<Terms>, AppError> {
    let terms = state.catalog.reload(&state.db, id).await?;
    terms.ok_or(AppError::UnknownProduct(id))
}

/// Whether this instance has room for one more order of the product (the queue checks
/// again when the order joins it: this is the early answer that writes nothing).
fn has_room(state: &AppState, terms: &Terms) -> bool {
    let max = state.config.max_waiters_per_product;
    if terms.batched() {
        state.combiner.queued(terms.id) < max
    } else if terms.guard.recipe().is_some() {
        state.zk.waiting_here(terms.id) < max
    } else {
        true
    }
}

/// Runs the whole flow for one order. `client_gone` resolves if the HTTP client disconnects:
/// it is honoured only while the order waits for its lock cycle; once served, the order runs
/// to a final status whether anyone listens or not.
pub async fn place(
    state: &AppState,
    new: NewOrder,
    key: Option<&str>,
    client_gone: oneshot::Receiver<()>,
) -> Answer {
    let admitted = admit(state, &new, false).await?;
    place_admitted(state, admitted, key, client_gone).await
}

/// [`place`], for an order [`admit`] let through.
pub async fn place_admitted(
    state: &AppState,
    admitted: Admitted,
    key: Option<&str>,
    client_gone: oneshot::Receiver<()>,
) -> Answer {
    let Admitted {
        terms,
        user_id,
        quantity,
        amount_cents,
        pay,
    } = admitted;
    let ticket = Ticket {
        id: Uuid::new_v4(),
        user_id,
        quantity,
        amount_cents,
        pay,
        key: key.map(str::to_string),
        placed: Instant::now(),
    };
    let span = tracing::info_span!("order", order_id = %ticket.id, product = terms.id);
    let flow = async {
        if terms.batched() {
            queue(state, terms, ticket, client_gone).await
        } else {
            alone(state, terms, ticket, client_gone).await
        }
    };
    flow.instrument(span).await
}

/// Why an order stopped waiting before a lock cycle took it.
enum Left {
    ClientGone,
    Timeout,
    SoldOut,
}

/// A combined product: wait in the product's queue on this instance for a lock cycle to
/// serve us — or leave it, as a buyer alone in the lock queue would: on hanging up, at the
/// lock timeout, or when the product sells out.
async fn queue(
    state: &AppState,
    terms: Arc<Terms>,
    ticket: Ticket,
    mut client_gone: oneshot::Receiver<()>,
) -> Answer {
    let id = ticket.id;
    let mut answer = state.combiner.submit(state, terms.clone(), ticket)?;
    let sold_out_flag = terms.id.to_string();
    let left = tokio::select! {
        answer = &mut answer => return answer.unwrap_or_else(|_| Err(lost_answer())),
        _ = &mut client_gone => Left::ClientGone,
        _ = tokio::time::sleep(step::lock_timeout(state, terms.id)) => Left::Timeout,
        _ = state.sold_out.raised(&sold_out_flag) => Left::SoldOut,
    };
    // A lock cycle may have taken us just now: then its answer is on its way.
    let Some(ticket) = state.combiner.withdraw(terms.id, id) else {
        return answer.await.unwrap_or_else(|_| Err(lost_answer()));
    };
    let error = match left {
        Left::ClientGone => AppError::Unavailable(anyhow!("client disconnected while queued")),
        Left::Timeout if !state.zk.connected() => {
            AppError::Unavailable(anyhow!("ZooKeeper disconnected while queued"))
        }
        Left::Timeout => AppError::LockTimeout { order_id: None },
        Left::SoldOut => AppError::SoldOut { order_id: None },
    };
    let (status, failure) = match left {
        Left::ClientGone => (OrderStatus::Failed, Some("client_gone")),
        Left::SoldOut => (OrderStatus::SoldOut, None),
        Left::Timeout => (OrderStatus::Failed, Some(error.code())),
    };
    store::ended(&state.db, &terms, &[&ticket], status, failure).await;
    Err(error.for_order(id))
}

/// A per-request product: the order takes the guard for itself, in a lock cycle of its own.
async fn alone(
    state: &AppState,
    terms: Arc<Terms>,
    ticket: Ticket,
    mut client_gone: oneshot::Receiver<()>,
) -> Answer {
    let db = &state.db;
    let demo = demo::armed(state, &terms).await;
    let session = if demo.is_some() {
        Session::Own
    } else {
        Session::Shared
    };
    let sold_out_flag = terms.id.to_string();
    let span = CycleSpan::new(&terms, false);
    let entered = tokio::select! {
        entered = inventory::enter_for_sale(state, terms.id, terms.guard, session, step::lock_timeout(state, terms.id)).instrument(span.span.clone()) => entered,
        _ = &mut client_gone => {
            store::ended(db, &terms, &[&ticket], OrderStatus::Failed, Some("client_gone")).await;
            let error = AppError::Unavailable(anyhow!("client disconnected while queued"));
            return Err(error.for_order(ticket.id));
        }
        // Sold out while we queued: leave the queue now instead of reading a 0 under the lock.
        _ = state.sold_out.raised(&sold_out_flag) => {
            store::ended(db, &terms, &[&ticket], OrderStatus::SoldOut, None).await;
            return Err(AppError::SoldOut { order_id: Some(ticket.id) });
        }
    };
    let entered = match entered {
        Ok(entered) => entered,
        Err(e) => {
            let error = AppError::from(e);
            store::ended(
                db,
                &terms,
                &[&ticket],
                OrderStatus::Failed,
                Some(error.code()),
            )
            .await;
            return Err(error.for_order(ticket.id));
        }
    };
    let (reply, answer) = oneshot::channel();
    cycle(
        state,
        &terms,
        entered,
        demo,
        vec![Waiting::new(ticket, reply)],
        span.number,
    )
    .instrument(span.span)
    .await;
    answer.await.unwrap_or_else(|_| Err(lost_answer()))
}

/// One lock cycle: with the guard entered, serves `batch`, releases (after the commit), and
/// answers every order — sold out, over the limit or reserved at once, paid ones once their
/// payment settles (outside the lock, so the next cycle need not wait for it).
pub(crate) async fn cycle(
    state: &AppState,
    terms: &Arc<Terms>,
    entered: (Option<StockLock>, Protection),
    demo: Option<Demo>,
    batch: Vec<Waiting>,
    number: u64,
) {
    let (mut lock, protection) = entered;
    let acquired = Instant::now();
    let cycle = tracing::Span::current();
    let fence = lock.as_ref().map(|l| l.token.zxid);
    if let Some(fence) = fence {
        cycle.record("fence", fence);
    }
    for waiting in &batch {
        cycle.follows_from(&waiting.span);
        // In the order's span, so the line carries its request's id and names the cycle.
        waiting.span.in_scope(|| {
            tracing::debug!(
                cycle = number,
                fence,
                batch = batch.len(),
                "served by a lock cycle"
            )
        });
    }
    let (tickets, replies): (Vec<Ticket>, Vec<_>) =
        batch.into_iter().map(|w| (w.ticket, w.reply)).unzip();
    let all: Vec<&Ticket> = tickets.iter().collect();
    metrics::lock_cycle(terms.guard.as_str(), tickets.len());
    if lock.is_some() {
        state.zk.count_served(terms.id, tickets.len());
    }
    if demo == Some(Demo::Crash) {
        if let Some(lock) = lock.take() {
            demo::crash(&state.db, terms.id, tickets[0].id, lock).await;
            store::ended(&state.db, terms, &all, OrderStatus::Failed, Some("crashed")).await;
            for (ticket, reply) in tickets.iter().zip(replies) {
                let _ = reply.send(Err(AppError::LockLost {
                    order_id: Some(ticket.id),
                }));
            }
            return;
        }
    }
    let token = lock.as_ref().map(|l| l.token.zxid);
    let pause = demo::pause_for(state, terms.id, demo, &mut lock);
    let served = batch::serve(state, terms, protection, acquired, &tickets, pause).await;
    if let (Some(Demo::Zombie), Some(token)) = (demo, token) {
        let fenced = matches!(served, Err(AppError::LockLost { .. }));
        demo::report_zombie(&state.db, terms.id, tickets[0].id, token, fenced).await;
    }
    // The step-through sale keeps a holder whose write committed until the page says next.
    let kept = match lock {
        Some(held) if served.is_ok() && step::stepping(state, terms.id) => Some(held),
        other => {
            drop(other);
            None
        }
    };
    if matches!(served, Err(AppError::LockLost { .. })) && demo.is_none() {
        state.zk.reidentify().await;
    }
    let served = match served {
        Ok(served) => {
            tracing::debug!(
                orders = tickets.len(),
                stock = served.stock,
                took_ms = acquired.elapsed().as_millis() as u64,
                "stock written and committed"
            );
            served
        }
        Err(e) => {
            tracing::debug!(
                orders = tickets.len(),
                error = e.code(),
                "lock cycle sold nothing"
            );
            store::ended(&state.db, terms, &all, OrderStatus::Failed, Some(e.code())).await;
            for (ticket, reply) in tickets.iter().zip(replies) {
                let _ = reply.send(Err(e.again_for(ticket.id)));
            }
            return;
        }
    };
    if served.stock == 0 {
        flag_sold_out(state, terms.id).await;
    }
    let mut paying = Vec::new();
    let deadline = |ticket: &Ticket| ticket.placed + state.config.request_timeout();
    for ((outcome, reply), ticket) in served.orders.into_iter().zip(replies).zip(&tickets) {
        let answer = match outcome {
            Ok(order) if order.status == OrderStatus::Paying => {
                paying.push((order, reply, deadline(ticket)));
                continue;
            }
            Ok(order) if order.status == OrderStatus::SoldOut => Err(AppError::SoldOut {
                order_id: Some(order.id),
            }),
            other => other,
        };
        let _ = reply.send(answer);
    }
    if !paying.is_empty() {
        state
            .tasks
            .spawn(pay::settle_and_answer(state.clone(), paying));
    }
    // Answered already; the lock waits apart, so the next cycle can queue behind it.
    if let Some(lock) = kept {
        let (state, product) = (state.clone(), terms.id);
        state.tasks.clone().spawn(async move {
            step::hold(&state, product, lock.token.zxid).await;
            drop(lock);
        });
    }
}

/// An order task whose lock cycle ended without answering it (a panic): a bug.
fn lost_answer() -> AppError {
    AppError::Internal(anyhow!("the order's lock cycle ended without an answer"))
}

/// Raises the sold-out flag, then re-reads the stock: a return that committed and cleared
/// the flag just before we raised it must not leave the product flagged with stock on sale.
async fn flag_sold_out(state: &AppState, product_id: i64) {
    state.sold_out.raise(&product_id.to_string()).await;
    state.events.touch(product_id);
    match inventory::stock(&state.db, product_id).await {
        Ok(Some(stock)) if stock > 0 => state.sold_out.lower(&product_id.to_string()).await,
        Ok(_) => {}
        // Unsure: the flag is only an optimisation, the guarded path stays correct.
        Err(_) => state.sold_out.lower(&product_id.to_string()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Guard;

    fn order(user_id: &str, quantity: i64) -> NewOrder {
        NewOrder {
            product_id: 1,
            user_id: user_id.into(),
            quantity,
            pay: true,
        }
    }

    #[test]
    fn user_ids_are_bounded_and_printable() {
        assert!(order("alice", 1).validate().is_ok());
        assert!(order(&"é".repeat(64), 1).validate().is_ok());
        assert!(order("", 1).validate().is_err());
        assert!(order("   ", 1).validate().is_err());
        assert!(order(&"a".repeat(65), 1).validate().is_err());
        assert!(order("a\nb", 1).validate().is_err());
    }

    #[test]
    fn quantity_is_positive_and_capped_per_product() {
        assert!(order("a", 0).validate().is_err());
        assert!(order("a", -3).validate().is_err());
        let product = Terms {
            id: 1,
            price_cents: 1,
            max_per_order: 2,
            per_user_limit: 1,
            reservation_ttl_s: 600,
            guard: Guard::Zk,
            batch_max: 1,
            terms_version: 1,
        };
        assert_eq!(order("a", 2).quantity_for(&product), Ok(2));
        assert!(order("a", 3).quantity_for(&product).is_err());
        assert!(order("a", i64::MAX).quantity_for(&product).is_err());
    }

    #[test]
    fn the_fingerprint_fills_in_defaults() {
        let short: NewOrder = serde_json::from_str(r#"{"product_id": 1, "user_id": "a"}"#).unwrap();
        let long: NewOrder = serde_json::from_str(
            r#"{"user_id": "a", "quantity": 1, "pay": true, "product_id": 1}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&short).unwrap(),
            serde_json::to_value(&long).unwrap()
        );
    }
}
