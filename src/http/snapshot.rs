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
}

impl Views {
    pub fn new(refresh: Duration) -> Views {
        Views {
            lock: Snapshots::new(refresh),
            terms_lock: Snapshots::new(refresh),
            semaphore: Snapshots::new(refresh),
            postgres: Snapshots::new(refresh),
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
type Slot<V> = tokio::sync::Mutex<Option<(Instant, Result<Arc<V>, String>)>>;

impl<K: Eq + Hash + Clone, V> Snapshots<K, V> {
    pub fn new(refresh: Duration) -> Snapshots<K, V> {
        Snapshots {
            refresh,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The view for `key`: the snapshot if it is younger than the refresh interval, else
    /// what `read` returns now (kept, failure included, for the next interval: a flood
    /// during ZooKeeper trouble must not turn into a flood of retries).
    pub async fn get<F, Fut, E>(&self, key: K, read: F) -> Result<Arc<V>, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: std::fmt::Display,
    {
        let slot = {
            let mut slots = self.slots.lock().expect("snapshot table poisoned");
            slots.entry(key).or_default().clone()
        };
        let mut snapshot = slot.lock().await;
        if let Some((taken, view)) = snapshot.as_ref() {
            if taken.elapsed() < self.refresh {
                return view.clone();
            }
        }
        let view = read().await.map(Arc::new).map_err(|e| e.to_string());
        *snapshot = Some((Instant::now(), view.clone()));
        view
    }
}

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
                .get(7, || async {
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
