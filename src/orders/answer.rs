//! A lock cycle's orders, answered: each told what its cycle came to (sold out, over the
//! limit, reserved at once, or paid once its payment settles, outside the lock), or the
//! cycle's error; the sold-out flag raised when the stock ran out.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::batch::Ended;
use super::model::{Answer, OrderStatus, Ticket, Waiting};
use super::pay;
use super::shop::Shop;
use super::store;
use crate::error::Error;
use crate::inventory::{self, Terms};
use crate::lock::StockLock;
use crate::telemetry::metrics;

/// Where an order's answer goes.
pub(super) type Reply = oneshot::Sender<Answer>;

/// The batch's tickets and reply channels, apart, counted for the metrics and the lock's
/// statistics.
pub(super) fn split(
    shop: &Shop,
    terms: &Terms,
    lock: Option<&StockLock>,
    batch: Vec<Waiting>,
) -> (Arc<[Ticket]>, Vec<Reply>) {
    let (tickets, replies): (Vec<Ticket>, Vec<Reply>) =
        batch.into_iter().map(|w| (w.ticket, w.reply)).unzip();
    metrics::lock_cycle(terms.guard.as_str(), tickets.len());
    if lock.is_some() {
        shop.zk.count_served(terms.id, tickets.len());
    }
    (tickets.into(), replies)
}

/// Answers every order of a cycle once it was `served`: sold out, over the limit or reserved
/// at once, paid ones once their payment settles (outside the lock: the next cycle need not
/// wait for it); after an error, each order is told it and marked failed.
pub(super) async fn answer(
    shop: &Shop,
    terms: &Terms,
    tickets: &Arc<[Ticket]>,
    replies: Vec<Reply>,
    served: Result<Ended, Error>,
) {
    let served = match served {
        Ok(served) => {
            tracing::debug!(
                orders = tickets.len(),
                stock = served.stock,
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
                let all: Vec<&Ticket> = tickets.iter().collect();
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
