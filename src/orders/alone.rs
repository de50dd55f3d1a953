//! A lock cycle in a transaction of its own (claim first, then read, decide, write, insert,
//! commit): a cycle that acts something out for the page, one with a pause between its read
//! and its write, or any other than a combined product's under a lock (those share theirs:
//! `shared`).

use std::sync::Arc;
use std::time::Instant;

use super::batch::{self, Ended};
use super::model::Ticket;
use super::shop::Shop;
use super::store;
use crate::error::Error;
use crate::inventory::{self, Protection, Read, Terms};
use crate::teaching::Pause;

/// How a cycle of its own runs: under `protection`, its guard entered at `acquired` (each
/// order's time in the queue), `acting` something out for the page (a pause of its own
/// between the read and the write).
pub(super) struct Alone {
    pub(super) protection: Protection,
    pub(super) acquired: Instant,
    pub(super) acting: bool,
}

/// Serves `tickets` under `protection` in a transaction of its own, claim first (a cycle
/// that acts something out, or any other than a combined product's under a lock); the lock,
/// if any, is held by the caller and released after this returns: after the commit. `acquired` is when the guard was entered, for each
/// order's time in the queue. An error means not one order sold, except `outcome_pending`
/// (a commit whose answer was lost: its orders may be written).
pub(super) async fn serve_alone(
    shop: &Shop,
    terms: &Arc<Terms>,
    alone: Alone,
    tickets: &[Ticket],
    pause: Pause,
) -> Result<Ended, Error> {
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
