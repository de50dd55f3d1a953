//! ZooKeeper: this instance's one session, kept alive across expiry, and the per-product stock
//! locks — the fair one the service uses, and the naive one the teaching page compares it to.
//!
//! **Fair** (guard `zk`, Apache Curator's `InterProcessMutex` recipe and node names): each
//! contender creates an ephemeral-sequential node `{root}/locks/stock/{product}/_c_<uuid>-lock-<seq>`.
//! The smallest sequence holds the lock; every other contender watches only the node just
//! before its own, so a release wakes exactly one waiter and buyers are served first come,
//! first served. Curator on the same path excludes us and we it (tested).
//!
//! **Herd** (guard `zk-herd`): everyone tries to create the one ephemeral node
//! `{root}/locks/herd/{product}/lock` and, failing, watches it; each release wakes every
//! waiter, of whom one wins. Unfair, and its cost grows with the crowd: the herd effect.
//!
//! Both are ours rather than zookeeper-client's `Client::lock` because the page shows how
//! many watch wake-ups each acquisition cost, which the crate's recipe cannot report; both
//! keep its care: a contender that gives up, or is cancelled, deletes its node (even one whose
//! create was still in flight), and a connection loss during create finds the node by its
//! unique name. A holder that crashes loses its session and ZooKeeper deletes its node.
//!
//! The node's `czxid` is the fencing token: zxids grow with every write to the ensemble, and
//! both recipes grant in creation order of the granted node, so each new holder's token is
//! larger than the last.

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
    _node: OwnNode,
    /// The node's czxid, checked by Postgres on every stock write.
    pub token: i64,
    /// Time from asking to holding: the queue's cost, reported to the buyer.
    pub waited: Duration,
    /// Watch notifications this acquisition woke up for (1 per wait in a fair queue; up
    /// to one per release in a herd).
    pub wakeups: u64,
    /// Our place among this instance's waiters for the product, given back with the lock.
    _slot: OwnedSemaphorePermit,
}

/// Which recipe guards a product's stock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    Fair,
    Herd,
}

/// Which ZooKeeper session a lock is taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Session {
    /// The instance's one session (every order).
    Shared,
    /// A session of its own, ended with the lock (demos).
    Own,
}

/// What acquisitions of one product's lock have cost on this instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockStats {
    pub acquisitions: u64,
    pub wakeups: u64,
}

/// One node in a lock's directory, as the teaching page draws it: a numbered ticket.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Ticket {
    pub node: String,
    /// The queue number (fair recipe).
    pub seq: Option<u64>,
    /// The instance that created it (the node's data).
    pub owner: String,
    /// The node this waiter watches: the one just before it (fair recipe).
    pub watches: Option<String>,
    /// czxid: the fencing token this ticket will carry when served.
    pub token: i64,
}

/// A product's lock at one moment: who holds it and who waits, in order.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueueView {
    pub product_id: i64,
    pub recipe: &'static str,
    pub path: String,
    pub holder: Option<Ticket>,
    /// In queue order (fair recipe; the herd has no queue, its waiters hold no node).
    pub waiters: Vec<Ticket>,
    /// Nodes in the directory; only the first [`QUEUE_VIEW_MAX`] are detailed.
    pub nodes: usize,
    /// Buyers of this instance waiting for or holding the lock.
    pub waiting_here: usize,
    /// What this instance's acquisitions have cost.
    pub stats: LockStats,
    pub instance: String,
}

