//! The read side of a product's terms lock, held by this instance across its sale's lock
//! cycles while no writer waits.
//!
//! Every lock cycle of a ZooKeeper-guarded sale decides under the product's terms held for
//! reading (see [`super::rwlock`]). A reader node created and deleted per cycle would cost
//! ZooKeeper two writes per cycle on top of the stock lock's two, so an instance takes the
//! read side once per product and shares it among its cycles (each holds an `Arc`). A child
//! watch on the lock's directory sees a writer's node arrive (ours or Curator's: it queues
//! in the same directory), and the hold is **retired** at once: no cycle joins it from then
//! on, the cycles already holding it finish (their commits), and its node goes with the last
//! of them. The writer, queued behind that node like behind any reader's, is granted then;
//! cycles after the retirement queue behind the writer with a node of their own.
//!
//! A hold no cycle has used for a minute is retired too (a sale that is over keeps no
//! node, watch or task).
//!
//! Exclusion is the rwlock's own: a writer is granted only once every reader node before it
//! is gone, and ours goes only when no cycle holds it. The watch's delay lets a cycle that
//! starts just after a writer queued still join the old hold; it is served before the writer,
//! as a reader that queued just before it would be. Anything that leaves us unsure of the
//! node (a lost connection, a new session, shutdown) retires the hold: the next cycle takes
//! a fresh one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use zookeeper_client as zk;

use super::node;
use super::rwlock::{self, Access, TermsLock};
use super::Zk;
use crate::telemetry::metrics;

/// The read side of one product's terms lock, shared by this instance's lock cycles. When
/// the last holder drops it (after its retirement), its node is deleted.
pub(super) struct SaleRead {
    /// The read node (its drop deletes it) and the lock's metrics, as any terms lock's.
    _lock: TermsLock,
    /// The session the node belongs to: a hold from an ended session is never handed out.
    session: zk::SessionId,
    /// Set when the hold is retired (a writer queued): a kept stock lock carrying it lets go.
    retired: watch::Sender<bool>,
}

impl SaleRead {
    /// Whether the hold is retired, as it changes.
    pub(super) fn retired(&self) -> watch::Receiver<bool> {
        self.retired.subscribe()
    }
}

/// This instance's holds, one per product at most.
#[derive(Default)]
pub(super) struct SaleReads {
    held: Mutex<HashMap<i64, Arc<SaleRead>>>,
}

impl SaleReads {
    /// The product's hold, if there is one in `session`.
    fn get(&self, product_id: i64, session: &zk::SessionId) -> Option<Arc<SaleRead>> {
        let held = self.held.lock().expect("sale reads poisoned");
        held.get(&product_id)
            .filter(|read| read.session == *session)
            .cloned()
    }

    /// Keeps `read` as the product's hold unless one in its session is kept already (another
    /// cycle of this instance took the read side at the same time); returns the one kept,
    /// and whether it is `read`.
    fn keep(&self, product_id: i64, read: Arc<SaleRead>) -> (Arc<SaleRead>, bool) {
        let mut held = self.held.lock().expect("sale reads poisoned");
        match held.get(&product_id) {
            Some(kept) if kept.session == read.session => (kept.clone(), false),
            _ => {
                held.insert(product_id, read.clone());
                (read, true)
            }
        }
    }

    /// No new cycle joins `read`: the next one takes the read side afresh.
    fn retire(&self, product_id: i64, read: &Weak<SaleRead>) {
        let mut held = self.held.lock().expect("sale reads poisoned");
        if held
            .get(&product_id)
            .is_some_and(|kept| std::ptr::eq(Arc::as_ptr(kept), read.as_ptr()))
        {
            if let Some(read) = held.remove(&product_id) {
                read.retired.send_replace(true);
            }
        }
    }

    /// Retires every hold (shutdown: their nodes go once the cycles in flight are done).
    pub(super) fn clear(&self) {
        let mut held = self.held.lock().expect("sale reads poisoned");
        for (_, read) in held.drain() {
            read.retired.send_replace(true);
        }
    }
}

