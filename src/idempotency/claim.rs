//! A key's claim on the order it places, and the two rules the order's transaction keeps
//! for it: the key learns its order only while this attempt still holds it, and an order
//! whose key a later attempt took over sells nothing. The `idempotency_keys` table is this
//! module's (with its parent's): the order path calls these, never the table.
//!
//! Nothing here knows about orders beyond their ids, so the order path can use it without
//! the module that wraps the order flow (`super`) depending on itself.

use std::collections::HashSet;

use sqlx::PgConnection;
use uuid::Uuid;

/// An Idempotency-Key (scoped to its buyer) and the attempt that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub key: String,
    pub attempt: Uuid,
}

/// Which of `claims` are still held by their attempt and have no order yet, locked until the
/// transaction ends: a later attempt cannot take them over before this one's orders are
/// written (or not). The others were taken over: their keys.
pub async fn taken_over<'a>(
    conn: &mut PgConnection,
    claims: impl Iterator<Item = &'a Claim>,
) -> Result<HashSet<String>, sqlx::Error> {
    let (keys, attempts): (Vec<&str>, Vec<Uuid>) =
        claims.map(|c| (c.key.as_str(), c.attempt)).unzip();
    if keys.is_empty() {
        return Ok(HashSet::new());
    }
    let held: HashSet<String> = sqlx::query_scalar!(
        "SELECT k.key FROM idempotency_keys k
         JOIN unnest($1::text[], $2::uuid[]) AS t(key, attempt)
           ON k.key = t.key AND k.attempt = t.attempt
         WHERE k.order_id IS NULL
         FOR UPDATE OF k",
        &keys as _,
        &attempts
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .collect();
    Ok(keys
        .into_iter()
        .filter(|k| !held.contains(*k))
        .map(str::to_string)
        .collect())
}

/// Each claim's key learns its order (`orders`, in the same order), in the transaction that
/// writes the orders: only the key's own attempt, and only once.
pub async fn link<'a>(
    conn: &mut PgConnection,
    claims: impl Iterator<Item = (Uuid, &'a Claim)>,
) -> Result<(), sqlx::Error> {
    let mut keys: Vec<&str> = Vec::new();
    let mut orders: Vec<Uuid> = Vec::new();
    let mut attempts: Vec<Uuid> = Vec::new();
    for (order, claim) in claims {
        keys.push(&claim.key);
        orders.push(order);
        attempts.push(claim.attempt);
    }
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "UPDATE idempotency_keys k SET order_id = t.id
         FROM unnest($1::text[], $2::uuid[], $3::uuid[]) AS t(key, id, attempt)
         WHERE k.key = t.key AND k.attempt = t.attempt AND k.order_id IS NULL",
        &keys as _,
        &orders,
        &attempts
    )
    .execute(conn)
    .await?;
    Ok(())
}