pub const QUEUE_VIEW_MAX: usize = 50;

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
    /// Per product, what its acquisitions cost (shown on the teaching page).
    stats: Mutex<HashMap<i64, LockStats>>,
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

    /// The directory holding a product's lock nodes.
    pub fn lock_dir(&self, recipe: Recipe, product_id: i64) -> String {
        match recipe {
            Recipe::Fair => format!("{}/locks/stock/{product_id}", self.inner.root),
            Recipe::Herd => format!("{}/locks/herd/{product_id}", self.inner.root),
        }
    }

    /// What this instance's acquisitions of the product's lock have cost so far.
    pub fn stats(&self, product_id: i64) -> LockStats {
        let stats = self.inner.stats.lock().expect("stats poisoned");
        stats.get(&product_id).copied().unwrap_or_default()
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
        let slots = {
            let mut waiters = self.inner.waiters.lock().expect("waiters poisoned");
            waiters
                .entry(product_id)
                .or_insert_with(|| Arc::new(Semaphore::new(self.inner.max_waiters)))
                .clone()
        };
        let slot = slots.try_acquire_owned().map_err(|_| LockError::TooBusy)?;
        let client = match session {
            Session::Shared => self.client(),
            Session::Own => open_session(&self.inner.connect, self.inner.session_timeout)
                .await
                .map_err(|e| LockError::Unavailable(e.into()))?,
        };
        let dir = self.lock_dir(recipe, product_id);
        let started = Instant::now();
        let acquire = async {
            match recipe {
                Recipe::Fair => acquire_fair(&client, &dir, &self.inner.instance).await,
                Recipe::Herd => acquire_herd(&client, &dir, &self.inner.instance).await,
            }
        };
        let (node, token, wakeups) = match tokio::time::timeout(timeout, acquire).await {
            Ok(Ok(acquired)) => acquired,
            Ok(Err(zk::Error::SessionExpired | zk::Error::RuntimeInconsistent)) => {
                return Err(LockError::Lost)
            }
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
        {
            let mut stats = self.inner.stats.lock().expect("stats poisoned");
            let entry = stats.entry(product_id).or_default();
            entry.acquisitions += 1;
            entry.wakeups += wakeups;
        }
        Ok(StockLock {
            _node: node,
            token,
            waited: started.elapsed(),
            wakeups,
            _slot: slot,
        })
    }

    /// The product's lock as it stands: holder and waiters (read in one multi-read, so the
    /// tickets are a consistent snapshot).
    pub async fn queue(&self, product_id: i64, recipe: Recipe) -> Result<QueueView, zk::Error> {
        let client = self.client();
        let dir = self.lock_dir(recipe, product_id);
        let mut names: Vec<(Option<u64>, String)> = match client.list_children(&dir).await {
            Ok(children) => children.into_iter().map(|c| (sequence(&c), c)).collect(),
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        };
        names.sort_unstable();
        let nodes = names.len();
        names.truncate(QUEUE_VIEW_MAX);
        let mut tickets = Vec::new();
        if !names.is_empty() {
            let mut reader = client.new_multi_reader();
            for (_, name) in &names {
                reader.add_get_data(&format!("{dir}/{name}"))?;
            }
            let mut previous: Option<String> = None;
            for ((seq, name), result) in names.into_iter().zip(reader.commit().await?) {
                // A node that went between the listing and the read is simply not drawn.
                let zk::MultiReadResult::Data { data, stat } = result else {
                    continue;
                };
                let data = String::from_utf8_lossy(&data);
                let owner = data
                    .split_once('#')
                    .map_or(&*data, |(owner, _)| owner)
                    .to_string();
                let watches = if recipe == Recipe::Fair {
                    previous.clone()
                } else {
                    None
                };
                previous = Some(name.clone());
                tickets.push(Ticket {
                    node: name,
                    seq,
                    owner,
                    watches,
                    token: stat.czxid,
                });
            }
        }
        let mut tickets = tickets.into_iter();
        let holder = tickets.next().map(|t| Ticket { watches: None, ..t });
        let waiting_here = {
            let waiters = self.inner.waiters.lock().expect("waiters poisoned");
            waiters.get(&product_id).map_or(0, |slots| {
                self.inner.max_waiters - slots.available_permits()
            })
        };
        Ok(QueueView {
            product_id,
            recipe: match recipe {
                Recipe::Fair => "fair",
                Recipe::Herd => "herd",
            },
            path: dir,
            holder,
            waiters: tickets.collect(),
            nodes,
            waiting_here,
            stats: self.stats(product_id),
            instance: self.inner.instance.clone(),
        })
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

/// A node of ours that is deleted when this is dropped: after use (the release), or when the
/// wait for it is abandoned. Until `path` is known (create still in flight), the drop finds
/// the node by its unique `marker` instead: requests on a session are ordered, so a lookup
/// sent after the create sees its result.
struct OwnNode {
    client: zk::Client,
    dir: String,
    /// A string only our node contains: its name (fair) or its data (herd). `None` once we
    /// know no node of ours exists.
    marker: Option<String>,
    path: Option<String>,
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        let client = self.client.clone();
        let (dir, path) = (self.dir.clone(), self.path.take());
        let Some(marker) = self.marker.take() else {
            return;
        };
        // A leftover node would block the product's queue for as long as the session lives
        // (and the shared one lives on): retry until the answer is final.
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let result = match &path {
                    Some(path) => client.delete(path, None).await,
                    None => delete_by_marker(&client, &dir, &marker).await,
                };
                match result {
                    Ok(()) | Err(zk::Error::NoNode) => return,
                    // Session gone: ZooKeeper deletes our ephemeral nodes itself.
                    Err(e) if e == zk::Error::SessionExpired || e == zk::Error::ClientClosed => {
                        return
                    }
                    Err(_) => {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
    }
}

/// Deletes the node whose name or data carries `marker`, and no other: the herd's one node
/// may already be someone else's (a retried delete must not remove the next holder's), so
/// the data is checked and the delete is conditional on the version read with it.
async fn delete_by_marker(client: &zk::Client, dir: &str, marker: &str) -> Result<(), zk::Error> {
    for child in client.list_children(dir).await? {
        let path = format!("{dir}/{child}");
        if child.contains(marker) {
            return client.delete(&path, None).await;
        }
        match client.get_data(&path).await {
            Ok((data, stat)) if data == marker.as_bytes() => {
                return client.delete(&path, Some(stat.version)).await
            }
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn sequence(name: &str) -> Option<u64> {
    name.rsplit_once("lock-")
        .and_then(|(_, seq)| seq.parse().ok())
}

/// The fair queue: take a number, then wait for the node just before ours to go.
async fn acquire_fair(
    client: &zk::Client,
    dir: &str,
    instance: &str,
) -> Result<(OwnNode, i64, u64), zk::Error> {
    let id = uuid::Uuid::new_v4();
    let marker = format!("_c_{id}-");
    let prefix = format!("{dir}/{marker}lock-");
    let mut node = OwnNode {
        client: client.clone(),
        dir: dir.to_string(),
        marker: Some(marker.clone()),
        path: None,
    };
    let ephemeral_sequential =
        zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (name, token) = loop {
        match client
            .create(&prefix, instance.as_bytes(), &ephemeral_sequential)
            .await
        {
            Ok((stat, seq)) => break (format!("{marker}lock-{seq}"), stat.czxid),
            Err(zk::Error::NoNode) => make_dir(client, dir).await?,
            // Did the create happen? Our unique marker says; ask until there is an answer, or
            // a second create could leave an orphan node blocking the queue.
            Err(zk::Error::ConnectionLoss) => {
                if let Some(found) = find_created(client, dir, &marker).await? {
                    break found;
                }
            }
            Err(e) => return Err(e),
        }
    };
    node.path = Some(format!("{dir}/{name}"));
    let mine = sequence(&name).ok_or(zk::Error::RuntimeInconsistent)?;
    let mut wakeups = 0;
    loop {
        let mut queue: Vec<(u64, String)> = match client.list_children(dir).await {
            Ok(children) => children
                .into_iter()
                .filter_map(|c| Some((sequence(&c)?, c)))
                .collect(),
            Err(zk::Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        };
        queue.sort_unstable();
        let Some(position) = queue.iter().position(|(seq, _)| *seq == mine) else {
            // Our node is gone: the session that owned it expired.
            return Err(zk::Error::RuntimeInconsistent);
        };
        if position == 0 {
            return Ok((node, token, wakeups));
        }
        let predecessor = format!("{dir}/{}", queue[position - 1].1);
        match client.get_and_watch_data(&predecessor).await {
            Ok((_, _, watcher)) => {
                watcher.changed().await;
                wakeups += 1;
            }
            Err(zk::Error::NoNode | zk::Error::ConnectionLoss) => {}
            Err(e) => return Err(e),
        }
    }
}

/// The herd: everyone races to create the one node and, losing, watches it.
async fn acquire_herd(
    client: &zk::Client,
    dir: &str,
    instance: &str,
) -> Result<(OwnNode, i64, u64), zk::Error> {
    let path = format!("{dir}/lock");
    // Unique per contender, so a connection loss during create can tell whose node it is.
    let marker = format!("{instance}#{}", uuid::Uuid::new_v4());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let mut wakeups = 0;
    loop {
        let mut node = OwnNode {
            client: client.clone(),
            dir: dir.to_string(),
            marker: Some(marker.clone()),
            path: None,
        };
        match client.create(&path, marker.as_bytes(), &ephemeral).await {
            // The release goes by marker (see `delete_by_marker`): the path is everyone's.
            Ok((stat, _)) => return Ok((node, stat.czxid, wakeups)),
            Err(zk::Error::NoNode) => make_dir(client, dir).await?,
            Err(zk::Error::NodeExists) => match client.check_and_watch_stat(&path).await {
                Ok((Some(_), watcher)) => {
                    watcher.changed().await;
                    wakeups += 1;
                }
                Ok((None, _)) | Err(zk::Error::ConnectionLoss) => {}
                Err(e) => return Err(e),
            },
            Err(zk::Error::ConnectionLoss) => {
                if let Some(token) = find_held(client, &path, &marker).await? {
                    return Ok((node, token, wakeups));
                }
            }
            Err(e) => return Err(e),
        }
        // The create has answered, and not with our node: nothing to clean up.
        node.marker = None;
    }
}

/// After a create lost its answer: our sequential node's name and czxid, if it exists.
async fn find_created(
    client: &zk::Client,
    dir: &str,
    marker: &str,
) -> Result<Option<(String, i64)>, zk::Error> {
    loop {
        let children = match client.list_children(dir).await {
            Ok(children) => children,
            Err(zk::Error::ConnectionLoss) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(found) = children.into_iter().find(|c| c.starts_with(marker)) else {
            return Ok(None);
        };
        match client.get_data(&format!("{dir}/{found}")).await {
            Ok((_, stat)) => return Ok(Some((found, stat.czxid))),
            Err(zk::Error::ConnectionLoss) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e),
        }
    }
}

/// After a create lost its answer: the herd node's czxid, if the node is ours.
async fn find_held(
    client: &zk::Client,
    path: &str,
    marker: &str,
) -> Result<Option<i64>, zk::Error> {
    loop {
        match client.get_data(path).await {
            Ok((data, stat)) => return Ok((data == marker.as_bytes()).then_some(stat.czxid)),
            Err(zk::Error::NoNode) => return Ok(None),
            Err(zk::Error::ConnectionLoss) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e),
        }
    }
}

async fn make_dir(client: &zk::Client, dir: &str) -> Result<(), zk::Error> {
    match client
        .mkdir(
            dir,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
    {
        Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e),
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
