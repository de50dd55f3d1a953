//! Flags every instance shares through ZooKeeper, mirrored in memory so reading one costs
//! nothing on the hot path:
//!
//! - **sold out** (`{root}/soldout/{product}`): once a product is sold out, every instance
//!   answers 409 without taking the lock or writing to PostgreSQL — the flood after a flash
//!   sale costs nothing. Only an optimisation: the stock under its guard stays the truth.
//! - **demo** (`{root}/demo/{product}-{mode}`): a teaching-page hook armed by an admin and
//!   consumed (deleted) by the one order that acts it out.
//!
//! A flag is a persistent node under the set's directory whose data is a [`Seal`]: a MAC over
//! the node's path and its creation zxid, keyed by a secret every instance of the
//! deployment has (`--admin-token`, else `--zk-auth`). It is raised in two writes: the node
//! (pending), then its seal, once ZooKeeper has told us its zxid. Each instance mirrors the
//! names, kept current by a recursive persistent ZooKeeper watch on the directory (re-listed
//! on every change and after every reconnect, since watch events can be lost while
//! disconnected; a node whose data changed is checked again). A node without a valid seal
//! was made by someone else (by hand, copied from another product or from an earlier node of
//! the same name, or its data swapped): it flags nothing, is logged, and is never deleted.
//! Without either secret the key is public and a seal proves nothing (a demo server: its
//! ZooKeeper is open to anyone anyway). Without `--zk-auth`, anyone who reaches ZooKeeper
//! can still delete a flag (a sold-out product's orders then reach its guard and are told
//! sold out there) but cannot make one count.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use zookeeper_client as zk;

use crate::lock::{make_dir, Zk};

mod follow;
mod mark;
mod seal;
use crate::telemetry::metrics;
use follow::{follow, resync};
use mark::{read_mark, seal_pending, Mark};
pub use seal::Seal;
use seal::PENDING;

/// One directory of flags.
#[derive(Clone)]
pub struct Flags {
    inner: Arc<Inner>,
}

struct Inner {
    zk: Zk,
    dir: String,
    /// This instance's mirror of the flags in ZooKeeper.
    flagged: RwLock<HashSet<String>>,
    /// Bumped on every change of the mirror, for waiters on a flag.
    changes: watch::Sender<u64>,
    /// Seals our flags, and checks theirs.
    seal: Seal,
    /// Whether each listed name is ours (carries our seal): a resync reads only new names.
    verified: Mutex<HashMap<String, bool>>,
    /// Flags this instance is raising now (made, not sealed yet, or not made yet): raised in
    /// the mirror whatever a resync meanwhile reads of them.
    raising: Mutex<HashSet<String>>,
    /// Flags this instance is lowering now: lowered in the mirror whatever a resync meanwhile
    /// reads of them (a listing from before the delete would raise them again).
    lowering: Mutex<HashSet<String>>,
}

impl Flags {
    /// Creates `{root}/{name}`, loads its flags, and starts the watch that keeps them current.
    pub async fn start(zk: Zk, root: &str, name: &str, seal: Seal) -> anyhow::Result<Flags> {
        let dir = format!("{root}/{name}");
        let client = zk.client();
        make_dir(&client, &dir, zk.acls())
            .await
            .with_context(|| format!("creating {dir}"))?;
        let flags = Flags {
            inner: Arc::new(Inner {
                zk,
                dir,
                flagged: RwLock::new(HashSet::new()),
                changes: watch::channel(0).0,
                seal,
                verified: Mutex::new(HashMap::new()),
                raising: Mutex::new(HashSet::new()),
                lowering: Mutex::new(HashSet::new()),
            }),
        };
        resync(&flags.inner, &client)
            .await
            .with_context(|| format!("reading the {name} flags"))?;
        tokio::spawn(follow(Arc::downgrade(&flags.inner)));
        Ok(flags)
    }

    pub fn is_raised(&self, flag: &str) -> bool {
        self.inner
            .flagged
            .read()
            .expect("flag set poisoned")
            .contains(flag)
    }

