//! Payment intents' SQL: a payment's row (`payments`) exists before its charge is sent, with
//! its outcome NULL (pending) until the provider's answer is recorded. Its `key` is the one
//! the provider sees; `payments` holds at most one row per key, so one per charge.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::model::{Order, OrderStatus, Payment};
use crate::payment::Charge;

/// One answer to record: the order, its intent's key, the provider's charge, and who heard it.
#[derive(Clone)]
pub(super) struct Answered {
    pub order: Order,
    pub key: String,
    pub charge: Charge,
    pub by: Settler,
}

/// Who learnt a charge's outcome (`payments.settled_by`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Settler {
    /// The order's own attempt: the provider's answer came back to it.
    Answer,
    /// The sweep, asking the provider again under the same key after the answer was lost.
    Sweep,
}

impl Settler {
    fn as_str(self) -> &'static str {
        match self {
            Settler::Answer => "answer",
            Settler::Sweep => "sweep",
        }
    }
}

/// Claims a reservation for payment (`reserved` → `paying`, only while it runs) and writes
/// its intent, in one statement. `None` if it was not payable.
pub(super) async fn claim_for_payment(
    db: &PgPool,
    id: Uuid,
    key: &str,
) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as!(
        Order,
        "WITH o AS (
            UPDATE orders SET status = 'paying', updated_at = now()
            WHERE id = $1 AND status = 'reserved' AND expires_at > now()
            RETURNING *
         ), intent AS (
            INSERT INTO payments (order_id, key, amount_cents)
            SELECT id, $2, amount_cents FROM o
            ON CONFLICT (key) DO NOTHING
         )
         SELECT id AS \"id!\", product_id AS \"product_id!\", user_id AS \"user_id!\", quantity AS \"quantity!\", amount_cents AS \"amount_cents!\", status AS \"status!: OrderStatus\", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS \"created_at!\", updated_at AS \"updated_at!\" FROM o",
        id,
        key
    )
    .fetch_optional(db)
    .await
}

/// Records providers' answers on their intents (inserted if missing) and, for a succeeded
/// charge, moves the order `paying` → `paid`, in one statement for them all. Returns, per
/// answer in order, the order if this moved it. An intent already settled is left as it is:
/// the provider gives one answer per key, so a second record says the same. Keys must be
/// distinct (see `recorder::take`).
pub(super) async fn record_payments(
    db: &PgPool,
    answers: &[Answered],
) -> Result<Vec<Option<Order>>, sqlx::Error> {
    let ids: Vec<Uuid> = answers.iter().map(|a| a.order.id).collect();
    let keys: Vec<&str> = answers.iter().map(|a| a.key.as_str()).collect();
    let amounts: Vec<i64> = answers.iter().map(|a| a.order.amount_cents).collect();
    let outcomes: Vec<&str> = answers
        .iter()
        .map(|a| match a.charge.approved() {
            true => "succeeded",
            false => "failed",
        })
        .collect();
    let refs: Vec<&str> = answers
        .iter()
        .map(|a| a.charge.reference.as_str())
        .collect();
    let started: Vec<DateTime<Utc>> = answers.iter().map(|a| a.charge.started_at).collect();
    let ended: Vec<DateTime<Utc>> = answers.iter().map(|a| a.charge.ended_at).collect();
    let by: Vec<&str> = answers.iter().map(|a| a.by.as_str()).collect();
    let paid = sqlx::query_as!(
        Order,
        "WITH t AS (
            SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[],
                                 $6::timestamptz[], $7::timestamptz[], $8::text[])
                   AS t(order_id, key, amount, outcome, provider_ref, started_at, ended_at, settler)
         ), p AS (
            INSERT INTO payments (order_id, key, amount_cents, outcome, provider_ref,
                                  started_at, ended_at, settled_at, settled_by)
            SELECT order_id, key, amount, outcome, provider_ref, started_at, ended_at, now(), settler
            FROM t
            ON CONFLICT (key) DO UPDATE
            SET outcome = EXCLUDED.outcome, provider_ref = EXCLUDED.provider_ref,
                started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
                settled_at = now(), settled_by = EXCLUDED.settled_by
            WHERE payments.outcome IS NULL
         )
         UPDATE orders o SET status = 'paid', updated_at = now()
         FROM t
         WHERE o.id = t.order_id AND o.status = 'paying' AND t.outcome = 'succeeded'
         RETURNING o.id AS \"id!\", o.product_id AS \"product_id!\", o.user_id AS \"user_id!\", o.quantity AS \"quantity!\", o.amount_cents AS \"amount_cents!\", o.status AS \"status!: OrderStatus\", o.fence, o.lock_wait_ms, o.batch_size, o.failure, o.expires_at, o.created_at AS \"created_at!\", o.updated_at AS \"updated_at!\"",
        &ids,
        &keys as _,
        &amounts,
        &outcomes as _,
        &refs as _,
        &started,
        &ended,
        &by as _
    )
    .fetch_all(db)
    .await?;
    let mut paid: HashMap<Uuid, Order> = paid.into_iter().map(|o| (o.id, o)).collect();
    Ok(ids.iter().map(|id| paid.remove(id)).collect())
}

