//! The fair lock (guard `zk`), Apache Curator's `InterProcessMutex` recipe and node names:
//! take a number (an ephemeral-sequential node), then wait for the node just before ours to go.

use zookeeper_client as zk;

use super::node::{self, OwnNode, Place};
use super::stats::Observer;
use crate::telemetry::metrics;

/// Waits until our node is first in `dir`: the node, its czxid (the fencing token), and how
/// many watch notifications woke us (one per predecessor that went).
pub(super) async fn acquire(
    client: &zk::Client,
    dir: &str,
    instance: &str,
    acls: zk::Acls<'static>,
    observer: &Observer<'_>,
) -> Result<(OwnNode, i64, u64), zk::Error> {
    let (own, name, token) =
        node::create_contender(client, dir, node::MUTEX, instance.as_bytes(), acls).await?;
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
        // Whether the node we are about to watch heads the queue.
        let behind_head = queue.get(1).is_some_and(|(seq, _)| *seq == mine);
        let (predecessor, name) = match node::place(&queue, mine) {
            Place::Holder => return Ok((own, token, wakeups)),
            Place::After(name) => (format!("{dir}/{name}"), name.to_string()),
            // Our node is gone: the session that owned it expired.
            Place::Gone => return Err(zk::Error::RuntimeInconsistent),
        };
        metrics::zk("get_data");
        match client.get_and_watch_data(&predecessor).await {
            Ok((_, stat, _)) if node::unowned(&stat) => {
                tracing::warn!(node = %predecessor, "ignoring a persistent node in a lock queue: no session owns it, so it would block the queue forever");
                strays.push(name);
            }
            Ok((_, _, watcher)) => {
                let watching = observer.watching();
                let event = watcher.changed().await;
                wakeups += 1;
                watching.woke();
                // The head went, and we were right behind it: nobody else can be ahead of
                // us (a new node always takes a higher number), so we hold the lock without
                // listing the queue again. Curator lists again; this saves ZooKeeper a read
                // on every handoff, and the next holder that read's round trip. (Our own
                // node gone with our session would be caught by the fence, as it would be a
                // moment after a listing.)
                if behind_head && event.event_type == zk::EventType::NodeDeleted {
                    return Ok((own, token, wakeups));
                }
            }
            Err(zk::Error::NoNode | zk::Error::ConnectionLoss) => {}
            Err(e) => return Err(e),
        }
    }
}
