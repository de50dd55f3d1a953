//! Lock cycles of many products in one transaction. A flash sale opens dozens of products
//! at once: each product's lock cycle on this instance (its own lock node, its own queue
//! turn) hands its batch here once it holds the lock, and the batches of every product
//! whose lock the instance holds at that moment are served together — one read, one write
//! (which claims each row for its own token), one insert, one commit — each under its own
//! fence (`inventory::many`). As
//! for the orders of one product (`combiner`) and the payments' records (`recorder`), no
//! batch waits for others: one alone is served alone, and what arrives while a transaction
//! runs forms the next (`group`), which starts at once rather than after that commit. Each cycle then releases its own lock after the commit.
//!
//! A product fenced out (a stale holder), or whose stock or terms moved under it, sells
//! nothing and the others go on; a statement PostgreSQL refuses is retried a batch at a time
//! (`group`), so one product cannot fail another's orders.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sqlx::PgPool;
use tracing::Instrument;

use super::batch::{self, Decided, Ended};
use super::model::Ticket;
use super::rules::Rules;
use super::store;
use crate::error::Error;
use crate::group::{Committing, GroupWriter, WriteGroup};
use crate::inventory::{self, Catalog, FencedWrite, Terms};
use crate::lock::Token;
use crate::telemetry::metrics;

/// Numbers shared transactions (per process), so their log lines can be found together.
static TRANSACTIONS: AtomicU64 = AtomicU64::new(0);

/// At most this many products' batches in one transaction.
const GROUP_MAX: usize = 128;

/// One product's lock cycle, its lock held under `token`, waiting for its transaction.
#[derive(Clone)]
pub(super) struct Part {
    /// The product's id as text: a transaction serves one batch per product.
    key: String,
    terms: Arc<Terms>,
    token: Token,
    /// When the lock was entered (each order's time in the queue).
    acquired: Instant,
    tickets: Arc<[Ticket]>,
}

impl Part {
    pub(super) fn new(
        terms: Arc<Terms>,
        token: Token,
        acquired: Instant,
        tickets: Arc<[Ticket]>,
    ) -> Part {
        Part {
            key: terms.id.to_string(),
            terms,
            token,
            acquired,
            tickets,
        }
    }
}

/// The instance's shared lock-cycle transactions.
#[derive(Clone)]
pub struct SharedCycles {
    writer: GroupWriter<Part, Result<Ended, Error>>,
}

impl SharedCycles {
    /// Up to `rules.shared_transactions` at once (`--shared-transactions`): with 2, while one
    /// commits, the cycles that arrived meanwhile start the next instead of waiting for that
    /// COMMIT (each product in one at a time); the next is built only then, so the groups stay
    /// as large as one transaction's time gathers.
    pub(super) fn new(db: PgPool, catalog: Catalog, rules: Rules) -> SharedCycles {
        let write: WriteGroup<Part, Result<Ended, Error>> = Arc::new(move |parts, committing| {
            let (db, catalog) = (db.clone(), catalog.clone());
            // A transaction serves many cycles: its span stands alone, numbered, and names
            // each cycle it serves by its fence (the cycle's own lines carry the same).
            let number = TRANSACTIONS.fetch_add(1, Ordering::Relaxed) + 1;
            let span = tracing::info_span!(parent: None, "shared_transaction", transaction = number, cycles = parts.len());
            for part in &parts {
                span.in_scope(|| {
                    tracing::debug!(
                        product = part.terms.id,
                        fence = part.token.zxid,
                        "lock cycle served in a shared transaction"
                    )
                });
            }
            Box::pin(
                async move { serve(&db, &catalog, &rules, &parts, committing).await }
                    .instrument(span),
            )
        });
        SharedCycles {
            writer: GroupWriter::with_writers(
                write,
                |part| &part.key,
                GROUP_MAX,
                usize::from(rules.shared_transactions),
            ),
        }
    }

    /// Serves the part's batch in the next shared transaction (see `alone::serve_alone`, whose
    /// answer this is). Its lock stays the caller's, released after this returns.
    pub(super) async fn serve(&self, part: Part) -> Result<Ended, Error> {
        struct Joined;
        impl Drop for Joined {
            fn drop(&mut self) {
                metrics::shared_cycles(-1.0);
            }
        }
        metrics::shared_cycles(1.0);
        let _joined = Joined;
        match self.writer.write(part).await {
            Ok(served) => served,
            Err(e) => Err(Error::Unavailable(
                anyhow::Error::new(SharedError(e))
                    .context("a shared lock cycle's transaction failed"),
            )),
        }
    }
}

/// A shared transaction's failure, as each of its parts is told.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SharedError(Arc<sqlx::Error>);

