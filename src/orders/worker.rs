//! The worker of a combined product's queue on this instance: lock cycles until nobody waits.
//! Each cycle enters the product's guard, serves a batch (`cycle::run`) and hands the lock
//! back; while the product's orders keep coming the worker keeps the lock's node for the
//! next cycle (`lock::Keeping`: the same node and fencing token, no ZooKeeper write), and
//! gives it up when its queue has stayed empty for the linger, at once when it has nothing to
//! serve and another node waits behind it, or when that node has waited the fairness bound.

use std::sync::Arc;

use tracing::Instrument;

use super::combiner::Queue;
use super::cycle::{self, CycleSpan};
use super::model::{OrderStatus, Ticket};
use super::shop::Shop;
use super::store;
use crate::error::Error;
use crate::inventory::{self, Guard, Protection, Terms};
use crate::lock::{Keeping, LockError, Session, StockLock};
use crate::teaching::Act;
use crate::telemetry::metrics;

/// Runs the worker of a combined product's queue, and starts it again if it panics: a
/// worker that died with its queue still marked as served would leave the product unsold
/// on this instance (every order timing out) until a restart. The batch it was serving
/// is answered 500 `internal` (its reply channels went with the worker; a transaction not
/// yet committed rolled back, and a paid order's intent is the sweep's), and the next cycle
/// serves whoever waits.
pub(super) async fn supervise(shop: Shop, terms: Arc<Terms>, queue: Arc<Queue>) {
    loop {
        let worker = tokio::spawn(work(shop.clone(), terms.clone(), queue.clone()));
        match worker.await {
            Ok(()) => return,
            Err(e) if e.is_panic() => {
                let panic = e.into_panic();
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(
                    product = terms.id,
                    panic = message,
                    "a lock-cycle worker panicked; starting it again"
                );
                metrics::worker_restarted("combiner");
                queue.cycle_ended(shop.lock_timeout(terms.id));
                // A panic that comes back every cycle must not spin the CPU.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            // Cancelled: the runtime is going away.
            Err(_) => return,
        }
    }
}

/// A lock kept from the last cycle for the next.
type Kept = (StockLock, Keeping);

async fn work(shop: Shop, terms: Arc<Terms>, queue: Arc<Queue>) {
    let batch_max = usize::try_from(terms.batch_max).unwrap_or(1).max(1);
    let fairness = shop.rules.fairness;
    // Only the fair lock has a queue behind its node to be fair to.
    let keeps = fairness.keeps() && terms.guard == Guard::Zk;
    let mut kept: Option<Kept> = None;
    loop {
        if kept.is_none() && queue.stop_if_empty() {
            return;
        }
        let act = shop.act(&terms).await;
        let session = act.as_ref().map_or(Session::Shared, Act::session);
        // A cycle serves many requests: its span stands alone, and each order it serves
        // names it (see `cycle::run`).
        let span = CycleSpan::new(&terms, true);
        let (entered, keeping, reused) = match reuse(&shop, kept.take(), session) {
            Some((lock, keeping)) => {
                let protection = Protection::Fenced(lock.token);
                ((Some(lock), protection), Some(keeping), true)
            }
            None => match enter(&shop, &terms, &queue, session, &span).await {
                // A node granted at once may be kept: who waits behind it is listed while its
                // first cycle runs. One that had to wait for another holder (another instance
                // sells the product too) is released after its cycle, as every node was
                // before keeping: the next holder's batch, gathered meanwhile, is larger than
                // the one this instance would serve next.
                Some(entered) => {
                    let keeping = match (&entered.0, keeps) {
                        (Some(lock), true) if lock.wakeups == 0 => shop.zk.keep(terms.id, lock),
                        _ => None,
                    };
                    (entered, keeping, false)
                }
                None => continue,
            },
        };
        let batch = queue.take(batch_max);
        let back = if batch.is_empty() {
            entered.0
        } else {
            let keep = keeping.is_some();
            cycle::run(&shop, &terms, entered, act, batch, span.number, keep)
                .instrument(span.span)
                .await
        };
        queue.cycle_ended(shop.lock_timeout(terms.id));
        let Some(mut keeping) = keeping else {
            continue;
        };
        let Some(lock) = back else {
            keeping.give_up(&shop.zk);
            continue;
        };
        keeping.count_cycle(&shop.zk, reused);
        if linger(&shop, &queue, &mut keeping).await {
            kept = Some((lock, keeping));
        } else {
            keeping.give_up(&shop.zk);
        }
    }
}

/// The kept lock, if the next cycle may run on it: in the shared session (a demo takes its
/// lock in a session of its own), and still within the fairness bound. Otherwise it is
/// given up here.
fn reuse(shop: &Shop, kept: Option<Kept>, session: Session) -> Option<Kept> {
    let (lock, keeping) = kept?;
    if session == Session::Shared && keeping.may_serve(&shop.zk, &shop.rules.fairness) {
        return Some((lock, keeping));
    }
    keeping.give_up(&shop.zk);
    None
}

/// Enters the product's guard for the next cycle; `None` when nobody is left to serve, or
/// the wait failed (every waiting order was told why).
async fn enter(
    shop: &Shop,
    terms: &Terms,
    queue: &Queue,
    session: Session,
    span: &CycleSpan,
) -> Option<(Option<StockLock>, Protection)> {
    let mut waiting = queue.waiting();
    let timeout = shop.lock_timeout(terms.id);
    // Each order keeps its own deadline (see `Shop::place`); the worker keeps its place in
    // the lock queue while anyone is left to serve.
    let entered = tokio::select! {
        entered = inventory::enter_for_sale(&shop.zk, terms.id, terms.guard, session, timeout).instrument(span.span.clone()) => entered,
        _ = waiting.wait_for(|n| *n == 0) => return None,
    };
    match entered {
        Ok(entered) => Some(entered),
        // Still someone waiting (each leaves at its own deadline): queue again.
        Err(LockError::Timeout(_)) => None,
        Err(e) => {
            fail_waiting(shop, terms, queue, Error::from(e)).await;
            None
        }
    }
}

/// Whether to keep the lock for the next cycle: orders wait now, or arrive within the
/// linger while nobody queues behind the lock. With nothing to serve and a node waiting
/// behind ours, it goes at once.
async fn linger(shop: &Shop, queue: &Queue, keeping: &mut Keeping) -> bool {
    let fairness = shop.rules.fairness;
    // A node's first listing (who waited behind it when it was granted) runs during its first
    // cycle: a fast cycle waits for it here, within the linger.
    tokio::select! {
        () = keeping.listed() => {}
        () = tokio::time::sleep(fairness.linger) => return false,
    }
    if !keeping.may_serve(&shop.zk, &fairness) {
        return false;
    }
    let mut waiting = queue.waiting();
    if *waiting.borrow_and_update() > 0 {
        return true;
    }
    if keeping.contended() {
        return false;
    }
    tokio::select! {
        arrived = waiting.wait_for(|n| *n > 0) => arrived.is_ok(),
        () = keeping.disturbed() => false,
        () = tokio::time::sleep(fairness.linger) => false,
    }
}

/// The guard could not be entered (ZooKeeper unavailable, the session lost): every waiting
/// order gets the error it would have got alone.
async fn fail_waiting(shop: &Shop, terms: &Terms, queue: &Queue, error: Error) {
    let failed = queue.drain();
    let tickets: Vec<&Ticket> = failed.iter().map(|w| &w.ticket).collect();
    store::ended(
        &shop.db,
        terms,
        &tickets,
        OrderStatus::Failed,
        Some(error.code()),
    )
    .await;
    for waiting in failed {
        let _ = waiting.reply.send(Err(error.again_for(waiting.ticket.id)));
    }
}
