//! `Idempotency-Key` for `POST /orders`: a retried request gets the first one's answer, byte
//! for byte, and never touches the stock again — also when the retries race each other on
//! different instances.
//!
//! It wraps the order flow: the checks that write nothing run first (a request they refuse
//! leaves no key row, and its replay is decided again), then the key's row is inserted (the primary key lets exactly one
//! request win, wherever it runs), the order is placed, and the row is completed with the
//! answer. A retryable answer (the HTTP layer's table says which) is not kept: the row is
//! deleted so a retry runs afresh. What an answer looks like on the wire is the HTTP layer's to say (an
//! [`Encode`]); this module keeps it as given.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::oneshot;
use uuid::Uuid;

pub mod claim;
use claim::Claim;

use crate::error::Error;
use crate::orders::{self, Answer, OrderRequest, OrderStatus, Shop};

/// A finished answer as it was sent (a status and a body), kept for replay.
#[derive(Clone, Debug)]
pub struct Kept {
    pub status: u16,
    pub body: String,
    /// Whether this is a replay of a kept answer.
    pub replayed: bool,
    /// A retryable answer's `Retry-After` seconds; such an answer is never kept, so the
    /// retry it invites runs afresh.
    pub retry_after: Option<u64>,
}

/// How an order's answer is written down for the wire (the HTTP layer's encoding).
pub type Encode = fn(&Answer) -> Kept;

/// A key as the client sent it: 1 to 128 visible ASCII characters.
pub fn parse_key(raw: &[u8]) -> Result<String, Error> {
    if raw.is_empty() || raw.len() > 128 || !raw.iter().all(|b| b.is_ascii_graphic()) {
        return Err(Error::invalid(
            "Idempotency-Key must be 1 to 128 visible ASCII characters",
        ));
    }
    Ok(String::from_utf8_lossy(raw).into_owned())
}

/// The key as it is kept: scoped to its buyer, so the same key from two buyers is two keys
/// (one buyer cannot replay, or block, another's). The buyer's id, U+001F (no buyer id holds
/// a control character), then the client's key; migration 0015 moved older keys so.
fn scoped(buyer: &str, key: &str) -> String {
    format!("{buyer}\u{1f}{key}")
}

/// Places the order, once per key: admitted once, placed at most once, answered once.
/// (An order without a key is the HTTP layer's to admit and place: nothing to remember.)
pub async fn place(
    shop: &Shop,
    db: &PgPool,
    key: String,
    request: OrderRequest,
    arrived: std::time::Instant,
    client_gone: oneshot::Receiver<()>,
    encode: Encode,
) -> Kept {
    let key = scoped(request.user_id(), &key);
    let product_id = request.product_id();
    let first = |answer: Answer| {
        shop.answered(product_id, &answer);
        encode(&answer)
    };
    let window = shop.attempt_window();
    let admitted = match shop.admit(&request, true, arrived).await {
        Ok(admitted) => admitted,
        // Refused before any work began (sold out, an unknown product, terms the order can
        // never meet, the buyer's limit, a queue that cannot serve it in time): nothing is
        // written, as Stripe does for a request refused before its endpoint runs — the crowd
        // after a sell-out is most of a flash sale's traffic, and must not write at its own
        // rate. A replay is simply decided again. Unless the key is known already (a retry):
        // its first answer wins over what a check says now. (An outage here fails the read
        // of the key too: 503, the key untouched.)
        Err(refused) => {
            return match known(db, &key).await {
                Ok(false) => first(Err(refused)),
                Ok(true) => {
                    let fingerprint = request.fingerprint();
                    match Box::pin(begin(db, &key, &fingerprint, encode, window)).await {
                        // Known a moment ago, freed since (its attempt sold nothing): the
                        // refusal is its answer now, and keeps nothing either.
                        Ok(Begin::First(attempt)) => {
                            let kept = first(Err(refused));
                            if let Err(e) = finish(db, &key, attempt, &kept, true).await {
                                tracing::warn!(error = %e, "could not free an idempotency key");
                            }
                            kept
                        }
                        begun => answer_begun(begun, first),
                    }
                }
                Err(e) => first(Err(e.into())),
            };
        }
    };
    // Boxed, here and above: taking the key is this future's largest state after placing,
    // and orders without a key (most of a flood) need not carry its room while they wait.
    let begun = Box::pin(begin(db, &key, &request.fingerprint(), encode, window)).await;
    let attempt = match begun {
        Ok(Begin::First(attempt)) => attempt,
        begun => return answer_begun(begun, first),
    };
    let answer = shop
        .place(
            admitted,
            Some(Claim {
                key: key.clone(),
                attempt,
            }),
            client_gone,
        )
        .await;
    let kept = first(answer);
    let transient = kept.retry_after.is_some();
    // The answer is due now: a database that does not answer (an outage, where a pool
    // connection takes seconds to fail) must not hold it up past the request's time.
    let finished = tokio::time::timeout(FINISH_WAIT, finish(db, &key, attempt, &kept, transient))
        .await
        .unwrap_or_else(|_| Err(sqlx::Error::PoolTimedOut));
    if let Err(e) = finished {
        // The order's own status is already final; only the key's record is behind. Left
        // so, the key would answer "in progress" until it went stale: keep trying while the
        // database comes back (an outage is when this happens). Not a tracked task: at
        // shutdown it may simply stop, and the key goes stale as before.
        tracing::warn!(error = %e, "could not record the idempotent response; retrying");
        let (db, kept) = (db.clone(), kept.clone());
        tokio::spawn(async move {
            for _ in 0..120 {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                if finish(&db, &key, attempt, &kept, transient).await.is_ok() {
                    return;
                }
            }
            tracing::warn!(key, "gave up recording the idempotent response");
        });
    }
    kept
}

