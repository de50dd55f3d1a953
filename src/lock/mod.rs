//! ZooKeeper locks on each product's stock — the fair one the service uses, and the naive one
//! the teaching page compares it to — over this instance's one session.
//!
//! **Fair** (guard `zk`, [`fair`]): Apache Curator's `InterProcessMutex` recipe and node names
//! `{root}/locks/stock/{product}/_c_<uuid>-lock-<seq>`. The smallest sequence holds the lock;
//! every other contender watches only the node just before its own, so a release wakes exactly
//! one waiter and buyers are served first come, first served. Curator on the same path
//! excludes us and we it (tested).
//!
//! **Herd** (guard `zk-herd`, [`herd`]): everyone races for one ephemeral node and watches it.
//!
//! Both are ours rather than zookeeper-client's `Client::lock` because the page shows how
//! many watch wake-ups each acquisition cost, which the crate's recipe cannot report; both
//! keep its care: a contender that gives up, or is cancelled, deletes its node (even one whose
//! create was still in flight), and a connection loss during create finds the node by its
//! unique name. A holder that crashes loses its session and ZooKeeper deletes its node.
//!
//! The fencing [`Token`] is the node's `czxid` with the identity of the ensemble that issued
//! it: zxids grow with every write to one ensemble, and both recipes grant in creation order
//! of the granted node, so each new holder's token is larger than the last. A replaced or
//! wiped ensemble starts its zxids again from zero; its identity (a node created once under
//! the root, see [`session`]) tells Postgres that the tokens started over.
//!
//! The source material's other recipes, laid out as Curator lays them out so Curator on the
//! same path takes part:
//!
//! - [`semaphore`]: `InterProcessSemaphoreV2`, at most N leases across instances (bounds the
//!   payment provider's calls in flight).
//! - [`rwlock`]: `InterProcessReadWriteLock`, shared readers and an exclusive writer (a
//!   product's terms: lock cycles read them, a terms change writes them).
//! - [`reentrant`]: an [`Owner`] that holds a product's lock takes it again by counting, as
//!   Curator's `InterProcessMutex` does per thread.
//!
//! - [`kept`]: a sale's holder keeps its node across cycles while its orders keep coming,
//!   and gives it up within a fairness bound when another node waits behind it.
//! - [`session`]: the session, replaced when ZooKeeper expires it.
//! - [`node`]: node names and queue order; a node of ours that deletes itself on drop.
//! - [`view`]: the queue as the teaching page draws it.

mod fair;
mod herd;
mod kept;
mod node;
mod reentrant;
mod rwlock;
mod sale_read;
mod semaphore;
mod session;
mod stats;
mod view;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use zookeeper_client as zk;

pub use kept::{Fairness, KeepSettings, Keeping};
pub use node::make_dir;
pub use reentrant::Owner;
pub use rwlock::{Access, TermsLock};
pub use semaphore::Lease;
pub use session::Zk;
pub use stats::LockStats;
use stats::Observer;
pub use view::{QueueView, RwLockView, SemaphoreView, Ticket, QUEUE_VIEW_MAX};

use crate::telemetry::metrics;

/// What the stock path needs from a granted lock. Dropping it deletes the node (in the
/// background), so every exit path releases, including panics and cancelled futures. A lock
/// taken again by its [`Owner`] shares the first one's node: the node goes when the last of
/// them is dropped.
pub struct StockLock {
    /// The node and what goes with it, shared by an owner's re-entries; its drop is the
    /// release.
    grant: Arc<Grant>,
    /// Checked by Postgres on every stock write.
    pub token: Token,
    /// Time from asking to holding: the queue's cost, reported to the buyer (zero for a
    /// re-entry).
    pub waited: Duration,
    /// Watch notifications this acquisition woke up for (1 per wait in a fair queue; up
    /// to one per release in a herd).
    pub wakeups: u64,
    /// The product's terms, read-locked for a sale's lock cycle (the instance's hold, shared
    /// by its cycles: see [`sale_read`]); let go with the stock lock, after the commit.
    _terms: Option<Arc<sale_read::SaleRead>>,
}

impl StockLock {
    /// How many acquisitions (the first and its re-entries) share this lock's node now.
    pub fn holds(&self) -> usize {
        Arc::strong_count(&self.grant)
    }

    /// The lock's node, `{dir}/{name}`.
    pub fn node(&self) -> &str {
        self.grant.node.path.as_deref().unwrap_or_default()
    }
}

