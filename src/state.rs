//! The handles the domain shares, built once in [`crate::startup`]. Cheap to clone: every
//! field is a handle. The HTTP layer carries it as axum state; the domain takes it by
//! reference and never sees HTTP.

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::events::Events;
use crate::flags::Flags;
use crate::inventory::Catalog;
use crate::lab::Lab;
use crate::lock::Zk;
use crate::orders::combiner::Combiner;
use crate::orders::demo::Holds;
use crate::payment::Provider;

#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    pub zk: Zk,
    pub payment: Provider,
    /// Products sold out, by id.
    pub sold_out: Flags,
    /// Armed teaching-page demos, `{product}-{mode}`.
    pub demo: Flags,
    /// Live updates for the teaching page.
    pub events: Events,
    /// The lock lab's holders (teaching page).
    pub lab: Lab,
    /// Lock holders to pause inside their critical section (tests reach it in-process).
    pub holds: Holds,
    /// Every product's terms of sale, kept after the first read.
    pub catalog: Catalog,
    /// Orders waiting, per product, for their lock cycle on this instance.
    pub combiner: Combiner,
    /// Every task that carries orders (order tasks, lock cycles, payments): shutdown waits
    /// for them, within its grace period, before it closes the database pool under them.
    pub tasks: TaskTracker,
    pub config: Arc<Config>,
}