impl Zk {
    /// The product's terms held for reading by this instance's sale: the hold its cycles
    /// share, or, if there is none (or a writer has queued since), a new read node, waited
    /// for as a reader waits (behind any writer queued before it).
    pub(super) async fn read_for_sale(
        &self,
        product_id: i64,
        started: Instant,
    ) -> Result<Arc<SaleRead>, zk::Error> {
        // Always in the shared session: the demos' own sessions are for the stock lock.
        let client = self.client();
        let session = client.session_id();
        // A session ZooKeeper expired may still be ours until the client notices; its node
        // is gone, and a demo cycle, whose stock lock is taken in a session of its own,
        // would decide unguarded by it. Connected, the node is there (the watch retires the
        // hold when it goes).
        if self.connected() {
            if let Some(read) = self.inner.sale_reads.get(product_id, &session) {
                return Ok(read);
            }
        }
        let dir = self.terms_lock_dir(product_id);
        let data = format!("{}#sale", self.instance());
        let node =
            rwlock::acquire(&client, &dir, Access::Read, data.as_bytes(), self.acls()).await?;
        let Some((mine, _)) = node.path.as_deref().and_then(rwlock::parse) else {
            return Err(zk::Error::RuntimeInconsistent);
        };
        let read = Arc::new(SaleRead {
            _lock: TermsLock::granted(node, Access::Read, started.elapsed()),
            session,
            retired: watch::channel(false).0,
        });
        let (kept, ours) = self.inner.sale_reads.keep(product_id, read);
        if ours {
            tokio::spawn(retire_when_a_writer_queues(
                Arc::downgrade(&self.inner.sale_reads),
                client,
                Queued {
                    product_id,
                    dir,
                    mine,
                },
                Arc::downgrade(&kept),
                self.closing(),
            ));
        }
        Ok(kept)
    }
}

/// Where a hold's node stands: the product, its lock's directory, the node's sequence.
struct Queued {
    product_id: i64,
    dir: String,
    mine: u64,
}

/// Watches the lock's directory until a writer queues after our node (or our node is gone,
/// or we cannot tell), then retires the hold.
async fn retire_when_a_writer_queues(
    holds: Weak<SaleReads>,
    client: zk::Client,
    queued: Queued,
    read: Weak<SaleRead>,
    mut closing: watch::Receiver<bool>,
) {
    // Persistent nodes named like writers: no session owns them, so they are nobody's
    // change (the rwlock leaves them out of its queue too) and must not retire every hold.
    // A hold replaced by one of a new session ends here too: the old session's watch and
    // listing fail.
    let mut strays: Vec<String> = Vec::new();
    while read.strong_count() > 0 && !*closing.borrow() {
        metrics::zk("get_children");
        let Ok((children, watcher)) = client.list_and_watch_children(&queued.dir).await else {
            break;
        };
        let queue = rwlock::queue_order(children);
        if !queue.iter().any(|(seq, _, _)| *seq == queued.mine) {
            break;
        }
        let writer = queue.iter().find(|(seq, access, name)| {
            *seq > queued.mine && *access == Access::Write && !strays.contains(name)
        });
        if let Some((_, _, name)) = writer {
            metrics::zk("exists");
            match client.check_stat(&format!("{}/{name}", queued.dir)).await {
                Ok(Some(stat)) if node::unowned(&stat) => {
                    strays.push(name.clone());
                    continue;
                }
                Ok(None) => continue, // gone already: look again
                _ => break,
            }
        }
        tokio::select! {
            _ = watcher.changed() => {}
            _ = closing.changed() => break,
            () = idle(&read) => break,
        }
    }
    if let Some(holds) = holds.upgrade() {
        holds.retire(queued.product_id, &read);
    }
}

/// How long a hold no cycle uses is kept: a product whose sale is over (or paused) gives up
/// its read node, its watch and this task.
const IDLE: Duration = Duration::from_secs(60);

/// Resolves once, at one of its checks `IDLE` apart, no cycle holds `read` (only the map
/// does). A sale that runs on keeps it; one caught between two cycles gives it up, and its
/// next cycle takes a new node: 2 writes per product per minute at most.
async fn idle(read: &Weak<SaleRead>) {
    loop {
        tokio::time::sleep(IDLE).await;
        if read.strong_count() <= 1 {
            return;
        }
    }
}
