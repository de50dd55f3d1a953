//! A lock cycle that acts something out for the teaching page (a demo's crash or zombie, the
//! step-through, a test's hold): the sale's one seam for teaching (see `cycle::run`). Such a
//! cycle always runs in a transaction of its own, its pause between the read and the write
//! is the act's, its lock may end with a crash or be kept for the step-through's "next", and
//! its lock is never kept for another cycle.

use std::sync::Arc;
use std::time::Instant;

use super::alone::{serve_alone, Alone};
use super::answer::{answer, split};
use super::model::{OrderStatus, Ticket, Waiting};
use super::shop::Shop;
use super::store;
use crate::error::Error;
use crate::inventory::{Protection, Terms};
use crate::lock::StockLock;
use crate::teaching::Act;

/// Serves `batch` as `act` acts it out, with the guard entered at `acquired`, and answers
/// every order (a cycle acting something out keeps even its late orders: they were paused
/// on purpose).
pub(super) async fn run(
    shop: &Shop,
    terms: &Arc<Terms>,
    entered: (Option<StockLock>, Protection),
    act: Act,
    batch: Vec<Waiting>,
    acquired: Instant,
) {
    let (mut lock, protection) = entered;
    let fence = lock.as_ref().map(|l| l.token.zxid);
    let (tickets, replies) = split(shop, terms, lock.as_ref(), batch);
    let first = tickets[0].id;
    if act.crash(&mut lock, first).await {
        let all: Vec<&Ticket> = tickets.iter().collect();
        store::ended(&shop.db, terms, &all, OrderStatus::Failed, Some("crashed")).await;
        for (ticket, reply) in tickets.iter().zip(replies) {
            let _ = reply.send(Err(Error::LockLost {
                order_id: Some(ticket.id),
            }));
        }
        return;
    }
    let pause = act.pause(&mut lock, shop.rules.stock_think);
    let alone = Alone {
        protection,
        acquired,
        acting: true,
    };
    let served = serve_alone(shop, terms, alone, &tickets, pause).await;
    let lost = matches!(served, Err(Error::LockLost { .. }));
    // Released here, after the commit (the step-through may keep it until "next").
    let kept = act.after(lock, fence, first, served.is_ok(), lost).await;
    // A demo's lost lock is the demo's own session; any other is an outage's.
    if lost && !act.acting() {
        shop.zk.reidentify().await;
    }
    answer(shop, terms, &tickets, replies, served).await;
    if let Some(lock) = kept {
        act.keep(lock, &shop.tasks);
    }
}
