//! Payments' answers recorded together: the charges of a sale come back from the provider
//! at nearly the same moment, and each would otherwise cost PostgreSQL a statement and a
//! commit of its own. Whoever records first while nothing is being written starts a writer
//! (a task of its own, so a caller that stops waiting cannot cut a write in half); the
//! answers that arrive while it writes form its next statement. One statement, one commit,
//! however many answers: the same combining as the lock cycles', for the step after them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sqlx::PgPool;
use tokio::sync::oneshot;

use super::intents;
use super::model::Order;
use crate::payment::Charge;

/// At most this many answers in one statement (the arrays of one `unnest`).
const BATCH_MAX: usize = 512;

/// One answer to record: the order, its intent's key and the provider's charge.
pub(super) struct Answered {
    pub order: Order,
    pub key: String,
    pub charge: Charge,
}

/// What recording one answer came to: the order if this moved it to `paid`, `None` if it
/// did not (declined, or already moved on), or why the statement failed.
pub(super) type Recorded = Result<Option<Order>, Arc<sqlx::Error>>;

#[derive(Clone)]
pub struct Recorder {
    db: PgPool,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    pending: Vec<(Answered, oneshot::Sender<Recorded>)>,
    /// A writer runs: new answers only queue.
    writing: bool,
}

impl Recorder {
    pub fn new(db: PgPool) -> Recorder {
        Recorder {
            db,
            state: Arc::default(),
        }
    }

    /// Records one answer (see `intents::record_payments`), in the next statement written.
    pub(super) async fn record(&self, answered: Answered) -> Recorded {
        let (reply, recorded) = oneshot::channel();
        let start = {
            let mut state = self.state();
            state.pending.push((answered, reply));
            !std::mem::replace(&mut state.writing, true)
        };
        if start {
            tokio::spawn(self.clone().write());
        }
        recorded.await.unwrap_or_else(|_| {
            Err(Arc::new(sqlx::Error::Protocol(
                "the payment recorder stopped before writing".into(),
            )))
        })
    }

    /// Writes what is pending, statement after statement, until nothing is.
    async fn write(self) {
        // A writer that panics is marked gone, so the next answer starts another rather
        // than queueing for none (its own answers' replies are dropped: recording failed).
        struct Panicked<'a>(&'a Recorder);
        impl Drop for Panicked<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.state().writing = false;
                }
            }
        }
        let _panicked = Panicked(&self);
        loop {
            let batch = {
                let mut state = self.state();
                if state.pending.is_empty() {
                    state.writing = false;
                    return;
                }
                take(&mut state.pending, |(answered, _)| &answered.key, BATCH_MAX)
            };
            let (answers, replies): (Vec<Answered>, Vec<_>) = batch.into_iter().unzip();
            match intents::record_payments(&self.db, &answers).await {
                Ok(recorded) => {
                    for (order, reply) in recorded.into_iter().zip(replies) {
                        let _ = reply.send(Ok(order));
                    }
                }
                // One answer PostgreSQL refuses must not fail the others with it: each alone.
                // (Only a refusal: an outage would fail each alone too, one wait each.)
                Err(sqlx::Error::Database(_)) if answers.len() > 1 => {
                    for (answer, reply) in answers.iter().zip(replies) {
                        let alone =
                            intents::record_payments(&self.db, std::slice::from_ref(answer));
                        let _ =
                            reply.send(alone.await.map(|mut one| one.remove(0)).map_err(Arc::new));
                    }
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

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The next statement's answers: up to `max`, one per key (a key twice in one
/// `INSERT ... ON CONFLICT DO UPDATE` is an error; the second waits for the next statement).
/// The rest stay pending, in their order.
fn take<T>(pending: &mut Vec<T>, key: impl Fn(&T) -> &String, max: usize) -> Vec<T> {
    let mut keys = HashSet::new();
    let mut batch = Vec::new();
    let mut rest = Vec::new();
    for item in pending.drain(..) {
        if batch.len() < max && keys.insert(key(&item).clone()) {
            batch.push(item);
        } else {
            rest.push(item);
        }
    }
    *pending = rest;
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_takes_each_key_once_and_at_most_max_answers() {
        let mut pending: Vec<String> = ["a", "b", "a", "c", "d"].map(String::from).to_vec();
        let batch = take(&mut pending, |k| k, 3);
        assert_eq!(batch, ["a", "b", "c"]);
        assert_eq!(
            pending,
            ["a", "d"],
            "the second `a` and what did not fit wait, in order"
        );
        let batch = take(&mut pending, |k| k, 3);
        assert_eq!(batch, ["a", "d"]);
        assert!(pending.is_empty());
    }
}
