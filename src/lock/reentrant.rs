//! Reentrancy, decided for async code. Curator's `InterProcessMutex` is reentrant per
//! thread: a thread that holds the lock acquires it again by counting, and the node goes
//! when the count is back to zero. A task is not a thread (it moves between threads, and one
//! task may poll many futures at once), so here the holder is named explicitly: an
//! [`Owner`], a token the caller makes and passes to every acquisition that belongs to it.
//!
//! The count is the number of live acquisitions sharing one grant (an `Arc`): dropping
//! them in any order releases the node exactly when the last one goes. The table keeps only
//! weak references, so it never keeps a lock alive by itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::Token;

/// Who holds a lock, for reentrancy. Clone it into every nested acquisition of one piece of
/// work (the expiry sweep makes one per product per pass); a fresh one is a stranger that
/// waits like anyone else.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner(uuid::Uuid);

impl Owner {
    #[allow(clippy::new_without_default)] // a default owner would be shared by accident
    pub fn new() -> Owner {
        Owner(uuid::Uuid::new_v4())
    }
}

/// Per owner and lock directory: the grant it holds, and the grant's token.
type Held<G> = HashMap<(Owner, String), (Weak<G>, Token)>;

/// The grants owners hold now.
pub(super) struct Reentries<G> {
    held: Mutex<Held<G>>,
}

impl<G> Default for Reentries<G> {
    fn default() -> Self {
        Reentries {
            held: Mutex::new(HashMap::new()),
        }
    }
}

impl<G> Reentries<G> {
    /// The grant `owner` holds on `dir`, counted once more; `None` if it holds none (never
    /// did, or every acquisition of it was dropped).
    pub(super) fn again(&self, owner: &Owner, dir: &str) -> Option<(Arc<G>, Token)> {
        let mut held = self.held.lock().expect("reentries poisoned");
        let key = (owner.clone(), dir.to_string());
        let (grant, token) = held.get(&key)?;
        match grant.upgrade() {
            Some(grant) => Some((grant, *token)),
            None => {
                held.remove(&key);
                None
            }
        }
    }

    /// Remembers a fresh grant of `dir` to `owner`, dropping entries whose grants are gone.
    pub(super) fn record(&self, owner: &Owner, dir: &str, grant: &Arc<G>, token: Token) {
        let mut held = self.held.lock().expect("reentries poisoned");
        held.retain(|_, (grant, _)| grant.strong_count() > 0);
        held.insert(
            (owner.clone(), dir.to_string()),
            (Arc::downgrade(grant), token),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Stands in for a lock node: counts its releases.
    struct Node(Arc<AtomicUsize>);

    impl Drop for Node {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn token(zxid: i64) -> Token {
        Token {
            ensemble: uuid::Uuid::nil(),
            zxid,
        }
    }

    #[test]
    fn the_owner_reenters_by_counting_and_releases_at_zero_in_any_order() {
        let table = Reentries::default();
        let released = Arc::new(AtomicUsize::new(0));
        let owner = Owner::new();
        let first = Arc::new(Node(released.clone()));
        table.record(&owner, "/locks/stock/1", &first, token(7));

        let (second, again) = table.again(&owner, "/locks/stock/1").expect("re-entry");
        assert_eq!(
            again,
            token(7),
            "a re-entry carries the first grant's token"
        );
        let (third, _) = table.again(&owner, "/locks/stock/1").expect("re-entry");
        assert_eq!(Arc::strong_count(&first), 3);

        // The outer acquisition goes first: the inner ones still hold the node.
        drop(first);
        drop(third);
        assert_eq!(released.load(Ordering::SeqCst), 0);
        drop(second);
        assert_eq!(released.load(Ordering::SeqCst), 1, "released once, at zero");
        assert!(
            table.again(&owner, "/locks/stock/1").is_none(),
            "once released, the next acquisition is a fresh one"
        );
    }

    #[test]
    fn a_stranger_or_another_lock_is_not_a_reentry() {
        let table = Reentries::default();
        let owner = Owner::new();
        let grant = Arc::new(Node(Arc::new(AtomicUsize::new(0))));
        table.record(&owner, "/locks/stock/1", &grant, token(1));
        assert!(table.again(&Owner::new(), "/locks/stock/1").is_none());
        assert!(table.again(&owner, "/locks/stock/2").is_none());
        assert!(table.again(&owner.clone(), "/locks/stock/1").is_some());
    }
}
