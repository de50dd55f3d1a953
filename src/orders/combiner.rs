//! The combining queue: orders for one product wait on this instance in arrival order, and
//! one worker at a time (see `worker`) takes the product's guard (for `zk`, the
//! ZooKeeper lock: one node in the fair queue for the whole instance), serves up to
//! `batch_max` of them in one lock cycle, releases, and goes again while anyone waits.
//! Orders that arrive during a cycle form the next one, so batches grow with the load and no
//! order waits for a batch to fill.
//!
//! Across instances the ZooKeeper queue stays first come, first served; inside an instance,
//! this queue does.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use uuid::Uuid;

use super::model::{Ticket, Waiting};
use crate::error::Error;
use crate::group::relock;

#[derive(Clone, Default)]
pub struct Combiner {
    queues: Arc<Mutex<HashMap<i64, Arc<Queue>>>>,
}

/// One product's queue on this instance.
pub(super) struct Queue {
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
    /// Seconds from one batch's answers to the next's lately, while the queue stayed busy
    /// (the lock's turn among the instances and the cycle itself; 0: not known yet).
    cycle: f64,
    /// When the last batch had its answers, or the worker started after an idle spell.
    since: Option<Instant>,
}

impl QueueState {
    fn publish(&self, waiting: &watch::Sender<usize>) {
        waiting.send_replace(self.waiting.len());
    }
}

impl Combiner {
    fn queue(&self, product_id: i64) -> Arc<Queue> {
        let mut queues = relock(&self.queues);
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

    /// Queues the order; its answer arrives on its reply channel. Returns the queue when no
    /// worker runs for it yet: the caller starts one. 429 `too_busy` when this instance
    /// already has `max` orders of the product queued or being served.
    pub(super) fn submit(
        &self,
        product_id: i64,
        waiting: Waiting,
        max: usize,
    ) -> Result<Option<Arc<Queue>>, Error> {
        let queue = self.queue(product_id);
        let start_worker = {
            let mut st = queue.state();
            if st.waiting.len() + st.serving >= max {
                return Err(Error::TooBusy);
            }
            st.waiting.push_back(waiting);
            st.publish(&queue.waiting);
            let start = !std::mem::replace(&mut st.worker, true);
            if start {
                // An idle spell is not the queue's pace: its rate counts from here.
                st.since = Some(Instant::now());
            }
            start
        };
        Ok(start_worker.then_some(queue))
    }

    /// The product's queue, if any order of it ever queued here.
    fn existing(&self, product_id: i64) -> Option<Arc<Queue>> {
        relock(&self.queues).get(&product_id).cloned()
    }

    /// Takes the order out of the queue if no lock cycle has taken it yet.
    pub fn withdraw(&self, product_id: i64, id: Uuid) -> Option<Ticket> {
        let queue = self.existing(product_id)?;
        let mut st = queue.state();
        let at = st.waiting.iter().position(|w| w.ticket.id == id)?;
        let waiting = st.waiting.remove(at)?;
        st.publish(&queue.waiting);
        Some(waiting.ticket)
    }

    /// Orders of the product queued or being served on this instance.
    pub fn queued(&self, product_id: i64) -> usize {
        self.load(product_id, 1).0
    }

    /// Orders of the product queued or being served on this instance, and how long one
    /// more would wait for its answer at the pace of this instance's recent lock cycles:
    /// the cycles its place needs, `batch_max` orders each, one cycle time each (`None`
    /// until a cycle has been timed).
    pub fn load(&self, product_id: i64, batch_max: usize) -> (usize, Option<Duration>) {
        self.existing(product_id).map_or((0, None), |queue| {
            let st = queue.state();
            let queued = st.waiting.len() + st.serving;
            let cycles = (queued + 1).div_ceil(batch_max.max(1));
            // An empty queue serves the next order in its next cycle, whatever the last took.
            let timed = st.cycle > 0.0 && queued > 0;
            let wait = timed.then(|| Duration::from_secs_f64(cycles as f64 * st.cycle));
            (queued, wait)
        })
    }
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, QueueState> {
        relock(&self.state)
    }
}

/// The worker's side of a queue.
impl Queue {
    /// Whether the worker should stop: nobody waits (then it is marked stopped, and the next
    /// order to queue starts a new one).
    pub(super) fn stop_if_empty(&self) -> bool {
        let mut st = self.state();
        if st.waiting.is_empty() {
            st.worker = false;
        }
        !st.worker
    }

    /// How many wait, as it changes.
    pub(super) fn waiting(&self) -> watch::Receiver<usize> {
        self.waiting.subscribe()
    }

    /// The next batch, at most `max` orders in arrival order, now being served.
    pub(super) fn take(&self, max: usize) -> Vec<Waiting> {
        let mut st = self.state();
        let n = st.waiting.len().min(max);
        let batch: Vec<Waiting> = st.waiting.drain(..n).collect();
        st.serving = batch.len();
        st.publish(&self.waiting);
        batch
    }

    /// The batch being served has its answers: its cycle counts towards the queue's pace
    /// (at most `cap`).
    pub(super) fn cycle_ended(&self, cap: Duration) {
        let mut st = self.state();
        let now = Instant::now();
        if let Some(since) = st.since.filter(|_| st.serving > 0) {
            // At most `cap` (the lock timeout) a cycle: a queue that can hold one batch
            // always admits one more, so a cycle slowed by an outage (a lock wait that timed
            // out, a commit that hung) cannot make it refuse everything with no cycle left
            // to measure a better pace.
            let took = now.saturating_duration_since(since).min(cap).as_secs_f64();
            // Smoothed over the last few cycles: one slow cycle (a pause of ZooKeeper's)
            // must not turn a crowd away.
            st.cycle = if st.cycle > 0.0 {
                0.7 * st.cycle + 0.3 * took
            } else {
                took
            };
        }
        st.since = Some(now);
        st.serving = 0;
    }

    /// Every waiting order, out of the queue (the guard could not be entered).
    pub(super) fn drain(&self) -> Vec<Waiting> {
        let mut st = self.state();
        let all = st.waiting.drain(..).collect();
        st.publish(&self.waiting);
        all
    }
}
