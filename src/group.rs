//! Group writes: many small writes that arrive at nearly the same moment, one statement and
//! one commit for them all. Whoever writes first while nothing is being written starts a
//! writer (a task of its own, so a caller that stops waiting cannot cut a write in half);
//! what arrives while it writes forms its next statement. No item waits for a group to
//! fill: under light load each is written alone, as soon as it comes.
//!
//! With two writers (`with_writers`), what arrives while a transaction runs need not wait
//! for its COMMIT to come back: once the transaction says it is committing ([`Committing`]),
//! a second writer takes what is pending and builds the next one beside that COMMIT (the
//! double buffering of a hot row's group commit). One transaction is built at a time (a
//! second one built beside the first would only split the groups); an item's key is never in
//! two at once.
//!
//! The service records its payment answers so (`orders::recorder`), and the payment
//! provider its ledger: on this machine each statement costs PostgreSQL far more than a row.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::oneshot;

/// Items of a refused group written again each alone, at most this many at once (each takes
/// a connection of the pool for its statement).
const ALONE_AT_ONCE: usize = 4;

/// What one item's write came to, or why its statement failed.
pub type Written<O> = Result<O, Arc<sqlx::Error>>;

/// Writes a group: one outcome per item, in order, or the statement's error for all. It may
/// say when it has only its COMMIT left ([`Committing::now`]).
pub type WriteGroup<I, O> = Arc<
    dyn Fn(Vec<I>, Committing) -> BoxFuture<'static, Result<Vec<O>, sqlx::Error>> + Send + Sync,
>;

/// Told by a group's write when only its COMMIT is left: with a second writer allowed, the
/// next group starts being built now.
pub struct Committing(Option<Box<dyn FnOnce() + Send>>);

impl Committing {
    /// A write that never says (a writer of one, or a group written again alone).
    fn never() -> Committing {
        Committing(None)
    }

    pub fn now(&mut self) {
        if let Some(now) = self.0.take() {
            now();
        }
    }
}

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
    /// Most writers at once.
    writers: usize,
}

struct State<I, O> {
    pending: Vec<(I, oneshot::Sender<Written<O>>)>,
    /// Writers running: with all of them busy, new items only queue.
    writing: usize,
    /// A writer is building its group's transaction (not yet committing): new items wait
    /// for its COMMIT, or for its next group.
    building: bool,
    /// The keys of the items being written now.
    in_flight: HashSet<String>,
}