/// One granted lock node and what it holds on this instance.
struct Grant {
    /// Keeps the node alive; its drop deletes it.
    node: node::OwnNode,
    /// Our place among this instance's waiters for the product, given back with the lock.
    _slot: OwnedSemaphorePermit,
    /// For the hold-time histogram, recorded at the release.
    recipe: Recipe,
    granted: Instant,
}

impl Drop for Grant {
    fn drop(&mut self) {
        metrics::lock_released(self.recipe.as_str(), self.granted.elapsed());
    }
}

/// A lock's fencing token: which ensemble granted it, and the lock node's `czxid` there.
/// Tokens of one ensemble order by `zxid`; Postgres orders ensembles by when it first saw
/// them (see `inventory::read_stock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub ensemble: uuid::Uuid,
    pub zxid: i64,
}

/// Which recipe guards a product's stock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    Fair,
    Herd,
}

impl Recipe {
    pub fn as_str(self) -> &'static str {
        match self {
            Recipe::Fair => "fair",
            Recipe::Herd => "herd",
        }
    }
}

/// Which ZooKeeper session a lock is taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Session {
    /// The instance's one session (every order).
    Shared,
    /// A session of its own, ended with the lock (demos).
    Own,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock not granted within {0:?}")]
    Timeout(Duration),
    #[error("lock node vanished before it could be used (session expired)")]
    Lost,
    #[error("too many buyers already queued for this product on this instance")]
    TooBusy,
    #[error("ZooKeeper unavailable")]
    Unavailable(#[source] anyhow::Error),
}

impl LockError {
    /// A short name for the metrics.
    fn reason(&self) -> &'static str {
        match self {
            LockError::Timeout(_) => "timeout",
            LockError::Lost => "lost",
            LockError::TooBusy => "too_busy",
            LockError::Unavailable(_) => "unavailable",
        }
    }
}

/// What a wait for a lock node came to: its result, or what running out of time means (on a
/// dead connection, an outage rather than a long queue).
fn settle_wait<T>(
    client: &zk::Client,
    timeout: Duration,
    waited: Result<Result<T, zk::Error>, tokio::time::error::Elapsed>,
) -> Result<T, LockError> {
    match waited {
        Ok(Ok(acquired)) => Ok(acquired),
        Ok(Err(zk::Error::SessionExpired | zk::Error::RuntimeInconsistent)) => Err(LockError::Lost),
        Ok(Err(e)) => Err(LockError::Unavailable(e.into())),
        Err(_) if !session::is_connected(client.state()) => Err(LockError::Unavailable(
            anyhow::anyhow!("ZooKeeper session is {:?}", client.state()),
        )),
        Err(_) => Err(LockError::Timeout(timeout)),
    }
}

impl Zk {
    /// The directory holding a product's lock nodes.
    pub fn lock_dir(&self, recipe: Recipe, product_id: i64) -> String {
        match recipe {
            Recipe::Fair => format!("{}/locks/stock/{product_id}", self.root()),
            Recipe::Herd => format!("{}/locks/herd/{product_id}", self.root()),
        }
    }

    /// Whether the session is connected right now.
    pub fn connected(&self) -> bool {
        session::is_connected(self.client().state())
    }

    /// Lock cycles of this instance waiting for or holding the product's lock.
    pub fn waiting_here(&self, product_id: i64) -> usize {
        let waiters = self.inner.waiters.lock().expect("waiters poisoned");
        waiters.get(&product_id).map_or(0, |slots| {
            self.inner.max_waiters - slots.available_permits()
        })
    }

    /// Waits, at most `timeout`, for the product's lock under the given recipe.
    ///
    /// Cancellation-safe: dropping the future (client gone, timeout) deletes our node, since a
    /// leftover node would stall everyone queued behind it until our session ended.
    ///
    /// With [`Session::Own`] the lock is taken in a session of its own, which ends when the
    /// lock is dropped: the teaching page's demos use it to lose one lock the way a paused or
    /// crashed holder would, without touching anyone else's.
    pub async fn lock_stock(
        &self,
        product_id: i64,
        recipe: Recipe,
        session: Session,
        timeout: Duration,
    ) -> Result<StockLock, LockError> {
        self.lock_stock_as(None, product_id, recipe, session, timeout)
            .await
    }

