//! What the teaching page is built on: the lock-queue view, the live event stream, the herd
//! lock beside the fair one, and the crash and zombie demos.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// Reads server-sent events until one of type `kind` satisfies `wanted`, or `limit` passes.
async fn next_event(
    response: &mut reqwest::Response,
    buffer: &mut String,
    kind: &str,
    limit: Duration,
    wanted: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut event_kind = "message";
            let mut data = String::new();
            for line in block.lines() {
                if let Some(k) = line.strip_prefix("event:") {
                    event_kind = k.trim();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            if event_kind == kind {
                if let Ok(value) = serde_json::from_str::<Value>(&data) {
                    if wanted(&value) {
                        return Some(value);
                    }
                }
            }
        }
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .ok()?
            .ok()??;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

async fn subscribe(base: &str) -> reqwest::Response {
    let response = reqwest::Client::new()
        .get(format!("{base}/api/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    response
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lock_view_shows_the_holder_and_each_waiter_watching_its_predecessor() {
    let env = TestEnv::new().await;
    let holder = env.spawn_app(&["--instance", "holder"]).await;
    let other = env
        .spawn_app(&["--lock-timeout-ms", "30000", "--instance", "other"])
        .await;
    let product = create_product_with(
        &holder.base_url,
        json!({ "stock": 10, "per_user_limit": 5, "batch_max": 1 }),
    )
    .await;

    let mut hold = holder.holds.hold_next(product);
    let first = spawn_order(&holder.base_url, product, "first");
    let watcher = env.zk_client().await;
    hold.reached().await;
    let waiters: Vec<_> = (0..2)
        .map(|i| {
            let base = other.base_url.clone();
            tokio::spawn(async move {
                place_order(&http(), &base, product, &format!("waiter-{i}")).await
            })
        })
        .collect();
    env.wait_for_queue(&watcher, product, 3, "two waiters")
        .await;

    let view = lock_view(&other.base_url, product).await;
    assert_eq!(view["recipe"], "fair");
    assert_eq!(view["holder"]["owner"], "holder", "{view}");
    let waiting = view["waiters"].as_array().unwrap();
    assert_eq!(waiting.len(), 2, "{view}");
    let mut predecessor = view["holder"]["node"].as_str().unwrap();
    for waiter in waiting {
        assert_eq!(waiter["owner"], "other");
        assert_eq!(
            waiter["watches"], predecessor,
            "each waiter watches only the node before it: {view}"
        );
        assert!(waiter["seq"].as_u64() > view["holder"]["seq"].as_u64());
        predecessor = waiter["node"].as_str().unwrap();
    }
    assert_eq!(view["waiting_here"], 2, "{view}");

    hold.release();
    assert_eq!(first.await.unwrap().unwrap().status, StatusCode::CREATED);
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().unwrap().status, StatusCode::CREATED);
    }
    let view = lock_view(&other.base_url, product).await;
    assert!(
        view["holder"].is_null() && view["waiters"].as_array().unwrap().is_empty(),
        "{view}"
    );
    assert_eq!(
        view["stats"]["acquisitions"], 2,
        "this instance acquired twice: {view}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purchase_and_its_queue_reach_every_subscriber() {
    let env = TestEnv::new().await;
    let watched = env.spawn_app(&["--instance", "watched"]).await;
    let buyer_side = env
        .spawn_app(&["--stock-think-ms", "300", "--instance", "buyer-side"])
        .await;
    let product = create_product(&watched.base_url, 5, "zk").await;
    let mut stream = subscribe(&watched.base_url).await;
    let mut buffer = String::new();

    // Bought through the other instance: the event still reaches this one's subscribers.
    let reply = place_order(&http(), &buyer_side.base_url, product, "eve")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::CREATED);

    let event = next_event(
        &mut stream,
        &mut buffer,
        "product",
        Duration::from_secs(10),
        |p| p["id"] == product && p["stock"] == 4,
    )
    .await
    .expect("a product event after the purchase");
    assert_eq!(event["sold"], 1);
    let queue = next_event(
        &mut stream,
        &mut buffer,
        "queue",
        Duration::from_secs(10),
        |q| q["product_id"] == product,
    )
    .await
    .expect("a queue event while the order held the lock");
    assert_eq!(queue["recipe"], "fair");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_herd_lock_sells_exactly_but_wakes_more_waiters_per_acquisition() {
    let env = TestEnv::new().await;
    let (_servers, urls) = three_instances(
        &env,
        &["--stock-think-ms", "10", "--lock-timeout-ms", "60000"],
    )
    .await;
    let mut cost = Vec::new();
    for guard in ["zk", "zk-herd"] {
        let product = create_per_request_product(&urls[0], 40, guard).await;
        let replies = flash_sale(&urls, product, 40).await;
        let sold = replies
            .iter()
            .flatten()
            .filter(|r| r.status == StatusCode::CREATED)
            .count();
        assert_eq!(sold, 40, "{guard}: every buyer gets one of the 40 units");
        let audit = audit(&urls[0], product).await;
        assert_eq!(
            (audit["sold"].as_i64(), audit["consistent"].as_bool()),
            (Some(40), Some(true)),
            "{guard}: {audit}"
        );
        let (mut acquisitions, mut wakeups) = (0, 0);
        for url in &urls {
            let view = lock_view(url, product).await;
            acquisitions += view["stats"]["acquisitions"].as_u64().unwrap();
            wakeups += view["stats"]["wakeups"].as_u64().unwrap();
        }
        assert_eq!(acquisitions, 40, "{guard}");
        cost.push(wakeups as f64 / acquisitions as f64);
    }
    let (fair, herd) = (cost[0], cost[1]);
    eprintln!("wake-ups per acquisition: fair {fair:.2}, herd {herd:.2}");
    assert!(
        fair <= 1.0,
        "a fair waiter wakes once, when its predecessor goes: {fair:.2}"
    );
    assert!(
        herd > 2.0 * fair.max(0.5),
        "the herd wakes everyone on every release: {herd:.2} vs {fair:.2}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_zombie_demo_shows_the_fence_refusing_the_stale_write() {
    let env = TestEnv::new().await;
    let flags = ["--allow-unsafe-guards", "--lock-timeout-ms", "30000"];
    let a = env
        .spawn_app(&[&flags[..], &["--instance", "a"]].concat())
        .await;
    let b = env
        .spawn_app(&[&flags[..], &["--instance", "b"]].concat())
        .await;
    let product = create_product(&a.base_url, 5, "zk").await;
    let mut stream = subscribe(&b.base_url).await;
    let mut buffer = String::new();

    // Armed on the zombie's own instance: it has the flag the moment the answer comes
    // (another instance learns of it through its watch a little later, and an order placed
    // there before would not act it out).
    let armed = send(
        http()
            .post(format!("{}/api/products/{product}/demo", a.base_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "mode": "zombie" })),
    )
    .await
    .unwrap();
    assert_eq!(armed.status, StatusCode::ACCEPTED, "{armed:?}");

    // The next holder becomes the zombie; the buyer after it takes over.
    let zombie = spawn_order(&a.base_url, product, "zombie");
    let db = env.db.clone();
    wait_until(Duration::from_secs(10), "the zombie's claim", || async {
        let fence: i64 = sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
            .bind(product)
            .fetch_one(&db)
            .await
            .ok()?;
        (fence > 0).then_some(())
    })
    .await;
    let successor = place_order(&http(), &b.base_url, product, "successor")
        .await
        .unwrap();
    assert_eq!(successor.status, StatusCode::CREATED, "{successor:?}");
    let zombie = zombie.await.unwrap().unwrap();
    assert_eq!(
        (zombie.status, zombie.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
        "{zombie:?}"
    );

    let event = next_event(
        &mut stream,
        &mut buffer,
        "demo",
        Duration::from_secs(10),
        |d| d["kind"] == "zombie",
    )
    .await
    .expect("the demo event");
    assert_eq!(event["write"], "rejected");
    assert!(
        event["stale_token"].as_i64() < event["current_token"].as_i64(),
        "{event}"
    );
    assert_eq!(event["current_token"], successor.body["fence"], "{event}");
    assert_eq!(env.stock(product).await, 4, "only the successor sold");
    assert_eq!(audit(&a.base_url, product).await["consistent"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_crash_demo_loses_the_holder_and_the_queue_moves_on() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--allow-unsafe-guards"]).await;
    let product = create_product(&app.base_url, 5, "zk-herd").await;
    let arm = |mode: &'static str| {
        let base = app.base_url.clone();
        async move {
            send(
                http()
                    .post(format!("{base}/api/products/{product}/demo"))
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&json!({ "mode": mode })),
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(arm("crash").await.status, StatusCode::ACCEPTED);
    let crashed = place_order(&http(), &app.base_url, product, "crashed")
        .await
        .unwrap();
    assert_eq!(
        (crashed.status, crashed.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "lock_lost")
    );
    let failure: Option<String> =
        sqlx::query_scalar("SELECT failure FROM orders WHERE user_id = 'crashed'")
            .fetch_one(&env.db)
            .await
            .unwrap();
    assert_eq!(failure.as_deref(), Some("crashed"));
    let next = place_order(&http(), &app.base_url, product, "next")
        .await
        .unwrap();
    assert_eq!(next.status, StatusCode::CREATED, "{next:?}");
    assert_eq!(env.stock(product).await, 4);
    assert_eq!(arm("nonsense").await.status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread")]
async fn demos_need_the_servers_consent() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let reply = send(
        http()
            .post(format!("{}/api/products/{product}/demo", app.base_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "mode": "zombie" })),
    )
    .await
    .unwrap();
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::FORBIDDEN, "demo_disabled")
    );
    let no_lock = create_product(&app.base_url, 5, "pg-atomic").await;
    let view = send(http().get(format!("{}/api/products/{no_lock}/lock", app.base_url)))
        .await
        .unwrap();
    assert_eq!(
        (view.status, view.code()),
        (StatusCode::NOT_FOUND, "no_lock")
    );
}
