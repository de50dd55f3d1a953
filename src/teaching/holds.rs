//! The test seam: pause the next holder of a product's lock inside its critical section
//! until released, so a test can do something "while X holds the lock" without racing a
//! timer. In-process only, and compiled only with the `test-hooks` feature (the test
//! command's builds): a production binary has no such pause.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Lock holders waiting to be paused, per product, in the order the holds were armed.
#[derive(Clone, Default)]
pub struct Holds {
    armed: Arc<Mutex<HashMap<i64, VecDeque<Held>>>>,
}

/// The holder's side of a hold.
pub(super) struct Held {
    reached: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
    /// Once released, panic instead of going on: a bug in a lock cycle, on demand.
    panic: bool,
}

impl Held {
    pub(super) async fn wait(self) {
        let _ = self.reached.send(());
        // Released, or the hold dropped: either way, go on.
        let _ = self.release.await;
        if self.panic {
            panic!("test hook: a lock holder panics inside its critical section");
        }
    }
}

/// The test's side of a hold: learn that the holder is inside, then let it go.
pub struct Hold {
    reached: oneshot::Receiver<()>,
    release: Option<oneshot::Sender<()>>,
}

impl Hold {
    /// Resolves once the holder has the lock, has claimed the row with its token and has
    /// read the stock; it stays there until [`Hold::release`] (or this is dropped).
    pub async fn reached(&mut self) {
        let _ = (&mut self.reached).await;
    }

    pub fn release(mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
    }
}

impl Holds {
    /// Pauses the next holder of the product's stock on this instance (one per call).
    pub fn hold_next(&self, product_id: i64) -> Hold {
        self.arm(product_id, false)
    }

    /// Pauses the next holder like [`Holds::hold_next`], and makes it panic once released.
    pub fn panic_next(&self, product_id: i64) -> Hold {
        self.arm(product_id, true)
    }

    fn arm(&self, product_id: i64, panic: bool) -> Hold {
        let (reached_tx, reached) = oneshot::channel();
        let (release, release_rx) = oneshot::channel();
        self.armed
            .lock()
            .expect("holds poisoned")
            .entry(product_id)
            .or_default()
            .push_back(Held {
                reached: reached_tx,
                release: release_rx,
                panic,
            });
        Hold {
            reached,
            release: Some(release),
        }
    }

    /// Whether a hold waits for the product's next holder.
    pub(super) fn armed(&self, product_id: i64) -> bool {
        self.armed
            .lock()
            .expect("holds poisoned")
            .contains_key(&product_id)
    }

    pub(super) fn take(&self, product_id: i64) -> Option<Held> {
        let mut armed = self.armed.lock().expect("holds poisoned");
        let queue = armed.get_mut(&product_id)?;
        let held = queue.pop_front();
        if queue.is_empty() {
            armed.remove(&product_id);
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hold_pauses_one_holder_until_released() {
        let holds = Holds::default();
        let mut hold = holds.hold_next(7);
        assert!(holds.take(8).is_none(), "other products are not held");
        let held = holds.take(7).expect("armed for product 7");
        assert!(holds.take(7).is_none(), "one holder per hold");
        let holder = tokio::spawn(held.wait());
        hold.reached().await;
        assert!(!holder.is_finished());
        hold.release();
        holder.await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_hold_lets_the_holder_go() {
        let holds = Holds::default();
        drop(holds.hold_next(1));
        holds.take(1).expect("armed").wait().await;
    }
}