impl<I, O> GroupWriter<I, O>
where
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    /// `write` writes a group of at most `max` items with distinct `key`s, one group at a
    /// time.
    pub fn new(write: WriteGroup<I, O>, key: fn(&I) -> &str, max: usize) -> Self {
        Self::with_writers(write, key, max, 1)
    }

    /// As [`GroupWriter::new`], with up to `writers` groups written at once.
    pub fn with_writers(
        write: WriteGroup<I, O>,
        key: fn(&I) -> &str,
        max: usize,
        writers: usize,
    ) -> Self {
        GroupWriter {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    pending: Vec::new(),
                    writing: 0,
                    building: false,
                    in_flight: HashSet::new(),
                }),
                write,
                key,
                max: max.max(1),
                writers: writers.max(1),
            }),
        }
    }

    /// Writes `item` in the next statement; its outcome once that statement ends.
    pub async fn write(&self, item: I) -> Written<O> {
        let (reply, written) = oneshot::channel();
        let start = {
            let mut state = self.state();
            state.pending.push((item, reply));
            self.claim_builder(&mut state)
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

    /// Whether a new writer may start building now (then it is counted as the builder).
    fn claim_builder(&self, state: &mut State<I, O>) -> bool {
        let start = !state.building && state.writing < self.inner.writers;
        if start {
            state.writing += 1;
            state.building = true;
        }
        start
    }

    /// Writes what is pending, group after group, until nothing is (or, with a second writer,
    /// until the other one builds the next group). Boxed: a writer may start another.
    fn run(self) -> BoxFuture<'static, ()> {
        Box::pin(self.write_groups())
    }

    async fn write_groups(self) {
        // A writer that panics is marked gone, so the next item starts another rather than
        // queueing for none; its own items' replies are dropped (their write failed), and so
        // are those that queued meanwhile: their callers hear the writer stopped at once,
        // rather than wait for a writer that no later item may come to start (a lock cycle
        // waits here holding its lock).
        struct Panicked<'a, I, O>(&'a Inner<I, O>, Vec<String>, Arc<AtomicBool>);
        impl<I, O> Drop for Panicked<'_, I, O> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let mut state = relock(&self.0.state);
                    state.writing -= 1;
                    if self.2.load(Ordering::SeqCst) {
                        state.building = false;
                    }
                    state.pending.clear();
                    for key in &self.1 {
                        state.in_flight.remove(key);
                    }
                }
            }
        }
        // Whether this writer is the one building (it starts as the builder).
        let mut panicked = Panicked(&self.inner, Vec::new(), Arc::new(AtomicBool::new(true)));
        loop {
            let group = {
                let mut state = self.state();
                let key = self.inner.key;
                let busy = std::mem::take(&mut state.in_flight);
                let group = take(
                    &mut state.pending,
                    |(item, _)| key(item),
                    &busy,
                    self.inner.max,
                );
                state.in_flight = busy;
                // Nothing this writer may take (nothing pending, or only keys another writer
                // is writing: it takes them after).
                if group.is_empty() {
                    state.writing -= 1;
                    state.building = false;
                    return;
                }
                let keys: Vec<String> = group
                    .iter()
                    .map(|(item, _)| key(item).to_string())
                    .collect();
                state.in_flight.extend(keys.iter().cloned());
                panicked.1 = keys;
                group
            };
            let building = panicked.2.clone();
            building.store(true, Ordering::SeqCst);
            let next = self.clone();
            let committing = Committing(Some(Box::new(move || {
                // Only the COMMIT left: no longer the builder, and what is pending starts the
                // next group beside it.
                building.store(false, Ordering::SeqCst);
                let start = {
                    let mut state = next.state();
                    state.building = false;
                    !state.pending.is_empty() && next.claim_builder(&mut state)
                };
                if start {
                    tokio::spawn(next.run());
                }
            })));
            let (items, replies): (Vec<I>, Vec<_>) = group.into_iter().unzip();
            match (self.inner.write)(items.clone(), committing).await {
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
                            let alone = write(vec![item], Committing::never()).await;
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
            let mut state = self.state();
            for key in std::mem::take(&mut panicked.1) {
                state.in_flight.remove(&key);
            }
            // Still the builder (its write never said it was committing): go on. Otherwise
            // it goes on only if nobody builds now.
            if !panicked.2.load(Ordering::SeqCst) {
                if state.building {
                    state.writing -= 1;
                    return;
                }
                state.building = true;
                panicked.2.store(true, Ordering::SeqCst);
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State<I, O>> {
        relock(&self.inner.state)
    }
}

/// A lock taken even after a panic while it was held: the callers' state is whole at every
/// step (counts and lists), and their workers are started again after a panic, so a poisoned
/// lock would only turn one panic into a panic of everything that comes after it.
pub(crate) fn relock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The next statement's items: up to `max`, one per key, none of the keys `busy` (in another
/// writer's statement); the rest stay pending, in order.
fn take<T>(
    pending: &mut Vec<T>,
    key: impl Fn(&T) -> &str,
    busy: &HashSet<String>,
    max: usize,
) -> Vec<T> {
    let mut keys = HashSet::new();
    let mut group = Vec::new();
    let mut rest = Vec::new();
    for item in pending.drain(..) {
        let k = key(&item);
        if group.len() < max && !busy.contains(k) && keys.insert(k.to_string()) {
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
        let none = HashSet::new();
        let group = take(&mut pending, |k| k, &none, 3);
        assert_eq!(group, ["a", "b", "c"]);
        assert_eq!(
            pending,
            ["a", "d"],
            "the second `a` and what did not fit wait, in order"
        );
        let group = take(&mut pending, |k| k, &none, 3);
        assert_eq!(group, ["a", "d"]);
        assert!(pending.is_empty());
    }

    #[test]
    fn a_key_in_another_writers_statement_waits_for_it() {
        let mut pending: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let busy = HashSet::from(["a".to_string()]);
        assert_eq!(take(&mut pending, |k| k, &busy, 3), ["b"]);
        assert_eq!(pending, ["a"]);
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
        let write: WriteGroup<String, usize> = Arc::new(move |items: Vec<String>, _| {
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
        until(|| writer.state().writing == 1 && writer.state().pending.is_empty()).await;
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

    #[tokio::test]
    async fn a_second_writer_writes_while_the_first_commits() {
        let (gate, opened) = tokio::sync::watch::channel(false);
        let write: WriteGroup<String, usize> =
            Arc::new(move |items: Vec<String>, mut committing: Committing| {
                let mut opened = opened.clone();
                Box::pin(async move {
                    if items.iter().any(|i| i == "slow") {
                        // Only its COMMIT left, which does not come back until the gate opens.
                        committing.now();
                        let _ = opened.wait_for(|open| *open).await;
                    }
                    Ok(items.iter().map(String::len).collect())
                })
            });
        let writer = GroupWriter::with_writers(write, |s: &String| s.as_str(), 100, 2);
        let slow = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write("slow".into()).await }
        });
        until(|| writer.state().in_flight.contains("slow")).await;
        // The first transaction cannot end until the gate opens: only a second writer, started
        // at its COMMIT, answers.
        let fast = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            writer.write("quick".into()),
        );
        assert_eq!(fast.await.expect("written beside the first").unwrap(), 5);
        gate.send_replace(true);
        assert_eq!(slow.await.unwrap().unwrap(), 4);
    }
}
