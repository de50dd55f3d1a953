//! An order as it is stored and answered (its status along the flow, its row), and as it
//! waits for its lock cycle (a ticket, and where its answer goes).

use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::Error;

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

/// Read from its TEXT column by name (`orders.status` in SQL: `status AS "status: OrderStatus"`).
impl sqlx::Type<sqlx::Postgres> for OrderStatus {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for OrderStatus {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let name = <String as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(OrderStatus::try_from(name)?)
    }
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Order {
    pub id: Uuid,
    pub product_id: i64,
    pub user_id: String,
    pub quantity: i32,
    pub amount_cents: i64,
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

/// An order's payment as its buyer sees it: the intent (written before the charge is sent)
/// and how it was settled.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Payment {
    /// What the provider sees on every try of this charge: `seckill-{order id}`.
    pub key: String,
    /// `pending` until the provider's answer is known, then `succeeded` or `failed`
    /// (declined).
    pub outcome: String,
    /// The provider's reference for the charge, once known.
    pub provider_ref: Option<String>,
    /// Who learnt the outcome: `answer` (the provider answered the order's own request) or
    /// `sweep` (the answer was lost; the sweep asked again under the same key). `null` while
    /// pending, and for a payment settled before this was recorded.
    pub settled_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
}

/// An order's outcome: its row, or why it has none (or why it stopped).
pub type Answer = Result<Order, Error>;

/// One buyer's order, waiting to be served. It has no row yet: its row is written, in its
/// final status, by the transaction that decides it (or by whatever ends it first).
#[derive(Clone, Debug)]
pub struct Ticket {
    pub id: Uuid,
    pub user_id: String,
    pub quantity: i32,
    pub amount_cents: i64,
    /// Pay at once (`paying` after the commit), or stop at `reserved`.
    pub pay: bool,
    /// Its Idempotency-Key's claim, which learns the order in the same transaction — only
    /// while the key is still held by this order's attempt: a key taken over by a later
    /// attempt (past this one's deadline) makes this order sell nothing.
    pub claim: Option<crate::idempotency::claim::Claim>,
    /// When its request arrived: its deadline (`--request-timeout-ms` later) and its time
    /// in the queue are measured from here.
    pub placed: Instant,
}

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
