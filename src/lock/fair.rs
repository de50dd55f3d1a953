//! The fair lock (guard `zk`), Apache Curator's `InterProcessMutex` recipe and node names:
//! take a number (an ephemeral-sequential node), then wait for the node just before ours to go.

use std::time::Duration;

use zookeeper_client as zk;

use super::node::{self, OwnNode, Place};
use crate::telemetry::metrics;

/// Waits until our node is first in `dir`: the node, its czxid (the fencing token), and how
/// many watch notifications woke us (one per predecessor that went).
pub(super) async fn acquire(
    client: &zk::Client,
    dir: &str,
    instance: &str,
    acls: zk::Acls<'static>,
    woke: &(dyn Fn() + Send + Sync),
) -> Result<(OwnNode, i64, u64), zk::Error> {
    let id = uuid::Uuid::new_v4();
    let marker = format!("_c_{id}-");
    let prefix = format!("{dir}/{marker}lock-");
    let mut own = OwnNode {
        client: client.clone(),
        dir: dir.to_string(),
        marker: Some(marker.clone()),
        path: None,
    };
    let ephemeral_sequential = zk::CreateMode::EphemeralSequential.with_acls(acls);
    let (name, token) = loop {
        metrics::zk("create");
        match client
            .create(&prefix, instance.as_bytes(), &ephemeral_sequential)
            .await
        {
            Ok((stat, seq)) => break (format!("{marker}lock-{seq}"), stat.czxid),
            Err(zk::Error::NoNode) => node::make_dir(client, dir, acls).await?,
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
    own.path = Some(format!("{dir}/{name}"));
    let mine = node::sequence(&name).ok_or(zk::Error::RuntimeInconsistent)?;
    let mut wakeups = 0;
    // Nodes named like contenders that are not ephemeral: no session owns them, so they would
    // never go. Someone (or something) put them there; they do not hold the queue up.
    let mut strays: Vec<String> = Vec::new();
    loop {
        metrics::zk("get_children");
        let mut queue = match client.list_children(dir).await {
            Ok(children) => node::queue_order(children),
            Err(zk::Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        };
        queue.retain(|(_, name)| !strays.contains(name));
        let (predecessor, name) = match node::place(&queue, mine) {
            Place::Holder => return Ok((own, token, wakeups)),
            Place::After(name) => (format!("{dir}/{name}"), name.to_string()),
            // Our node is gone: the session that owned it expired.
            Place::Gone => return Err(zk::Error::RuntimeInconsistent),
        };
        metrics::zk("get_data");
        match client.get_and_watch_data(&predecessor).await {
            Ok((_, stat, _)) if stat.ephemeral_owner == 0 => {
                tracing::warn!(node = %predecessor, "ignoring a persistent node in a lock queue: no session owns it, so it would block the queue forever");
                strays.push(name);
            }
            Ok((_, _, watcher)) => {
                watcher.changed().await;
                wakeups += 1;
                woke();
            }
            Err(zk::Error::NoNode | zk::Error::ConnectionLoss) => {}
            Err(e) => return Err(e),
        }
    }
}

/// After a create lost its answer: our sequential node's name and czxid, if it exists.
async fn find_created(
    client: &zk::Client,
    dir: &str,
    marker: &str,
) -> Result<Option<(String, i64)>, zk::Error> {
    loop {
        metrics::zk("get_children");
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
        metrics::zk("get_data");
        match client.get_data(&format!("{dir}/{found}")).await {
            Ok((_, stat)) => return Ok(Some((found, stat.czxid))),
            Err(zk::Error::ConnectionLoss) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e),
        }
    }
}
