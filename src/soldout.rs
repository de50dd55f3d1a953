//! The shared sold-out flag: once a product is sold out, every instance answers 409 without
//! taking the lock or writing to PostgreSQL — the flood after a flash sale costs nothing.
//!
//! A flag is a persistent node `{root}/soldout/{product}`. Each instance mirrors the set of
//! flags in memory, kept current by a persistent ZooKeeper watch on the directory (re-listed
//! on every change and after every reconnect, since watch events can be lost while
//! disconnected). The flag is only an optimisation: the stock under its guard stays the truth.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use zookeeper_client as zk;

use crate::lock::Zk;

#[derive(Clone)]
pub struct SoldOut {
    inner: Arc<Inner>,
}

struct Inner {
    zk: Zk,
    dir: String,
    /// This instance's mirror of the flags in ZooKeeper.
    flagged: RwLock<HashSet<i64>>,
}

impl SoldOut {
    /// Creates the directory, loads the flags, and starts the watch that keeps them current.
    pub async fn start(zk: Zk, root: &str) -> anyhow::Result<SoldOut> {
        let dir = format!("{root}/soldout");
        let client = zk.client();
        match client
            .create(
                &dir,
                &[],
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(e).with_context(|| format!("creating {dir}")),
        }
        let sold_out = SoldOut {
            inner: Arc::new(Inner {
                zk,
                dir,
                flagged: RwLock::new(HashSet::new()),
            }),
        };
        sold_out
            .resync(&client)
            .await
            .context("reading the sold-out flags")?;
        tokio::spawn(follow(Arc::downgrade(&sold_out.inner)));
        Ok(sold_out)
    }

    pub fn is_flagged(&self, product_id: i64) -> bool {
        self.inner
            .flagged
            .read()
            .expect("sold-out set poisoned")
            .contains(&product_id)
    }

    /// Raises the flag for every instance. Best effort: without it buyers take the slow path.
    pub async fn flag(&self, product_id: i64) {
        self.inner
            .flagged
            .write()
            .expect("sold-out set poisoned")
            .insert(product_id);
        let path = self.path(product_id);
        let created = self
            .inner
            .zk
            .client()
            .create(
                &path,
                &[],
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await;
        match created {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => tracing::warn!(product_id, error = %e, "could not raise the sold-out flag"),
        }
    }

    /// Lowers the flag for every instance (stock came back).
    pub async fn clear(&self, product_id: i64) {
        self.inner
            .flagged
            .write()
            .expect("sold-out set poisoned")
            .remove(&product_id);
        match self
            .inner
            .zk
            .client()
            .delete(&self.path(product_id), None)
            .await
        {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => tracing::warn!(product_id, error = %e, "could not clear the sold-out flag"),
        }
    }

    fn path(&self, product_id: i64) -> String {
        format!("{}/{product_id}", self.inner.dir)
    }

    async fn resync(&self, client: &zk::Client) -> Result<(), zk::Error> {
        resync(&self.inner, client).await
    }
}

async fn resync(inner: &Inner, client: &zk::Client) -> Result<(), zk::Error> {
    let children = client.list_children(&inner.dir).await?;
    let flagged: HashSet<i64> = children.iter().filter_map(|c| c.parse().ok()).collect();
    *inner.flagged.write().expect("sold-out set poisoned") = flagged;
    Ok(())
}

/// Follows the flags through the directory's persistent watch, across reconnects and new
/// sessions, until the last handle is dropped.
async fn follow(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(live) = inner.upgrade() else { return };
        let client = live.zk.client();
        let watched = async {
            let watcher = client
                .watch(&live.dir, zk::AddWatchMode::Persistent)
                .await?;
            resync(&live, &client).await?;
            Ok::<_, zk::Error>(watcher)
        };
        let mut watcher = match watched.await {
            Ok(watcher) => watcher,
            Err(_) => {
                drop(live);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut closing = live.zk.closing();
        drop(live);
        loop {
            let event = tokio::select! {
                event = watcher.changed() => event,
                // Shutting down: drop our client so the session can close.
                _ = closing.wait_for(|closing| *closing) => return,
            };
            let Some(live) = inner.upgrade() else { return };
            match event.event_type {
                zk::EventType::Session if event.session_state.is_terminated() => break,
                zk::EventType::Session
                    if event.session_state != zk::SessionState::SyncConnected =>
                {
                    continue
                }
                // A child came or went, or we reconnected (events may have been lost): re-list.
                _ => {
                    if let Err(e) = resync(&live, &client).await {
                        tracing::debug!(error = %e, "sold-out resync failed; retrying on the next event");
                    }
                }
            }
        }
    }
}
