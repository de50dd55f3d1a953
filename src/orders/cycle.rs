//! One lock cycle: with the product's guard entered, serve a batch of orders (see `batch`),
//! hand the lock back after the commit (released, or kept for the next cycle: `worker`), and
//! answer every order — sold out, over the limit or reserved at once, paid ones once their
//! payment settles (outside the lock, so the next cycle need not wait for it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;

use super::acted;
use super::alone::{serve_alone, Alone};
use super::answer::{answer, split};
use super::model::Waiting;
use super::shared;
use super::shop::Shop;
use crate::error::Error;
use crate::inventory::{self, Protection, Terms};
use crate::lock::StockLock;
use crate::teaching::Act;

/// Numbers lock cycles (per process) so log lines of one cycle can be found together.
static CYCLES: AtomicU64 = AtomicU64::new(0);

/// One lock cycle, for the logs: its number, and its span (acquiring the guard, the stock's
/// transaction, the release; `fence` is recorded once the lock is held).
pub(crate) struct CycleSpan {
    pub number: u64,
    pub span: tracing::Span,
}

impl CycleSpan {
    /// Inside the current span (a lone order's), or with `root`, a span of its own (a
    /// combined cycle serves many requests).
    pub(crate) fn new(terms: &Terms, root: bool) -> CycleSpan {
        let number = CYCLES.fetch_add(1, Ordering::Relaxed) + 1;
        let span = if root {
            tracing::info_span!(parent: None, "lock_cycle", cycle = number, product = terms.id, guard = terms.guard.as_str(), fence = tracing::field::Empty)
        } else {
            tracing::info_span!(
                "lock_cycle",
                cycle = number,
                product = terms.id,
                guard = terms.guard.as_str(),
                fence = tracing::field::Empty
            )
        };
        CycleSpan { number, span }
    }
}

/// One lock cycle: with the guard entered, serves `batch` and answers every order. With
/// `keep`, hands the lock back after the commit (the worker may keep it for its next cycle),
/// unless the cycle sold nothing for want of it; otherwise releases it right after the commit,
/// before the answers, so the next holder starts at once. `act` is what the cycle acts
/// out for the teaching page, if anything: such a cycle leaves the sale's path at one seam
/// (`acted`).
pub(super) async fn run(
    shop: &Shop,
    terms: &Arc<Terms>,
    entered: (Option<StockLock>, Protection),
    act: Option<Act>,
    batch: Vec<Waiting>,
    number: u64,
    keep: bool,
) -> Option<StockLock> {
    let (lock, protection) = entered;
    let acquired = Instant::now();
    trace(&batch, lock.as_ref(), number);
    if let Some(act) = act.filter(|act| !act.plain()) {
        acted::run(shop, terms, (lock, protection), act, batch, acquired).await;
        return None;
    }
    // An order whose request has all but run out is not written now: the buyer could no
    // longer hear what became of it (and, without a key, would order again). Told so, with
    // nothing written.
    let (batch, late): (Vec<Waiting>, Vec<Waiting>) = batch
        .into_iter()
        .partition(|w| shop.rules.still_servable(&w.ticket));
    for waiting in late {
        tracing::debug!(order = %waiting.ticket.id, "too late to serve: not written");
        let _ = waiting
            .reply
            .send(Err(Error::LockTimeout { order_id: None }));
    }
    if batch.is_empty() {
        return lock;
    }
    let (tickets, replies) = split(shop, terms, lock.as_ref(), batch);
    // A combined product's cycle under a lock, with no pause between read and write, shares
    // its transaction with every other product whose lock this instance holds now
    // (`shared`); any other runs its own.
    let served = match protection {
        Protection::Fenced(token) if shop.rules.stock_think.is_zero() && terms.batched() => {
            let part = shared::Part::new(terms.clone(), token, acquired, tickets.clone());
            shop.shared.serve(part).await
        }
        _ => {
            let alone = Alone {
                protection,
                acquired,
                acting: false,
            };
            let think = Box::pin(inventory::think(shop.rules.stock_think));
            serve_alone(shop, terms, alone, &tickets, think).await
        }
    };
    let kept = match &served {
        Ok(_) if keep => lock,
        Err(Error::LockLost { .. }) => {
            drop(lock);
            shop.zk.reidentify().await;
            None
        }
        _ => {
            drop(lock);
            None
        }
    };
    answer(shop, terms, &tickets, replies, served).await;
    kept
}

/// The cycle's span names its fence and follows each order's; each order's span names the
/// cycle.
fn trace(batch: &[Waiting], lock: Option<&StockLock>, number: u64) {
    let cycle = tracing::Span::current();
    let fence = lock.map(|l| l.token.zxid);
    if let Some(fence) = fence {
        cycle.record("fence", fence);
    }
    for waiting in batch {
        cycle.follows_from(&waiting.span);
        // In the order's span, so the line carries its request's id and names the cycle.
        waiting.span.in_scope(|| {
            tracing::debug!(
                cycle = number,
                fence,
                batch = batch.len(),
                "served by a lock cycle"
            )
        });
    }
}

/// An order task whose lock cycle ended without answering it (a panic): a bug.
pub(super) fn unanswered() -> Error {
    Error::Internal(anyhow!("the order's lock cycle ended without an answer"))
}
