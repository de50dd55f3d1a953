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
//! Every stock change, in either direction, goes through [`enter`] (the product's guard) and
//! [`inventory::change_stock`], and moves the order in the same transaction as the stock.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::{PgConnection, PgPool};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::AppError;
use crate::events;
use crate::http::AppState;
use crate::inventory::{self, Change, Guard, Outcome, Product, Protection};
use crate::lock::{LockError, Recipe, Session, StockLock};
use crate::payment::Charge;

/// A buyer's request. Serialised again (defaults filled in) as the Idempotency-Key fingerprint.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    pub product_id: i64,
    pub user_id: String,
    #[serde(default = "one")]
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
    pub fn quantity_for(&self, product: &Product) -> Result<i32, String> {
        if self.quantity > i64::from(product.max_per_order) {
            return Err(format!(
                "quantity must be at most {} for this product",
                product.max_per_order
            ));
        }
        Ok(self.quantity as i32)
    }
}

#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub struct Order {
    pub id: Uuid,
    pub product_id: i64,
    pub user_id: String,
    pub quantity: i32,
    pub amount_cents: i64,
    pub status: String,
    /// The lock token the stock write carried (`zk` guard only).
    pub fence: Option<i64>,
    /// Time spent in the lock queue (`zk` guard only).
    pub lock_wait_ms: Option<i32>,
    /// Why a `failed` order failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Until when a reservation waits for its payment.
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Runs the whole flow for one order. `client_gone` resolves if the HTTP client disconnects:
/// it is honoured only while waiting in the lock queue; once the lock is held the order
/// runs to a final status whether anyone listens or not.
pub async fn place(
    state: &AppState,
    new: NewOrder,
    key: Option<&str>,
    client_gone: oneshot::Receiver<()>,
) -> Result<Order, AppError> {
    new.validate().map_err(AppError::InvalidRequest)?;
    // The flood after a sale ends here: no lock, no write, no order row.
    if state.sold_out.is_raised(&new.product_id.to_string()) {
        return Err(AppError::SoldOut { order_id: None });
    }
    let db = &state.db;
    let product = inventory::terms(db, new.product_id)
        .await?
        .ok_or(AppError::UnknownProduct(new.product_id))?;
    let quantity = new
        .quantity_for(&product)
        .map_err(AppError::InvalidRequest)?;
    let amount = product
        .price_cents
        .checked_mul(quantity.into())
        .ok_or_else(|| AppError::invalid("the order's amount is too large"))?;
    // Repeat clicks end here. Not the enforcement (that is the purchases row, under the
    // guard), just the cheap early answer.
    if held_units(db, product.id, &new.user_id).await? + quantity > product.per_user_limit {
        return Err(AppError::PurchaseLimit { order_id: None });
    }

    let id = Uuid::new_v4();
    // The key (if any) learns its order in the same statement: from here on, a retry must
    // find this order rather than place another.
    sqlx::query(
        "WITH o AS (INSERT INTO orders (id, product_id, user_id, quantity, amount_cents)
                    VALUES ($1, $2, $3, $4, $5) RETURNING id)
         UPDATE idempotency_keys SET order_id = (SELECT id FROM o) WHERE key = $6",
    )
    .bind(id)
    .bind(product.id)
    .bind(&new.user_id)
    .bind(quantity)
    .bind(amount)
    .bind(key)
    .execute(db)
    .await?;

    let reserved = reserve(state, &product, id, &new, quantity, client_gone).await?;
    if !new.pay {
        return Ok(reserved);
    }
    // Reserved straight into `paying`: claimed for this payment in the same commit.
    settle(state, reserved).await
}

/// What the product's guard needs before a stock change: for `zk` and `zk-herd`, the
/// product's lock, whose token fences the write.
pub async fn enter(
    state: &AppState,
    product: &Product,
    session: Session,
) -> Result<(Option<StockLock>, Protection), LockError> {
    let recipe = match product.guard {
        Guard::Zk => Recipe::Fair,
        Guard::ZkHerd => Recipe::Herd,
        Guard::PgAtomic => return Ok((None, Protection::Atomic)),
        Guard::None => return Ok((None, Protection::Unguarded)),
    };
    let lock = state
        .zk
        .lock_stock(product.id, recipe, session, state.config.lock_timeout())
        .await?;
    let protection = Protection::Fenced(lock.token);
    Ok((Some(lock), protection))
}

