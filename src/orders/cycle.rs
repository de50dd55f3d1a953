//! One lock cycle: with the product's guard entered, serve a batch of orders (see `batch`),
//! release after the commit, and answer every order — sold out, over the limit or reserved
//! at once, paid ones once their payment settles (outside the lock, so the next cycle need
//! not wait for it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use tracing::Instrument;

use super::batch::{self, Served};
use super::combiner::Queue;
use super::model::{OrderStatus, Ticket, Waiting};
use super::pay;
use super::shared;
use super::shop::Shop;
use super::store;
use crate::error::Error;
use crate::inventory::{self, Protection, Read, Terms};
use crate::lock::{LockError, Session, StockLock};
use crate::teaching::{Act, Pause};
use crate::telemetry::metrics;

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
                queue.served(shop.lock_timeout(terms.id));
                // A panic that comes back every cycle must not spin the CPU.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            // Cancelled: the runtime is going away.
            Err(_) => return,
        }
    }
}

/// The worker of a combined product's queue on this instance: lock cycles until nobody
/// waits.
async fn work(shop: Shop, terms: Arc<Terms>, queue: Arc<Queue>) {
    let batch_max = usize::try_from(terms.batch_max).unwrap_or(1).max(1);
    loop {
        if queue.stop_if_empty() {
            return;
        }
        let act = shop.act(&terms).await;
        let session = act.as_ref().map_or(Session::Shared, Act::session);
        let mut waiting = queue.waiting();
        // A cycle serves many requests: its span stands alone, and each order it serves
        // names it (see `run`).
        let span = CycleSpan::new(&terms, true);
        let timeout = shop.lock_timeout(terms.id);
        // Each order keeps its own deadline (see `Shop::place`); the worker keeps its place
        // in the lock queue while anyone is left to serve.
        let entered = tokio::select! {
            entered = inventory::enter_for_sale(&shop.zk, terms.id, terms.guard, session, timeout).instrument(span.span.clone()) => entered,
            _ = waiting.wait_for(|n| *n == 0) => continue,
        };
        let entered = match entered {
            Ok(entered) => entered,
            // Still someone waiting (each leaves at its own deadline): queue again.
            Err(LockError::Timeout(_)) => continue,
            Err(e) => {
                fail_waiting(&shop, &terms, &queue, Error::from(e)).await;
                continue;
            }
        };
        let batch = queue.take(batch_max);
        if !batch.is_empty() {
            run(&shop, &terms, entered, act, batch, span.number)
                .instrument(span.span)
                .await;
        }
        queue.served(shop.lock_timeout(terms.id));
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

/// One lock cycle: with the guard entered, serves `batch`, releases (after the commit), and
/// answers every order. `act` is what the cycle acts out for the teaching page, if anything.
pub(super) async fn run(
    shop: &Shop,
    terms: &Arc<Terms>,
    entered: (Option<StockLock>, Protection),
    act: Option<Act>,
    batch: Vec<Waiting>,
    number: u64,
) {
    let (mut lock, protection) = entered;
    let acquired = Instant::now();
    let cycle = tracing::Span::current();
    let fence = lock.as_ref().map(|l| l.token.zxid);
    if let Some(fence) = fence {
        cycle.record("fence", fence);
    }
    for waiting in &batch {
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
    // Whether the cycle acts something out for the page (a demo, the step-through, a test's
    // hold): its orders are paused on purpose.
    let acting = !act.as_ref().is_none_or(Act::plain);
    // An order whose request has all but run out is not written now: the buyer could no
    // longer hear what became of it (and, without a key, would order again). Told so, with
    // nothing written. (A cycle acting something out keeps its orders.)
    let batch = if !acting {
        let (servable, late): (Vec<Waiting>, Vec<Waiting>) = batch
            .into_iter()
            .partition(|w| shop.rules.still_servable(&w.ticket));
        for waiting in late {
            tracing::debug!(order = %waiting.ticket.id, "too late to serve: not written");
            let _ = waiting
                .reply
                .send(Err(Error::LockTimeout { order_id: None }));
        }
        servable
    } else {
        batch
    };
    if batch.is_empty() {
        return;
    }
    let (tickets, replies): (Vec<Ticket>, Vec<_>) =
        batch.into_iter().map(|w| (w.ticket, w.reply)).unzip();
    let tickets: Arc<[Ticket]> = tickets.into();
    let all: Vec<&Ticket> = tickets.iter().collect();
    metrics::lock_cycle(terms.guard.as_str(), tickets.len());
    if lock.is_some() {
        shop.zk.count_served(terms.id, tickets.len());
    }
    let first = tickets[0].id;
    if let Some(act) = &act {
        if act.crash(&mut lock, first).await {
            store::ended(&shop.db, terms, &all, OrderStatus::Failed, Some("crashed")).await;
            for (ticket, reply) in tickets.iter().zip(replies) {
                let _ = reply.send(Err(Error::LockLost {
                    order_id: Some(ticket.id),
                }));
            }
            return;
        }
    }
    // An ordinary cycle (nothing acted out, no pause between read and write) of a combined
    // product under a lock shares its transaction with every other product whose lock this
    // instance holds now (`shared`); any other runs its own.
    let plain = !acting && shop.rules.stock_think.is_zero();
    let served = match protection {
        Protection::Fenced(token) if plain && terms.batched() => {
            let part = shared::Part::new(terms.clone(), token, acquired, tickets.clone());
            shop.shared.serve(part).await
        }
        _ => {
            let pause: Pause = match &act {
                Some(act) => act.pause(&mut lock, shop.rules.stock_think),
                None => Box::pin(inventory::think(shop.rules.stock_think)),
            };
            let alone = Alone {
                protection,
                acquired,
                acting,
            };
            serve_alone(shop, terms, alone, &tickets, pause).await
        }
    };
    let lost = matches!(served, Err(Error::LockLost { .. }));
    // Released here, after the commit (the step-through may keep it until "next").
    let kept = match &act {
        Some(act) => act.after(lock, fence, first, served.is_ok(), lost).await,
        None => {
            drop(lock);
            None
        }
    };
    if lost && !act.as_ref().is_some_and(Act::acting) {
        shop.zk.reidentify().await;
    }
    let served = match served {
        Ok(served) => {
            tracing::debug!(
                orders = tickets.len(),
                stock = served.stock,
                took_ms = acquired.elapsed().as_millis() as u64,
                "stock written and committed"
            );
            served
        }
        Err(e) => {
            tracing::debug!(
                orders = tickets.len(),
                error = e.code(),
                "lock cycle sold nothing"
            );
            // An outcome not known (a commit whose answer was lost) may have written the
            // orders: write nothing over them.
            if !matches!(e, Error::OutcomePending { .. }) {
                store::ended(&shop.db, terms, &all, OrderStatus::Failed, Some(e.code())).await;
            }
            for (ticket, reply) in tickets.iter().zip(replies) {
                let _ = reply.send(Err(e.again_for(ticket.id)));
            }
            return;
        }
    };
    if served.stock == 0 {
        flag_sold_out(shop, terms.id).await;
    }
    let mut paying = Vec::new();
    let deadline = |ticket: &Ticket| ticket.placed + shop.rules.request_timeout;
    for ((outcome, reply), ticket) in served.orders.into_iter().zip(replies).zip(tickets.iter()) {
        let answer = match outcome {
            Ok(order) if order.status == OrderStatus::Paying => {
                paying.push((order, reply, deadline(ticket)));
                continue;
            }
            Ok(order) if order.status == OrderStatus::SoldOut => Err(Error::SoldOut {
                order_id: Some(order.id),
            }),
            other => other,
        };
        let _ = reply.send(answer);
    }
    if !paying.is_empty() {
        shop.tasks
            .spawn(pay::settle_and_answer(shop.clone(), paying));
    }
    if let (Some(act), Some(lock)) = (act, kept) {
        act.keep(lock, &shop.tasks);
    }
}

/// How a cycle of its own runs: under `protection`, its guard entered at `acquired` (each
/// order's time in the queue), `acting` something out for the page (a pause of its own
/// between the read and the write).
struct Alone {
    protection: Protection,
    acquired: Instant,
    acting: bool,
}

/// Serves `tickets` under `protection` in a transaction of its own, claim first (a cycle
/// that acts something out, or any other than a combined product's under a lock); the lock,
/// if any, is held by the caller and released after this returns: after the commit. `acquired` is when the guard was entered, for each
/// order's time in the queue. An error means not one order sold, except `outcome_pending`
/// (a commit whose answer was lost: its orders may be written).
async fn serve_alone(
    shop: &Shop,
    terms: &Arc<Terms>,
    alone: Alone,
    tickets: &[Ticket],
    pause: Pause,
) -> Result<Served, Error> {
    let Alone {
        protection,
        acquired,
        acting,
    } = alone;
    let buyers: Vec<String> = tickets.iter().map(|t| t.user_id.clone()).collect();
    let bound = shop.rules.cycle_bound(tickets);
    let read = inventory::read_stock(&shop.db, terms.id, protection, &buyers);
    let mut read = match bound.run(read).await? {
        Read::Ready(read) => read,
        Read::Fenced => return Err(Error::LockLost { order_id: None }),
    };
    // A pause between the read and the write may outlast the server's bound on an idle
    // transaction: a pause acted out for the page (a zombie stalls until it is superseded,
    // a test holds the lock) must end at the fence, as it teaches, so it has none; the
    // configured think time has its own length and a step's bound twice over.
    let think = shop.rules.stock_think;
    let idle = if acting {
        Some(std::time::Duration::ZERO)
    } else {
        (!think.is_zero()).then(|| think + shop.rules.db_step * 2)
    };
    if let Some(idle) = idle {
        bound.run(inventory::allow_idle(&mut read.tx, idle)).await?;
    }
    // The steps after a pause keep the orders' deadline: an order held past it (a test's
    // hold, a zombie's stall) is not written, as any other.
    pause.await;
    let all: Vec<&Ticket> = tickets.iter().collect();
    let superseded = bound.run(batch::superseded(&mut read.tx, &all)).await?;
    let decided = batch::decide_batch(
        &shop.catalog,
        &shop.rules,
        terms,
        &read.figures,
        &superseded,
        tickets,
    );
    let Some(mut written) = bound.run(read.write(decided.left)).await? else {
        return Err(Error::LockLost { order_id: None });
    };
    let fence = match protection {
        Protection::Fenced(token) => Some(token.zxid),
        _ => None,
    };
    let (rows, units) = decided.rows(fence, acquired);
    let orders = match bound
        .run(store::insert(&mut written.tx, &rows, &units))
        .await
    {
        Ok(orders) => orders,
        // The holdings changed since our read: only possible with no guard (`none`), where
        // another order of the buyer raced ours. The CHECK refused it: nothing sold.
        Err(e) if batch::over_limit(&e) => return Err(Error::PurchaseLimit { order_id: None }),
        Err(e) => return Err(e.into()),
    };
    batch::commit(&shop.db, written, bound).await?;
    Ok(decided.answers(orders))
}

/// An order task whose lock cycle ended without answering it (a panic): a bug.
pub(super) fn lost_answer() -> Error {
    Error::Internal(anyhow!("the order's lock cycle ended without an answer"))
}

/// Raises the sold-out flag, then re-reads the stock: a return that committed and cleared
/// the flag just before we raised it must not leave the product flagged with stock on sale.
async fn flag_sold_out(shop: &Shop, product_id: i64) {
    shop.sold_out.raise(&product_id.to_string()).await;
    shop.events.touch(product_id);
    match inventory::stock(&shop.db, product_id).await {
        Ok(Some(stock)) if stock > 0 => shop.sold_out.lower(&product_id.to_string()).await,
        Ok(_) => {}
        // Unsure: the flag is only an optimisation, the guarded path stays correct.
        Err(_) => shop.sold_out.lower(&product_id.to_string()).await,
    }
}
