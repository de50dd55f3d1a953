//! The source material's other recipes at work: the terms read-write lock, reentrancy, and
//! the sweep's one lock for many returns. (The payment semaphore is `semaphore`; Curator
//! interop for each is in `interop`.)

use std::time::Duration;

use reqwest::StatusCode;
use seckill::lock::{Owner, Recipe, Session};
use serde_json::{json, Value};

use crate::helpers::*;

async fn change_terms(base: &str, product: i64, change: Value) -> Reply {
    send(
        http()
            .put(format!("{base}/api/products/{product}/terms"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&change),
    )
    .await
    .unwrap()
}

async fn terms_lock(base: &str, product: i64) -> Value {
    send(http().get(format!("{base}/api/products/{product}/terms-lock")))
        .await
        .unwrap()
        .body
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terms_change_waits_for_the_cycle_deciding_and_the_next_sells_on_the_new_terms() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 10, "price_cents": 1000, "batch_max": 1, "per_user_limit": 5 }),
    )
    .await;

    // A lock cycle holds the terms (read side) and has read the stock: it stays there.
    let mut hold = app.holds.hold_next(product);
    let before = spawn_order(&app.base_url, product, "before");
    hold.reached().await;
    let view = terms_lock(&app.base_url, product).await;
    assert_eq!(each(&view["holders"], "label"), ["sale"], "{view}");
    let old_node = view["holders"][0]["node"].clone();

    let (base, change) = (app.base_url.clone(), json!({ "price_cents": 2500 }));
    let changing = tokio::spawn(async move { change_terms(&base, product, change).await });
    let view = wait_until(Duration::from_secs(30), "the change waiting", || async {
        let view = terms_lock(&app.base_url, product).await;
        (each(&view["waiters"], "label") == ["terms-change"]).then_some(view)
    })
    .await;
    assert_eq!(view["waiters"][0]["access"], "write", "{view}");
    // The writer cannot be granted while the reader holds: the change has not answered.
    assert!(!changing.is_finished());

    hold.release();
    let before = before.await.unwrap().unwrap();
    assert_eq!(before.status, StatusCode::CREATED, "{before:?}");
    assert_eq!(
        before.body["amount_cents"], 1000,
        "decided before the change"
    );
    let changed = changing.await.unwrap();
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    assert_eq!(changed.body["price_cents"], 2500);
    assert_eq!(changed.body["terms_version"], 2);

    let after = place_order(&http(), &app.base_url, product, "after")
        .await
        .unwrap();
    assert_eq!(after.body["amount_cents"], 2500, "{after:?}");
    // The writer gone, the sale's cycles hold the read side again, on a node of their own
    // (made after the writer's), kept for the cycles to come.
    let view = wait_until(
        Duration::from_secs(30),
        "the sale reading again",
        || async {
            let view = terms_lock(&app.base_url, product).await;
            (each(&view["holders"], "label") == ["sale"] && view["waiters"].as_array()?.is_empty())
                .then_some(view)
        },
    )
    .await;
    assert_eq!(view["holders"][0]["access"], "read", "{view}");
    assert_ne!(
        view["holders"][0]["node"], old_node,
        "a node made after the writer's"
    );
}