/// Steps 2-4: enter the guard, take the stock and the buyer's units, record `reserved` in
/// the same transaction, commit, and only then release the lock (dropping it): releasing
/// before the commit would let the next holder read the old stock.
async fn reserve(
    state: &AppState,
    product: &Product,
    id: Uuid,
    new: &NewOrder,
    quantity: i32,
    mut client_gone: oneshot::Receiver<()>,
) -> Result<Order, AppError> {
    let user_id = new.user_id.as_str();
    let db = &state.db;
    let demo = armed_demo(state, product).await;
    let session = if demo.is_some() {
        Session::Own
    } else {
        Session::Shared
    };
    let sold_out_flag = product.id.to_string();
    let entered = tokio::select! {
        entered = enter(state, product, session) => entered,
        _ = &mut client_gone => {
            fail(db, id, "client_gone").await;
            return Err(AppError::Unavailable(anyhow!("client disconnected while queued")));
        }
        // Sold out while we queued: leave the queue now instead of reading a 0 under the lock.
        _ = state.sold_out.raised(&sold_out_flag) => {
            let mut conn = db.acquire().await?;
            set_status(&mut conn, id, "sold_out", None, None).await?;
            return Err(AppError::SoldOut { order_id: Some(id) });
        }
    };
    let (lock, protection) = match entered {
        Ok(entered) => entered,
        Err(e) => return Err(lock_failed(db, id, e).await),
    };
    let mut lock = lock;
    let fence = lock.as_ref().map(|l| l.token);
    let waited = lock.as_ref().map(|l| millis(l.waited));
    // Between reading and writing the stock: the usual think, or a demo's misfortune.
    let pause: Pin<Box<dyn Future<Output = ()> + Send>> = match (demo, fence) {
        (Some(Demo::Crash), Some(token)) => {
            drop(lock.take()); // its session ends with it: the node vanishes, as in a crash
            fail(db, id, "crashed").await;
            events::notify_demo(db, json!({ "kind": "crash", "product_id": product.id, "order_id": id, "token": token })).await;
            return Err(AppError::LockLost { order_id: id });
        }
        (Some(Demo::Zombie), Some(token)) => Box::pin(stall_until_superseded(
            db.clone(),
            product.id,
            token,
            lock.take(),
        )),
        _ => Box::pin(inventory::think(state.config.stock_think())),
    };
    let outcome =
        inventory::change_stock(db, product.id, Change::Take(quantity), protection, pause).await;
    if let (Some(Demo::Zombie), Some(token), Ok(outcome)) = (demo, fence, &outcome) {
        let current: Option<i64> = sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
            .bind(product.id)
            .fetch_optional(db)
            .await
            .unwrap_or_default();
        // Nobody took over within the stall: the zombie's token was still the newest, so its
        // write was (rightly) accepted. Said so, rather than leaving the page waiting.
        let write = if matches!(outcome, Outcome::Fenced) {
            "rejected"
        } else {
            "accepted"
        };
        let demo = json!({
            "kind": "zombie", "product_id": product.id, "order_id": id,
            "stale_token": token, "current_token": current, "write": write,
        });
        events::notify_demo(db, demo).await;
    }
    let result = match outcome {
        Ok(Outcome::Applied(mut tx)) => {
            if !hold_units(&mut tx, product, user_id, quantity).await? {
                tx.rollback().await?; // the stock goes back with it
                fail(db, id, "purchase_limit").await;
                return Err(AppError::PurchaseLimit { order_id: Some(id) });
            }
            // An order paid at once goes straight to `paying` (claimed for its payment, so the
            // expiry sweep leaves it alone) and saves the separate claim's commit.
            let status = if new.pay { "paying" } else { "reserved" };
            let order = sqlx::query_as(
                "UPDATE orders SET status = $5, fence = $2, lock_wait_ms = $3,
                        expires_at = now() + make_interval(secs => $4), updated_at = now()
                 WHERE id = $1 RETURNING *",
            )
            .bind(id)
            .bind(fence)
            .bind(waited)
            .bind(f64::from(product.reservation_ttl_s))
            .bind(status)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(order)
        }
        Ok(Outcome::Insufficient { mut tx, stock }) => {
            set_status(&mut tx, id, "sold_out", fence, waited).await?;
            tx.commit().await?;
            if stock == 0 {
                flag_sold_out(state, product.id).await;
            }
            Err(AppError::SoldOut { order_id: Some(id) })
        }
        Ok(Outcome::Fenced) => {
            fail(db, id, "lock_lost").await;
            Err(AppError::LockLost { order_id: id })
        }
        Err(e) => {
            fail(db, id, "unavailable").await;
            Err(e.into())
        }
    };
    drop(lock);
    result
}

