//! The order flow of the source material: create the order, reduce the stock under the
//! product's guard, release, then pay. Each step leaves the order row in a status that says
//! how far it got, so no order is ever lost in between:
//!
//! ```text
//! created ──reserve──> reserved ──pay──> paid
//!    │                    └──declined──> payment_failed (stock returned under the guard)
//!    ├──not enough──> sold_out
//!    └──lock timeout / lock lost / client gone / outage──> failed (nothing sold)
//! ```

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::AppError;
use crate::http::AppState;
use crate::inventory::{self, Change, Guard, Outcome, Product, Protection};
use crate::lock::{LockError, StockLock};
use crate::payment::Charge;

/// A buyer's request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    pub product_id: i64,
    pub user_id: String,
    #[serde(default = "one")]
    pub quantity: i64,
}

fn one() -> i64 {
    1
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
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Runs the whole flow for one order. `client_gone` resolves if the HTTP client disconnects:
/// it is honoured only while waiting in the lock queue; once the lock is held the order
/// runs to a final status whether anyone listens or not.
pub async fn place(
    state: &AppState,
    new: NewOrder,
    client_gone: oneshot::Receiver<()>,
) -> Result<Order, AppError> {
    new.validate().map_err(AppError::InvalidRequest)?;
    let db = &state.db;
    let product = inventory::get(db, new.product_id)
        .await?
        .ok_or(AppError::UnknownProduct(new.product_id))?;
    let quantity = new
        .quantity_for(&product)
        .map_err(AppError::InvalidRequest)?;
    let amount = product
        .price_cents
        .checked_mul(quantity.into())
        .ok_or_else(|| AppError::invalid("the order's amount is too large"))?;

    let id = Uuid::new_v4();
    sqlx::query("INSERT INTO orders (id, product_id, user_id, quantity, amount_cents) VALUES ($1, $2, $3, $4, $5)")
        .bind(id)
        .bind(product.id)
        .bind(&new.user_id)
        .bind(quantity)
        .bind(amount)
        .execute(db)
        .await?;

    reserve(state, &product, id, quantity, client_gone).await?;

    match state.payment.charge(amount).await {
        Charge::Approved { reference } => {
            let mut tx = db.begin().await?;
            record_payment(&mut tx, id, amount, "succeeded", &reference).await?;
            let order = sqlx::query_as(
                "UPDATE orders SET status = 'paid', updated_at = now() WHERE id = $1 AND status = 'reserved' RETURNING *",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(order)
        }
        Charge::Declined { reference } => {
            record_payment(
                db.acquire().await?.as_mut(),
                id,
                amount,
                "failed",
                &reference,
            )
            .await?;
            return_stock(state, &product, id, quantity).await;
            Err(AppError::PaymentFailed { order_id: id })
        }
    }
}

/// Steps 2-4: take the lock (for `zk`), reduce the stock, record `reserved` in the same
/// transaction, commit, and only then release the lock (dropping it): releasing before the
/// commit would let the next holder read the old stock.
async fn reserve(
    state: &AppState,
    product: &Product,
    id: Uuid,
    quantity: i32,
    mut client_gone: oneshot::Receiver<()>,
) -> Result<(), AppError> {
    let db = &state.db;
    let lock = match product.guard {
        Guard::Zk => {
            let acquired = tokio::select! {
                acquired = state.zk.lock_stock(product.id, state.config.lock_timeout()) => acquired,
                _ = &mut client_gone => {
                    fail(db, id, "client_gone").await;
                    return Err(AppError::Unavailable(anyhow!("client disconnected while queued")));
                }
            };
            Some(acquired.map_err(|e| lock_failed(db, id, e))?)
        }
        Guard::PgAtomic | Guard::None => None,
    };
    let (protection, fence, waited) = match (&lock, product.guard) {
        (Some(l), _) => (
            Protection::Fenced(l.token),
            Some(l.token),
            Some(millis(&l.waited)),
        ),
        (None, Guard::PgAtomic) => (Protection::Atomic, None, None),
        (None, _) => (Protection::Unguarded, None, None),
    };
    let outcome = inventory::change_stock(
        db,
        product.id,
        Change::Take(quantity),
        protection,
        state.config.stock_think(),
    )
    .await;
    let result = match outcome {
        Ok(Outcome::Applied(mut tx)) => {
            set_status(&mut tx, id, "reserved", fence, waited).await?;
            tx.commit().await?;
            Ok(())
        }
        Ok(Outcome::Insufficient(mut tx)) => {
            set_status(&mut tx, id, "sold_out", fence, waited).await?;
            tx.commit().await?;
            Err(AppError::SoldOut { order_id: id })
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

// Keeps `reserve` readable: the error for a lock that was not granted, after marking the
// order failed in the background (the caller is about to return).
fn lock_failed(db: &PgPool, id: Uuid, err: LockError) -> AppError {
    let (reason, error) = match err {
        LockError::Timeout(_) => ("lock_timeout", AppError::LockTimeout { order_id: id }),
        LockError::Lost => ("lock_lost", AppError::LockLost { order_id: id }),
        LockError::Unavailable(e) => ("unavailable", AppError::Unavailable(e)),
    };
    let db = db.clone();
    tokio::spawn(async move { fail(&db, id, reason).await });
    error
}

/// A declined payment gives the units back through the same guard that took them. Retried a
/// few times: if it still cannot (lock queue jammed, database down) the order stays
/// `reserved` — the audit stays balanced, the units are just not back on sale.
async fn return_stock(state: &AppState, product: &Product, id: Uuid, quantity: i32) {
    for attempt in 1..=3 {
        match try_return_stock(state, product, id, quantity).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(order = %id, attempt, error = %e, "returning stock failed"),
        }
    }
    tracing::error!(order = %id, "stock not returned after a declined payment; order left reserved");
}

async fn try_return_stock(
    state: &AppState,
    product: &Product,
    id: Uuid,
    quantity: i32,
) -> anyhow::Result<()> {
    let lock: Option<StockLock> = match product.guard {
        Guard::Zk => Some(
            state
                .zk
                .lock_stock(product.id, state.config.lock_timeout())
                .await?,
        ),
        _ => None,
    };
    let protection = match (&lock, product.guard) {
        (Some(l), _) => Protection::Fenced(l.token),
        (None, Guard::PgAtomic) => Protection::Atomic,
        (None, _) => Protection::Unguarded,
    };
    match inventory::change_stock(
        &state.db,
        product.id,
        Change::Return(quantity),
        protection,
        state.config.stock_think(),
    )
    .await?
    {
        Outcome::Applied(mut tx) => {
            set_status(&mut tx, id, "payment_failed", None, None).await?;
            tx.commit().await?;
            Ok(())
        }
        Outcome::Insufficient(_) => Err(anyhow!("stock would overflow")),
        Outcome::Fenced => Err(anyhow!("lock lost while returning stock")),
    }
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
    sqlx::query("INSERT INTO payments (order_id, amount_cents, outcome, provider_ref) VALUES ($1, $2, $3, $4)")
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

fn millis(d: &std::time::Duration) -> i32 {
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
            guard: Guard::Zk,
        };
        assert_eq!(order("a", 2).quantity_for(&product), Ok(2));
        assert!(order("a", 3).quantity_for(&product).is_err());
        assert!(order("a", i64::MAX).quantity_for(&product).is_err());
    }
}
