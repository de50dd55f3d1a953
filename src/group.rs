//! Group writes: many small writes that arrive at nearly the same moment, one statement and
//! one commit for them all. Whoever writes first while nothing is being written starts a
//! writer (a task of its own, so a caller that stops waiting cannot cut a write in half);
//! what arrives while it writes forms its next statement. No item waits for a group to
//! fill: under light load each is written alone, as soon as it comes.
//!
//! The service records its payment answers so (`orders::recorder`), and the payment
//! provider its ledger: on this machine each statement costs PostgreSQL far more than a row.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::oneshot;

/// Items of a refused group written again each alone, at most this many at once (each takes
/// a connection of the pool for its statement).
const ALONE_AT_ONCE: usize = 4;

/// What one item's write came to, or why its statement failed.
pub type Written<O> = Result<O, Arc<sqlx::Error>>;

/// Writes a group: one outcome per item, in order, or the statement's error for all.
pub type WriteGroup<I, O> =
    Arc<dyn Fn(Vec<I>) -> BoxFuture<'static, Result<Vec<O>, sqlx::Error>> + Send + Sync>;

pub struct GroupWriter<I, O> {
    inner: Arc<Inner<I, O>>,
}

impl<I, O> Clone for GroupWriter<I, O> {
    fn clone(&self) -> Self {
        GroupWriter {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<I, O> {
    state: Mutex<State<I, O>>,
    write: WriteGroup<I, O>,
    /// Items with the same key never share a statement (an `INSERT ... ON CONFLICT DO
    /// UPDATE` may not touch a row twice): the second waits for the next.
    key: fn(&I) -> &str,
    max: usize,
}

struct State<I, O> {
    pending: Vec<(I, oneshot::Sender<Written<O>>)>,
    /// A writer runs: new items only queue.
    writing: bool,
}

impl<I, O> GroupWriter<I, O>
where
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    /// `write` writes a group of at most `max` items with distinct `key`s.
    pub fn new(write: WriteGroup<I, O>, key: fn(&I) -> &str, max: usize) -> Self {
        GroupWriter {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    pending: Vec::new(),
                    writing: false,
                }),
                write,
                key,
                max: max.max(1),
            }),
        }
    }

    /// Writes `item` in the next statement; its outcome once that statement ends.
    pub async fn write(&self, item: I) -> Written<O> {
        let (reply, written) = oneshot::channel();
        let start = {
            let mut state = self.state();
            state.pending.push((item, reply));
            !std::mem::replace(&mut state.writing, true)
        };
        if start {
            tokio::spawn(self.clone().run());
        }
        written.await.unwrap_or_else(|_| {
            Err(Arc::new(sqlx::Error::Protocol(
                "the group writer stopped before writing".into(),
            )))
        })
    }

    /// Writes what is pending, statement after statement, until nothing is.
    async fn run(self) {
        // A writer that panics is marked gone, so the next item starts another rather than
        // queueing for none; its own items' replies are dropped (their write failed), and so
        // are those that queued meanwhile: their callers hear the writer stopped at once,
        // rather than wait for a writer that no later item may come to start (a lock cycle
        // waits here holding its lock).
        struct Panicked<'a, I, O>(&'a Inner<I, O>);
        impl<I, O> Drop for Panicked<'_, I, O> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let mut state = relock(&self.0.state);
                    state.writing = false;
                    state.pending.clear();
                }
            }
        }
        let _panicked = Panicked(&self.inner);
        loop {
            let group = {
                let mut state = self.state();
                if state.pending.is_empty() {
                    state.writing = false;
                    return;
                }
                let key = self.inner.key;
                take(&mut state.pending, |(item, _)| key(item), self.inner.max)
            };
            let (items, replies): (Vec<I>, Vec<_>) = group.into_iter().unzip();
            match (self.inner.write)(items.clone()).await {
                Ok(outcomes) => {
                    for (outcome, reply) in outcomes.into_iter().zip(replies) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                // One item PostgreSQL refuses must not fail the others with it: each alone,
                // a few at once, so that one item that waits out its statement's bound (a
                // row another transaction holds) delays the others by one statement, not one
                // each. (Only a refusal: an outage would fail each alone too.)
                Err(sqlx::Error::Database(_)) if items.len() > 1 => {
                    let write = &self.inner.write;
                    let alone = items
                        .into_iter()
                        .zip(replies)
                        .map(|(item, reply)| async move {
                            let alone = write(vec![item]).await;
                            let _ =
                                reply.send(alone.map(|mut one| one.remove(0)).map_err(Arc::new));
                        });
                    futures_util::stream::iter(alone)
                        .buffer_unordered(ALONE_AT_ONCE)
                        .for_each(|()| async {})
                        .await;
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State<I, O>> {
        relock(&self.inner.state)
    }
}

fn relock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The next statement's items: up to `max`, one per key; the rest stay pending, in order.
fn take<T>(pending: &mut Vec<T>, key: impl Fn(&T) -> &str, max: usize) -> Vec<T> {
    let mut keys = HashSet::new();
    let mut group = Vec::new();
    let mut rest = Vec::new();
    for item in pending.drain(..) {
        if group.len() < max && keys.insert(key(&item).to_string()) {
            group.push(item);
        } else {
            rest.push(item);
        }
    }
    *pending = rest;
    group
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_takes_each_key_once_and_at_most_max_items() {
        let mut pending: Vec<String> = ["a", "b", "a", "c", "d"].map(String::from).to_vec();
        let group = take(&mut pending, |k| k, 3);
        assert_eq!(group, ["a", "b", "c"]);
        assert_eq!(
            pending,
            ["a", "d"],
            "the second `a` and what did not fit wait, in order"
        );
        let group = take(&mut pending, |k| k, 3);
        assert_eq!(group, ["a", "d"]);
        assert!(pending.is_empty());
    }

    /// Waits for a state the test can see, for 10 s at most.
    async fn until(seen: impl Fn() -> bool) {
        let waited = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while !seen() {
                tokio::task::yield_now().await;
            }
        });
        waited.await.expect("the state the test waits for");
    }

    #[tokio::test]
    async fn items_that_arrive_while_a_statement_runs_share_the_next() {
        let (gate, opened) = tokio::sync::watch::channel(false);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let write: WriteGroup<String, usize> = Arc::new(move |items: Vec<String>| {
            let (seen, mut opened) = (seen.clone(), opened.clone());
            Box::pin(async move {
                // The first statement waits until every other item has queued behind it.
                let _ = opened.wait_for(|open| *open).await;
                seen.lock().unwrap().push(items.len());
                Ok(items.iter().map(String::len).collect())
            })
        });
        let writer = GroupWriter::new(write, |s: &String| s.as_str(), 100);
        let first = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write("x".into()).await }
        });
        // Wait until the first item's writer runs (nothing pending), then queue three more.
        until(|| writer.state().writing && writer.state().pending.is_empty()).await;
        let rest: Vec<_> = ["yy", "zzz", "yy"]
            .map(|item| {
                let writer = writer.clone();
                tokio::spawn(async move { writer.write(item.into()).await })
            })
            .into_iter()
            .collect();
        until(|| writer.state().pending.len() == 3).await;
        gate.send_replace(true);
        assert_eq!(first.await.unwrap().unwrap(), 1);
        let mut outcomes = Vec::new();
        for task in rest {
            outcomes.push(task.await.unwrap().unwrap());
        }
        assert_eq!(outcomes, [2, 3, 2], "each item gets its own outcome");
        // One statement alone, then the two distinct keys together, then the repeated key.
        assert_eq!(*sizes.lock().unwrap(), [1, 2, 1]);
    }
}
