//! An order's way from the edge to its lock cycle: admitted once ([`Shop::admit`]: every
//! check that writes nothing), then placed ([`Shop::place`]): it waits in its product's
//! queue on this instance for a lock cycle to serve it (a combined product, see `combiner`
//! and `worker`), or takes the guard in a lock cycle of its own (a per-request product).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use chrono::Utc;
use tokio::sync::oneshot;
use tracing::Instrument;
use uuid::Uuid;

use super::cycle::{self, CycleSpan};
use super::model::{Answer, OrderStatus, Ticket, Waiting};
use super::request::OrderRequest;
use super::shop::Shop;
use super::store;
use super::worker;
use crate::error::Error;
use crate::inventory::{self, Terms};
use crate::line::Pass;
use crate::lock::Session;
use crate::teaching::Act;

/// The longest `Retry-After` a queue's refusal asks for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// An order that passed every check made before anything is written.
pub struct Admitted {
    /// When its request arrived: its deadline runs from here, so the time admission took
    /// (a busy pool, the key's read) is not added on top of the request's.
    arrived: Instant,
    terms: Arc<Terms>,
    user_id: String,
    quantity: i32,
    amount_cents: i64,
    pay: bool,
    /// The pass its product's line gave the buyer (checked, not spent yet).
    pass: Option<Pass>,
}

/// Why an order stopped waiting before a lock cycle took it.
enum StoppedWaiting {
    ClientGone,
    Timeout,
    SoldOut,
}

impl Shop {
    /// The checks made before anything is written: the product, the sold-out flag, the
    /// quantity against its terms, room in this instance's queue for the product and, with
    /// `check_limit`, the buyer's per-customer limit (one read). A rejection here costs
    /// PostgreSQL no write: the flood after a sale, and a script replaying a buyer who is at
    /// the limit, end here.
    pub async fn admit(
        &self,
        request: &OrderRequest,
        check_limit: bool,
        arrived: Instant,
    ) -> Result<Admitted, Error> {
        let product_id = request.product_id();
        // The flood after a sale ends here: no lock, no write, no order row.
        if self.sold_out.is_raised(&product_id.to_string()) {
            return Err(Error::SoldOut { order_id: None });
        }
        let mut terms = self
            .terms(product_id)
            .await?
            .ok_or(Error::UnknownProduct(product_id))?;
        // A refusal on this instance's copy of the terms is checked against the row first:
        // the terms may have changed through another instance (a lock cycle would catch up,
        // but a refused order never reaches one).
        if request.quantity_for(&terms).is_err() {
            terms = self.fresh_terms(product_id).await?;
        }
        let quantity = request.quantity_for(&terms).map_err(Error::Unprocessable)?;
        // The sale's window and its line, before anything is written: the crowd that comes
        // before the opening, or without a pass, ends here.
        let now = Utc::now();
        if terms.window.refusal(now).is_some() {
            // This instance's copy may predate a change through another (an opening moved).
            terms = self.fresh_terms(product_id).await?;
            if let Some(refusal) = terms.window.refusal(now) {
                return Err(refusal);
            }
        }
        let pass = match (terms.line, request.pass()) {
            (false, _) => None,
            (true, None) => return Err(Error::NotAdmitted(product_id)),
            (true, Some(raw)) => Some(self.line.verify(raw, product_id, request.user_id(), now)?),
        };
        // Our tokens cannot claim a row while another ensemble guards the database: refused
        // here, before a lock node or an order row is written (a stray instance must leave
        // every row to the fleet that guards it).
        if terms.guard.recipe().is_some() && self.outranked() {
            return Err(Error::Unavailable(anyhow!(
                "this instance's ZooKeeper ensemble does not guard this database (see /readyz)"
            )));
        }
        let amount_cents = terms
            .price_cents
            .checked_mul(quantity.into())
            .ok_or_else(|| Error::invalid("the order's amount is too large"))?;
        self.room(&terms)?;
        if check_limit {
            let held = store::units_held(&self.db, terms.id, request.user_id()).await?;
            if held + quantity > terms.per_user_limit {
                terms = self.fresh_terms(terms.id).await?;
                if held + quantity > terms.per_user_limit {
                    return Err(Error::PurchaseLimit { order_id: None });
                }
            }
        }
        Ok(Admitted {
            arrived,
            terms,
            user_id: request.user_id().to_string(),
            quantity,
            amount_cents,
            pay: request.pay(),
            pass,
        })
    }

