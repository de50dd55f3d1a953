//! A COMMIT whose answer did not come back is not proof that nothing was written: the
//! COMMIT may still be on its way (a congested link, a slow middlebox) and land after we
//! looked. So a transaction that writes what a buyer is told about carries its id and its
//! backend's pid, and a failed COMMIT is decided by PostgreSQL itself: `pg_xact_status`
//! says committed, aborted or in progress; in progress, the old backend is ended
//! (`pg_terminate_backend`), which aborts the transaction unless its COMMIT is already being
//! applied, and the status is read again. Until it is known the outcome stays unknown.

use std::time::{Duration, Instant};

use sqlx::{PgPool, Postgres, Transaction};

use crate::database::Bound;

/// A transaction that has written, and what PostgreSQL needs to tell later whether it
/// committed.
pub struct Tracked {
    pub tx: Transaction<'static, Postgres>,
    /// `pg_current_xact_id()`: a 64-bit id, never reused.
    pub xid: i64,
    /// The backend that runs the transaction (ended if its COMMIT is still on its way).
    pub pid: i32,
}

/// Why a commit did not report success.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The transaction certainly did not commit, and never can now.
    #[error("the transaction did not commit")]
    NotCommitted(#[source] sqlx::Error),
    /// Whether it committed is not known (PostgreSQL did not answer before the deadline).
    #[error("whether the transaction committed is not known yet")]
    Unknown(#[source] sqlx::Error),
}

impl Tracked {
    /// Commits within `bound` (a COMMIT that does not answer by then is abandoned, its
    /// connection closed). If the COMMIT failed or was abandoned, asks PostgreSQL whether it
    /// committed all the same, for one more step at most (and never past `bound.by`): `Ok(())`
    /// if it did. Bounded so: a PostgreSQL that cannot be reached now will not answer within
    /// the order's time either, and the lock cycle waiting here holds its product's lock.
    pub async fn commit(self, db: &PgPool, bound: Bound) -> Result<(), CommitError> {
        let Tracked { tx, xid, pid } = self;
        let Err(failed) = bound.run(tx.commit()).await else {
            return Ok(());
        };
        tracing::warn!(xid, error = %failed, "a COMMIT did not answer; asking PostgreSQL whether it committed");
        let ask = Bound {
            step: bound.step,
            by: bound.by.min(Instant::now() + bound.step),
        };
        match outcome(db, xid, pid, ask).await {
            Some(true) => {
                tracing::warn!(xid, "the COMMIT whose answer was lost did commit");
                Ok(())
            }
            Some(false) => Err(CommitError::NotCommitted(failed)),
            None => Err(CommitError::Unknown(failed)),
        }
    }
}

/// Whether transaction `xid` committed (`None`: not known by `bound.by`). A transaction
/// still in progress is ended first, by ending its backend `pid` (only while that backend
/// still runs that transaction: a pid can be reused).
async fn outcome(db: &PgPool, xid: i64, pid: i32, bound: Bound) -> Option<bool> {
    let deadline = bound.by;
    let mut pause = Duration::from_millis(20);
    loop {
        match bound.run(status(db, xid)).await {
            Ok(Some(status)) if status == "committed" => return Some(true),
            Ok(Some(status)) if status == "aborted" => return Some(false),
            Ok(Some(_in_progress)) => match bound.run(end_backend(db, xid, pid)).await {
                // Ended (waited for): its transaction is settled now, whatever the deadline
                // says: read it once more rather than answer "not known".
                Ok(true) => {
                    return match Bound::steps(bound.step).run(status(db, xid)).await {
                        Ok(Some(status)) if status == "committed" => Some(true),
                        Ok(Some(status)) if status == "aborted" => Some(false),
                        _ => None,
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "ending the backend of an unanswered COMMIT failed")
                }
            },
            // Too old for PostgreSQL to remember: cannot be one of ours (it was just written).
            Ok(None) => return None,
            Err(e) => tracing::debug!(error = %e, "asking whether a transaction committed failed"),
        }
        if Instant::now() + pause >= deadline {
            return None;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

async fn status(db: &PgPool, xid: i64) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT pg_xact_status($1::BIGINT::TEXT::xid8)", xid)
        .fetch_one(db)
        .await
}

/// Ends the backend still running `xid` (the 32-bit `backend_xid` is the 64-bit id's low
/// half), waiting up to a second for it to go (PostgreSQL 14 or later). `true` if it went.
async fn end_backend(db: &PgPool, xid: i64, pid: i32) -> Result<bool, sqlx::Error> {
    let ended = sqlx::query_scalar!(
        r#"SELECT pg_terminate_backend(pid, 1000) AS "ended!" FROM pg_stat_activity
           WHERE pid = $1 AND backend_xid::TEXT = ($2::BIGINT % 4294967296)::TEXT"#,
        pid,
        xid
    )
    .fetch_optional(db)
    .await?;
    Ok(ended == Some(true))
}
