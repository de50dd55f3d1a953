//! A read-write lock across instances: Apache Curator's `InterProcessReadWriteLock` recipe
//! and layout, so Curator on the same path takes part.
//!
//! Readers and writers queue in one directory, `{dir}/_c_<uuid>-__READ__<seq>` and
//! `{dir}/_c_<uuid>-__WRIT__<seq>`, in one sequence. A reader holds the lock when no writer
//! is ahead of it (readers share) and otherwise watches the first writer ahead; a writer
//! holds it when it is first and otherwise watches the node just before it. A writer is
//! never starved: readers that come after it queue behind it.
//!
//! The service holds a product's terms for reading in each sale lock cycle (one read node
//! per instance, shared by its cycles while no writer waits: see `sale_read`) and
//! write-locks them to change them (`inventory::change_terms`): a change waits for the
//! cycles deciding under the old terms, on every instance, and the cycles after it see the
//! new ones.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use super::node::{self, OwnNode, Place};
use super::{settle_wait, LockError, Zk};
use crate::telemetry::metrics;

/// Which side of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }

    fn lock_name(self) -> &'static str {
        match self {
            Access::Read => node::READ,
            Access::Write => node::WRITE,
        }
    }
}

/// A node's sequence number and side, if it is a read-write lock node.
pub(crate) fn parse(name: &str) -> Option<(u64, Access)> {
    node::sequence_after(name, node::READ)
        .map(|seq| (seq, Access::Read))
        .or_else(|| node::sequence_after(name, node::WRITE).map(|seq| (seq, Access::Write)))
}

/// A lock directory's children in queue order (one sequence for both sides); other names are
/// left out.
pub(crate) fn queue_order(
    children: impl IntoIterator<Item = String>,
) -> Vec<(u64, Access, String)> {
    let mut queue: Vec<(u64, Access, String)> = children
        .into_iter()
        .filter_map(|c| {
            let (seq, access) = parse(&c)?;
            Some((seq, access, c))
        })
        .collect();
    queue.sort_unstable_by_key(|(seq, _, _)| *seq);
    queue
}

/// Where the contender with sequence `mine` stands: a reader after the first writer ahead
/// of it (or holding, if there is none), a writer after the node just before it.
pub(crate) fn place(queue: &[(u64, Access, String)], mine: u64) -> Place<'_> {
    let Some(at) = queue.iter().position(|(seq, _, _)| *seq == mine) else {
        return Place::Gone;
    };
    match queue[at].1 {
        Access::Read => match queue[..at].iter().find(|(_, a, _)| *a == Access::Write) {
            None => Place::Holder,
            Some((_, _, writer)) => Place::After(writer),
        },
        Access::Write if at == 0 => Place::Holder,
        Access::Write => Place::After(&queue[at - 1].2),
    }
}

/// A held side of a product's terms lock. Dropping it deletes its node.
pub struct TermsLock {
    _node: OwnNode,
    pub access: Access,
    /// Time from asking to holding.
    pub waited: Duration,
    granted: Instant,
}

impl TermsLock {
    pub(super) fn granted(node: OwnNode, access: Access, waited: Duration) -> TermsLock {
        metrics::lock_granted(access.as_str(), waited);
        TermsLock {
            _node: node,
            access,
            waited,
            granted: Instant::now(),
        }
    }
}

impl Drop for TermsLock {
    fn drop(&mut self) {
        metrics::lock_released(self.access.as_str(), self.granted.elapsed());
    }
}

impl Zk {
    /// The directory of a product's terms lock.
    pub fn terms_lock_dir(&self, product_id: i64) -> String {
        format!("{}/locks/terms/{product_id}", self.root())
    }

    /// Waits, at most `timeout`, for one side of the product's terms lock. `label` goes into
    /// the node after this instance's name. Cancellation-safe.
    pub async fn lock_terms(
        &self,
        product_id: i64,
        access: Access,
        label: &str,
        timeout: Duration,
    ) -> Result<TermsLock, LockError> {
        let client = self.client();
        let dir = self.terms_lock_dir(product_id);
        let data = format!("{}#{label}", self.instance());
        let started = Instant::now();
        let waited = tokio::time::timeout(
            timeout,
            acquire(&client, &dir, access, data.as_bytes(), self.acls()),
        );
        let node = settle_wait(&client, timeout, waited.await).inspect_err(|e| {
            metrics::lock_failed(access.as_str(), e.reason());
        })?;
        Ok(TermsLock::granted(node, access, started.elapsed()))
    }
}