/// Gives an order whose charge was never sent back to its reservation (`paying` →
/// `reserved`, deadline unchanged) and drops its intent, in one transaction. With a `share`,
/// only while the product's unpaid reservations have room for it (`share` of its stock, the
/// product's row locked so two such returns cannot both take the last room); without one
/// (the order was a reservation a moment ago, already counted), always. `false`: no room,
/// nothing changed.
pub(super) async fn unclaim(
    db: &PgPool,
    id: Uuid,
    key: &str,
    share: Option<f64>,
) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    if let Some(share) = share {
        let room = sqlx::query_scalar!(
            r#"SELECT (SELECT COALESCE(SUM(r.quantity), 0) FROM orders r
                       WHERE r.product_id = p.id AND r.status = 'reserved') + o.quantity
                      <= ceil(p.stocked_total * $2::FLOAT8) AS "room!"
               FROM orders o JOIN products p ON p.id = o.product_id
               WHERE o.id = $1
               FOR UPDATE OF p"#,
            id,
            share
        )
        .fetch_optional(&mut *tx)
        .await?;
        if room != Some(true) {
            return Ok(false);
        }
    }
    sqlx::query!(
        "WITH o AS (
            UPDATE orders SET status = 'reserved', updated_at = now()
            WHERE id = $1 AND status = 'paying'
         )
         DELETE FROM payments WHERE key = $2 AND outcome IS NULL AND sent_at IS NULL",
        id,
        key
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Removes the order's intent while it is still pending and was never sent (no charge can
/// follow: sending needs the mark first, see [`mark_sent`]), and the order is not being paid
/// (a payment claiming it meanwhile reuses the intent's key). Whether one was removed.
pub(super) async fn drop_unsent(
    conn: impl sqlx::PgExecutor<'_>,
    order_id: Uuid,
) -> Result<bool, sqlx::Error> {
    let dropped = sqlx::query!(
        "DELETE FROM payments p USING orders o
         WHERE p.order_id = $1 AND p.outcome IS NULL AND p.sent_at IS NULL
           AND o.id = p.order_id AND o.status <> 'paying'",
        order_id
    )
    .execute(conn)
    .await?;
    Ok(dropped.rows_affected() > 0)
}

