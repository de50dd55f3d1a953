//! The combining queue: orders for one product wait on this instance in arrival order, and
//! one worker at a time takes the product's guard (for `zk`, the ZooKeeper lock: one node in
//! the fair queue for the whole instance), serves up to `batch_max` of them in one lock cycle,
//! releases, and goes again while anyone waits. Orders that arrive during a cycle form the
//! next one, so batches grow with the load and no order waits for a batch to fill.
//!
//! Across instances the ZooKeeper queue stays first come, first served; inside an instance,
//! this queue does.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};
use tracing::Instrument;
use uuid::Uuid;

use super::batch::Ticket;
use super::{cycle, demo, step, Answer, Waiting};
use crate::error::AppError;
use crate::inventory::{self, Terms};
use crate::lock::{LockError, Session};
use crate::state::AppState;

#[derive(Clone, Default)]
pub struct Combiner {
    queues: Arc<Mutex<HashMap<i64, Arc<Queue>>>>,
}

struct Queue {
    state: Mutex<QueueState>,
    /// How many wait (not counting a batch being served): the worker gives up its place in
    /// the lock queue when this falls to 0 (everyone left: timed out, hung up).
    waiting: watch::Sender<usize>,
}

#[derive(Default)]
struct QueueState {
    waiting: VecDeque<Waiting>,
    /// Orders of the batch being served now.
    serving: usize,
    /// A worker runs: new orders only queue.
    worker: bool,
}

impl QueueState {
    fn publish(&self, waiting: &watch::Sender<usize>) {
        waiting.send_replace(self.waiting.len());
    }
}

impl Combiner {
    fn queue(&self, product_id: i64) -> Arc<Queue> {
        let mut queues = self.queues.lock().expect("queues poisoned");
        queues
            .entry(product_id)
            .or_insert_with(|| {
                Arc::new(Queue {
                    state: Mutex::new(QueueState::default()),
                    waiting: watch::channel(0).0,
                })
            })
            .clone()
    }

    /// Queues the order; its answer arrives on the receiver. 429 `too_busy` when this
    /// instance already has `--max-waiters-per-product` orders of the product queued or
    /// being served.
    pub fn submit(
        &self,
        state: &AppState,
        terms: Arc<Terms>,
        ticket: Ticket,
    ) -> Result<oneshot::Receiver<Answer>, AppError> {
        let queue = self.queue(terms.id);
        let (reply, answer) = oneshot::channel();
        let start_worker = {
            let mut st = queue.state.lock().expect("queue poisoned");
            if st.waiting.len() + st.serving >= state.config.max_waiters_per_product {
                return Err(AppError::TooBusy);
            }
            st.waiting.push_back(Waiting::new(ticket, reply));
            st.publish(&queue.waiting);
            !std::mem::replace(&mut st.worker, true)
        };
        if start_worker {
            state.tasks.spawn(work(state.clone(), terms, queue));
        }
        Ok(answer)
    }

    /// The product's queue, if any order of it ever queued here.
    fn existing(&self, product_id: i64) -> Option<Arc<Queue>> {
        self.queues
            .lock()
            .expect("queues poisoned")
            .get(&product_id)
            .cloned()
    }

    /// Takes the order out of the queue if no lock cycle has taken it yet.
    pub fn withdraw(&self, product_id: i64, id: Uuid) -> Option<Ticket> {
        let queue = self.existing(product_id)?;
        let mut st = queue.state.lock().expect("queue poisoned");
        let at = st.waiting.iter().position(|w| w.ticket.id == id)?;
        let waiting = st.waiting.remove(at)?;
        st.publish(&queue.waiting);
        Some(waiting.ticket)
    }

    /// Orders of the product queued or being served on this instance.
    pub fn queued(&self, product_id: i64) -> usize {
        self.existing(product_id).map_or(0, |queue| {
            let st = queue.state.lock().expect("queue poisoned");
            st.waiting.len() + st.serving
        })
    }
}

/// The product's worker: lock cycles until nobody waits.
async fn work(state: AppState, terms: Arc<Terms>, queue: Arc<Queue>) {
    let batch_max = usize::try_from(terms.batch_max).unwrap_or(1).max(1);
    loop {
        {
            let mut st = queue.state.lock().expect("queue poisoned");
            if st.waiting.is_empty() {
                st.worker = false;
                return;
            }
        }
        let demo = demo::armed(&state, &terms).await;
        let session = if demo.is_some() {
            Session::Own
        } else {
            Session::Shared
        };
        let mut waiting = queue.waiting.subscribe();
        // A cycle serves many requests: its span stands alone, and each order it serves
        // names it (see `orders::cycle`).
        let span = super::CycleSpan::new(&terms, true);
        // Each order keeps its own deadline (see `orders::queue`); the worker keeps its place
        // in the lock queue while anyone is left to serve.
        let entered = tokio::select! {
            entered = inventory::enter_for_sale(&state, terms.id, terms.guard, session, step::lock_timeout(&state, terms.id)).instrument(span.span.clone()) => entered,
            _ = waiting.wait_for(|n| *n == 0) => continue,
        };
        let entered = match entered {
            Ok(entered) => entered,
            // Still someone waiting (each leaves at its own deadline): queue again.
            Err(LockError::Timeout(_)) => continue,
            Err(e) => {
                fail_waiting(&state, &terms, &queue, AppError::from(e)).await;
                continue;
            }
        };
        let batch: Vec<Waiting> = {
            let mut st = queue.state.lock().expect("queue poisoned");
            let n = st.waiting.len().min(batch_max);
            let batch: Vec<Waiting> = st.waiting.drain(..n).collect();
            st.serving = batch.len();
            st.publish(&queue.waiting);
            batch
        };
        if !batch.is_empty() {
            cycle(&state, &terms, entered, demo, batch, span.number)
                .instrument(span.span)
                .await;
        }
        queue.state.lock().expect("queue poisoned").serving = 0;
    }
}

/// The guard could not be entered (ZooKeeper unavailable, the session lost): every waiting
/// order gets the error it would have got alone.
async fn fail_waiting(state: &AppState, terms: &Terms, queue: &Queue, error: AppError) {
    let failed: Vec<Waiting> = {
        let mut st = queue.state.lock().expect("queue poisoned");
        let failed = st.waiting.drain(..).collect();
        st.publish(&queue.waiting);
        failed
    };
    let tickets: Vec<&Ticket> = failed.iter().map(|w| &w.ticket).collect();
    super::store::ended(
        &state.db,
        terms,
        &tickets,
        super::OrderStatus::Failed,
        Some(error.code()),
    )
    .await;
    for waiting in failed {
        let _ = waiting.reply.send(Err(error.again_for(waiting.ticket.id)));
    }
}
