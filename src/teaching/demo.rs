//! The teaching page's demos of a lock holder's misfortunes: admin-armed, one-shot, shared
//! through ZooKeeper flags so exactly one lock cycle, on any instance, acts one out.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::events;
use crate::flags::Flags;
use crate::inventory;
use crate::lock::StockLock;

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

/// The demo armed for the product, if one is and this caller is the one that took its flag
/// (exactly one, across instances, gets it).
pub(super) async fn take_armed(flags: &Flags, product_id: i64) -> Option<Demo> {
    for demo in [Demo::Zombie, Demo::Crash] {
        let flag = demo.flag(product_id);
        if flags.is_raised(&flag) && flags.take(&flag).await {
            return Some(demo);
        }
    }
    None
}

/// The crash: the holder's session ends with its lock (its node vanishes, as in a crash)
/// before it writes anything.
pub(super) async fn crash(db: &PgPool, product_id: i64, order_id: Uuid, lock: StockLock) {
    let token = lock.token.zxid;
    drop(lock);
    let event =
        json!({ "kind": "crash", "product_id": product_id, "order_id": order_id, "token": token });
    events::notify_demo(db, event).await;
}

/// Tells the page how the zombie's write ended. Nobody may have taken over within the stall:
/// then the zombie's token was still the newest and its write was (rightly) accepted.
pub(super) async fn report_zombie(
    db: &PgPool,
    product_id: i64,
    order_id: Uuid,
    token: i64,
    fenced: bool,
) {
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
pub(super) async fn stall_until_superseded(
    db: PgPool,
    product_id: i64,
    token: i64,
    lock: Option<StockLock>,
) {
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