/// The teaching page's demos of a lock holder's misfortunes (admin-armed, one-shot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Demo {
    /// The next holder stalls between reading and writing the stock until its session has
    /// ended and a newer holder has claimed the row; then it writes anyway, and the fence
    /// refuses it.
    Zombie,
    /// The next holder's session ends as soon as it holds the lock: its node vanishes and
    /// the queue moves on, with no write at all.
    Crash,
}

impl Demo {
    pub fn flag(self, product_id: i64) -> String {
        match self {
            Demo::Zombie => format!("{product_id}-zombie"),
            Demo::Crash => format!("{product_id}-crash"),
        }
    }
}

/// The demo this order acts out, if one is armed for the product and this order is the one
/// that took the flag (exactly one order, across instances, gets it).
async fn armed_demo(state: &AppState, product: &Product) -> Option<Demo> {
    if !state.config.allow_unsafe_guards || !matches!(product.guard, Guard::Zk | Guard::ZkHerd) {
        return None;
    }
    for demo in [Demo::Zombie, Demo::Crash] {
        let flag = demo.flag(product.id);
        if state.demo.is_raised(&flag) && state.demo.take(&flag).await {
            return Some(demo);
        }
    }
    None
}

/// The zombie's stall: its lock (in a session of its own) goes, as a session does when a
/// long pause outlasts it; then it waits, at most 15 s, for a newer holder to claim the row.
async fn stall_until_superseded(db: PgPool, product_id: i64, token: i64, lock: Option<StockLock>) {
    drop(lock);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        let fence: Option<i64> = sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
            .bind(product_id)
            .fetch_optional(&db)
            .await
            .unwrap_or_default();
        if fence.is_some_and(|f| f > token) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Raises the sold-out flag, then re-reads the stock: a return that committed and cleared
/// the flag just before we raised it must not leave the product flagged with stock on sale.
async fn flag_sold_out(state: &AppState, product_id: i64) {
    state.sold_out.raise(&product_id.to_string()).await;
    state.events.touch(product_id);
    match inventory::terms(&state.db, product_id).await {
        Ok(Some(p)) if p.stock > 0 => state.sold_out.lower(&product_id.to_string()).await,
        Ok(_) => {}
        // Unsure: the flag is only an optimisation, the guarded path stays correct.
        Err(_) => state.sold_out.lower(&product_id.to_string()).await,
    }
}

/// Step 5: pay a reservation. The order is first claimed (`reserved` → `paying`) only if
/// its reservation is still running, in one conditional UPDATE; the expiry sweep moves
/// `reserved` → `expired` with the opposite condition. PostgreSQL serialises the two on the
/// order's row, so a payment racing the expiry ends in exactly one of them.
pub async fn pay(state: &AppState, id: Uuid) -> Result<Order, AppError> {
    let db = &state.db;
    let claimed: Option<Order> = sqlx::query_as(
        "UPDATE orders SET status = 'paying', updated_at = now()
         WHERE id = $1 AND status = 'reserved' AND expires_at > now() RETURNING *",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    let Some(order) = claimed else {
        let current = get(db, id).await?.ok_or(AppError::OrderNotFound(id))?;
        return match current.status.as_str() {
            "paid" => Ok(current),
            // Past its deadline, expired or about to be: either way, not payable.
            "reserved" | "expired" => Err(AppError::ReservationExpired { order_id: id }),
            "paying" => Err(AppError::PaymentInProgress { order_id: id }),
            _ => Err(AppError::NotPayable { order_id: id }),
        };
    };
    settle(state, order).await
}

/// Charges an order claimed for payment (`paying`): `paid`, or declined and its units back.
async fn settle(state: &AppState, order: Order) -> Result<Order, AppError> {
    let db = &state.db;
    let id = order.id;
    match state.payment.charge(order.amount_cents).await {
        Charge::Approved { reference } => {
            let mut tx = db.begin().await?;
            record_payment(&mut tx, id, order.amount_cents, "succeeded", &reference).await?;
            let paid = sqlx::query_as(
                "UPDATE orders SET status = 'paid', updated_at = now()
                 WHERE id = $1 AND status = 'paying' RETURNING *",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(paid)
        }
        Charge::Declined { reference } => {
            // The units go back even if the decline cannot be recorded.
            let mut conn = db.acquire().await;
            if let Ok(conn) = conn.as_mut() {
                if let Err(e) =
                    record_payment(conn, id, order.amount_cents, "failed", &reference).await
                {
                    tracing::warn!(order = %id, error = %e, "could not record a declined payment");
                }
            }
            drop(conn);
            give_back(state, &order, "paying", "payment_failed").await;
            Err(AppError::PaymentFailed { order_id: id })
        }
    }
}

/// A declined payment gives the units back through the same guard that took them. Retried a
/// few times: if it still cannot (lock queue jammed, database down) the order stays as it
/// is — the audit stays balanced, the units are just not back on sale yet.
async fn give_back(state: &AppState, order: &Order, from: &str, to: &str) {
    for attempt in 1..=3 {
        match release(state, order, from, to).await {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(order = %order.id, attempt, error = %e, "returning stock failed");
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
        }
    }
    // The sweep's stale-payment pass will retry it.
    tracing::error!(order = %order.id, from, "stock not returned yet; the order keeps its units");
}

/// Puts an order's units back on sale and moves it `from` → `to`, both in one transaction
/// under the product's guard. `Ok(false)` if the order had already left `from` (for
/// `reserved`, also: not yet due), which rolls the stock back: another instance's sweep or a
/// payment got there first.
async fn release(state: &AppState, order: &Order, from: &str, to: &str) -> anyhow::Result<bool> {
    let product = inventory::terms(&state.db, order.product_id)
        .await?
        .ok_or_else(|| anyhow!("product {} vanished", order.product_id))?;
    let (lock, protection) = enter(state, &product, Session::Shared).await?;
    let outcome = inventory::change_stock(
        &state.db,
        product.id,
        Change::Return(order.quantity),
        protection,
        inventory::think(state.config.stock_think()),
    )
    .await?;
    let mut tx = match outcome {
        Outcome::Applied(tx) => tx,
        Outcome::Insufficient { .. } => return Err(anyhow!("stock would overflow")),
        Outcome::Fenced => return Err(anyhow!("lock lost while returning stock")),
    };
    let moved = sqlx::query(
        "UPDATE orders SET status = $3, updated_at = now()
         WHERE id = $1 AND status = $2 AND ($2 <> 'reserved' OR expires_at <= now())",
    )
    .bind(order.id)
    .bind(from)
    .bind(to)
    .execute(&mut *tx)
    .await?;
    if moved.rows_affected() == 0 {
        tx.rollback().await?; // and the stock with it
        return Ok(false);
    }
    sqlx::query("UPDATE purchases SET units = units - $3 WHERE product_id = $1 AND user_id = $2")
        .bind(order.product_id)
        .bind(&order.user_id)
        .bind(order.quantity)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    drop(lock);
    state.sold_out.lower(&product.id.to_string()).await;
    Ok(true)
}

/// One pass of the expiry sweep: returns the stock of reservations past their deadline.
/// Every instance runs it; the conditional move in [`release`] makes each expiry happen once.
pub async fn expire_due(state: &AppState) -> anyhow::Result<usize> {
    let due: Vec<Order> = sqlx::query_as(
        "SELECT * FROM orders WHERE status = 'reserved' AND expires_at <= now()
         ORDER BY expires_at LIMIT 100",
    )
    .fetch_all(&state.db)
    .await?;
    let mut expired = 0;
    for order in &due {
        match release(state, order, "reserved", "expired").await {
            Ok(true) => expired += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(order = %order.id, error = %e, "expiring a reservation failed")
            }
        }
    }
    settle_stale_payments(state).await?;
    Ok(expired)
}

/// A payment that has not finished in this long was abandoned (its instance died, or the
/// database failed it half way); no charge takes anywhere near it.
pub const STALE_PAYMENT: Duration = Duration::from_secs(300);

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
        } else if release(state, &order, "paying", "payment_failed").await? {
            tracing::warn!(order = %order.id, "settled an abandoned payment: failed, units returned");
        }
    }
    Ok(())
}

