//! What a lock holder may do between reading and writing the stock, besides the usual think:
//!
//! - the teaching page's **demos** of a holder's misfortunes (admin-armed, one-shot, shared
//!   through ZooKeeper so exactly one order on any instance acts one out);
//! - **holds**: pause the next holder of a product until released. In-process only: tests
//!   use it to do something "while X holds the lock" without racing a timer.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::events;
use crate::inventory::{self, Terms};
use crate::lock::StockLock;
use crate::state::AppState;

/// The teaching page's demos of a lock holder's misfortunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Demo {
    /// The next holder stalls between reading and writing the stock until its session has
    /// ended and a newer holder has claimed the row; then it writes anyway, and the fence
    /// refuses it.
    Zombie,
    /// The next holder's session ends as soon as it holds the lock: its node vanishes and
    /// the queue moves on, with no write at all.
    Crash,
}

impl Demo {
    pub fn flag(self, product_id: i64) -> String {
        match self {
            Demo::Zombie => format!("{product_id}-zombie"),
            Demo::Crash => format!("{product_id}-crash"),
        }
    }
}

/// The demo this order acts out, if one is armed for the product and this order is the one
/// that took the flag (exactly one order, across instances, gets it).
pub async fn armed(state: &AppState, product: &Terms) -> Option<Demo> {
    if !state.config.allow_unsafe_guards || product.guard.recipe().is_none() {
        return None;
    }
    for demo in [Demo::Zombie, Demo::Crash] {
        let flag = demo.flag(product.id);
        if state.demo.is_raised(&flag) && state.demo.take(&flag).await {
            return Some(demo);
        }
    }
    None
}

/// A boxed pause, to choose between kinds at run time.
pub type Pause = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The ordinary pause between reading and writing the stock: an armed hold if there is one
/// for the product, else the configured think.
pub fn pause(state: &AppState, product_id: i64) -> Pause {
    match state.holds.take(product_id) {
        Some(held) => Box::pin(held.wait()),
        None => Box::pin(inventory::think(state.config.stock_think())),
    }
}

/// The pause for a holder acting out `demo`: the zombie's stall, which takes the lock away
/// first; otherwise the ordinary [`pause`].
pub fn pause_for(
    state: &AppState,
    product_id: i64,
    demo: Option<Demo>,
    lock: &mut Option<StockLock>,
) -> Pause {
    match (demo, lock.as_ref().map(|l| l.token.zxid)) {
        (Some(Demo::Zombie), Some(token)) => Box::pin(stall_until_superseded(
            state.db.clone(),
            product_id,
            token,
            lock.take(),
        )),
        _ => pause(state, product_id),
    }
}

/// The crash: the holder's session ends with its lock (its node vanishes, as in a crash)
/// before it writes anything.
pub async fn crash(db: &PgPool, product_id: i64, order_id: Uuid, lock: StockLock) {
    let token = lock.token.zxid;
    drop(lock);
    let event =
        json!({ "kind": "crash", "product_id": product_id, "order_id": order_id, "token": token });
    events::notify_demo(db, event).await;
}

/// Tells the page how the zombie's write ended. Nobody may have taken over within the stall:
/// then the zombie's token was still the newest and its write was (rightly) accepted.
pub async fn report_zombie(db: &PgPool, product_id: i64, order_id: Uuid, token: i64, fenced: bool) {
    let current = inventory::fence(db, product_id).await.unwrap_or_default();
    let write = if fenced { "rejected" } else { "accepted" };
    let event = json!({
        "kind": "zombie", "product_id": product_id, "order_id": order_id,
        "stale_token": token, "current_token": current, "write": write,
    });
    events::notify_demo(db, event).await;
}

/// The zombie's stall: its lock (in a session of its own) goes, as a session does when a
/// long pause outlasts it; then it waits, at most 15 s, for a newer holder to claim the row.
async fn stall_until_superseded(db: PgPool, product_id: i64, token: i64, lock: Option<StockLock>) {
    drop(lock);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        if inventory::fence(&db, product_id)
            .await
            .is_ok_and(|f| f.is_some_and(|f| f > token))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Lock holders waiting to be paused, per product, in the order the holds were armed.
#[derive(Clone, Default)]
pub struct Holds {
    armed: Arc<Mutex<HashMap<i64, VecDeque<Held>>>>,
}

/// The holder's side of a hold.
struct Held {
    reached: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

impl Held {
    async fn wait(self) {
        let _ = self.reached.send(());
        // Released, or the hold dropped: either way, go on.
        let _ = self.release.await;
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
            });
        Hold {
            reached,
            release: Some(release),
        }
    }

    fn take(&self, product_id: i64) -> Option<Held> {
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
