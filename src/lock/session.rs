//! This instance's one ZooKeeper session, kept alive across expiry: every lock, flag and
//! watch of the instance goes through it.
//!
//! Each session also reads the **ensemble's identity**: a persistent node `{root}/ensemble`
//! holding a UUID, created by the first instance that finds it missing. A ZooKeeper whose
//! data was wiped, or a new ensemble in place of the old, has no such node (or another
//! UUID), and its zxids, the fencing tokens, start again from zero. Postgres learns the new
//! identity from the first token it sees and orders it after the old one, so the service
//! recovers on its own instead of fencing every product out (see `inventory::read_stock`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{watch, Semaphore};
use uuid::Uuid;
use zookeeper_client as zk;

use super::node::make_dir;
use super::LockStats;
use crate::telemetry::metrics;

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
    /// `user:password` for ZooKeeper's digest scheme, sent by every session we open.
    auth: Option<String>,
    /// The ACL of every node we create: only sessions with our credentials may touch them
    /// when `auth` is set, anyone otherwise.
    pub(super) acls: zk::Acls<'static>,
    /// The live session and the identity of the ensemble it is connected to. Swapped for a
    /// new one by [`supervise`] when ZooKeeper expires it; requests clone it and never hold
    /// the lock across an await.
    live: RwLock<(zk::Client, Uuid)>,
    /// Bounds each product's queue on this instance: a flood cannot pile up unbounded
    /// waiters (and ZooKeeper nodes) behind one lock.
    pub(super) max_waiters: usize,
    pub(super) waiters: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// Per product, what its acquisitions cost (shown on the teaching page).
    pub(super) stats: Mutex<HashMap<i64, LockStats>>,
    /// Products whose waiters woke or began or stopped watching since the event feed last
    /// looked (see `Zk::take_lock_news`).
    pub(super) lock_news: Mutex<HashSet<i64>>,
    /// Stock locks held by an [`super::Owner`], for its re-entries.
    pub(super) reentries: super::reentrant::Reentries<super::Grant>,
    /// The terms read side each product's sale holds across its lock cycles.
    pub(super) sale_reads: Arc<super::sale_read::SaleReads>,
    /// Flipped on shutdown so background tasks drop their clients and the session can close.
    closing: watch::Sender<bool>,
}

impl Zk {
    /// Opens the session and starts the task that replaces it if ZooKeeper ever expires it.
    /// With `auth` (`user:password`), every session authenticates with ZooKeeper's digest
    /// scheme and every node under `root` is created readable and writable by those
    /// credentials only.
    pub async fn connect(
        connect: &str,
        root: &str,
        session_timeout: Duration,
        instance: String,
        max_waiters: usize,
        auth: Option<String>,
    ) -> anyhow::Result<Zk> {
        let acls = match auth {
            Some(_) => zk::Acls::creator_all(),
            None => zk::Acls::anyone_all(),
        };
        let client = open_session(connect, session_timeout, auth.as_deref())
            .await
            .with_context(|| format!("connecting to ZooKeeper at {connect}"))?;
        let ensemble = identify(&client, root, acls)
            .await
            .with_context(|| format!("creating {root} and reading {root}/ensemble"))?;
        make_dir(&client, &format!("{root}/locks/stock"), acls)
            .await
            .with_context(|| format!("creating {root}/locks/stock"))?;
        tracing::info!(%ensemble, "ZooKeeper ensemble identified");
        let zk = Zk {
            inner: Arc::new(Inner {
                connect: connect.to_string(),
                root: root.to_string(),
                session_timeout,
                instance,
                auth,
                acls,
                live: RwLock::new((client, ensemble)),
                max_waiters,
                waiters: Mutex::new(HashMap::new()),
                stats: Mutex::new(HashMap::new()),
                lock_news: Mutex::new(HashSet::new()),
                reentries: Default::default(),
                sale_reads: Default::default(),
                closing: watch::channel(false).0,
            }),
        };
        tokio::spawn(supervise(Arc::downgrade(&zk.inner)));
        Ok(zk)
    }

