//! Teaching beside the sale: what the page's demos, its step-through and its lock lab do to
//! real locks, and the test seam that pauses a holder. None of it is needed to sell.
//!
//! The lock cycle reaches it through one hook: [`Teaching::before`] hands a cycle its
//! [`Act`] (which demo it acts out, its pause between read and write, whether it keeps its
//! lock for the step-through). A server without `--allow-unsafe-guards` builds no hook at
//! all (see `orders::Shop`), so its sale path makes no teaching call; only a build with the
//! `test-hooks` feature (the test command's) adds the hook for [`Holds`].
//!
//! - [`demo`]: the crash and zombie demos of a holder's misfortunes.
//! - [`step`]: the step-through sale (holders keep the lock after their write until "next").
//! - [`lab`]: holders of real leases and terms locks, made on demand.
//! - `holds`: the test seam (feature `test-hooks`).

mod demo;
#[cfg(feature = "test-hooks")]
mod holds;
mod lab;
mod step;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::flags::Flags;
use crate::inventory::{self, Terms};
use crate::lock::{Session, StockLock, Zk};

pub use demo::Demo;
#[cfg(feature = "test-hooks")]
pub use holds::{Hold, Holds};
pub use lab::{Holder, Lab, Target};
pub use step::STEP_MODE;

/// A boxed pause between reading and writing the stock, to choose between kinds at run time.
pub type Pause = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The teaching page's hooks on real locks. Cheap to clone: every field is a handle.
#[derive(Clone)]
pub struct Teaching {
    db: PgPool,
    zk: Zk,
    /// Armed demos and step-through flags, shared by every instance through ZooKeeper.
    demo: Flags,
    /// This instance's lab holders.
    lab: Lab,
    /// Lock holders to pause inside their critical section (tests, in-process).
    #[cfg(feature = "test-hooks")]
    holds: Holds,
    /// `--allow-unsafe-guards`: demos, step-through and lab act only with it.
    allow_unsafe: bool,
    /// `--payment-concurrency`: the lab's leases count against it.
    payment_concurrency: usize,
    /// How long an order of a stepping product waits for its lock: its whole request.
    step_lock_timeout: Duration,
}

impl Teaching {
    pub fn new(
        db: PgPool,
        zk: Zk,
        demo: Flags,
        allow_unsafe: bool,
        payment_concurrency: usize,
        request_timeout: Duration,
    ) -> Teaching {
        Teaching {
            db,
            zk,
            demo,
            lab: Lab::default(),
            #[cfg(feature = "test-hooks")]
            holds: Holds::default(),
            allow_unsafe,
            payment_concurrency,
            step_lock_timeout: request_timeout,
        }
    }

    /// Whether the sale path needs this hook: only where something can act on a lock cycle.
    pub fn on_sale_path(&self) -> bool {
        self.allow_unsafe || cfg!(feature = "test-hooks")
    }

    /// Whether the demos, the step-through and the lab may act (`--allow-unsafe-guards`).
    pub fn allowed(&self) -> bool {
        self.allow_unsafe
    }

    /// Arms a one-shot demo for the product's next lock holder, on whichever instance.
    pub async fn arm(&self, product_id: i64, demo: Demo) {
        self.demo.raise(&demo.flag(product_id)).await;
    }

    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    /// A lab holder that takes `target` (see [`Lab::take`]).
    pub fn lab_take(&self, target: Target) -> Result<Holder, crate::error::Error> {
        self.lab.take(&self.zk, self.payment_concurrency, target)
    }

    #[cfg(feature = "test-hooks")]
    pub fn holds(&self) -> &Holds {
        &self.holds
    }

    /// How long an order of the product waits for its lock: while stepping, as long as its
    /// request may last, so the queue stays in place between clicks.
    pub fn lock_timeout(&self, product_id: i64, usual: Duration) -> Duration {
        if self.stepping(product_id) {
            self.step_lock_timeout
        } else {
            usual
        }
    }

    /// The hook: what the lock cycle about to queue for `terms`' lock acts out.
    pub async fn before(&self, terms: &Terms) -> Act {
        let demo = if self.allow_unsafe && terms.guard.recipe().is_some() {
            demo::take_armed(&self.demo, terms.id).await
        } else {
            None
        };
        Act {
            teaching: self.clone(),
            product_id: terms.id,
            demo,
        }
    }
}

/// What one lock cycle acts out for the teaching page.
pub struct Act {
    teaching: Teaching,
    product_id: i64,
    demo: Option<Demo>,
}

impl Act {
    /// A demo's lock is taken in a session of its own, so losing it loses no one else's.
    pub fn session(&self) -> Session {
        if self.demo.is_some() {
            Session::Own
        } else {
            Session::Shared
        }
    }

    /// Whether the cycle acts out a demo (its lost lock is the demo's, not an outage).
    pub fn acting(&self) -> bool {
        self.demo.is_some()
    }

    /// Whether the cycle acts nothing out at all: no demo, no step-through and (in a test
    /// build) no hold armed for it: an ordinary lock cycle.
    pub fn plain(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        if self.teaching.holds.armed(self.product_id) {
            return false;
        }
        self.demo.is_none() && !self.teaching.stepping(self.product_id)
    }

    /// The crash demo: the holder's session ends with its lock before it writes anything.
    /// True if it crashed (the lock is gone; the cycle sells nothing).
    pub async fn crash(&self, lock: &mut Option<StockLock>, order_id: Uuid) -> bool {
        if self.demo != Some(Demo::Crash) {
            return false;
        }
        let Some(held) = lock.take() else {
            return false;
        };
        demo::crash(&self.teaching.db, self.product_id, order_id, held).await;
        true
    }

    /// The pause between reading and writing the stock: the zombie's stall (which takes the
    /// lock away first), an armed test hold, or the usual `think`.
    pub fn pause(&self, lock: &mut Option<StockLock>, think: Duration) -> Pause {
        if let (Some(Demo::Zombie), Some(token)) = (self.demo, lock.as_ref().map(|l| l.token.zxid))
        {
            let db = self.teaching.db.clone();
            return Box::pin(demo::stall_until_superseded(
                db,
                self.product_id,
                token,
                lock.take(),
            ));
        }
        #[cfg(feature = "test-hooks")]
        if let Some(held) = self.teaching.holds.take(self.product_id) {
            return Box::pin(held.wait());
        }
        Box::pin(inventory::think(think))
    }

    /// After the stock write (`fenced`: refused by the fence): reports the zombie's write, and
    /// hands back the lock if the step-through keeps it (the write committed).
    pub async fn after(
        &self,
        lock: Option<StockLock>,
        token: Option<i64>,
        order_id: Uuid,
        committed: bool,
        fenced: bool,
    ) -> Option<StockLock> {
        if let (Some(Demo::Zombie), Some(token)) = (self.demo, token) {
            demo::report_zombie(&self.teaching.db, self.product_id, order_id, token, fenced).await;
        }
        match lock {
            Some(held) if committed && self.teaching.stepping(self.product_id) => Some(held),
            _ => None,
        }
    }

    /// The step-through's kept lock waits apart for "next" (its orders are answered), so the
    /// next cycle can queue behind it.
    pub fn keep(self, lock: StockLock, tasks: &TaskTracker) {
        tasks.spawn(async move {
            self.teaching
                .step_hold(self.product_id, lock.token.zxid)
                .await;
            drop(lock);
        });
    }
}