    /// The product's terms from its row (see [`inventory::Catalog::reload`]).
    async fn fresh_terms(&self, id: i64) -> Result<Arc<Terms>, Error> {
        let terms = self.catalog.reload(&self.db, id).await?;
        terms
            .map(|terms| self.terms_sold(terms))
            .ok_or(Error::UnknownProduct(id))
    }

    /// Whether this instance has room for one more order of the product (the queue checks
    /// again when the order joins it: this is the early answer that writes nothing). A
    /// combined product's queue turns away an order it could not serve within the lock
    /// timeout at the pace its cycles keep (the cycles its place needs, times the recent
    /// cycle time) — told so at once, with that wait as its Retry-After, rather than after
    /// waiting for a `lock_timeout` — and is capped at `--max-waiters-per-product` (memory).
    fn room(&self, terms: &Terms) -> Result<(), Error> {
        let max = self.rules.max_waiters_per_product;
        if terms.batched() {
            let batch_max = usize::try_from(terms.batch_max).unwrap_or(1);
            let (queued, wait) = self.combiner.load(terms.id, batch_max);
            let late = wait.is_some_and(|wait| wait > self.lock_timeout(terms.id));
            if queued >= max || late {
                return Err(Error::QueueFull {
                    retry_after: wait.unwrap_or(Duration::from_secs(1)).min(MAX_RETRY_AFTER),
                });
            }
        } else if terms.guard.recipe().is_some() && self.zk.waiting_here(terms.id) >= max {
            return Err(Error::TooBusy);
        }
        Ok(())
    }

    /// Runs an admitted order to its answer. `claim`, its Idempotency-Key with the attempt
    /// that holds it, learns the order in the transaction that writes it. `client_gone` resolves if the HTTP client disconnects:
    /// it is honoured only while the order waits for its lock cycle; once served, the order
    /// runs to a final status whether anyone listens or not.
    pub async fn place(
        &self,
        admitted: Admitted,
        claim: Option<crate::idempotency::claim::Claim>,
        client_gone: oneshot::Receiver<()>,
    ) -> Answer {
        let Admitted {
            arrived,
            terms,
            user_id,
            quantity,
            amount_cents,
            pay,
            pass,
        } = admitted;
        // A pass buys once: spent before the order is placed, given back if the order ends
        // without one that holds units (a passing refusal: the buyer may try again with it).
        if let Some(pass) = &pass {
            self.line.spend(pass).await?;
        }
        let ticket = Ticket {
            id: Uuid::new_v4(),
            user_id,
            quantity,
            amount_cents,
            pay,
            claim,
            placed: arrived,
        };
        let span = tracing::info_span!("order", order_id = %ticket.id, product = terms.id);
        // A future is as large as its largest state, and an order's task is allocated whole
        // while it waits: the per-request path (a lock cycle inline, ~3.5 KB) goes on the
        // heap, so the queue's waiters stay small (a full queue of 512, and thousands of
        // connections in a flood, each hold one).
        let flow = async {
            if terms.batched() {
                self.queue(terms, ticket, client_gone).await
            } else {
                Box::pin(self.alone(terms, ticket, client_gone)).await
            }
        };
        let answer = flow.instrument(span).await;
        if let (Some(pass), Err(error)) = (&pass, &answer) {
            if !matches!(
                error,
                Error::OutcomePending { .. } | Error::PaymentBusy { .. }
            ) {
                let overloaded = matches!(
                    error,
                    Error::TooBusy
                        | Error::QueueFull { .. }
                        | Error::LockTimeout { .. }
                        | Error::Unavailable(_)
                );
                self.line.give_back(pass, overloaded).await;
            }
        }
        answer
    }

