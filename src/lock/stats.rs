//! What each product's lock has cost this instance, for the page and the tests: acquisitions,
//! wake-ups (counted as each happens), orders served, and waiters watching right now.

use super::Zk;

/// What acquisitions of one product's lock have cost on this instance, and what they served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LockStats {
    pub acquisitions: u64,
    pub wakeups: u64,
    /// Orders served under those acquisitions: `orders / acquisitions` per lock cycle.
    pub orders: u64,
    /// Waiters of this instance whose watch is set right now. A release wakes only waiters
    /// already watching (one who is between its create and its watch sees the lock free and
    /// takes it unwoken), so the step-through waits for this before each Next.
    pub watching: u64,
    /// Lock cycles served on a kept node (after its first): no node made for them.
    pub kept_cycles: u64,
    /// The longest a node waited behind a kept lock before it was given up (ms): the
    /// fairness bound, as measured.
    pub longest_handover_ms: u64,
}

/// What a waiter tells its product's statistics: each watch while it is set, each wake as it
/// happens (not when the lock is granted: the page shows a herd waking while its waiters
/// still wait).
///
/// Nobody's ([`Observer::NONE`]) for the recipes built on the fair lock (the semaphore's turns).
pub(super) struct Observer<'a>(pub(super) Option<(&'a Zk, i64)>);

impl Observer<'_> {
    pub(super) const NONE: Observer<'static> = Observer(None);

    /// Call once the watch is set (its answer came back); the waiter counts as watching until
    /// [`Watching::woke`] or until the wait is given up (the guard dropped).
    pub(super) fn watching(&self) -> Watching<'_> {
        if let Some((zk, product_id)) = self.0 {
            zk.count_watching(product_id, true);
        }
        Watching(self)
    }
}

pub(super) struct Watching<'a>(&'a Observer<'a>);

impl Watching<'_> {
    /// The watch fired: one wake-up, and no longer watching, counted together (a reader of
    /// the stats never sees the wake without the watch gone).
    pub(super) fn woke(self) {
        if let Some((zk, product_id)) = self.0 .0 {
            zk.count_wake(product_id);
        }
        // Counted above: the guard's drop must not count the watch gone a second time.
        std::mem::forget(self);
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        if let Some((zk, product_id)) = self.0 .0 {
            zk.count_watching(product_id, false);
        }
    }
}

impl Zk {
    /// What this instance's acquisitions of the product's lock have cost so far.
    pub fn stats(&self, product_id: i64) -> LockStats {
        let stats = self.inner.stats.lock().expect("stats poisoned");
        stats.get(&product_id).copied().unwrap_or_default()
    }

    /// Counts one watch notification that woke a waiter for the product's lock: a wake-up,
    /// and one waiter fewer watching, under one lock.
    pub(super) fn count_wake(&self, product_id: i64) {
        let mut stats = self.inner.stats.lock().expect("stats poisoned");
        let product = stats.entry(product_id).or_default();
        product.wakeups += 1;
        product.watching = product.watching.saturating_sub(1);
        drop(stats);
        self.has_news(product_id);
    }

    /// Counts one waiter of the product's lock more (`up`) or less watching.
    pub(super) fn count_watching(&self, product_id: i64, up: bool) {
        let mut stats = self.inner.stats.lock().expect("stats poisoned");
        let watching = &mut stats.entry(product_id).or_default().watching;
        *watching = if up {
            *watching + 1
        } else {
            watching.saturating_sub(1)
        };
        drop(stats);
        self.has_news(product_id);
    }

    fn has_news(&self, product_id: i64) {
        self.inner
            .lock_news
            .lock()
            .expect("lock news poisoned")
            .insert(product_id);
    }

    /// Products whose waiters woke, or began or stopped watching, since the last call: their
    /// lock view has news even when no node changed. A herd's waiters create no node (they
    /// watch the one node), and its losers wake and watch again; and since a sale's cycles
    /// share one terms read node, a herd waiter no longer creates a read node either.
    pub fn take_lock_news(&self) -> Vec<i64> {
        let mut news = self.inner.lock_news.lock().expect("lock news poisoned");
        news.drain().collect()
    }

    /// Counts `orders` served under one acquisition of the product's lock.
    pub fn count_served(&self, product_id: i64, orders: usize) {
        let mut stats = self.inner.stats.lock().expect("stats poisoned");
        stats.entry(product_id).or_default().orders += orders as u64;
    }

    /// Counts one lock cycle served on a kept node.
    pub(super) fn count_kept(&self, product_id: i64) {
        let mut stats = self.inner.stats.lock().expect("stats poisoned");
        stats.entry(product_id).or_default().kept_cycles += 1;
    }

    /// A kept lock was given up after someone had waited behind it for `waited`.
    pub(super) fn count_handover(&self, product_id: i64, waited: std::time::Duration) {
        let mut stats = self.inner.stats.lock().expect("stats poisoned");
        let longest = &mut stats.entry(product_id).or_default().longest_handover_ms;
        *longest = (*longest).max(waited.as_millis() as u64);
    }
}
