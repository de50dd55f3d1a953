//! Live events for the teaching page (`GET /api/events`, server-sent events): product
//! snapshots when stock changes, lock-queue snapshots when ZooKeeper nodes come and go, and
//! demo outcomes — from every instance, not just the one the page talks to.
//!
//! Sources: stock writes `pg_notify` in their own statement (delivered on commit, to every
//! instance's LISTEN); lock nodes are followed through a persistent recursive ZooKeeper
//! watch on `{root}/locks`, set only while someone is subscribed, so a sale nobody watches
//! pays nothing for it; and this instance's waiters that wake or begin or stop watching
//! (`Zk::take_lock_news`), which need change no node (a herd's waiters create none).
//! Changes are coalesced per product and sent as full snapshots at most every [`TICK`], so a
//! slow page loses intermediate states, never the latest one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{broadcast, watch, Notify};
use zookeeper_client as zk;

use crate::flags::Flags;
use crate::inventory::{self, Guard};
use crate::lock::Zk;
use crate::telemetry::metrics;

/// The PostgreSQL channel every instance listens on.
pub const CHANNEL: &str = "seckill_events";
const TICK: Duration = Duration::from_millis(100);

/// One server-sent event: its type (`product`, `queue`, `demo`) and JSON data.
#[derive(Clone, Debug)]
pub struct Message {
    pub kind: &'static str,
    pub data: String,
}

#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

struct Inner {
    tx: broadcast::Sender<Message>,
    /// Products whose stock or queue changed since the last tick.
    dirty: Mutex<Dirty>,
    /// Wakes the queue watcher when the first subscriber arrives.
    subscribed: Notify,
    /// Set on shutdown: open streams end so the server can drain.
    stopping: watch::Sender<bool>,
}

#[derive(Default)]
struct Dirty {
    products: HashSet<i64>,
    queues: HashSet<i64>,
}

impl Events {
    pub async fn start(db: PgPool, zk: Zk, sold_out: Flags) -> anyhow::Result<Events> {
        let events = Events {
            inner: Arc::new(Inner {
                tx: broadcast::channel(1024).0,
                dirty: Mutex::new(Dirty::default()),
                subscribed: Notify::new(),
                stopping: watch::channel(false).0,
            }),
        };
        let mut listener = PgListener::connect_with(&db).await?;
        listener.listen(CHANNEL).await?;
        tokio::spawn(listen(events.clone(), listener));
        tokio::spawn(follow_locks(events.clone(), zk.clone()));
        tokio::spawn(tick(events.clone(), db, zk, sold_out));
        Ok(events)
    }

    pub fn subscribe(&self) -> (broadcast::Receiver<Message>, watch::Receiver<bool>) {
        let rx = self.inner.tx.subscribe();
        self.inner.subscribed.notify_one();
        (rx, self.inner.stopping.subscribe())
    }

    /// Ends every open stream (shutdown).
    pub fn stop(&self) {
        self.inner.stopping.send_replace(true);
    }

    /// Sends the product's snapshot at the next tick (for changes that are not stock writes,
    /// like the sold-out flag).
    pub fn touch(&self, product_id: i64) {
        self.mark(|d| {
            d.products.insert(product_id);
        });
    }

    fn watched(&self) -> bool {
        self.inner.tx.receiver_count() > 0
    }

    fn send(&self, kind: &'static str, data: &impl serde::Serialize) {
        if self.watched() {
            let data = serde_json::to_string(data).expect("events serialise");
            let _ = self.inner.tx.send(Message { kind, data });
        }
    }

    fn mark(&self, update: impl FnOnce(&mut Dirty)) {
        update(&mut self.inner.dirty.lock().expect("dirty set poisoned"));
    }
}

/// Publishes a demo outcome to every instance's subscribers.
pub async fn notify_demo(db: &PgPool, demo: Value) {
    let payload = serde_json::json!({ "demo": demo }).to_string();
    if let Err(e) = sqlx::query!("SELECT pg_notify($1, $2)", CHANNEL, payload)
        .execute(db)
        .await
    {
        tracing::warn!(error = %e, "could not publish a demo event");
    }
}

async fn listen(events: Events, mut listener: PgListener) {
    let mut stopping = events.inner.stopping.subscribe();
    loop {
        let received = tokio::select! {
            received = listener.recv() => received,
            // Give the connection back so the pool can close.
            _ = stopping.wait_for(|s| *s) => return,
        };
        match received {
            Ok(notification) => {
                let Ok(payload) = serde_json::from_str::<Value>(notification.payload()) else {
                    continue;
                };
                if let Some(id) = payload["product"].as_i64() {
                    events.mark(|d| {
                        d.products.insert(id);
                    });
                } else if payload.get("demo").is_some() {
                    events.send("demo", &payload["demo"]);
                }
            }
            // recv() reconnects on its next call; don't spin while PostgreSQL is away.
            Err(e) => {
                tracing::debug!(error = %e, "event listener lost PostgreSQL; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Follows lock nodes while someone is subscribed.
async fn follow_locks(events: Events, zk: Zk) {
    let locks = format!("{}/locks", zk.root());
    let mut closing = zk.closing();
    loop {
        while !events.watched() {
            tokio::select! {
                _ = events.inner.subscribed.notified() => {}
                _ = closing.wait_for(|c| *c) => return,
            }
        }
        let client = zk.client();
        metrics::zk("add_watch");
        let mut watcher = match client
            .watch(&locks, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(watcher) => watcher,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut check = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                event = watcher.changed() => {
                    if event.event_type == zk::EventType::Session {
                        if event.session_state.is_terminated() {
                            break;
                        }
                        continue;
                    }
                    // {root}/locks/{stock|herd}/{product}/...
                    let id = event.path.strip_prefix(&locks).and_then(|rest| rest.split('/').nth(2)?.parse().ok());
                    if let Some(id) = id {
                        events.mark(|d| {
                            d.queues.insert(id);
                        });
                    }
                }
                _ = check.tick() => if !events.watched() { break },
                _ = closing.wait_for(|c| *c) => return,
            }
        }
    }
}

/// Turns the changes of the last tick into snapshots.
async fn tick(events: Events, db: PgPool, zk: Zk, sold_out: Flags) {
    let mut guards: HashMap<i64, Guard> = HashMap::new();
    let mut ticker = tokio::time::interval(TICK);
    let mut closing = zk.closing();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = closing.wait_for(|c| *c) => return,
        }
        let mut dirty =
            std::mem::take(&mut *events.inner.dirty.lock().expect("dirty set poisoned"));
        dirty.queues.extend(zk.take_lock_news());
        if !events.watched() {
            continue;
        }
        for id in dirty.products.union(&dirty.queues) {
            let Ok(Some(mut product)) = inventory::get(&db, *id).await else {
                continue;
            };
            guards.insert(product.id, product.guard);
            if dirty.products.contains(id) {
                product.sold_out = sold_out.is_raised(&id.to_string());
                events.send("product", &product);
            }
        }
        for id in dirty.queues {
            let Some(recipe) = guards.get(&id).and_then(|g| g.recipe()) else {
                continue;
            };
            if let Ok(view) = zk.queue(id, recipe).await {
                events.send("queue", &view);
            }
        }
    }
}