/// How long recording a key's answer may hold the answer up before it goes on in the
/// background.
const FINISH_WAIT: Duration = Duration::from_millis(500);

/// The answer when the key was not ours to take: a replay, or why not.
fn answer_begun(begun: Result<Begin, sqlx::Error>, first: impl FnOnce(Answer) -> Kept) -> Kept {
    match begun {
        Ok(Begin::Replay(kept)) => kept,
        Ok(Begin::Mismatch) => first(Err(Error::IdempotencyMismatch)),
        Ok(Begin::InProgress) => first(Err(Error::IdempotencyInProgress)),
        Ok(Begin::First(_)) => first(Err(Error::Internal(anyhow::anyhow!(
            "an idempotency key was taken twice"
        )))),
        Err(e) => first(Err(e.into())),
    }
}

/// Whether the key has a row (one index probe; a refusal at admission writes none).
async fn known(db: &PgPool, key: &str) -> Result<bool, sqlx::Error> {
    let found = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE key = $1) AS "found!""#,
        key
    )
    .fetch_one(db)
    .await?;
    Ok(found)
}

/// A key's row as `begin` reads it.
struct KeyRow {
    /// The first request's fingerprint.
    request: Value,
    /// The answer kept for replay, once the order finished (both or neither).
    status_code: Option<i16>,
    response: Option<String>,
    /// The order the key placed, as soon as its row exists.
    order_id: Option<Uuid>,
    /// Past its attempt's deadline (the request timeout plus a margin; a minute for rows
    /// from before deadlines were kept) without an order: abandoned, a retry takes it over.
    stale: bool,
    /// The attempt that holds the key (none on rows from before attempts were recorded).
    attempt: Option<Uuid>,
}

enum Begin {
    /// The key is ours: this attempt's id is in its row.
    First(Uuid),
    Replay(Kept),
    Mismatch,
    InProgress,
}

async fn begin(
    db: &PgPool,
    key: &str,
    fingerprint: &Value,
    encode: Encode,
    window: Duration,
) -> Result<Begin, sqlx::Error> {
    // Twice at most: a key freed below (its order sold nothing) is taken afresh.
    for _ in 0..2 {
        let attempt = Uuid::new_v4();
        let inserted = sqlx::query!(
            "INSERT INTO idempotency_keys (key, request, attempt, deadline)
             VALUES ($1, $2, $3, now() + make_interval(secs => $4))
             ON CONFLICT (key) DO NOTHING",
            key,
            fingerprint,
            attempt,
            window.as_secs_f64()
        )
        .execute(db)
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(Begin::First(attempt));
        }
        let row = sqlx::query_as!(
            KeyRow,
            r#"SELECT request, status_code, response, order_id, attempt,
                      COALESCE(deadline, created_at + interval '1 minute') < now() AS "stale!"
               FROM idempotency_keys WHERE key = $1"#,
            key
        )
        .fetch_optional(db)
        .await?;
        let Some(row) = row else {
            // Deleted in between (the first attempt was transient): ask the client to retry.
            return Ok(Begin::InProgress);
        };
        if row.request != *fingerprint {
            return Ok(Begin::Mismatch);
        }
        if let (Some(status), Some(body)) = (row.status_code, row.response) {
            return Ok(Begin::Replay(Kept {
                status: status as u16,
                body,
                replayed: true,
                retry_after: None,
            }));
        }
        if let Some(order_id) = row.order_id {
            // No answer kept, but an order: its attempt failed after the order had effects
            // (or its instance died). Answer from the order as it stands, once it has
            // settled; an order that sold nothing frees the key for this attempt.
            match settled(db, key, row.attempt, order_id, encode).await? {
                Settled::Reply(reply) => return Ok(Begin::Replay(reply)),
                Settled::Moving => return Ok(Begin::InProgress),
                Settled::NothingSold => {
                    forget(db, key, Some(order_id)).await?;
                    continue;
                }
            }
        }
        if row.stale {
            // No answer and no order past its attempt's deadline: abandoned before it did
            // anything (or too slow to do anything now: its key is no longer its own, so its
            // lock cycle will sell nothing). Forget it and take the key afresh.
            forget(db, key, None).await?;
            continue;
        }
        return Ok(Begin::InProgress);
    }
    Ok(Begin::InProgress)
}

