//! A counting semaphore across instances: Apache Curator's `InterProcessSemaphoreV2` recipe
//! and layout, so Curator on the same path counts against the same N.
//!
//! ```text
//! {dir}/locks/_c_<uuid>-lock-<seq>     the recipe's own fair mutex: acquirers take turns
//! {dir}/leases/_c_<uuid>-lease-<seq>   one ephemeral-sequential node per lease
//! ```
//!
//! An acquirer takes the mutex, creates its lease node, and lists the leases with a watch:
//! while there are more than N (itself included) it waits for the list to change, still
//! holding the mutex; then it releases the mutex and holds its lease. Only the mutex holder
//! ever waits on the leases, so one release wakes one acquirer (no herd), and turns are
//! first come, first served. A holder whose session ends loses its lease node with it.
//!
//! Every participant must agree on N: the recipe stores no limit, each side enforces its own.
//! Before waiting, an acquirer leaves out of its count the children that hold no lease: nodes
//! not named like leases, and persistent ones (Curator's leases, like ours, are ephemeral).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::node::{self, OwnNode};
use super::stats::Observer;
use super::{fair, settle_wait, LockError, Zk};
use crate::telemetry::metrics;

/// One of the semaphore's leases. Dropping it deletes its node (in the background), which
/// hands the place to the next acquirer.
pub struct Lease {
    _node: OwnNode,
    /// Time from asking to holding.
    pub waited: Duration,
    granted: Instant,
}

impl Drop for Lease {
    fn drop(&mut self) {
        metrics::lock_released("semaphore", self.granted.elapsed());
    }
}

impl Zk {
    /// The directory of the semaphore `name`.
    pub fn semaphore_dir(&self, name: &str) -> String {
        format!("{}/semaphores/{name}", self.root())
    }

    /// Waits, at most `timeout`, for one of the `max` leases of semaphore `name`. `label`
    /// goes into the nodes after this instance's name, so a reader of ZooKeeper (or the
    /// teaching page) sees whose lease it is. Cancellation-safe, like the stock lock: a
    /// dropped wait deletes its nodes.
    pub async fn acquire_lease(
        &self,
        name: &str,
        max: usize,
        label: &str,
        timeout: Duration,
    ) -> Result<Lease, LockError> {
        let client = self.client();
        let dir = self.semaphore_dir(name);
        let data = format!("{}#{label}", self.instance());
        let started = Instant::now();
        let waited = tokio::time::timeout(timeout, acquire(&client, &dir, max, &data, self.acls()));
        let node = settle_wait(&client, timeout, waited.await).inspect_err(|e| {
            metrics::lock_failed("semaphore", e.reason());
        })?;
        let waited = started.elapsed();
        metrics::lock_granted("semaphore", waited);
        Ok(Lease {
            _node: node,
            waited,
            granted: Instant::now(),
        })
    }
}

async fn acquire(
    client: &zk::Client,
    dir: &str,
    max: usize,
    data: &str,
    acls: zk::Acls<'static>,
) -> Result<OwnNode, zk::Error> {
    // Held until we hold a lease (dropped on return): the others wait their turn behind it.
    let (_turn, _, _) =
        fair::acquire(client, &format!("{dir}/locks"), data, acls, &Observer::NONE).await?;
    let leases = format!("{dir}/leases");
    let (lease, name, _) =
        node::create_contender(client, &leases, node::LEASE, data.as_bytes(), acls).await?;
    // Children that hold no lease: persistent nodes (no session owns them, so they would
    // never go) and names that are not lease nodes. `leased`: children known to be leases.
    let mut strays: HashSet<String> = HashSet::new();
    let mut leased: HashSet<String> = HashSet::from([name.clone()]);
    'list: loop {
        metrics::zk("get_children");
        let (children, watcher) = match client.list_and_watch_children(&leases).await {
            Ok(found) => found,
            Err(zk::Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        };
        // Our node is gone: the session that owned it expired.
        if !children.contains(&name) {
            return Err(zk::Error::RuntimeInconsistent);
        }
        // Curator counts every child, ours included.
        if children.len() <= max {
            return Ok(lease);
        }
        // We would wait: first make sure each child is a lease, looking each up only once,
        // so nodes nobody holds cannot take places for good.
        strays.retain(|c| children.contains(c));
        leased.retain(|c| children.contains(c));
        for child in &children {
            if strays.contains(child) || leased.contains(child) {
                continue;
            }
            let path = format!("{leases}/{child}");
            if node::sequence_after(child, node::LEASE).is_none() {
                tracing::warn!(node = %path, "ignoring a node that is not a lease in a semaphore's leases");
                strays.insert(child.clone());
                continue;
            }
            match metrics::zk_then("exists", client.check_stat(&path)).await {
                Ok(Some(stat)) if node::unowned(&stat) => {
                    tracing::warn!(node = %path, "ignoring a persistent node in a semaphore's leases: no session owns it, so it would hold a lease forever");
                    strays.insert(child.clone());
                }
                Ok(Some(_)) => {
                    leased.insert(child.clone());
                }
                // Gone: the watch reports the change.
                Ok(None) => {}
                Err(zk::Error::ConnectionLoss) => continue 'list,
                Err(e) => return Err(e),
            }
        }
        if counted(&children, &strays) <= max {
            return Ok(lease);
        }
        watcher.changed().await;
    }
}

/// The children that count against N: every lease node (ours, Curator's) but the strays.
fn counted(children: &[String], strays: &HashSet<String>) -> usize {
    children
        .iter()
        .filter(|c| node::sequence_after(c, node::LEASE).is_some() && !strays.contains(*c))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strays_and_names_that_are_not_leases_do_not_count_against_n() {
        let children: Vec<String> = [
            "_c_a-lease-0000000001",
            "_c_b-lease-0000000002",
            "not-a-lease",
            "_c_c-lock-0000000003",
            "_c_d-lease-0000000004",
        ]
        .map(String::from)
        .into();
        assert_eq!(counted(&children, &HashSet::new()), 3);
        let strays = HashSet::from(["_c_b-lease-0000000002".to_string()]);
        assert_eq!(counted(&children, &strays), 2);
    }
}
