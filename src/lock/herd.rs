//! The naive lock (guard `zk-herd`), kept to show the herd effect: everyone tries to create
//! the one ephemeral node `{dir}/lock` and, failing, watches it; each release wakes every
//! waiter, of whom one wins. Unfair, and its cost grows with the crowd. A persistent node at
//! that path (no session of ours makes one) is refused at once rather than waited for.

use std::time::Duration;

use zookeeper_client as zk;

use super::node::{self, OwnNode};
use super::stats::Observer;
use crate::telemetry::metrics;

/// Waits until we created the one node: the node, its czxid, and the wake-ups it cost.
pub(super) async fn acquire(
    client: &zk::Client,
    dir: &str,
    instance: &str,
    acls: zk::Acls<'static>,
    observer: &Observer<'_>,
) -> Result<(OwnNode, i64, u64), zk::Error> {
    let path = format!("{dir}/lock");
    // Unique per contender, so a connection loss during create can tell whose node it is.
    let marker = format!("{instance}#{}", uuid::Uuid::new_v4());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(acls);
    let mut wakeups = 0;
    loop {
        let mut own = OwnNode {
            client: client.clone(),
            dir: dir.to_string(),
            marker: Some(marker.clone()),
            path: None,
        };
        metrics::zk("create");
        match client.create(&path, marker.as_bytes(), &ephemeral).await {
            // The release goes by marker (see `node::delete_by_marker`): the path is everyone's.
            Ok((stat, _)) => return Ok((own, stat.czxid, wakeups)),
            Err(zk::Error::NoNode) => node::make_dir(client, dir, acls).await?,
            Err(zk::Error::NodeExists) => {
                match metrics::zk_then("exists", client.check_and_watch_stat(&path)).await {
                    // No session owns it, so it would never go: every buyer would wait out
                    // the lock timeout. Answer at once (503 `unavailable`); it is not ours to delete.
                    Ok((Some(stat), _)) if node::unowned(&stat) => {
                        tracing::warn!(node = %path, "a persistent node holds the herd lock: no session owns it, so nobody can take the lock; remove it (zkCli.sh delete {path})");
                        return Err(zk::Error::NodeExists);
                    }
                    Ok((Some(_), watcher)) => {
                        let watching = observer.watching();
                        watcher.changed().await;
                        wakeups += 1;
                        watching.woke();
                    }
                    Ok((None, _)) | Err(zk::Error::ConnectionLoss) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(zk::Error::ConnectionLoss) => {
                if let Some(token) = find_held(client, &path, &marker).await? {
                    return Ok((own, token, wakeups));
                }
            }
            Err(e) => return Err(e),
        }
        // The create has answered, and not with our node: nothing to clean up.
        own.marker = None;
    }
}

/// After a create lost its answer: the node's czxid, if the node is ours.
async fn find_held(
    client: &zk::Client,
    path: &str,
    marker: &str,
) -> Result<Option<i64>, zk::Error> {
    loop {
        metrics::zk("get_data");
        match client.get_data(path).await {
            Ok((data, stat)) => return Ok((data == marker.as_bytes()).then_some(stat.czxid)),
            Err(zk::Error::NoNode) => return Ok(None),
            Err(zk::Error::ConnectionLoss) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e),
        }
    }
}
