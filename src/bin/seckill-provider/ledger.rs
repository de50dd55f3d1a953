//! The ledger: one row per charge, keyed by the caller's Idempotency-Key.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use seckill::group::{GroupWriter, WriteGroup};
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

/// A charge to make, as its request asked for it.
#[derive(Clone)]
pub struct Entry {
    key: String,
    amount_cents: i64,
    status: &'static str,
    started_at: DateTime<Utc>,
}

/// Concurrent charges share one statement and one commit (see `seckill::group`): the shop's
/// sale sends them in bursts, and a statement each would cost this machine's PostgreSQL more
/// than the shop's own order.
pub type Ledger = GroupWriter<Entry, Charge>;

pub fn ledger(db: PgPool) -> Ledger {
    let write: WriteGroup<Entry, Charge> = Arc::new(move |entries, _| {
        let db = db.clone();
        Box::pin(async move { write(&db, &entries).await })
    });
    GroupWriter::new(write, |entry| &entry.key, 512)
}

/// The charge under `key`: made now (declined if `decline`), or the one made before under
/// it. `None` if the key was used for another amount.
pub async fn charge(
    ledger: &Ledger,
    key: &str,
    amount_cents: i64,
    decline: bool,
    started_at: DateTime<Utc>,
) -> Result<Option<Charge>, Arc<sqlx::Error>> {
    let entry = Entry {
        key: key.to_string(),
        amount_cents,
        status: if decline { "declined" } else { "succeeded" },
        started_at,
    };
    let charge = ledger.write(entry).await?;
    Ok((charge.amount_cents == amount_cents).then_some(charge))
}

/// Makes the charges not made yet (keys distinct), and answers each entry with the charge
/// its key has: the new one, or the one made before under it.
async fn write(db: &PgPool, entries: &[Entry]) -> Result<Vec<Charge>, sqlx::Error> {
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let amounts: Vec<i64> = entries.iter().map(|e| e.amount_cents).collect();
    let statuses: Vec<&str> = entries.iter().map(|e| e.status).collect();
    let references: Vec<String> = entries
        .iter()
        .map(|_| format!("ch_{}", uuid::Uuid::new_v4().simple()))
        .collect();
    let started: Vec<DateTime<Utc>> = entries.iter().map(|e| e.started_at).collect();
    let made = sqlx::query_as!(
        Charge,
        r#"INSERT INTO ledger (key, amount_cents, status, reference, started_at)
           SELECT * FROM unnest($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[],
                                $5::TIMESTAMPTZ[])
           ON CONFLICT (key) DO NOTHING
           RETURNING key AS "key!", amount_cents AS "amount_cents!", status AS "status!",
                     reference AS "reference!", started_at AS "started_at!",
                     ended_at AS "ended_at!""#,
        &keys as _,
        &amounts,
        &statuses as _,
        &references,
        &started
    )
    .fetch_all(db)
    .await?;
    let mut charges: HashMap<String, Charge> =
        made.into_iter().map(|c| (c.key.clone(), c)).collect();
    // Charged before under these keys: the same answers again.
    let before: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !charges.contains_key(*k))
        .collect();
    if !before.is_empty() {
        let found = sqlx::query_as!(
            Charge,
            "SELECT key, amount_cents, status, reference, started_at, ended_at
             FROM ledger WHERE key = ANY($1)",
            &before as _
        )
        .fetch_all(db)
        .await?;
        charges.extend(found.into_iter().map(|c| (c.key.clone(), c)));
    }
    keys.iter()
        .map(|k| charges.get(*k).cloned().ok_or(sqlx::Error::RowNotFound))
        .collect()
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