    /// Reads the ensemble's identity again in the current session. For a lock that lost its
    /// claim: if `{root}/ensemble` was deleted and made again (with a new identity, which
    /// Postgres then ranks above ours) while our session lived on, our tokens would be
    /// fenced out for as long as the session lasts. One fenced cycle, then the new identity.
    pub async fn reidentify(&self) {
        let client = self.client();
        match identify(&client, self.root(), self.acls()).await {
            Ok(ensemble) => {
                let mut live = self.inner.live.write().expect("zk client lock poisoned");
                if live.0.session_id() == client.session_id() && live.1 != ensemble {
                    tracing::warn!(%ensemble, was = %live.1, "the ensemble's identity changed under our session");
                    live.1 = ensemble;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not re-read the ensemble's identity"),
        }
    }

    /// Reads `{root}/ensemble` (a read, no write) and, if it no longer holds our session's
    /// identity (deleted, or made again by an instance started since), takes up what is
    /// there now, so every instance on one ZooKeeper converges on one identity.
    pub async fn check_identity(&self) {
        let (client, ours) = self.live();
        metrics::zk("get_data");
        match client.get_data(&format!("{}/ensemble", self.root())).await {
            Ok((data, _)) if data == ours.as_bytes() => {}
            Ok(_) | Err(zk::Error::NoNode) => self.reidentify().await,
            // Connection trouble: the session's supervisor deals with it.
            Err(_) => {}
        }
    }

    /// The ACL for nodes we create (see [`Zk::connect`]).
    pub fn acls(&self) -> zk::Acls<'static> {
        self.inner.acls
    }

    /// A session of its own, authenticated as the instance's is (demos).
    pub(super) async fn open_own_session(&self) -> Result<zk::Client, zk::Error> {
        let inner = &self.inner;
        open_session(&inner.connect, inner.session_timeout, inner.auth.as_deref()).await
    }

    /// The current session (cheap clone).
    pub fn client(&self) -> zk::Client {
        self.live().0
    }

    /// The current session and its ensemble's identity, read together.
    pub(super) fn live(&self) -> (zk::Client, Uuid) {
        self.inner
            .live
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

    /// The identity of the ensemble the current session is connected to.
    pub fn ensemble(&self) -> Uuid {
        self.live().1
    }

    /// How long ZooKeeper keeps a silent session's nodes.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
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
        // Our lock, lease and terms-lock nodes first, one delete each: if the close itself
        // then does not reach the server (a slow or partitioned ensemble), the other
        // instances need not wait a session timeout for nodes of a process that is gone.
        match tokio::time::timeout(Duration::from_secs(2), self.delete_own_nodes()).await {
            Ok(Ok(0)) => {}
            Ok(Ok(deleted)) => tracing::info!(deleted, "deleted our lock nodes before closing"),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not delete our lock nodes; closing"),
            Err(_) => tracing::warn!("deleting our lock nodes took over 2s; closing"),
        }
        let mut watcher = self.client().state_watcher();
        self.inner.sale_reads.clear();
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
}

impl Zk {
    /// Deletes every ephemeral node the current session holds under our root (ZooKeeper
    /// lists them: `getEphemerals`), and returns how many went. For shutdown: whoever held
    /// them is finishing, and a holder still running is fenced by the next one's token.
    pub async fn delete_own_nodes(&self) -> Result<usize, zk::Error> {
        let client = self.client();
        let root = self.root();
        metrics::zk("get_ephemerals");
        let nodes = client.list_ephemerals(root).await?;
        // The listing matches by prefix: `/seckill` would also name `/seckill-b/...`. Sent
        // together (one session orders them anyway): shutdown waits for the slowest alone.
        let ours = nodes.iter().filter(|n| n.starts_with(&format!("{root}/")));
        let deletes = ours.map(|node| {
            metrics::zk("delete");
            client.delete(node, None)
        });
        let mut deleted = 0;
        for result in futures_util::future::join_all(deletes).await {
            match result {
                Ok(()) => deleted += 1,
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}

pub(super) fn is_connected(state: zk::SessionState) -> bool {
    matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    )
}

async fn open_session(
    connect: &str,
    session_timeout: Duration,
    auth: Option<&str>,
) -> Result<zk::Client, zk::Error> {
    let connector = zk::Client::connector().with_session_timeout(session_timeout);
    let connector = match auth {
        Some(auth) => connector.with_auth("digest", auth.as_bytes()),
        None => connector,
    };
    connector.connect(connect).await
}

/// Creates `root` if missing: its parents open to anyone (other services may share them),
/// `root` itself with `acls`.
async fn make_root(
    client: &zk::Client,
    root: &str,
    acls: zk::Acls<'static>,
) -> Result<(), zk::Error> {
    if let Some((parent, _)) = root
        .rsplit_once('/')
        .filter(|(parent, _)| !parent.is_empty())
    {
        make_dir(client, parent, zk::Acls::anyone_all()).await?;
    }
    make_dir(client, root, acls).await
}

/// The ensemble's identity, from `{root}/ensemble`; the first session to find it missing
/// creates it (and `root`, if missing too: a new or wiped ensemble). A race between instances
/// is settled by the create: the loser reads.
pub(super) async fn identify(
    client: &zk::Client,
    root: &str,
    acls: zk::Acls<'static>,
) -> Result<Uuid, zk::Error> {
    let path = format!("{root}/ensemble");
    let persistent = zk::CreateMode::Persistent.with_acls(acls);
    loop {
        let fresh = Uuid::new_v4();
        metrics::zk("create");
        match client.create(&path, fresh.as_bytes(), &persistent).await {
            Ok(_) => {
                if acls == zk::Acls::creator_all() {
                    ensure_closed(client, root).await?;
                }
                return Ok(fresh);
            }
            Err(zk::Error::NoNode) => {
                make_root(client, root, acls).await?;
                continue;
            }
            Err(zk::Error::NodeExists) if acls == zk::Acls::creator_all() => {
                for node in [root, path.as_str()] {
                    ensure_closed(client, node).await?;
                }
            }
            Err(zk::Error::NodeExists) => {}
            // Created or not, the next create finds out (NodeExists, then the read).
            Err(zk::Error::ConnectionLoss) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        }
        metrics::zk("get_data");
        match client.get_data(&path).await {
            Ok((data, _)) => {
                return Uuid::from_slice(&data).map_err(|_| {
                    zk::Error::UnexpectedError(format!(
                        "{path} holds {} bytes, not an ensemble UUID",
                        data.len()
                    ))
                })
            }
            Err(zk::Error::NoNode) => continue,
            Err(zk::Error::ConnectionLoss) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e),
        }
    }
}

/// With `--zk-auth`, a node we rely on must not be open to anyone: one created before auth
/// was turned on, or by a stranger who got to a wiped ZooKeeper first, would let others
/// raise flags or rewrite the ensemble's identity. Refuse it (at start, the service does not
/// start; later, the session is not used) rather than trust it.
async fn ensure_closed(client: &zk::Client, node: &str) -> Result<(), zk::Error> {
    metrics::zk("get_acl");
    let (acl, _) = client.get_acl(node).await?;
    if acl.iter().any(|entry| entry.scheme() == "world") {
        return Err(zk::Error::UnexpectedError(format!(
            "{node} is open to anyone (created without --zk-auth, or not by us): \
             delete it with everything under it (zkCli.sh deleteall {node}; the instances \
             make it again, closed), or restrict the ACL of it and every node under it to \
             our credentials"
        )));
    }
    Ok(())
}

/// Replaces the session when ZooKeeper expires it (a long partition, a paused process, a
/// replaced ensemble). While it is gone, lock requests fail fast as `unavailable` rather than
/// hang. Stops when the last [`Zk`] handle is dropped.
async fn supervise(inner: std::sync::Weak<Inner>) {
    loop {
        let mut watcher = match inner.upgrade() {
            Some(inner) => inner
                .live
                .read()
                .expect("zk client lock poisoned")
                .0
                .state_watcher(),
            None => return,
        };
        // The watcher counts the current state as seen: check it first, or a session that
        // ended before we looked would never be replaced. (The client expires a session
        // itself when no server answers within its timeout, so this also ends when a wiped
        // server keeps refusing a client that has seen newer zxids than its own.)
        let mut state = watcher.state();
        metrics::zk_session(&format!("{state:?}"));
        while !state.is_terminated() {
            state = watcher.changed().await;
            metrics::zk_session(&format!("{state:?}"));
        }
        if inner.strong_count() == 0 {
            return; // closed on purpose: shutting down
        }
        tracing::warn!(?state, "ZooKeeper session ended; opening a new one");
        let mut backoff = Duration::from_millis(100);
        loop {
            let Some(live) = inner.upgrade() else { return };
            let opened =
                match open_session(&live.connect, live.session_timeout, live.auth.as_deref()).await
                {
                    Ok(client) => identify(&client, &live.root, live.acls)
                        .await
                        .map(|ensemble| (client, ensemble)),
                    Err(e) => Err(e),
                };
            match opened {
                Ok((client, ensemble)) => {
                    tracing::info!(session = ?client.session_id(), %ensemble, "ZooKeeper session re-established");
                    *live.live.write().expect("zk client lock poisoned") = (client, ensemble);
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
