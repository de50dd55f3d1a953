//! The shop: the handles the order path uses, and what it is told by the configuration.
//! The order's way through it is in `place` (admission, queueing) and `cycle` (the lock
//! cycles); this file holds only what every step reaches for.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::combiner::Combiner;
use super::intents;
use super::model::{Answer, Order, Payment};
use super::recorder::Recorder;
use super::rules::Rules;
use super::shared::SharedCycles;
use super::store;
use crate::error::Error;
use crate::events::Events;
use crate::flags::Flags;
use crate::inventory::{Catalog, Standing, Terms};
use crate::line::Line;
use crate::lock::Zk;
use crate::payment::Provider;
use crate::teaching::{Act, Teaching};
use crate::telemetry::metrics;

/// The handles the order path uses. Cheap to clone: every field is a handle.
#[derive(Clone)]
pub struct Shop {
    pub(super) db: PgPool,
    pub(super) zk: Zk,
    /// Every product's terms of sale, kept after the first read.
    pub(super) catalog: Catalog,
    /// Orders waiting, per product, for their lock cycle on this instance.
    pub(super) combiner: Combiner,
    /// Products sold out, by id, as every instance sees them.
    pub(super) sold_out: Flags,
    /// Live updates for the teaching page (a sold-out flag is news).
    pub(super) events: Events,
    pub(super) payment: Provider,
    /// Writes the provider's answers, many to a statement.
    pub(super) recorder: Recorder,
    /// Serves the lock cycles of many products in one transaction.
    pub(super) shared: SharedCycles,
    /// Every task that carries orders (order tasks, lock cycles, payments): shutdown waits
    /// for them before it closes the database pool under them.
    pub(super) tasks: TaskTracker,
    /// The teaching page's hook on lock cycles: none on a server that allows no demos.
    pub(super) teaching: Option<Teaching>,
    pub(super) rules: Rules,
    /// Whether our ZooKeeper ensemble guards the database: an outranked instance (a stray,
    /// pointed at another ZooKeeper) sells nothing under a ZooKeeper guard and takes no
    /// background work, so it holds no row the guarding fleet needs.
    pub(super) standing: watch::Receiver<Standing>,
    /// The products' lines: checks and spends the passes their orders carry.
    pub(super) line: Line,
}

impl Shop {
    /// The payment provider's client (`/readyz` asks whether it can be used).
    pub fn payment(&self) -> &Provider {
        &self.payment
    }

    #[allow(clippy::too_many_arguments)] // each is a handle the order path uses
    pub fn new(
        db: PgPool,
        zk: Zk,
        catalog: Catalog,
        sold_out: Flags,
        events: Events,
        payment: Provider,
        tasks: TaskTracker,
        teaching: &Teaching,
        rules: Rules,
        standing: watch::Receiver<Standing>,
        line: Line,
    ) -> Shop {
        let recorder = Recorder::new(db.clone());
        let shared = SharedCycles::new(db.clone(), catalog.clone(), rules);
        Shop {
            db,
            zk,
            catalog,
            combiner: Combiner::default(),
            sold_out,
            events,
            payment,
            recorder,
            shared,
            tasks,
            teaching: teaching.on_sale_path().then(|| teaching.clone()),
            rules,
            standing,
            line,
        }
    }

    /// Whether another ZooKeeper ensemble, alive, guards the database (not merely "not
    /// known": a PostgreSQL outage leaves the standing unknown, and the fence still decides).
    pub fn outranked(&self) -> bool {
        matches!(*self.standing.borrow(), Standing::Outranked { .. })
    }

    /// This instance's per-product queues of orders waiting for a lock cycle.
    pub fn combiner(&self) -> &Combiner {
        &self.combiner
    }

    /// Counts and logs an order's answer as it is first sent (replays are not counted
    /// again): the line that ties the request's id to its order.
    pub fn answered(&self, product_id: i64, answer: &Answer) {
        let guard = self
            .catalog
            .cached(product_id)
            .map_or("unknown", |terms| terms.guard.as_str());
        match answer {
            Ok(order) => {
                metrics::order(guard, order.status.as_str());
                tracing::info!(
                    order_id = %order.id,
                    product = product_id,
                    guard,
                    outcome = order.status.as_str(),
                    fence = order.fence,
                    lock_wait_ms = order.lock_wait_ms,
                    batch_size = order.batch_size,
                    "order answered"
                );
            }
            // A flood of refusals (a sold-out sale draws many times its stock in requests) must
            // not write a line each: the metric counts them; the line is there at debug.
            Err(e) if e.is_refusal() => {
                metrics::order(guard, e.code());
                tracing::debug!(
                    product = product_id,
                    guard,
                    outcome = e.code(),
                    "order refused"
                );
            }
            Err(e) => {
                metrics::order(guard, e.code());
                tracing::info!(
                    order_id = e.order_id().map(tracing::field::display),
                    product = product_id,
                    guard,
                    outcome = e.code(),
                    "order answered"
                );
            }
        }
    }

    /// The teaching hook's act for a lock cycle of `terms` (none on a server without demos).
    pub(super) async fn act(&self, terms: &Terms) -> Option<Act> {
        match &self.teaching {
            Some(teaching) => Some(teaching.before(terms).await),
            None => None,
        }
    }

    /// How long an order of the product waits for its lock.
    pub(super) fn lock_timeout(&self, product_id: i64) -> Duration {
        match &self.teaching {
            Some(teaching) => teaching.lock_timeout(product_id, self.rules.lock_timeout),
            None => self.rules.lock_timeout,
        }
    }

    /// The product's terms as this server sells it: a `none` product is sold under
    /// `pg-atomic` where unsafe guards are not allowed (see `Guard::sold_under`).
    pub(super) async fn terms(&self, product_id: i64) -> Result<Option<Arc<Terms>>, Error> {
        let terms = self.catalog.terms(&self.db, product_id).await?;
        Ok(terms.map(|terms| self.terms_sold(terms)))
    }

    /// `terms`, with the guard this server sells under.
    pub(super) fn terms_sold(&self, terms: Arc<Terms>) -> Arc<Terms> {
        let guard = terms.guard.sold_under(self.rules.allow_unsafe_guards);
        if guard == terms.guard {
            return terms;
        }
        Arc::new(Terms {
            guard,
            batch_max: 1,
            ..(*terms).clone()
        })
    }

    /// One order as it stands, with its payment, if it has one (read together: see
    /// [`intents::order_with_payment`]).
    pub async fn order_with_payment(
        &self,
        id: Uuid,
    ) -> Result<Option<(Order, Option<Payment>)>, Error> {
        Ok(intents::order_with_payment(&self.db, id).await?)
    }

    /// One order as it stands.
    pub async fn order(&self, id: Uuid) -> Result<Option<Order>, Error> {
        Ok(store::get(&self.db, id).await?)
    }

    /// A page of `buyer`'s orders, newest first (see [`store::of_buyer`]).
    pub async fn orders_of(
        &self,
        buyer: &str,
        after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
        limit: i64,
    ) -> Result<Vec<Order>, Error> {
        Ok(store::of_buyer(&self.db, buyer, after, limit).await?)
    }
}
