//! The order's SQL: each function one statement, each status move conditional where a race
//! is possible.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{Order, OrderStatus};
use crate::inventory::Product;

/// The new order, `created`. The key (if any) learns its order in the same statement: from
/// here on, a retry must find this order rather than place another.
pub(super) async fn insert(
    db: &PgPool,
    id: Uuid,
    product: &Product,
    user_id: &str,
    quantity: i32,
    amount: i64,
    key: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH o AS (INSERT INTO orders (id, product_id, user_id, quantity, amount_cents)
                    VALUES ($1, $2, $3, $4, $5) RETURNING id)
         UPDATE idempotency_keys SET order_id = (SELECT id FROM o) WHERE key = $6",
    )
    .bind(id)
    .bind(product.id)
    .bind(user_id)
    .bind(quantity)
    .bind(amount)
    .bind(key)
    .execute(db)
    .await?;
    Ok(())
}

/// Records the reservation (`reserved`, or `paying` when paid at once) in the stock's
/// transaction, with the token that fenced the write and the time spent queueing.
pub(super) async fn reserved(
    tx: &mut PgConnection,
    id: Uuid,
    status: OrderStatus,
    fence: Option<i64>,
    lock_wait_ms: Option<i32>,
    product: &Product,
) -> Result<Order, sqlx::Error> {
    sqlx::query_as(
        "UPDATE orders SET status = $5, fence = $2, lock_wait_ms = $3,
                expires_at = now() + make_interval(secs => $4), updated_at = now()
         WHERE id = $1 RETURNING *",
    )
    .bind(id)
    .bind(fence)
    .bind(lock_wait_ms)
    .bind(f64::from(product.reservation_ttl_s))
    .bind(status.as_str())
    .fetch_one(tx)
    .await
}

/// Units the user already holds of the product.
pub(super) async fn held_units(
    db: &PgPool,
    product_id: i64,
    user_id: &str,
) -> Result<i32, sqlx::Error> {
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
pub(super) async fn hold_units(
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

/// Gives units back to the user's allowance (their order returned its stock).
pub(super) async fn release_units(tx: &mut PgConnection, order: &Order) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE purchases SET units = units - $3 WHERE product_id = $1 AND user_id = $2")
        .bind(order.product_id)
        .bind(&order.user_id)
        .bind(order.quantity)
        .execute(tx)
        .await?;
    Ok(())
}

pub(super) async fn set_status(
    conn: &mut PgConnection,
    id: Uuid,
    status: OrderStatus,
    fence: Option<i64>,
    lock_wait_ms: Option<i32>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE orders SET status = $2, fence = COALESCE($3, fence), lock_wait_ms = COALESCE($4, lock_wait_ms),
                updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(fence)
    .bind(lock_wait_ms)
    .execute(conn)
    .await?;
    Ok(())
}

/// Moves the order `from` → `to` if it is still `from`; `false` if it had moved on. A
/// `reserved` order moves only once due (the expiry's side of the race with a payment).
pub(super) async fn advance(
    conn: &mut PgConnection,
    id: Uuid,
    from: OrderStatus,
    to: OrderStatus,
) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query(
        "UPDATE orders SET status = $3, updated_at = now()
         WHERE id = $1 AND status = $2 AND ($2 <> 'reserved' OR expires_at <= now())",
    )
    .bind(id)
    .bind(from.as_str())
    .bind(to.as_str())
    .execute(conn)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Ends an order that sold nothing. Best effort: if the database is what failed, the order
/// stays `created`, which the audit already counts as not sold.
pub(super) async fn fail(db: &PgPool, id: Uuid, reason: &str) {
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

pub(super) async fn record_payment(
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

pub(super) fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
