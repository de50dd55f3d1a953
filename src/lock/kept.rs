//! A kept lock: the holder of a product's stock lock that still has the product's orders
//! waiting keeps its node for its next lock cycle (the same node, the same fencing token)
//! instead of deleting it and queueing again. A hot product served by one instance then
//! costs ZooKeeper two writes per sale, not two per cycle.
//!
//! Keeping must not starve anyone queued behind the node: while it is kept, a child watch on
//! the lock's directory sees every node queued after ours, and the holder gives the lock up
//! once one has waited longer than the [`Fairness`] bound, in time or in cycles served
//! meanwhile, whichever comes first; with nothing to serve it gives the lock up at once. A
//! terms change queued behind the sale's read hold, a new session, or a listing that does not
//! show our node (it went with an expired session) end the keeping too.
//!
//! The fence does not change: a kept node whose session expired unnoticed (a partition)
//! writes under its old token, and PostgreSQL refuses it once a newer holder has claimed the
//! row, however long the node was kept.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use super::{node, StockLock, Zk};
use crate::telemetry::metrics;

/// The flags that set [`Fairness`].
#[derive(Clone, Debug, clap::Args)]
pub struct KeepSettings {
    /// How long a product's lock is kept after a lock cycle while none of its orders wait on
    /// this instance: orders that keep coming are served on the same node, with no ZooKeeper
    /// write. 0 gives the lock up after every cycle.
    #[arg(long, env = "SECKILL_LOCK_LINGER_MS", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub lock_linger_ms: u64,

    /// Longest a node waits behind a kept lock: its holder gives the lock up at the end of
    /// the cycle in which someone has waited this long (at once if it has nothing to serve).
    #[arg(long, env = "SECKILL_LOCK_HANDOVER_MS", default_value_t = 50)]
    pub lock_handover_ms: u64,

    /// Most lock cycles a kept lock serves while a node waits behind it: 1 hands it over at
    /// the end of the cycle in which the node was seen. More serves fewer, smaller batches of
    /// this instance's orders for each of the other's larger ones.
    #[arg(long, env = "SECKILL_LOCK_HANDOVER_CYCLES", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub lock_handover_cycles: u32,
}

impl KeepSettings {
    pub fn fairness(&self) -> Fairness {
        Fairness {
            linger: Duration::from_millis(self.lock_linger_ms),
            handover: Duration::from_millis(self.lock_handover_ms),
            cycles: self.lock_handover_cycles,
        }
    }
}

/// How long a lock is kept, and how long anyone waits behind a kept lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fairness {
    /// How long a holder with nothing to serve keeps the lock for orders still arriving
    /// (`Duration::ZERO`: never kept, one node per cycle).
    pub linger: Duration,
    /// Longest a node queued behind a kept lock waits before the holder gives it up (it
    /// finishes the cycle it is in first).
    pub handover: Duration,
    /// Most cycles a kept lock serves while a node waits behind it.
    pub cycles: u32,
}

impl Fairness {
    /// Whether a lock is ever kept.
    pub fn keeps(&self) -> bool {
        !self.linger.is_zero()
    }

    /// Whether a holder may serve one more cycle, someone having waited behind it since
    /// `since` (if anyone) while it served `cycles` cycles.
    pub fn may_serve(&self, since: Option<Instant>, cycles: u32, now: Instant) -> bool {
        match since {
            None => true,
            Some(since) => {
                now.saturating_duration_since(since) < self.handover && cycles < self.cycles
            }
        }
    }
}

/// Who is queued behind a kept lock's node, as its directory's watch last saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behind {
    /// Not listed yet: counted as someone (a lock is kept only once the watch has shown that
    /// nobody waits, never on the chance that nobody does).
    Unlisted,
    /// Nobody.
    Nobody,
    /// Someone, first seen then.
    Since(Instant),
    /// Not known: the listing failed, or did not show our node (gone with our session).
    Unsure,
}

/// The keeping of one stock lock: what it watches and what it counted. The lock itself stays
/// with the lock cycles (each takes it and hands it back); dropping this stops the watch.
pub struct Keeping {
    product_id: i64,
    behind: watch::Receiver<Behind>,
    /// The sale's terms read hold the lock carries, retired when a terms change queues.
    terms: Option<watch::Receiver<bool>>,
    session: zk::SessionId,
    closing: watch::Receiver<bool>,
    /// Cycles served since someone queued behind us (reset when nobody is).
    cycles: u32,
    /// Cycles served on the kept node, after its first.
    pub kept_cycles: u64,
    watcher: JoinHandle<()>,
}