    /// A combined product: wait in the product's queue on this instance for a lock cycle to
    /// serve us — or leave it, as a buyer alone in the lock queue would: on hanging up, at
    /// the lock timeout, or when the product sells out.
    async fn queue(
        &self,
        terms: Arc<Terms>,
        ticket: Ticket,
        mut client_gone: oneshot::Receiver<()>,
    ) -> Answer {
        let id = ticket.id;
        // The lock's wait runs from the request's arrival, as its deadline does: time spent
        // in admission (a busy pool, the key's read) is not added on top.
        let give_up = tokio::time::Instant::from_std(ticket.placed + self.lock_timeout(terms.id));
        let (reply, mut answer) = oneshot::channel();
        let max = self.rules.max_waiters_per_product;
        let joined = self
            .combiner
            .submit(terms.id, Waiting::new(ticket, reply), max)?;
        if let Some(queue) = joined {
            self.tasks
                .spawn(worker::supervise(self.clone(), terms.clone(), queue));
        }
        let sold_out_flag = terms.id.to_string();
        let left = tokio::select! {
            answer = &mut answer => return answer.unwrap_or_else(|_| Err(cycle::unanswered())),
            _ = &mut client_gone => StoppedWaiting::ClientGone,
            _ = tokio::time::sleep_until(give_up) => StoppedWaiting::Timeout,
            _ = self.sold_out.raised(&sold_out_flag) => StoppedWaiting::SoldOut,
        };
        // A lock cycle may have taken us just now: then its answer is on its way.
        let Some(ticket) = self.combiner.withdraw(terms.id, id) else {
            return answer.await.unwrap_or_else(|_| Err(cycle::unanswered()));
        };
        let error = match left {
            StoppedWaiting::ClientGone => {
                Error::Unavailable(anyhow!("client disconnected while queued"))
            }
            StoppedWaiting::Timeout if !self.zk.connected() => {
                Error::Unavailable(anyhow!("ZooKeeper disconnected while queued"))
            }
            StoppedWaiting::Timeout => Error::LockTimeout { order_id: None },
            StoppedWaiting::SoldOut => Error::SoldOut { order_id: None },
        };
        let (status, failure) = match left {
            // Nobody is there to be told, and no lock cycle saw the order: a row would only
            // record the hang-up (a flood of buyers who hang up would write one each).
            StoppedWaiting::ClientGone => return Err(error),
            StoppedWaiting::SoldOut => (OrderStatus::SoldOut, None),
            StoppedWaiting::Timeout => (OrderStatus::Failed, Some(error.code())),
        };
        // Boxed: its pool wait is the queue's largest state, and only the leavers need it.
        Box::pin(store::ended(&self.db, &terms, &[&ticket], status, failure)).await;
        Err(error.for_order(id))
    }

    /// A per-request product: the order takes the guard for itself, in a lock cycle of its
    /// own.
    async fn alone(
        &self,
        terms: Arc<Terms>,
        ticket: Ticket,
        mut client_gone: oneshot::Receiver<()>,
    ) -> Answer {
        let db = &self.db;
        let act = self.act(&terms).await;
        let session = act.as_ref().map_or(Session::Shared, Act::session);
        let sold_out_flag = terms.id.to_string();
        let span = CycleSpan::new(&terms, false);
        let timeout = self.lock_timeout(terms.id);
        let entered = tokio::select! {
            entered = inventory::enter_for_sale(&self.zk, terms.id, terms.guard, session, timeout).instrument(span.span.clone()) => entered,
            // As in `queue`: no lock cycle saw the order, so it leaves no row.
            _ = &mut client_gone => {
                return Err(Error::Unavailable(anyhow!("client disconnected while queued")));
            }
            // Sold out while we queued: leave the queue now instead of reading a 0 under the lock.
            _ = self.sold_out.raised(&sold_out_flag) => {
                store::ended(db, &terms, &[&ticket], OrderStatus::SoldOut, None).await;
                return Err(Error::SoldOut { order_id: Some(ticket.id) });
            }
        };
        let entered = match entered {
            Ok(entered) => entered,
            Err(e) => {
                let error = Error::from(e);
                store::ended(
                    db,
                    &terms,
                    &[&ticket],
                    OrderStatus::Failed,
                    Some(error.code()),
                )
                .await;
                return Err(error.for_order(ticket.id));
            }
        };
        let (reply, answer) = oneshot::channel();
        // A lone order's lock is never kept: released after its commit.
        let released = cycle::run(
            self,
            &terms,
            entered,
            act,
            vec![Waiting::new(ticket, reply)],
            span.number,
            false,
        )
        .instrument(span.span)
        .await;
        drop(released);
        answer.await.unwrap_or_else(|_| Err(cycle::unanswered()))
    }
}