    /// [`Zk::lock_stock`] for an `owner`: if the owner holds the product's lock already (and
    /// has not released every acquisition of it), this one is counted, not queued: no node,
    /// no wait, the same token. The node goes when the owner's last acquisition is dropped.
    ///
    /// An owner promises what a thread promises Curator: its acquisitions run one after
    /// another (nested), never side by side. Two tasks sharing an owner would both be
    /// "inside" at once, and the lock would no longer keep them apart.
    pub async fn lock_stock_as(
        &self,
        owner: Option<&Owner>,
        product_id: i64,
        recipe: Recipe,
        session: Session,
        timeout: Duration,
    ) -> Result<StockLock, LockError> {
        self.acquire_stock(owner, product_id, recipe, session, timeout, false)
            .await
    }

    /// The lock a sale's lock cycle takes: the product's terms read-locked first (see
    /// [`rwlock`]; the instance's read node is shared by its cycles and kept across them
    /// until a writer queues, see [`sale_read`]), then its stock lock, both within
    /// `timeout`, let go together. In this order only: a cycle holding the stock lock never
    /// waits for the terms, so a terms change queued between cycles cannot deadlock with
    /// them.
    pub async fn lock_for_sale(
        &self,
        product_id: i64,
        recipe: Recipe,
        session: Session,
        timeout: Duration,
    ) -> Result<StockLock, LockError> {
        self.acquire_stock(None, product_id, recipe, session, timeout, true)
            .await
    }

    async fn acquire_stock(
        &self,
        owner: Option<&Owner>,
        product_id: i64,
        recipe: Recipe,
        session: Session,
        timeout: Duration,
        for_sale: bool,
    ) -> Result<StockLock, LockError> {
        let dir = self.lock_dir(recipe, product_id);
        if let Some(owner) = owner {
            if let Some((grant, token)) = self.inner.reentries.again(owner, &dir) {
                metrics::lock_reentered(recipe.as_str());
                return Ok(StockLock {
                    grant,
                    token,
                    waited: Duration::ZERO,
                    wakeups: 0,
                    _terms: None,
                });
            }
        }
        let slots = {
            let mut waiters = self.inner.waiters.lock().expect("waiters poisoned");
            waiters
                .entry(product_id)
                .or_insert_with(|| Arc::new(Semaphore::new(self.inner.max_waiters)))
                .clone()
        };
        let slot = slots.try_acquire_owned().map_err(|_| {
            metrics::lock_failed(recipe.as_str(), "too_busy");
            LockError::TooBusy
        })?;
        let (client, ensemble) = match session {
            Session::Shared => self.live(),
            Session::Own => {
                let unavailable = |e: zk::Error| LockError::Unavailable(e.into());
                let client = self.open_own_session().await.map_err(unavailable)?;
                let ensemble = session::identify(&client, self.root(), self.acls())
                    .await
                    .map_err(unavailable)?;
                (client, ensemble)
            }
        };
        let started = Instant::now();
        let instance = self.instance();
        let woke = Observer(Some((self, product_id)));
        let acquire = async {
            let terms = match for_sale {
                true => Some(self.read_for_sale(product_id, started).await?),
                false => None,
            };
            let (node, zxid, wakeups) = match recipe {
                Recipe::Fair => fair::acquire(&client, &dir, instance, self.acls(), &woke).await?,
                Recipe::Herd => herd::acquire(&client, &dir, instance, self.acls(), &woke).await?,
            };
            Ok((terms, node, zxid, wakeups))
        };
        let acquired = settle_wait(
            &client,
            timeout,
            tokio::time::timeout(timeout, acquire).await,
        );
        let (terms, node, zxid, wakeups) = acquired.inspect_err(|e| {
            metrics::lock_failed(recipe.as_str(), e.reason());
        })?;
        let waited = started.elapsed();
        metrics::lock_granted(recipe.as_str(), waited);
        tracing::debug!(
            node = node.path.as_deref().unwrap_or_default(),
            fence = zxid,
            waited_ms = waited.as_millis() as u64,
            wakeups,
            "lock granted"
        );
        {
            let mut stats = self.inner.stats.lock().expect("stats poisoned");
            stats.entry(product_id).or_default().acquisitions += 1;
        }
        let token = Token { ensemble, zxid };
        let grant = Arc::new(Grant {
            node,
            _slot: slot,
            recipe,
            granted: Instant::now(),
        });
        if let Some(owner) = owner {
            self.inner.reentries.record(owner, &dir, &grant, token);
        }
        Ok(StockLock {
            grant,
            token,
            waited,
            wakeups,
            _terms: terms,
        })
    }
}