/// Deletes the key's row if it still has no answer kept and still names `order_id`.
async fn forget(db: &PgPool, key: &str, order_id: Option<Uuid>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM idempotency_keys
         WHERE key = $1 AND response IS NULL AND order_id IS NOT DISTINCT FROM $2",
        key,
        order_id
    )
    .execute(db)
    .await?;
    Ok(())
}

enum Settled {
    /// The order's outcome, kept from now on.
    Reply(Kept),
    /// Still moving (its lock cycle or payment is running).
    Moving,
    /// It ended without selling anything (`failed`): the key may place an order afresh.
    NothingSold,
}

/// The answer for a key whose order settled without the answer being kept: the order if it
/// was reserved, paid or expired, the decline if its payment failed.
async fn settled(
    db: &PgPool,
    key: &str,
    attempt: Option<Uuid>,
    order_id: Uuid,
    encode: Encode,
) -> Result<Settled, sqlx::Error> {
    let Some(order) = orders::store::get(db, order_id).await? else {
        return Ok(Settled::Moving);
    };
    let reply = match order.status {
        OrderStatus::Paid | OrderStatus::Reserved | OrderStatus::Expired => encode(&Ok(order)),
        OrderStatus::PaymentFailed => encode(&Err(Error::PaymentFailed { order_id })),
        OrderStatus::SoldOut => encode(&Err(Error::SoldOut {
            order_id: Some(order_id),
        })),
        OrderStatus::Failed => return Ok(Settled::NothingSold),
        OrderStatus::Created | OrderStatus::Paying => return Ok(Settled::Moving),
    };
    finish(db, key, attempt, &reply, false).await?;
    Ok(Settled::Reply(Kept {
        replayed: true,
        ..reply
    }))
}

/// Records `attempt`'s answer on its key, or, for a transient one, frees the key when its
/// order did nothing. Only while the key is still the attempt's: once freed and taken by a
/// later attempt, the row is the later attempt's. The first answer recorded wins: a late
/// retry of a record (see `place`) never replaces one (a trigger keeps that for every
/// writer, migration 0012).
async fn finish(
    db: &PgPool,
    key: &str,
    attempt: impl Into<Option<Uuid>>,
    reply: &Kept,
    transient: bool,
) -> Result<(), sqlx::Error> {
    let attempt = attempt.into();
    if transient {
        // Forget the key only if its order did nothing (or never existed); otherwise the
        // next retry answers from the order (see `settled`).
        sqlx::query!("DELETE FROM idempotency_keys k
             WHERE k.key = $1 AND k.attempt IS NOT DISTINCT FROM $2 AND (k.order_id IS NULL OR EXISTS
               (SELECT 1 FROM orders o WHERE o.id = k.order_id AND o.status IN ('created', 'failed')))", key, attempt)
        .execute(db)
        .await?;
    } else {
        sqlx::query!(
            "UPDATE idempotency_keys SET status_code = $3, response = $4, completed_at = now()
             WHERE key = $1 AND attempt IS NOT DISTINCT FROM $2 AND response IS NULL",
            key,
            attempt,
            reply.status as i16,
            &reply.body
        )
        .execute(db)
        .await?;
    }
    Ok(())
}

/// Forgets keys older than `ttl`.
pub async fn purge(db: &PgPool, ttl: std::time::Duration) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1)",
        ttl.as_secs_f64()
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_up_to_128() {
        assert_eq!(parse_key(b"order-42").unwrap(), "order-42");
        assert!(parse_key(&[b'k'; 128]).is_ok());
        assert!(parse_key(&[b'k'; 129]).is_err());
        assert!(parse_key(b"has space").is_err());
        assert!(parse_key(b"").is_err());
        assert!(parse_key("ключ".as_bytes()).is_err());
    }
}
