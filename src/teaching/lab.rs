//! The teaching page's lock lab: holders made on demand, each of which takes a real lease of
//! the payment semaphore or a real side of a product's terms lock (the same paths, the same
//! recipes the sale uses) and keeps it until the page lets it go, or for a minute at most.
//! With them the page shows, live from ZooKeeper, leases running out and a waiter queued for
//! the next one, and readers sharing the terms while a writer waits and then excludes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::oneshot;

use crate::error::Error;
use crate::lock::{Access, Lease, TermsLock, Zk};
use crate::payment::PAYMENT_SEMAPHORE;

/// A lab holder lets go on its own after this long.
pub const MAX_HOLD: Duration = Duration::from_secs(60);
/// Holders at once on one instance, over every lock.
pub const MAX_HOLDERS: usize = 16;

/// What a lab holder takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A lease of the payment semaphore.
    Lease,
    /// A side of a product's terms lock.
    Terms(i64, Access),
}

impl Target {
    fn same_lock(self, other: Target) -> bool {
        match (self, other) {
            (Target::Lease, Target::Lease) => true,
            (Target::Terms(a, _), Target::Terms(b, _)) => a == b,
            _ => false,
        }
    }
}

/// A lab holder, as the page lists it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Holder {
    /// `lab-<n>`: also written into its node, so the lock views name it.
    pub label: String,
    /// Whether it holds (else it waits).
    pub held: bool,
}

struct Entry {
    label: String,
    target: Target,
    held: Arc<AtomicBool>,
    release: Option<oneshot::Sender<()>>,
}

/// This instance's lab holders.
#[derive(Clone, Default)]
pub struct Lab {
    entries: Arc<Mutex<VecDeque<Entry>>>,
    next: Arc<AtomicU64>,
}

/// What a holder keeps until it lets go.
enum Kept {
    Lease { _lease: Lease },
    Terms { _lock: TermsLock },
}

impl Lab {
    /// Starts a holder that waits for `target` (up to [`MAX_HOLD`]) and keeps it until
    /// released. Returns its label at once: it may still be waiting.
    pub fn take(
        &self,
        zk: &Zk,
        payment_concurrency: usize,
        target: Target,
    ) -> Result<Holder, Error> {
        let (release, released) = oneshot::channel();
        let held = Arc::new(AtomicBool::new(false));
        let label = {
            let mut entries = self.entries.lock().expect("lab poisoned");
            if entries.len() >= MAX_HOLDERS {
                return Err(Error::TooBusy);
            }
            let label = format!("lab-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
            entries.push_back(Entry {
                label: label.clone(),
                target,
                held: held.clone(),
                release: Some(release),
            });
            label
        };
        let (lab, zk, name) = (self.clone(), zk.clone(), label.clone());
        tokio::spawn(async move {
            let acquire = async {
                match target {
                    Target::Lease => {
                        let lease = zk.acquire_lease(
                            PAYMENT_SEMAPHORE,
                            payment_concurrency,
                            &name,
                            MAX_HOLD,
                        );
                        lease.await.map(|lease| Kept::Lease { _lease: lease })
                    }
                    Target::Terms(product, access) => {
                        let lock = zk.lock_terms(product, access, &name, MAX_HOLD);
                        lock.await.map(|lock| Kept::Terms { _lock: lock })
                    }
                }
            };
            let mut released = released;
            tokio::select! {
                kept = acquire => {
                    if let Ok(kept) = kept {
                        held.store(true, Ordering::SeqCst);
                        tokio::select! {
                            _ = &mut released => {}
                            _ = tokio::time::sleep(MAX_HOLD) => {}
                        }
                        drop(kept);
                    }
                }
                _ = &mut released => {}
            }
            lab.forget(&name);
        });
        Ok(Holder { label, held: false })
    }

    /// Lets go of the oldest holder of `target`'s lock that holds (or, if none holds yet,
    /// the oldest that waits). Its label, if there was one.
    pub fn release(&self, target: Target) -> Option<String> {
        let mut entries = self.entries.lock().expect("lab poisoned");
        let mine = |e: &&mut Entry| e.target.same_lock(target) && e.release.is_some();
        let at = match entries
            .iter_mut()
            .position(|e| mine(&e) && e.held.load(Ordering::SeqCst))
        {
            Some(at) => at,
            None => entries.iter_mut().position(|e| mine(&e))?,
        };
        let entry = &mut entries[at];
        let _ = entry.release.take()?.send(());
        Some(entry.label.clone())
    }

    /// Lets go of every holder of `target`'s lock; how many.
    pub fn clear(&self, target: Target) -> usize {
        let mut entries = self.entries.lock().expect("lab poisoned");
        let mut released = 0;
        for entry in entries.iter_mut().filter(|e| e.target.same_lock(target)) {
            if let Some(release) = entry.release.take() {
                let _ = release.send(());
                released += 1;
            }
        }
        released
    }

    /// The holders of `target`'s lock, oldest first.
    pub fn holders(&self, target: Target) -> Vec<Holder> {
        let entries = self.entries.lock().expect("lab poisoned");
        entries
            .iter()
            .filter(|e| e.target.same_lock(target) && e.release.is_some())
            .map(|e| Holder {
                label: e.label.clone(),
                held: e.held.load(Ordering::SeqCst),
            })
            .collect()
    }

    fn forget(&self, label: &str) {
        let mut entries = self.entries.lock().expect("lab poisoned");
        entries.retain(|e| e.label != label);
    }
}
