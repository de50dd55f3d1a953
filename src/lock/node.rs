//! Lock nodes: how their names order a queue, and a node of ours that deletes itself.

use std::time::Duration;

use crate::telemetry::metrics;
use zookeeper_client as zk;

/// The queue number of a fair-lock node, `…lock-<digits>` (Curator's naming). `None` for a
/// name that is not one (a foreign or malformed node): it takes no place in the queue.
pub(crate) fn sequence(name: &str) -> Option<u64> {
    sequence_after(name, MUTEX)
}

/// The names Curator puts before a contender's sequence number, one per recipe.
pub(crate) const MUTEX: &str = "lock-";
pub(crate) const LEASE: &str = "lease-";
pub(crate) const READ: &str = "__READ__";
pub(crate) const WRITE: &str = "__WRIT__";

/// The sequence number that follows `lock_name` in a node's name (how Curator's
/// `fixForSorting` orders every recipe's nodes), if the name is one of that kind.
pub(crate) fn sequence_after(name: &str, lock_name: &str) -> Option<u64> {
    let (_, digits) = name.rsplit_once(lock_name)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether no session owns the node: it is persistent, so it will never go by itself. Every
/// node our recipes (and Curator's) make is ephemeral: such a node was put there by someone else.
pub(crate) fn unowned(stat: &zk::Stat) -> bool {
    stat.ephemeral_owner == 0
}

/// Creates our contender node `{dir}/_c_<uuid>-{lock_name}<seq>`, ephemeral and sequential,
/// as Curator's "protected" mode names it: the unique prefix lets a create whose answer was
/// lost to a connection loss be found instead of repeated (a repeat would leave an orphan
/// node holding a place in the queue), and lets a cancelled create be cleaned up. Creates
/// `dir` if missing. Returns the node (deleted when dropped), its name and its czxid.
pub(crate) async fn create_contender(
    client: &zk::Client,
    dir: &str,
    lock_name: &str,
    data: &[u8],
    acls: zk::Acls<'static>,
) -> Result<(OwnNode, String, i64), zk::Error> {
    let marker = format!("_c_{}-", uuid::Uuid::new_v4());
    let prefix = format!("{dir}/{marker}{lock_name}");
    // Exists before the create is sent: dropping it mid-create finds the node by its marker.
    let mut own = OwnNode {
        client: client.clone(),
        dir: dir.to_string(),
        marker: Some(marker.clone()),
        path: None,
    };
    let ephemeral_sequential = zk::CreateMode::EphemeralSequential.with_acls(acls);
    let (name, czxid) = loop {
        metrics::zk("create");
        match client.create(&prefix, data, &ephemeral_sequential).await {
            Ok((stat, seq)) => break (format!("{marker}{lock_name}{seq}"), stat.czxid),
            Err(zk::Error::NoNode) => make_dir(client, dir, acls).await?,
            // Did the create happen? Our unique marker says; ask until there is an answer.
            Err(zk::Error::ConnectionLoss) => {
                if let Some(found) = find_created(client, dir, &marker).await? {
                    break found;
                }
            }
            Err(e) => return Err(e),
        }
    };
    own.path = Some(format!("{dir}/{name}"));
    Ok((own, name, czxid))
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

/// A lock directory's children in queue order, by sequence number; names that are not lock
/// nodes are left out.
pub(crate) fn queue_order(children: impl IntoIterator<Item = String>) -> Vec<(u64, String)> {
    let mut queue: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| Some((sequence(&c)?, c)))
        .collect();
    queue.sort_unstable();
    queue
}

/// Where a contender with sequence `mine` stands in a queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Place<'a> {
    /// First in line: it holds the lock.
    Holder,
    /// Waiting: the one node it watches, the one just before it (no herd).
    After(&'a str),
    /// Not in the queue: its node is gone (the session that owned it ended).
    Gone,
}

pub(crate) fn place(queue: &[(u64, String)], mine: u64) -> Place<'_> {
    match queue.iter().position(|(seq, _)| *seq == mine) {
        None => Place::Gone,
        Some(0) => Place::Holder,
        Some(i) => Place::After(&queue[i - 1].1),
    }
}

/// A node of ours that is deleted when this is dropped: after use (the release), or when the
/// wait for it is abandoned. Until `path` is known (create still in flight), the drop finds
/// the node by its unique `marker` instead: requests on a session are ordered, so a lookup
/// sent after the create sees its result.
pub(crate) struct OwnNode {
    pub(crate) client: zk::Client,
    pub(crate) dir: String,
    /// A string only our node contains: its name (fair) or its data (herd). `None` once we
    /// know no node of ours exists.
    pub(crate) marker: Option<String>,
    pub(crate) path: Option<String>,
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
                    Some(path) => metrics::zk_then("delete", client.delete(path, None)).await,
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
    metrics::zk("get_children");
    for child in client.list_children(dir).await? {
        let path = format!("{dir}/{child}");
        if child.contains(marker) {
            metrics::zk("delete");
            return client.delete(&path, None).await;
        }
        metrics::zk("get_data");
        match client.get_data(&path).await {
            Ok((data, stat)) if data == marker.as_bytes() => {
                metrics::zk("delete");
                return client.delete(&path, Some(stat.version)).await;
            }
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates a directory (and its missing parents) with `acls`, if missing.
pub async fn make_dir(
    client: &zk::Client,
    dir: &str,
    acls: zk::Acls<'static>,
) -> Result<(), zk::Error> {
    metrics::zk("create");
    match client
        .mkdir(dir, &zk::CreateMode::Persistent.with_acls(acls))
        .await
    {
        Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn curator_names_give_their_sequence() {
        assert_eq!(
            sequence("_c_5f1e2d3c-aaaa-bbbb-cccc-0123456789ab-lock-0000000007"),
            Some(7)
        );
        assert_eq!(sequence("lock-0000000000"), Some(0));
        assert_eq!(sequence("_c_x-lock-0000000012"), Some(12));
    }

    #[test]
    fn foreign_and_malformed_names_have_no_sequence() {
        for name in [
            "lock",
            "leases",
            "_c_x-lock-",
            "_c_x-lock-12a",
            "_c_x-lock-+12",
            "_c_x-lock- 12",
            "_c_x-__READ__0000000001",
            "_c_x-lock-99999999999999999999999",
        ] {
            assert_eq!(sequence(name), None, "{name}");
        }
    }

    #[test]
    fn the_queue_orders_by_sequence_not_by_name() {
        // The uuid prefix sorts differently from the sequence: the sequence decides.
        let queue = queue_order(names(&[
            "_c_ffff-lock-0000000003",
            "_c_0000-lock-0000000010",
            "stray-node",
            "_c_8888-lock-0000000001",
        ]));
        let order: Vec<u64> = queue.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(order, [1, 3, 10]);
    }

    #[test]
    fn each_waiter_watches_only_the_node_just_before_it() {
        let queue = queue_order(names(&[
            "_c_a-lock-0000000004",
            "_c_b-lock-0000000009",
            "_c_c-lock-0000000006",
        ]));
        assert_eq!(place(&queue, 4), Place::Holder);
        assert_eq!(place(&queue, 6), Place::After("_c_a-lock-0000000004"));
        assert_eq!(place(&queue, 9), Place::After("_c_c-lock-0000000006"));
        assert_eq!(place(&queue, 5), Place::Gone);
        assert_eq!(place(&[], 1), Place::Gone);
    }
}