/// ZooKeeper writes this instance has sent: creates and deletes.
async fn zk_writes(base: &str) -> (f64, f64) {
    let metrics = scrape(base).await;
    let op = |op: &str| {
        let series = format!("seckill_zk_operations_total{{op=\"{op}\"}}");
        metrics.get(&series).copied().unwrap_or(0.0)
    };
    (op("create"), op("delete"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sales_lock_cycle_costs_zookeeper_two_writes_while_no_terms_change_waits() {
    let env = TestEnv::new().await;
    // Metrics are process-wide: a process of its own.
    let app = env.spawn_process("two-writes", &[]).await;
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 20, "batch_max": 1, "per_user_limit": 20 }),
    )
    .await;
    let zk = env.zk_client().await;
    let terms_dir = format!("{}/locks/terms/{product}", env.zk_root);
    let start = zk_writes(&app.base_url).await;
    let first = place_order(&http(), &app.base_url, product, "first")
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let held = zk.list_children(&terms_dir).await.unwrap();
    assert_eq!(held.len(), 1, "the sale's read node: {held:?}");
    // The first cycle's stock lock node is deleted in the background, after the answer.
    let before = wait_until(
        Duration::from_secs(10),
        "the first cycle's node gone",
        || async {
            let now = zk_writes(&app.base_url).await;
            (now.1 > start.1).then_some(now)
        },
    )
    .await;

    const CYCLES: usize = 5;
    for i in 0..CYCLES {
        let paid = place_order(&http(), &app.base_url, product, &format!("buyer-{i}"))
            .await
            .unwrap();
        assert_eq!(paid.status, StatusCode::CREATED, "{paid:?}");
    }
    // One lock cycle per order (batch_max 1), each its stock lock node created and deleted:
    // the first cycle's terms read node serves them all.
    let after = wait_until(
        Duration::from_secs(10),
        "the cycles' nodes gone",
        || async {
            let now = zk_writes(&app.base_url).await;
            (now.1 - before.1 >= CYCLES as f64).then_some(now)
        },
    )
    .await;
    let writes = (after.0 - before.0) + (after.1 - before.1);
    assert_eq!(
        writes,
        2.0 * CYCLES as f64,
        "2 writes per cycle: {before:?} → {after:?}"
    );
    let still = zk.list_children(&terms_dir).await.unwrap();
    assert_eq!(still, held, "the same read node throughout");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cycle_whose_terms_changed_under_it_sells_nothing() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 10, "price_cents": 1000, "batch_max": 1 }),
    )
    .await;
    // A holder that read the terms, then lost its locks (as to an expired session) while a
    // change went through: the change is simulated in the row, where the write checks it.
    let mut hold = app.holds.hold_next(product);
    let stale = spawn_order(&app.base_url, product, "stale");
    hold.reached().await;
    sqlx::query(
        "UPDATE products SET price_cents = 3000, terms_version = terms_version + 1 WHERE id = $1",
    )
    .bind(product)
    .execute(&env.db)
    .await
    .unwrap();
    hold.release();
    let stale = stale.await.unwrap().unwrap();
    assert_eq!(stale.status, StatusCode::SERVICE_UNAVAILABLE, "{stale:?}");
    assert_eq!(stale.code(), "lock_lost");
    assert_eq!(
        env.stock(product).await,
        10,
        "nothing sold on the old terms"
    );
    let next = place_order(&http(), &app.base_url, product, "next")
        .await
        .unwrap();
    assert_eq!(next.body["amount_cents"], 3000, "{next:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_instance_sells_on_the_changed_terms_without_being_told() {
    let env = TestEnv::new().await;
    let (_servers, urls) = {
        let a = env.spawn_process("instance-a", &[]).await;
        let b = env.spawn_process("instance-b", &[]).await;
        let urls = vec![a.base_url.clone(), b.base_url.clone()];
        (vec![a, b], urls)
    };
    let product = create_product_with(
        &urls[0],
        json!({ "stock": 20, "price_cents": 700, "max_per_order": 3, "per_user_limit": 10 }),
    )
    .await;
    // Instance b keeps the terms after its first order.
    let first = place_order_of(&http(), &urls[1], product, "buyer", 2)
        .await
        .unwrap();
    assert_eq!(first.body["amount_cents"], 1400, "{first:?}");

    let changed = change_terms(
        &urls[0],
        product,
        json!({ "price_cents": 900, "max_per_order": 1 }),
    )
    .await;
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");

    // b's copy says 3 per order at 700; its lock cycle reads the row and decides on 1 at 900.
    let over = place_order_of(&http(), &urls[1], product, "buyer", 2)
        .await
        .unwrap();
    assert_eq!(over.status, StatusCode::UNPROCESSABLE_ENTITY, "{over:?}");
    assert_eq!(over.code(), "unprocessable");
    let one = place_order_of(&http(), &urls[1], product, "buyer", 1)
        .await
        .unwrap();
    assert_eq!(one.status, StatusCode::CREATED, "{one:?}");
    assert_eq!(one.body["amount_cents"], 900, "{one:?}");

    // Raised through a: b's copy (1 per order) must not refuse what the row now allows.
    let raised = change_terms(&urls[0], product, json!({ "max_per_order": 5 })).await;
    assert_eq!(raised.status, StatusCode::OK, "{raised:?}");
    let four = place_order_of(&http(), &urls[1], product, "buyer", 4)
        .await
        .unwrap();
    assert_eq!(four.status, StatusCode::CREATED, "{four:?}");
    assert_eq!(four.body["amount_cents"], 3600, "{four:?}");
    assert_eq!(env.stock(product).await, 13);
    assert_eq!(audit(&urls[1], product).await["consistent"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_terms_changes_get_clear_errors_and_change_nothing() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let cases = [
        (
            json!({ "price_cents": -1 }),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({ "per_user_limit": 0 }),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({ "guard": "none" }),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({ "price_cents": 1.5 }),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
    ];
    for (body, status, code) in cases {
        let reply = change_terms(&app.base_url, product, body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {reply:?}"
        );
    }
    let reply = change_terms(&app.base_url, 999_999, json!({ "price_cents": 1 })).await;
    assert_eq!(reply.code(), "unknown_product", "{reply:?}");
    let anonymous = send(
        http()
            .put(format!("{}/api/products/{product}/terms", app.base_url))
            .json(&json!({ "price_cents": 1 })),
    )
    .await
    .unwrap();
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{anonymous:?}");
    // A change of nothing is no change: the product as it is, no new version.
    let nothing = change_terms(&app.base_url, product, json!({ "price_cents": null })).await;
    assert_eq!(nothing.status, StatusCode::OK, "{nothing:?}");
    let product = send(http().get(format!("{}/api/products/{product}", app.base_url)))
        .await
        .unwrap();
    assert_eq!(product.body["terms_version"], 1, "{product:?}");
    // The same product, but for the clock each answer was given at.
    let at_any_time = |mut body: serde_json::Value| {
        body.as_object_mut().unwrap().remove("server_time");
        body
    };
    assert_eq!(at_any_time(product.body), at_any_time(nothing.body));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_reenters_by_counting_and_a_stranger_waits_for_the_last_release() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let zk = app.zk.clone();
    let watcher = env.zk_client().await;
    let timeout = Duration::from_secs(30);

    let owner = Owner::new();
    let outer = zk
        .lock_stock_as(
            Some(&owner),
            product,
            Recipe::Fair,
            Session::Shared,
            timeout,
        )
        .await
        .unwrap();
    let inner = zk
        .lock_stock_as(
            Some(&owner),
            product,
            Recipe::Fair,
            Session::Shared,
            timeout,
        )
        .await
        .unwrap();
    // Counted, not queued: one node, one token, two holds.
    assert_eq!(env.lock_queue(&watcher, product).await.len(), 1);
    assert_eq!(inner.token, outer.token);
    assert_eq!(inner.node(), outer.node());
    assert_eq!(outer.holds(), 2);

    let stranger = tokio::spawn(async move {
        zk.lock_stock_as(
            Some(&Owner::new()),
            product,
            Recipe::Fair,
            Session::Shared,
            timeout,
        )
        .await
        .map(|lock| lock.token)
    });
    env.wait_for_queue(&watcher, product, 2, "the stranger queued")
        .await;

    // The outer acquisition goes first: the inner still holds the node, the stranger waits.
    let ours = outer.node().to_string();
    drop(outer);
    assert_eq!(inner.holds(), 1);
    let queue = env.lock_queue(&watcher, product).await;
    assert_eq!(queue.len(), 2, "{queue:?}");
    assert!(
        ours.ends_with(&queue[0].0),
        "{queue:?} should start with {ours}"
    );
    assert!(!stranger.is_finished());

    let token = inner.token;
    drop(inner);
    let granted = stranger.await.unwrap().unwrap();
    assert!(granted.zxid > token.zxid, "a new node, a newer token");
}

/// One counter's value in a `/metrics` text, summed over the label sets that match.
fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sweep_takes_a_products_lock_once_for_all_its_expired_reservations() {
    let env = TestEnv::new().await;
    // A process of its own: the metrics recorder is process-wide.
    let server = env
        .spawn_process("sweeper", &["--expiry-interval-ms", "200"])
        .await;
    let base = server.base_url.clone();
    let product = create_product_with(
        &base,
        json!({ "stock": 10, "per_user_limit": 5, "batch_max": 1 }),
    )
    .await;
    for i in 0..4 {
        assert_eq!(
            reserve(&base, product, &format!("r{i}")).await.status,
            StatusCode::CREATED
        );
    }
    let scrape = || async {
        send(http().get(format!("{base}/metrics")))
            .await
            .unwrap()
            .raw
    };
    let before = scrape().await;
    let grants = |text: &str| metric(text, "seckill_lock_wait_seconds_count", "recipe=\"fair\"");
    // All four run out at once, so one pass finds them together.
    sqlx::query("UPDATE orders SET expires_at = now() - interval '1 second' WHERE product_id = $1")
        .bind(product)
        .execute(&env.db)
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "the stock back", || async {
        (env.stock(product).await == 10).then_some(())
    })
    .await;
    // Counted once the pass is over, just after its last return.
    let after = wait_until(Duration::from_secs(30), "the pass counted", || async {
        let text = scrape().await;
        (metric(&text, "seckill_sweep_actions_total", "action=\"expired\"") == 4.0).then_some(text)
    })
    .await;
    assert_eq!(
        metric(&after, "seckill_lock_reentries_total", "recipe=\"fair\""),
        0.0,
        "one lock cycle returned them all: nothing to re-enter"
    );
    assert_eq!(
        grants(&after) - grants(&before),
        1.0,
        "one lock node for the pass"
    );
}
