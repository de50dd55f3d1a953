//! The step-through sale: with step mode on, each holder keeps the product's lock after its
//! write until "next"; each next releases one holder and wakes exactly one waiter under the
//! fair lock, every waiter under the herd lock; what is sold is what would have been sold.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

async fn step(base: &str, product: i64, action: &str) -> Reply {
    send(
        http()
            .post(format!("{base}/api/products/{product}/step"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "action": action })),
    )
    .await
    .unwrap()
}

/// The lock view once it shows a holder and `waiting` buyers queued on this instance
/// (holder included in `waiting_here`).
async fn frozen_with(base: &str, product: i64, waiting: u64) -> Value {
    wait_until(Duration::from_secs(30), "the queue to freeze", || async {
        let view = lock_view(base, product).await;
        (view["holder"].is_object() && view["waiting_here"].as_u64() == Some(waiting))
            .then_some(view)
    })
    .await
}

/// Three clicks on a product with four buyers queued; `woken[i]` waiters must wake on click
/// i (counted by the lock view's stats on this instance). Each click waits until at least
/// that many woke; once every buyer is served, the total must be exactly their sum: a lock
/// waking more waiters than it should fails, whenever the extra wakes arrive.
async fn three_clicks(guard: &str, woken: [u64; 3]) {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--allow-unsafe-guards"]).await;
    let base = &app.base_url;
    let product = create_per_request_product(base, 10, guard).await;
    let started = step(base, product, "start").await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{started:?}");
    assert_eq!(started.body["stepping"], true);

    // The first buyer is served and answered, and its lock stays held.
    let first = place_order(&http(), base, product, "buyer-0")
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    frozen_with(base, product, 1).await;
    let waiters: Vec<_> = (1..4)
        .map(|i| spawn_order(base, product, &format!("buyer-{i}")))
        .collect();
    let mut view = frozen_with(base, product, 4).await;
    if guard == "zk" {
        // Each buyer has its place here before its node: it read-locks the terms first.
        view = wait_until(Duration::from_secs(30), "three nodes queued", || async {
            let view = lock_view(base, product).await;
            (view["waiters"].as_array()?.len() == 3).then_some(view)
        })
        .await;
    }
    let wakeups = |view: &Value| view["stats"]["wakeups"].as_u64().unwrap();
    let before = wakeups(&view);
    let mut expected = before;
    for click in 1..=3u64 {
        // A release wakes only the waiters already watching: one between its create and its
        // watch would find the lock free and take it unwoken. Every waiter left must watch.
        view = wait_until(Duration::from_secs(30), "every waiter watching", || async {
            let view = lock_view(base, product).await;
            (view["stats"]["watching"].as_u64() == Some(4 - click)).then_some(view)
        })
        .await;
        let holder = view["holder"]["token"].as_i64().unwrap();
        expected += woken[click as usize - 1];
        let next = step(base, product, "next").await;
        assert_eq!(next.body["released"], holder, "{next:?}");
        // The next holder has written (a sale more) and holds in its turn.
        wait_until(Duration::from_secs(30), "the next holder", || async {
            let view = lock_view(base, product).await;
            let moved = view["holder"]["token"]
                .as_i64()
                .is_some_and(|t| t != holder)
                && view["waiting_here"].as_u64() == Some(4 - click)
                && view["stats"]["acquisitions"].as_u64() == Some(click + 1)
                && wakeups(&view) >= expected;
            moved.then_some(())
        })
        .await;
    }
    let stopped = step(base, product, "stop").await;
    assert_eq!(stopped.body["stepping"], false);
    for waiter in waiters {
        let reply = waiter.await.unwrap().unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    }
    // Nothing sold differently: four buyers, four units, books balanced.
    let books = audit(base, product).await;
    assert_eq!(
        (books["sold"].as_i64(), books["consistent"].as_bool()),
        (Some(4), Some(true))
    );
    let settled = wakeups(&lock_view(base, product).await);
    assert_eq!(
        settled - before,
        woken.iter().sum::<u64>(),
        "wake-ups over the three clicks"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn each_next_wakes_exactly_one_waiter_of_the_fair_lock() {
    three_clicks("zk", [1, 1, 1]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_next_wakes_every_waiter_of_the_herd_lock() {
    // Three waiters, then two, then one: each release wakes all of them.
    three_clicks("zk-herd", [3, 2, 1]).await;
}

#[tokio::test]
async fn stepping_needs_the_unsafe_demo_flag_and_a_locked_product() {
    let env = TestEnv::new().await;
    let safe = env.spawn_app(&[]).await;
    let product = create_per_request_product(&safe.base_url, 5, "zk").await;
    let reply = step(&safe.base_url, product, "start").await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::FORBIDDEN, "demo_disabled")
    );
    let demo = env.spawn_app(&["--allow-unsafe-guards"]).await;
    let plain = create_product(&demo.base_url, 5, "pg-atomic").await;
    let reply = step(&demo.base_url, plain, "start").await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::NOT_FOUND, "no_lock")
    );
    // And a sale without step mode is not held.
    let reply = place_order(&http(), &demo.base_url, product, "free")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::CREATED);
    let view = lock_view(&demo.base_url, product).await;
    assert!(view["holder"].is_null(), "{view}");
}
