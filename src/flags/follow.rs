//! The mirror kept current: re-reading the flags' directory, and following it through its
//! persistent watch.

use std::time::Duration;

use futures_util::future::join_all;
use zookeeper_client as zk;

use super::mark::{read_mark, Mark};
use super::Inner;
use crate::lock::make_dir;
use crate::telemetry::metrics;

/// Re-reads the flags: the names listed, each new one checked once for our mark.
pub(super) async fn resync(inner: &Inner, client: &zk::Client) -> Result<(), zk::Error> {
    metrics::zk("get_children");
    let children = match client.list_children(&inner.dir).await {
        Ok(children) => children,
        // A wiped or replaced ZooKeeper: no flags, and the directory made again.
        Err(zk::Error::NoNode) => {
            make_dir(client, &inner.dir, inner.zk.acls()).await?;
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    let unverified = inner.unverified(&children);
    let marks = unverified.iter().map(|name| async move {
        read_mark(client, &format!("{}/{name}", inner.dir), inner).await
    });
    for (name, mark) in unverified.iter().zip(join_all(marks).await) {
        // A node gone since the listing is not cached: the next listing leaves it out; nor
        // one being raised: its seal's data change brings it back here.
        let ours = match mark? {
            Some(Mark::Ours) => true,
            Some(Mark::Stranger) => false,
            Some(Mark::Pending) | None => continue,
        };
        if inner.record(name, ours) {
            tracing::warn!(node = %format!("{}/{name}", inner.dir), "ignoring a node we did not make among the flags (its data is not our seal); remove it if it is not wanted");
        }
    }
    // Computed and written under the mirror's lock: a flag this instance raises or lowers
    // meanwhile (`set_local` takes the same lock) comes either before this, and is counted
    // through `raising`/`lowering`, or after, and changes what this wrote.
    let mut mirror = inner.flagged.write().expect("flag set poisoned");
    let raising = inner
        .raising
        .lock()
        .expect("raising flags poisoned")
        .clone();
    let lowering = inner
        .lowering
        .lock()
        .expect("lowering flags poisoned")
        .clone();
    *mirror = children
        .into_iter()
        .filter(|c| inner.ours(c) && !lowering.contains(c))
        .chain(raising)
        .collect();
    drop(mirror);
    inner.changes.send_modify(|n| *n += 1);
    Ok(())
}

/// Follows the flags through the directory's persistent watch, across reconnects and new
/// sessions, until the last handle is dropped.
pub(super) async fn follow(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(live) = inner.upgrade() else { return };
        let client = live.zk.client();
        let watched = async {
            metrics::zk("add_watch");
            // Recursive: a flag's data changing (its seal written, or swapped) is an event too.
            let watcher = client
                .watch(&live.dir, zk::AddWatchMode::PersistentRecursive)
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
                // A flag's data changed: checked again (sealed now, or swapped: no longer ours).
                zk::EventType::NodeDataChanged => {
                    if let Some(name) = event.path.strip_prefix(&format!("{}/", live.dir)) {
                        // Read again and recorded at once: never unknown in between.
                        match read_mark(&client, &event.path, &live).await {
                            Ok(Some(Mark::Ours)) => _ = live.record(name, true),
                            Ok(Some(Mark::Stranger)) => {
                                if live.record(name, false) {
                                    tracing::warn!(node = %event.path, "a flag's data was changed to something we did not seal: it flags nothing now");
                                }
                            }
                            _ => live.forget(name),
                        }
                    }
                    if let Err(e) = resync(&live, &client).await {
                        tracing::debug!(error = %e, "sold-out resync failed; retrying on the next event");
                    }
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