/// Serves every part in one transaction: an outcome per part, in order, or the statement
/// PostgreSQL refused (then `group` serves each part alone).
async fn serve(
    db: &PgPool,
    catalog: &Catalog,
    rules: &Rules,
    parts: &[Part],
    mut committing: Committing,
) -> Result<Vec<Result<Ended, Error>>, sqlx::Error> {
    metrics::shared_transaction(parts.len());
    let lost = || Err(Error::LockLost { order_id: None });
    // Every step bounded on our side: a PostgreSQL gone silent must not keep this
    // transaction, and with it every product's lock cycle on this instance, waiting.
    let bound = rules.cycle_bound(parts.iter().flat_map(|p| p.tickets.iter()));
    // One instance's locks share its ensemble. A part of another ensemble than the first
    // part's (a session made again on a replaced ZooKeeper between two cycles) is not claimed
    // under the first's epoch: it sells nothing, and its orders are told the lock was lost
    // (whichever side is stale, the fence decides at the next cycle).
    let ensemble = parts[0].token.ensemble;
    let ours: Vec<&Part> = parts
        .iter()
        .filter(|p| p.token.ensemble == ensemble)
        .collect();
    let wanted: Vec<(i64, Vec<String>)> = ours
        .iter()
        .map(|p| {
            let buyers = p.tickets.iter().map(|t| t.user_id.clone()).collect();
            (p.terms.id, buyers)
        })
        .collect();
    let (mut tx, reads) = bound.run(inventory::read_fenced(db, &wanted)).await?;
    let all: Vec<&Ticket> = parts.iter().flat_map(|p| p.tickets.iter()).collect();
    let superseded = bound.run(batch::superseded(&mut tx, &all)).await?;
    let reads: HashMap<i64, &inventory::FencedRead> =
        reads.iter().map(|r| (r.product_id, r)).collect();
    // Each part still ours, decided as its own lock cycle would decide it.
    let decided: Vec<Option<(Decided, &inventory::FencedRead)>> = parts
        .iter()
        .map(|part| {
            let read = *reads.get(&part.terms.id)?;
            let decided = batch::decide_batch(
                catalog,
                rules,
                &part.terms,
                &read.figures,
                &superseded,
                &part.tickets,
            );
            Some((decided, read))
        })
        .collect();
    let writes: Vec<FencedWrite> = parts
        .iter()
        .zip(&decided)
        .filter_map(|(part, decided)| {
            let (decided, read) = decided.as_ref()?;
            Some(FencedWrite {
                read,
                next: decided.left,
                token: part.token,
            })
        })
        .collect();
    let Some((written, ids)) = bound
        .run(inventory::write_fenced(tx, ensemble, &writes))
        .await?
    else {
        return Ok(parts.iter().map(|_| lost()).collect());
    };
    let mut rows = Vec::new();
    let mut units = Vec::new();
    for (part, decided) in parts.iter().zip(&decided) {
        if let Some((decided, _)) = decided.as_ref().filter(|_| ids.contains(&part.terms.id)) {
            let (r, u) = decided.rows(Some(part.token.zxid), part.acquired);
            rows.extend(r);
            units.extend(u);
        }
    }
    let mut tx = written;
    let orders = match bound.run(store::insert(&mut tx.tx, &rows, &units)).await {
        Ok(orders) => orders,
        // A buyer's holding moved since the read (only a stale writer can): the CHECK
        // refused it. Alone, the part hears it as a lone cycle would; shared, each part is
        // tried alone (`group`).
        Err(e) if batch::over_limit(&e) && parts.len() == 1 => {
            return Ok(vec![Err(Error::PurchaseLimit { order_id: None })]);
        }
        Err(e) => return Err(e),
    };
    drop(rows);
    // Only the COMMIT left: the next transaction may be built beside it.
    committing.now();
    if let Err(e) = batch::commit(db, tx, bound).await {
        // Only the parts the transaction wrote may have sold; the others wrote nothing.
        return Ok(parts
            .iter()
            .map(|part| {
                if !ids.contains(&part.terms.id) {
                    return lost();
                }
                Err(match &e {
                    Error::OutcomePending { .. } => Error::OutcomePending { order_id: None },
                    other => Error::Unavailable(anyhow::anyhow!("{other:#}")),
                })
            })
            .collect());
    }
    let mut orders = orders.into_iter();
    Ok(parts
        .iter()
        .zip(&decided)
        .map(|(part, decided)| match decided {
            Some((decided, _)) if ids.contains(&part.terms.id) => {
                let n = decided.verdicts.iter().filter(|v| v.writes_row()).count();
                Ok(decided.answers(orders.by_ref().take(n).collect::<Vec<_>>()))
            }
            _ => lost(),
        })
        .collect())
}
