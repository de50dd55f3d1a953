//! ZooKeeper: this instance's one session, kept alive across expiry, and the fair per-product
//! stock lock built on zookeeper-client's Curator-compatible recipe.
//!
//! A lock is an ephemeral-sequential node `{root}/locks/stock/{product}/_c_<uuid>-lock-<seq>`.
//! The smallest sequence holds the lock; every other contender watches only the node just
//! before its own (no herd effect), so the queue is first come, first served. A holder that
//! crashes loses its session and ZooKeeper deletes its node: the next in line proceeds.
//! Apache Curator's `InterProcessMutex` on the same path excludes us and we it.
//!
//! The node's `czxid` is the fencing token: zxids grow with every write to the ensemble, and
//! the queue grants in creation order, so each new holder's token is larger than the last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use zookeeper_client as zk;

/// What the stock path needs from a granted lock. Dropping it deletes the node (in the
/// background), so every exit path releases, including panics and cancelled futures.
pub struct StockLock {
    /// Keeps the node alive; its drop is the release.
    _node: zk::OwnedLockClient,
    /// The node's czxid, checked by Postgres on every stock write.
    pub token: i64,
    /// Time from asking to holding: the queue's cost, reported to the buyer.
    pub waited: Duration,
    /// Our place among this instance's waiters for the product, given back with the lock.
    _slot: OwnedSemaphorePermit,
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

/// A cheap handle to this instance's ZooKeeper session.
#[derive(Clone)]
pub struct Zk {
    inner: Arc<Inner>,
}

struct Inner {
    /// Connect string, kept to open a new session after expiry.
    connect: String,
    /// Every path the service owns lives under here.
    root: String,
    session_timeout: Duration,
    /// Written into our lock nodes so a person (or the teaching page) sees who waits.
    instance: String,
    /// The live session. Swapped for a new one by [`supervise`] when ZooKeeper expires it;
    /// requests clone it and never hold the lock across an await.
    client: RwLock<zk::Client>,
    /// Bounds each product's queue on this instance: a flood cannot pile up unbounded
    /// waiters (and ZooKeeper nodes) behind one lock.
    max_waiters: usize,
    waiters: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// Flipped on shutdown so background tasks drop their clients and the session can close.
    closing: watch::Sender<bool>,
}

impl Zk {
    /// Opens the session and starts the task that replaces it if ZooKeeper ever expires it.
    pub async fn connect(
        connect: &str,
        root: &str,
        session_timeout: Duration,
        instance: String,
        max_waiters: usize,
    ) -> anyhow::Result<Zk> {
        let client = open_session(connect, session_timeout)
            .await
            .with_context(|| format!("connecting to ZooKeeper at {connect}"))?;
        let root = root.to_string();
        client
            .mkdir(
                &format!("{root}/locks/stock"),
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .or_else(|e| {
                if e == zk::Error::NodeExists {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .with_context(|| format!("creating {root}/locks/stock"))?;
        let zk = Zk {
            inner: Arc::new(Inner {
                connect: connect.to_string(),
                root,
                session_timeout,
                instance,
                client: RwLock::new(client),
                max_waiters,
                waiters: Mutex::new(HashMap::new()),
                closing: watch::channel(false).0,
            }),
        };
        tokio::spawn(supervise(Arc::downgrade(&zk.inner)));
        Ok(zk)
    }

    /// The current session (cheap clone).
    pub fn client(&self) -> zk::Client {
        self.inner
            .client
            .read()
            .expect("zk client lock poisoned")
            .clone()
    }

    /// Session id and password, so a test can take the session over and expire it.
    pub fn session(&self) -> zk::SessionInfo {
        self.client().session().clone()
    }

    /// Resolves when the session is being closed on purpose.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.closing.subscribe()
    }

    pub fn root(&self) -> &str {
        &self.inner.root
    }

    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The directory holding a product's lock queue.
    pub fn stock_lock_dir(&self, product_id: i64) -> String {
        format!("{}/locks/stock/{product_id}", self.inner.root)
    }

    /// Takes a number in the product's queue and waits, at most `timeout`, to be served.
    ///
    /// Cancellation-safe: dropping the future (client gone, timeout) deletes our node, since a
    /// leftover node would stall everyone queued behind it until our session ended.
    pub async fn lock_stock(
        &self,
        product_id: i64,
        timeout: Duration,
    ) -> Result<StockLock, LockError> {
        let slots = {
            let mut waiters = self.inner.waiters.lock().expect("waiters poisoned");
            waiters
                .entry(product_id)
                .or_insert_with(|| Arc::new(Semaphore::new(self.inner.max_waiters)))
                .clone()
        };
        let slot = slots.try_acquire_owned().map_err(|_| LockError::TooBusy)?;
        let client = self.client();
        let dir = self.stock_lock_dir(product_id);
        let started = Instant::now();
        let acquire = async {
            let prefix = zk::LockPrefix::new_curator(&dir, "lock-")?;
            let options = zk::LockOptions::new(zk::Acls::anyone_all()).with_ancestor_options(
                zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )?;
            let lock = client
                .lock(prefix, self.inner.instance.as_bytes(), options)
                .await?;
            Ok::<_, zk::Error>(lock.into_owned())
        };
        let node = match tokio::time::timeout(timeout, acquire).await {
            Ok(Ok(node)) => node,
            Ok(Err(zk::Error::SessionExpired)) => return Err(LockError::Lost),
            Ok(Err(e)) => return Err(LockError::Unavailable(e.into())),
            // Waiting on a dead connection is an outage, not a long queue.
            Err(_) if !is_connected(client.state()) => {
                return Err(LockError::Unavailable(anyhow::anyhow!(
                    "ZooKeeper session is {:?}",
                    client.state()
                )))
            }
            Err(_) => return Err(LockError::Timeout(timeout)),
        };
        let waited = started.elapsed();
        // The recipe drops the create's Stat; one read gets the czxid. If the node is already
        // gone our session expired while we were being granted: the lock is not ours.
        match client.check_stat(node.lock_path()).await {
            Ok(Some(stat)) => Ok(StockLock {
                _node: node,
                token: stat.czxid,
                waited,
                _slot: slot,
            }),
            Ok(None) | Err(zk::Error::SessionExpired) => Err(LockError::Lost),
            Err(e) => Err(LockError::Unavailable(e.into())),
        }
    }

    /// Closes the session so ZooKeeper deletes our nodes now rather than after the session
    /// timeout. Waits (bounded) for the close to reach the server; other holders of a
    /// client (in-flight orders) must be gone first for the close to happen.
    pub async fn close(self) {
        let mut watcher = self.client().state_watcher();
        self.inner.closing.send_replace(true);
        drop(self);
        let closed = async { while !watcher.changed().await.is_terminated() {} };
        if tokio::time::timeout(Duration::from_secs(2), closed)
            .await
            .is_err()
        {
            tracing::warn!(
                "ZooKeeper session did not close within 2s; its nodes go at session timeout"
            );
        }
    }

    /// True when the session is connected and answers a read.
    pub async fn ping(&self) -> bool {
        let client = self.client();
        matches!(
            tokio::time::timeout(Duration::from_secs(2), client.check_stat(&self.inner.root)).await,
            Ok(Ok(Some(_)))
        )
    }
}

fn is_connected(state: zk::SessionState) -> bool {
    matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    )
}

async fn open_session(connect: &str, session_timeout: Duration) -> Result<zk::Client, zk::Error> {
    zk::Client::connector()
        .with_session_timeout(session_timeout)
        .connect(connect)
        .await
}

/// Replaces the session when ZooKeeper expires it (a long partition, a paused process).
/// While it is gone, lock requests fail fast as `unavailable` rather than hang. Stops when
/// the last [`Zk`] handle is dropped.
async fn supervise(inner: std::sync::Weak<Inner>) {
    loop {
        let mut watcher = match inner.upgrade() {
            Some(inner) => inner
                .client
                .read()
                .expect("zk client lock poisoned")
                .state_watcher(),
            None => return,
        };
        let state = loop {
            let state = watcher.changed().await;
            if state.is_terminated() {
                break state;
            }
        };
        if inner.strong_count() == 0 {
            return; // closed on purpose: shutting down
        }
        tracing::warn!(?state, "ZooKeeper session ended; opening a new one");
        let mut backoff = Duration::from_millis(100);
        loop {
            let Some(live) = inner.upgrade() else { return };
            match open_session(&live.connect, live.session_timeout).await {
                Ok(client) => {
                    tracing::info!(session = ?client.session_id(), "ZooKeeper session re-established");
                    *live.client.write().expect("zk client lock poisoned") = client;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ZooKeeper reconnect failed");
                    drop(live);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