    /// Every flag raised, as this instance sees them.
    pub fn all_raised(&self) -> Vec<String> {
        let flagged = self.inner.flagged.read().expect("flag set poisoned");
        flagged.iter().cloned().collect()
    }

    /// Resolves once this instance sees `flag` raised.
    pub async fn raised(&self, flag: &str) {
        let mut changes = self.inner.changes.subscribe();
        while !self.is_raised(flag) {
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Raises the flag for every instance. Flags are hints, but a flag that exists on one
    /// side only misleads: on a final failure the local mirror is put back as ZooKeeper has it.
    pub async fn raise(&self, flag: &str) {
        self.inner.lowering(flag, false);
        self.inner.raising(flag, true);
        self.set_local(flag, true);
        let persistent = zk::CreateMode::Persistent.with_acls(self.inner.zk.acls());
        let path = self.path(flag);
        let created = retry(|| async {
            let client = self.inner.zk.client();
            metrics::zk("create");
            match client.create(&path, PENDING, &persistent).await {
                Ok((stat, _)) => seal_pending(&client, &path, &self.inner, stat).await,
                Err(zk::Error::NodeExists) => {
                    metrics::zk("get_data");
                    let (data, stat) = match client.get_data(&path).await {
                        Ok(found) => found,
                        // Gone since: create it again.
                        Err(zk::Error::NoNode) => return Err(zk::Error::ConnectionLoss),
                        Err(e) => return Err(e),
                    };
                    if data == PENDING {
                        // Ours whose seal was lost with a connection, or another instance's
                        // raising it now: either way the flag is to be raised, so sealed.
                        return seal_pending(&client, &path, &self.inner, stat).await;
                    }
                    match read_mark(&client, &path, &self.inner).await? {
                        Some(Mark::Ours) => Ok(true),
                        Some(Mark::Pending) => Err(zk::Error::ConnectionLoss),
                        Some(Mark::Stranger) => Ok(false),
                        // Gone since: create it again.
                        None => Err(zk::Error::ConnectionLoss),
                    }
                }
                // The directory went with a wiped ZooKeeper: make it again, then retry.
                Err(zk::Error::NoNode) => {
                    make_dir(&client, &self.inner.dir, self.inner.zk.acls()).await?;
                    Err(zk::Error::ConnectionLoss)
                }
                Err(e) => Err(e),
            }
        })
        .await;
        self.inner.raising(flag, false);
        match created {
            Ok(ours) => {
                self.inner.record(flag, ours);
                if ours {
                    return;
                }
                tracing::warn!(node = %path, "could not raise a flag: a node we did not make has its name; remove it (zkCli.sh delete {path})");
                self.resync_now().await;
            }
            Err(e) => {
                tracing::warn!(flag, error = %e, "could not raise a flag");
                self.resync_now().await;
            }
        }
    }

    /// Lowers the flag for every instance.
    pub async fn lower(&self, flag: &str) {
        self.take(flag).await;
    }

    /// Lowers the flag; true if this call is the one that removed it from ZooKeeper, so that
    /// exactly one caller, on any instance, acts on a one-shot flag. A node we did not make is
    /// no flag: it is left where it is, and taking it takes nothing.
    pub async fn take(&self, flag: &str) -> bool {
        self.inner.raising(flag, false);
        self.inner.lowering(flag, true);
        self.set_local(flag, false);
        let path = self.path(flag);
        let deleted = retry(|| async {
            let client = self.inner.zk.client();
            loop {
                metrics::zk("get_data");
                let stat = match client.get_data(&path).await {
                    Ok((data, stat)) if self.inner.seal.verify(&path, &data, stat.czxid) => stat,
                    Ok(_) => return Ok(false),
                    Err(zk::Error::NoNode) => {
                        self.inner.forget(flag);
                        return Ok(false);
                    }
                    Err(e) => return Err(e),
                };
                // Conditional on what we read: a node changed since is not the one we checked.
                metrics::zk("delete");
                match client.delete(&path, Some(stat.version)).await {
                    Ok(()) => {
                        self.inner.forget(flag);
                        return Ok(true);
                    }
                    Err(zk::Error::NoNode) => {
                        self.inner.forget(flag);
                        return Ok(false);
                    }
                    Err(zk::Error::BadVersion) => continue,
                    Err(e) => return Err(e),
                }
            }
        })
        .await;
        // Forgotten (or not ours): a listing from before the delete no longer counts it.
        self.inner.lowering(flag, false);
        match deleted {
            Ok(deleted) => deleted,
            Err(e) => {
                tracing::warn!(flag, error = %e, "could not lower a flag");
                // Maybe still there: the mirror as ZooKeeper has it, as after a failed raise.
                self.resync_now().await;
                false
            }
        }
    }

    fn set_local(&self, flag: &str, raised: bool) {
        let mut flagged = self.inner.flagged.write().expect("flag set poisoned");
        if raised {
            flagged.insert(flag.to_string());
        } else {
            flagged.remove(flag);
        }
        self.inner.changes.send_modify(|n| *n += 1);
    }

    async fn resync_now(&self) {
        if let Err(e) = resync(&self.inner, &self.inner.zk.client()).await {
            tracing::warn!(error = %e, "could not re-read the flags; the watch will on reconnect");
        }
    }

    fn path(&self, flag: &str) -> String {
        format!("{}/{flag}", self.inner.dir)
    }
}

/// Retries a ZooKeeper write through a connection loss (a few seconds at most): the answer
/// that counts is the one after the connection is back.
async fn retry<T, F, Fut>(mut write: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zk::Error>>,
{
    let mut backoff = Duration::from_millis(50);
    for _ in 0..8 {
        match write().await {
            Err(zk::Error::ConnectionLoss) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            result => return result,
        }
    }
    write().await
}

impl Inner {
    /// Marks `name` as being raised by this instance now, or no longer.
    fn raising(&self, name: &str, now: bool) {
        in_flight(&self.raising, name, now);
    }

    /// Marks `name` as being lowered by this instance now, or no longer.
    fn lowering(&self, name: &str, now: bool) {
        in_flight(&self.lowering, name, now);
    }

    /// Records whether `name` is ours; true if it is newly known not to be.
    fn record(&self, name: &str, ours: bool) -> bool {
        let mut verified = self.verified.lock().expect("verified flags poisoned");
        let before = verified.insert(name.to_string(), ours);
        !ours && before != Some(false)
    }

    /// The listed names not yet known to be ours or not; forgets the names no longer listed.
    fn unverified(&self, children: &[String]) -> Vec<String> {
        let listed: HashSet<&String> = children.iter().collect();
        let mut verified = self.verified.lock().expect("verified flags poisoned");
        verified.retain(|name, _| listed.contains(name));
        unknown(children, &verified)
    }

    /// After we deleted `name`: a node made there next is checked again.
    fn forget(&self, name: &str) {
        let mut verified = self.verified.lock().expect("verified flags poisoned");
        verified.remove(name);
    }

    /// Whether `name` is known to be one of our flags.
    fn ours(&self, name: &str) -> bool {
        let verified = self.verified.lock().expect("verified flags poisoned");
        verified.get(name) == Some(&true)
    }
}

/// Adds `name` to (or removes it from) a set of flags this instance is changing now.
fn in_flight(set: &Mutex<HashSet<String>>, name: &str, now: bool) {
    let mut set = set.lock().expect("flags in flight poisoned");
    if now {
        set.insert(name.to_string());
    } else {
        set.remove(name);
    }
}

/// The names in `children` that `verified` says nothing about.
fn unknown(children: &[String], verified: &HashMap<String, bool>) -> Vec<String> {
    children
        .iter()
        .filter(|c| !verified.contains_key(*c))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_never_checked_are_read_again() {
        let children: Vec<String> = ["7", "8", "9-crash"].map(String::from).into();
        let verified = HashMap::from([("7".to_string(), true), ("9-crash".to_string(), false)]);
        assert_eq!(unknown(&children, &verified), ["8"]);
        assert!(unknown(&[], &verified).is_empty());
    }
}