/// Removes the order's intent, sent but never charged by the provider's own word, while it
/// is pending and the order is not being paid.
pub(super) async fn drop_uncharged(db: &PgPool, order_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM payments p USING orders o
         WHERE p.order_id = $1 AND p.outcome IS NULL
           AND o.id = p.order_id AND o.status <> 'paying'",
        order_id
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Marks pending intents as sent, before their charges' first requests leave; per key in
/// order, whether it was marked (or already was). `false`: the intent is gone or settled
/// (a sweep dropped it as never sent): its charge must not be sent.
pub(super) async fn mark_sent(db: &PgPool, keys: &[String]) -> Result<Vec<bool>, sqlx::Error> {
    let marked: Vec<String> = sqlx::query_scalar!(
        "UPDATE payments SET sent_at = COALESCE(sent_at, now())
         WHERE key = ANY($1) AND outcome IS NULL
         RETURNING key",
        keys
    )
    .fetch_all(db)
    .await?;
    Ok(keys.iter().map(|k| marked.contains(k)).collect())
}

/// Orders, not `paying`, whose intent has been pending longer than `age`: an intent that
/// nothing would ever settle (the sweep's payment pass looks at `paying` orders only).
pub(super) async fn orphans(
    db: &PgPool,
    age: std::time::Duration,
    limit: i64,
) -> Result<Vec<Order>, sqlx::Error> {
    sqlx::query_as!(
        Order,
        "SELECT o.id AS \"id!\", o.product_id AS \"product_id!\", o.user_id AS \"user_id!\", o.quantity AS \"quantity!\", o.amount_cents AS \"amount_cents!\", o.status AS \"status!: OrderStatus\", o.fence, o.lock_wait_ms, o.batch_size, o.failure, o.expires_at, o.created_at AS \"created_at!\", o.updated_at AS \"updated_at!\"
         FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE p.outcome IS NULL AND o.status <> 'paying'
           AND p.created_at < now() - make_interval(secs => $1)
         ORDER BY p.created_at LIMIT $2",
        age.as_secs_f64(),
        limit
    )
    .fetch_all(db)
    .await
}

/// An intent as the sweep reads it: its outcome once recorded.
pub(super) struct Intent {
    /// `succeeded`, `failed` (declined), or none yet (pending).
    pub outcome: Option<String>,
    /// Whether its charge was (maybe) sent: marked before the first request left.
    pub sent: bool,
}

/// The order's payment intent, if it has one.
pub(super) async fn of_order(db: &PgPool, order_id: Uuid) -> Result<Option<Intent>, sqlx::Error> {
    sqlx::query_as!(
        Intent,
        r#"SELECT outcome, sent_at IS NOT NULL AS "sent!" FROM payments WHERE order_id = $1 ORDER BY id DESC LIMIT 1"#,
        order_id
    )
    .fetch_optional(db)
    .await
}

/// An order whose intent records a succeeded charge, still `paying` (its move to `paid` was
/// lost): moved now.
pub(super) async fn paid(db: &PgPool, order_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE orders SET status = 'paid', updated_at = now() WHERE id = $1 AND status = 'paying'",
        order_id
    )
    .execute(db)
    .await?;
    Ok(())
}

/// An order and its payment as its buyer sees them (its latest intent, if any), in one
/// statement: one snapshot, so a settlement (which moves the intent and the order in one
/// transaction) is seen whole or not at all, never a settled intent on a `paying` order.
pub(super) async fn order_with_payment(
    db: &PgPool,
    order_id: Uuid,
) -> Result<Option<(Order, Option<Payment>)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT o.id, o.product_id, o.user_id, o.quantity, o.amount_cents,
                  o.status AS "status: OrderStatus", o.fence, o.lock_wait_ms, o.batch_size,
                  o.failure, o.expires_at, o.created_at, o.updated_at,
                  p.key AS "pay_key?", COALESCE(p.outcome, 'pending') AS "pay_outcome?",
                  p.provider_ref AS "pay_ref?", p.settled_by AS "pay_settled_by?",
                  p.created_at AS "pay_created_at?", p.settled_at AS "pay_settled_at?"
           FROM orders o
           LEFT JOIN LATERAL (
               SELECT key, outcome, provider_ref, settled_by, created_at, settled_at
               FROM payments WHERE order_id = o.id ORDER BY id DESC LIMIT 1
           ) p ON true
           WHERE o.id = $1"#,
        order_id
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| {
        let payment = match (r.pay_key, r.pay_outcome, r.pay_created_at) {
            (Some(key), Some(outcome), Some(created_at)) => Some(Payment {
                key,
                outcome,
                provider_ref: r.pay_ref,
                settled_by: r.pay_settled_by,
                created_at,
                settled_at: r.pay_settled_at,
            }),
            _ => None,
        };
        let order = Order {
            id: r.id,
            product_id: r.product_id,
            user_id: r.user_id,
            quantity: r.quantity,
            amount_cents: r.amount_cents,
            status: r.status,
            fence: r.fence,
            lock_wait_ms: r.lock_wait_ms,
            batch_size: r.batch_size,
            failure: r.failure,
            expires_at: r.expires_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        };
        (order, payment)
    }))
}