/// Units the user already holds of the product.
async fn held_units(db: &PgPool, product_id: i64, user_id: &str) -> Result<i32, sqlx::Error> {
    let units: Option<i32> =
        sqlx::query_scalar("SELECT units FROM purchases WHERE product_id = $1 AND user_id = $2")
            .bind(product_id)
            .bind(user_id)
            .fetch_optional(db)
            .await?;
    Ok(units.unwrap_or(0))
}

/// Adds the units to the user's holding, in the stock's transaction. `false` when that would
/// pass the product's per-user limit (the CHECK refused it; the transaction is aborted).
async fn hold_units(
    tx: &mut PgConnection,
    product: &Product,
    user_id: &str,
    quantity: i32,
) -> Result<bool, sqlx::Error> {
    let held = sqlx::query(
        "INSERT INTO purchases (product_id, user_id, units, max_units) VALUES ($1, $2, $3, $4)
         ON CONFLICT (product_id, user_id)
         DO UPDATE SET units = purchases.units + EXCLUDED.units, max_units = EXCLUDED.max_units",
    )
    .bind(product.id)
    .bind(user_id)
    .bind(quantity)
    .bind(product.per_user_limit)
    .execute(tx)
    .await;
    match held {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("purchases_within_limit") => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

// The error for a lock that was not granted, after marking the order failed.
async fn lock_failed(db: &PgPool, id: Uuid, err: LockError) -> AppError {
    let (reason, error) = match err {
        LockError::Timeout(_) => ("lock_timeout", AppError::LockTimeout { order_id: id }),
        LockError::Lost => ("lock_lost", AppError::LockLost { order_id: id }),
        LockError::TooBusy => ("too_busy", AppError::TooBusy),
        LockError::Unavailable(e) => ("unavailable", AppError::Unavailable(e)),
    };
    fail(db, id, reason).await;
    error
}

async fn set_status(
    conn: &mut PgConnection,
    id: Uuid,
    status: &str,
    fence: Option<i64>,
    lock_wait_ms: Option<i32>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE orders SET status = $2, fence = COALESCE($3, fence), lock_wait_ms = COALESCE($4, lock_wait_ms),
                updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(status)
    .bind(fence)
    .bind(lock_wait_ms)
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends an order that sold nothing. Best effort: if the database is what failed, the order
/// stays `created`, which the audit already counts as not sold.
async fn fail(db: &PgPool, id: Uuid, reason: &str) {
    let done = sqlx::query(
        "UPDATE orders SET status = 'failed', failure = $2, updated_at = now() WHERE id = $1 AND status = 'created'",
    )
    .bind(id)
    .bind(reason)
    .execute(db)
    .await;
    if let Err(e) = done {
        tracing::warn!(order = %id, reason, error = %e, "could not mark order failed");
    }
}

async fn record_payment(
    conn: &mut PgConnection,
    order_id: Uuid,
    amount: i64,
    outcome: &str,
    reference: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO payments (order_id, amount_cents, outcome, provider_ref) VALUES ($1, $2, $3, $4)",
    )
    .bind(order_id)
    .bind(amount)
    .bind(outcome)
    .bind(reference)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn get(db: &PgPool, id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM orders WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let product = Product {
            id: 1,
            name: "x".into(),
            price_cents: 1,
            stock: 5,
            sold: 0,
            stocked_total: 5,
            max_per_order: 2,
            per_user_limit: 1,
            reservation_ttl_s: 600,
            guard: Guard::Zk,
            sold_out: false,
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