impl Drop for Keeping {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl Zk {
    /// Starts watching who queues behind `lock`'s node (just granted: the first listing runs
    /// during its first cycle), so that it may be kept after it. `None` for a lock that cannot be kept (a re-entry, a node of a demo's
    /// own session, the herd's node, which no queue stands behind).
    pub fn keep(&self, product_id: i64, lock: &StockLock) -> Option<Keeping> {
        let node = &lock.grant.node;
        let name = node.path.as_deref()?.rsplit('/').next()?;
        let mine = node::sequence(name)?;
        let session = node.client.session_id();
        if session != self.client().session_id() || lock.holds() > 1 {
            return None;
        }
        let (seen, behind) = watch::channel(Behind::Unlisted);
        let watcher = tokio::spawn(watch_behind(
            node.client.clone(),
            node.dir.clone(),
            mine,
            seen,
        ));
        Some(Keeping {
            product_id,
            behind,
            terms: lock._terms.as_ref().map(|read| read.retired()),
            session,
            closing: self.closing(),
            cycles: 0,
            kept_cycles: 0,
            watcher,
        })
    }
}

impl Keeping {
    /// Whether the lock may serve one more cycle now: still ours as far as we can tell, no
    /// terms change waiting, and anyone behind it not yet at the fairness bound.
    pub fn may_serve(&self, zk: &Zk, fairness: &Fairness) -> bool {
        self.still_ours(zk)
            && match *self.behind.borrow() {
                Behind::Nobody => true,
                Behind::Since(since) => {
                    fairness.may_serve(Some(since), self.cycles, Instant::now())
                }
                Behind::Unsure | Behind::Unlisted => false,
            }
    }

    /// Resolves once the directory has been listed since the node was granted.
    pub async fn listed(&mut self) {
        let _ = self.behind.wait_for(|b| *b != Behind::Unlisted).await;
    }

    /// Whether anyone waits behind the lock (or we cannot tell).
    pub fn contended(&self) -> bool {
        !matches!(*self.behind.borrow(), Behind::Nobody)
    }

    fn still_ours(&self, zk: &Zk) -> bool {
        zk.connected()
            && zk.client().session_id() == self.session
            && !*self.closing.borrow()
            && !self.terms.as_ref().is_some_and(|retired| *retired.borrow())
    }

    /// Counts one more cycle served on the node: towards the fairness bound if someone waits
    /// behind it, and as a kept cycle if it ran on the node `kept` from an earlier one.
    pub fn count_cycle(&mut self, zk: &Zk, kept: bool) {
        self.cycles = match *self.behind.borrow() {
            Behind::Nobody => 0,
            _ => self.cycles + 1,
        };
        if kept {
            self.kept_cycles += 1;
            zk.count_kept(self.product_id);
            // Only the fair recipe's nodes are kept: the herd's one node has no queue behind it.
            metrics::lock_kept("fair");
        }
    }

    /// Resolves when the lock should go now if it has nothing to serve: someone queued
    /// behind it (or we cannot tell), a terms change waits, or the session is going.
    pub async fn disturbed(&mut self) {
        let behind = async {
            let _ = self.behind.wait_for(|b| *b != Behind::Nobody).await;
        };
        let terms = async {
            match &mut self.terms {
                Some(retired) => {
                    let _ = retired.wait_for(|r| *r).await;
                }
                None => std::future::pending().await,
            }
        };
        let closing = async {
            let _ = self.closing.wait_for(|c| *c).await;
        };
        tokio::select! {
            () = behind => {}
            () = terms => {}
            () = closing => {}
        }
    }

    /// The lock is given up: how long the first node behind it had waited (reported to the
    /// product's statistics and the metrics: the fairness bound as measured).
    pub fn give_up(self, zk: &Zk) {
        if let Behind::Since(since) = *self.behind.borrow() {
            let waited = since.elapsed();
            metrics::lock_handover(waited);
            zk.count_handover(self.product_id, waited);
        }
    }
}

/// Lists the lock's directory, and again at each change, publishing who is behind our node
/// (sequence `mine`) until the keeping ends (the receiver dropped or the task aborted).
async fn watch_behind(client: zk::Client, dir: String, mine: u64, seen: watch::Sender<Behind>) {
    loop {
        metrics::zk("get_children");
        let Ok((children, watcher)) = client.list_and_watch_children(&dir).await else {
            seen.send_replace(Behind::Unsure);
            return;
        };
        let queue = node::queue_order(children);
        let now = if !queue.iter().any(|(seq, _)| *seq == mine) {
            Behind::Unsure
        } else if queue.iter().any(|(seq, _)| *seq > mine) {
            match *seen.borrow() {
                Behind::Since(since) => Behind::Since(since),
                _ => Behind::Since(Instant::now()),
            }
        } else {
            Behind::Nobody
        };
        seen.send_replace(now);
        if now == Behind::Unsure {
            return;
        }
        tokio::select! {
            _ = watcher.changed() => {}
            () = seen.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fairness() -> Fairness {
        Fairness {
            linger: Duration::from_millis(20),
            handover: Duration::from_millis(50),
            cycles: 4,
        }
    }

    #[test]
    fn nobody_behind_keeps_the_lock_for_any_number_of_cycles() {
        let now = Instant::now();
        assert!(fairness().may_serve(None, 1_000, now));
    }

    #[test]
    fn someone_behind_gets_the_lock_at_the_time_bound_or_the_cycle_bound() {
        let f = fairness();
        let now = Instant::now();
        let since = now - Duration::from_millis(10);
        assert!(f.may_serve(Some(since), 3, now), "within both bounds");
        assert!(!f.may_serve(Some(since), 4, now), "the cycle bound");
        let long_ago = now - Duration::from_millis(50);
        assert!(!f.may_serve(Some(long_ago), 0, now), "the time bound");
    }

    #[test]
    fn no_linger_keeps_nothing() {
        let f = Fairness {
            linger: Duration::ZERO,
            ..fairness()
        };
        assert!(!f.keeps());
        assert!(fairness().keeps());
    }
}