pub(super) async fn acquire(
    client: &zk::Client,
    dir: &str,
    access: Access,
    data: &[u8],
    acls: zk::Acls<'static>,
) -> Result<OwnNode, zk::Error> {
    let (own, name, _) =
        node::create_contender(client, dir, access.lock_name(), data, acls).await?;
    let (mine, _) = parse(&name).ok_or(zk::Error::RuntimeInconsistent)?;
    // Persistent nodes named like readers or writers: no session owns them, so they would
    // never go and would freeze the terms for good. Left out of the queue, as the fair lock does.
    let mut strays: Vec<String> = Vec::new();
    loop {
        metrics::zk("get_children");
        let mut queue = match client.list_children(dir).await {
            Ok(children) => queue_order(children),
            Err(zk::Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        };
        queue.retain(|(_, _, name)| !strays.contains(name));
        let (watched, name) = match place(&queue, mine) {
            Place::Holder => return Ok(own),
            Place::After(name) => (format!("{dir}/{name}"), name.to_string()),
            Place::Gone => return Err(zk::Error::RuntimeInconsistent),
        };
        metrics::zk("get_data");
        match client.get_and_watch_data(&watched).await {
            Ok((_, stat, _)) if node::unowned(&stat) => {
                tracing::warn!(node = %watched, "ignoring a persistent node in a read-write lock queue: no session owns it, so it would block the queue forever");
                strays.push(name);
            }
            Ok((_, _, watcher)) => {
                watcher.changed().await;
            }
            Err(zk::Error::NoNode | zk::Error::ConnectionLoss) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(names: &[&str]) -> Vec<(u64, Access, String)> {
        queue_order(names.iter().map(|s| s.to_string()))
    }

    #[test]
    fn curator_names_give_their_side_and_sequence() {
        assert_eq!(parse("_c_0f3a-__READ__0000000004"), Some((4, Access::Read)));
        assert_eq!(
            parse("_c_0f3a-__WRIT__0000000012"),
            Some((12, Access::Write))
        );
        assert_eq!(parse("_c_0f3a-lock-0000000001"), None);
        assert_eq!(parse("__READ__"), None);
    }

    #[test]
    fn readers_share_until_a_writer_and_a_later_reader_waits_for_it() {
        // r1 r2 w3 r4 w5: r1 and r2 hold together; w3 waits for r2 (just before it); r4
        // waits for w3 (no starvation); w5 waits for r4.
        let q = queue(&[
            "_c_e-__WRIT__0000000005",
            "_c_a-__READ__0000000001",
            "_c_d-__READ__0000000004",
            "_c_b-__READ__0000000002",
            "_c_c-__WRIT__0000000003",
        ]);
        assert_eq!(place(&q, 1), Place::Holder);
        assert_eq!(place(&q, 2), Place::Holder);
        assert_eq!(place(&q, 3), Place::After("_c_b-__READ__0000000002"));
        assert_eq!(place(&q, 4), Place::After("_c_c-__WRIT__0000000003"));
        assert_eq!(place(&q, 5), Place::After("_c_d-__READ__0000000004"));
        assert_eq!(place(&q, 6), Place::Gone);
    }

    #[test]
    fn a_writer_first_excludes_everyone_and_readers_watch_the_first_writer() {
        let q = queue(&[
            "_c_a-__WRIT__0000000001",
            "_c_b-__WRIT__0000000002",
            "_c_c-__READ__0000000003",
        ]);
        assert_eq!(place(&q, 1), Place::Holder);
        assert_eq!(place(&q, 2), Place::After("_c_a-__WRIT__0000000001"));
        // As Curator's readLockPredicate: the first writer, not the nearest one.
        assert_eq!(place(&q, 3), Place::After("_c_a-__WRIT__0000000001"));
    }
}
