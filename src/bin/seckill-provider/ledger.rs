//! The ledger: one row per charge, keyed by the caller's Idempotency-Key.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A charge, as the ledger has it and the API answers it.
#[derive(Clone, Debug, Serialize)]
pub struct Charge {
    pub key: String,
    pub amount_cents: i64,
    /// `succeeded` or `declined`.
    pub status: String,
    pub reference: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

/// The charge under `key`: made now (declined if `decline`), or the one made before under
/// it. `None` if the key was used for another amount.
pub async fn charge(
    db: &PgPool,
    key: &str,
    amount_cents: i64,
    decline: bool,
    started_at: DateTime<Utc>,
) -> Result<Option<Charge>, sqlx::Error> {
    let status = if decline { "declined" } else { "succeeded" };
    let reference = format!("ch_{}", uuid::Uuid::new_v4().simple());
    let made = sqlx::query_as!(
        Charge,
        "INSERT INTO ledger (key, amount_cents, status, reference, started_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (key) DO NOTHING
         RETURNING key, amount_cents, status, reference, started_at, ended_at",
        key,
        amount_cents,
        status,
        reference,
        started_at
    )
    .fetch_optional(db)
    .await?;
    let charge = match made {
        Some(charge) => charge,
        // Charged before under this key: the same answer again.
        None => get(db, key).await?.ok_or(sqlx::Error::RowNotFound)?,
    };
    Ok((charge.amount_cents == amount_cents).then_some(charge))
}

pub async fn get(db: &PgPool, key: &str) -> Result<Option<Charge>, sqlx::Error> {
    sqlx::query_as!(
        Charge,
        "SELECT key, amount_cents, status, reference, started_at, ended_at
         FROM ledger WHERE key = $1",
        key
    )
    .fetch_optional(db)
    .await
}

pub async fn all(db: &PgPool) -> Result<Vec<Charge>, sqlx::Error> {
    sqlx::query_as!(
        Charge,
        "SELECT key, amount_cents, status, reference, started_at, ended_at
         FROM ledger ORDER BY ended_at, key"
    )
    .fetch_all(db)
    .await
}
