//! Step 5, paying, and the way back: a declined payment or an expired reservation returns
//! its units through the same guard that took them.

use std::time::Duration;

use anyhow::anyhow;
use uuid::Uuid;

use super::store::{self, advance, record_payment};
use super::{Order, OrderStatus};
use crate::error::AppError;
use crate::inventory::{self, Change, Outcome};
use crate::lock::Session;
use crate::payment::Charge;
use crate::state::AppState;

/// Pays a reservation. The order is first claimed (`reserved` → `paying`) only if its
/// reservation is still running, in one conditional UPDATE; the expiry sweep moves
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
        let current = store::get(db, id)
            .await?
            .ok_or(AppError::OrderNotFound(id))?;
        return match current.status {
            OrderStatus::Paid => Ok(current),
            // Past its deadline, expired or about to be: either way, not payable.
            OrderStatus::Reserved | OrderStatus::Expired => {
                Err(AppError::ReservationExpired { order_id: id })
            }
            OrderStatus::Paying => Err(AppError::PaymentInProgress { order_id: id }),
            _ => Err(AppError::NotPayable { order_id: id }),
        };
    };
    settle(state, order).await
}

/// Charges an order claimed for payment (`paying`): `paid`, or declined and its units back.
pub(super) async fn settle(state: &AppState, order: Order) -> Result<Order, AppError> {
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
            give_back(state, &order).await;
            Err(AppError::PaymentFailed { order_id: id })
        }
    }
}

/// A declined payment gives the units back. Retried a few times: if it still cannot (lock
/// queue jammed, database down) the order stays `paying` — the audit stays balanced, the
/// units are just not back on sale yet; the sweep's stale-payment pass retries it.
async fn give_back(state: &AppState, order: &Order) {
    for attempt in 1..=3 {
        match release(
            state,
            order,
            OrderStatus::Paying,
            OrderStatus::PaymentFailed,
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
/// payment got there first.
pub(super) async fn release(
    state: &AppState,
    order: &Order,
    from: OrderStatus,
    to: OrderStatus,
) -> anyhow::Result<bool> {
    let product = inventory::terms(&state.db, order.product_id)
        .await?
        .ok_or_else(|| anyhow!("product {} vanished", order.product_id))?;
    let (lock, protection) = inventory::enter(state, &product, Session::Shared).await?;
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
    if !advance(&mut tx, order.id, from, to).await? {
        tx.rollback().await?; // and the stock with it
        return Ok(false);
    }
    store::release_units(&mut tx, order).await?;
    tx.commit().await?;
    drop(lock);
    state.sold_out.lower(&product.id.to_string()).await;
    Ok(true)
}
