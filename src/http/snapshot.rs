//! Public views of ZooKeeper (a product's lock queue, its terms lock, the payment semaphore)
//! and readiness are read by anyone, unauthenticated. Read per request, a flood of them
//! would load the ensemble every instance's locks depend on until sessions expire
//! cluster-wide. So each view is a snapshot per instance: read at most once per refresh
//! interval, however many clients ask, and concurrent askers of a stale one wait for the
//! one read in flight instead of sending their own.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::{QueueView, RwLockView, SemaphoreView};

/// Every public view this instance serves from a snapshot.
pub struct Views {
    /// A product's lock queue (`GET /api/products/{id}/lock`).
    pub lock: Snapshots<i64, QueueView>,
    /// A product's terms lock (`GET /api/products/{id}/terms-lock`).
    pub terms_lock: Snapshots<i64, RwLockView>,
    /// The payment semaphore (`GET /api/payments/semaphore`).
    pub semaphore: Snapshots<(), SemaphoreView>,
    /// Whether PostgreSQL answers (`GET /readyz`).
    pub postgres: Snapshots<(), bool>,
    /// Whether the payment provider answers and takes our key (`GET /readyz`): why not, if not.
    pub payment_provider: Snapshots<(), Result<(), String>>,
}

impl Views {
    pub fn new(refresh: Duration) -> Views {
        Views {
            lock: Snapshots::new(refresh),
            terms_lock: Snapshots::new(refresh),
            semaphore: Snapshots::new(refresh),
            postgres: Snapshots::new(refresh),
            payment_provider: Snapshots::new(refresh),
        }
    }
}

/// Snapshots of one kind of view, by key (a product id, or `()` for a single view).
pub struct Snapshots<K, V> {
    refresh: Duration,
    slots: Mutex<HashMap<K, Arc<Slot<V>>>>,
}

/// One view's last read. The async mutex is what coalesces: whoever holds it reads, the
/// others queue behind it and find the fresh snapshot when their turn comes.
/// The instant is when the read began.
type Slot<V> = tokio::sync::Mutex<Option<(Instant, Result<Arc<V>, String>)>>;

impl<K: Eq + Hash + Clone, V> Snapshots<K, V> {
    pub fn new(refresh: Duration) -> Snapshots<K, V> {
        Snapshots {
            refresh,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The view for `key`: the snapshot if it is younger than the refresh interval (or
    /// was read since this call began: with an interval of 0 every asker gets a fresh read,
    /// still shared with those asking at the same time), else what `read` returns now.
    /// Kept, failure included, for the next interval: a flood during ZooKeeper trouble must
    /// not turn into a flood of retries.
    ///
    /// The read runs in a task of its own that stores its result whatever becomes of this
    /// call: an asker that hangs up mid-read (its request future dropped) must not throw
    /// the read away and leave the next asker to send another.
    pub async fn get<F, Fut, E>(&self, key: K, read: F) -> Result<Arc<V>, String>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send,
        E: std::fmt::Display,
        V: Send + Sync + 'static,
    {
        let asked = Instant::now();
        let slot = {
            let mut slots = self.slots.lock().expect("snapshot table poisoned");
            slots.entry(key).or_default().clone()
        };
        let mut snapshot = slot.lock_owned().await;
        if let Some((taken, view)) = snapshot.as_ref() {
            if taken.elapsed() < self.refresh || *taken >= asked {
                return view.clone();
            }
        }
        let refresh = tokio::spawn(async move {
            let started = Instant::now();
            let view = match tokio::time::timeout(READ_LIMIT, read()).await {
                Ok(read) => read.map(Arc::new).map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {READ_LIMIT:?}")),
            };
            *snapshot = Some((started, view.clone()));
            view
        });
        refresh.await.unwrap_or_else(|e| Err(e.to_string()))
    }
}

/// The longest a refresh may take: askers queue behind it, so a stalled session must not
/// hold them for a whole request timeout.
const READ_LIMIT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn many_askers_at_once_cost_one_read_per_interval() {
        let views = Arc::new(Snapshots::<i64, usize>::new(Duration::from_millis(250)));
        let reads = Arc::new(AtomicUsize::new(0));
        let ask = |views: Arc<Snapshots<i64, usize>>, reads: Arc<AtomicUsize>| async move {
            views
                .get(7, move || async move {
                    // The read takes a while: everyone else arrives meanwhile.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok::<_, String>(reads.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await
        };
        let askers: Vec<_> = (0..100)
            .map(|_| tokio::spawn(ask(views.clone(), reads.clone())))
            .collect();
        for asker in askers {
            assert_eq!(
                *asker.await.unwrap().unwrap(),
                1,
                "every asker saw the one read"
            );
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // Another product is another view.
        views.get(8, || async { Ok::<_, String>(0) }).await.unwrap();
        // Once the interval has passed, the next asker reads again.
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(*ask(views.clone(), reads.clone()).await.unwrap(), 2);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_interval_askers_at_once_still_share_one_read_and_later_ones_read_again() {
        let views = Arc::new(Snapshots::<(), usize>::new(Duration::ZERO));
        let reads = Arc::new(AtomicUsize::new(0));
        let ask = |views: Arc<Snapshots<(), usize>>, reads: Arc<AtomicUsize>| async move {
            views
                .get((), move || async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok::<_, String>(reads.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await
        };
        let first = tokio::spawn(ask(views.clone(), reads.clone()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Arrive while the first read runs: one more read, begun after we asked, for all.
        let crowd: Vec<_> = (0..10)
            .map(|_| tokio::spawn(ask(views.clone(), reads.clone())))
            .collect();
        assert_eq!(*first.await.unwrap().unwrap(), 1);
        for asker in crowd {
            assert_eq!(*asker.await.unwrap().unwrap(), 2);
        }
        assert_eq!(*ask(views.clone(), reads.clone()).await.unwrap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_asker_that_hangs_up_mid_read_leaves_the_read_for_the_others() {
        let views = Arc::new(Snapshots::<(), usize>::new(Duration::from_secs(60)));
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = reads.clone();
        let gone = tokio::spawn({
            let views = views.clone();
            async move {
                views
                    .get((), move || async move {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Ok::<_, String>(counted.fetch_add(1, Ordering::SeqCst) + 1)
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        gone.abort();
        let view = views
            .get((), || async { Ok::<_, String>(99) })
            .await
            .unwrap();
        assert_eq!(*view, 1, "the read the first asker began, not a second one");
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_does_not_answer_fails_after_its_limit() {
        let views = Snapshots::<(), usize>::new(Duration::from_millis(250));
        let stalled = views
            .get((), std::future::pending::<Result<usize, String>>)
            .await;
        assert!(stalled.unwrap_err().contains("no answer"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_is_kept_for_the_interval_too() {
        let views = Snapshots::<(), usize>::new(Duration::from_millis(250));
        let failed = views
            .get((), || async { Err::<usize, _>("no quorum") })
            .await;
        assert_eq!(failed.unwrap_err(), "no quorum");
        let again = views.get((), || async { Ok::<_, String>(1) }).await;
        assert_eq!(
            again.unwrap_err(),
            "no quorum",
            "not read again within the interval"
        );
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(
            *views
                .get((), || async { Ok::<_, String>(1) })
                .await
                .unwrap(),
            1
        );
    }
}
