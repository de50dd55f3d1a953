//! This instance's one ZooKeeper session, kept alive across expiry: every lock, flag and
//! watch of the instance goes through it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{watch, Semaphore};
use zookeeper_client as zk;

use super::LockStats;

/// A cheap handle to this instance's ZooKeeper session.
#[derive(Clone)]
pub struct Zk {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// Connect string, kept to open a new session after expiry.
    pub(super) connect: String,
    /// Every path the service owns lives under here.
    pub(super) root: String,
    pub(super) session_timeout: Duration,
    /// Written into our lock nodes so a person (or the teaching page) sees who waits.
    pub(super) instance: String,
    /// The live session. Swapped for a new one by [`supervise`] when ZooKeeper expires it;
    /// requests clone it and never hold the lock across an await.
    client: RwLock<zk::Client>,
    /// Bounds each product's queue on this instance: a flood cannot pile up unbounded
    /// waiters (and ZooKeeper nodes) behind one lock.
    pub(super) max_waiters: usize,
    pub(super) waiters: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// Per product, what its acquisitions cost (shown on the teaching page).
    pub(super) stats: Mutex<HashMap<i64, LockStats>>,
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
        super::node::make_dir(&client, &format!("{root}/locks/stock"))
            .await
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
                stats: Mutex::new(HashMap::new()),
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

pub(super) fn is_connected(state: zk::SessionState) -> bool {
    matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    )
}

pub(super) async fn open_session(
    connect: &str,
    session_timeout: Duration,
) -> Result<zk::Client, zk::Error> {
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
        // The watcher counts the current state as seen: check it first, or a session that
        // ended before we looked would never be replaced.
        let mut state = watcher.state();
        while !state.is_terminated() {
            state = watcher.changed().await;
        }
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
