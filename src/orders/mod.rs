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
//! Every stock change, in either direction, goes through [`inventory::enter`] (the product's
//! guard) and [`inventory::change_stock`], and moves the order in the same transaction as
//! the stock.
//!
//! - [`pay`]: paying a reservation, and giving units back (declines, expiries).
//! - [`sweep`]: the background pass that expires reservations and settles stale payments.
//! - [`demo`]: what a lock holder may do between its read and its write besides thinking.
//! - `store`: the order's SQL.

pub mod demo;
mod pay;
mod store;
pub mod sweep;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::AppError;
use crate::inventory::{self, Change, Outcome, Product};
use crate::lock::{LockError, Session};
use crate::state::AppState;
use demo::Demo;
pub use pay::pay;
pub use store::get;
use store::{fail, held_units, hold_units, millis, set_status};

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

/// Where an order stands (see the diagram at the top). Stored as its snake_case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub struct Order {
    pub id: Uuid,
    pub product_id: i64,
    pub user_id: String,
    pub quantity: i32,
    pub amount_cents: i64,
    #[sqlx(try_from = "String")]
    pub status: OrderStatus,
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
    store::insert(db, id, &product, &new.user_id, quantity, amount, key).await?;
    let reserved = reserve(state, &product, id, &new, quantity, client_gone).await?;
    if !new.pay {
        return Ok(reserved);
    }
    // Reserved straight into `paying`: claimed for this payment in the same commit.
    pay::settle(state, reserved).await
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
    let db = &state.db;
    let demo = demo::armed(state, product).await;
    let session = if demo.is_some() {
        Session::Own
    } else {
        Session::Shared
    };
    let sold_out_flag = product.id.to_string();
    let entered = tokio::select! {
        entered = inventory::enter(state, product, session) => entered,
        _ = &mut client_gone => {
            fail(db, id, "client_gone").await;
            return Err(AppError::Unavailable(anyhow!("client disconnected while queued")));
        }
        // Sold out while we queued: leave the queue now instead of reading a 0 under the lock.
        _ = state.sold_out.raised(&sold_out_flag) => {
            let mut conn = db.acquire().await?;
            set_status(&mut conn, id, OrderStatus::SoldOut, None, None).await?;
            return Err(AppError::SoldOut { order_id: Some(id) });
        }
    };
    let (mut lock, protection) = match entered {
        Ok(entered) => entered,
        Err(e) => return Err(lock_failed(db, id, e).await),
    };
    let fence = lock.as_ref().map(|l| l.token);
    let waited = lock.as_ref().map(|l| millis(l.waited));
    if demo == Some(Demo::Crash) {
        if let Some(lock) = lock.take() {
            demo::crash(db, product.id, id, lock).await;
            return Err(AppError::LockLost { order_id: Some(id) });
        }
    }
    let pause = demo::pause_for(state, product.id, demo, &mut lock);
    let outcome =
        inventory::change_stock(db, product.id, Change::Take(quantity), protection, pause).await;
    if let (Some(Demo::Zombie), Some(token), Ok(outcome)) = (demo, fence, &outcome) {
        demo::report_zombie(db, product.id, id, token, outcome).await;
    }
    let result = match outcome {
        Ok(Outcome::Applied(mut tx)) => {
            if !hold_units(&mut tx, product, &new.user_id, quantity).await? {
                tx.rollback().await?; // the stock goes back with it
                fail(db, id, "purchase_limit").await;
                return Err(AppError::PurchaseLimit { order_id: Some(id) });
            }
            // An order paid at once goes straight to `paying` (claimed for its payment, so the
            // expiry sweep leaves it alone) and saves the separate claim's commit.
            let status = if new.pay {
                OrderStatus::Paying
            } else {
                OrderStatus::Reserved
            };
            let order = store::reserved(&mut tx, id, status, fence, waited, product).await?;
            tx.commit().await?;
            Ok(order)
        }
        Ok(Outcome::Insufficient { mut tx, stock }) => {
            set_status(&mut tx, id, OrderStatus::SoldOut, fence, waited).await?;
            tx.commit().await?;
            if stock == 0 {
                flag_sold_out(state, product.id).await;
            }
            Err(AppError::SoldOut { order_id: Some(id) })
        }
        Ok(Outcome::Fenced) => {
            fail(db, id, "lock_lost").await;
            Err(AppError::LockLost { order_id: Some(id) })
        }
        Err(e) => {
            fail(db, id, "unavailable").await;
            Err(e.into())
        }
    };
    drop(lock);
    result
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

/// The error for a lock that was not granted, after marking the order failed.
async fn lock_failed(db: &sqlx::PgPool, id: Uuid, err: LockError) -> AppError {
    let error = AppError::from(err).for_order(id);
    fail(db, id, error.code()).await;
    error
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
