//! Combined orders: one lock cycle serves every order queued on the instance, each decided
//! exactly as it would be alone. Each test holds a lock cycle inside its critical section,
//! queues the orders under test behind it (waiting until the instance's queue shows each),
//! and lets go: the queued orders are then one batch, in the order they were placed.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::helpers::*;
use seckill::teaching::Hold;

fn order(base: &str, product: i64, user: &str, quantity: i64) -> JoinHandle<Reply> {
    let (base, user) = (base.to_string(), user.to_string());
    tokio::spawn(async move {
        place_order_of(&http(), &base, product, &user, quantity)
            .await
            .expect("an answer")
    })
}

/// Places `orders` (user, quantity) one after another behind a held lock cycle serving
/// `first`, each queued before the next is placed.
async fn queue_behind(
    app: &TestApp,
    product: i64,
    first: (&str, i64),
    orders: &[(&str, i64)],
) -> (JoinHandle<Reply>, Vec<JoinHandle<Reply>>) {
    let (held, queued, _) = queue_behind_holding(app, product, first, orders, false).await;
    (held, queued)
}

/// [`queue_behind`], and with `hold_next` the cycle that serves the queued orders is held
/// too (armed once the first cycle took its own hold: holds go to cycles in arming order).
async fn queue_behind_holding(
    app: &TestApp,
    product: i64,
    first: (&str, i64),
    orders: &[(&str, i64)],
    hold_next: bool,
) -> (JoinHandle<Reply>, Vec<JoinHandle<Reply>>, Option<Hold>) {
    let mut hold = app.holds.hold_next(product);
    let held = order(&app.base_url, product, first.0, first.1);
    hold.reached().await;
    let next = hold_next.then(|| app.holds.hold_next(product));
    let mut queued = Vec::new();
    for (i, (user, quantity)) in orders.iter().enumerate() {
        queued.push(order(&app.base_url, product, user, *quantity));
        wait_until(Duration::from_secs(30), "the order to queue", || async {
            (app.combiner.queued(product) == i + 2).then_some(())
        })
        .await;
    }
    assert!(!held.is_finished(), "the first cycle held throughout");
    hold.release();
    (held, queued, next)
}

/// Each reply's status and error code (empty for a success).
fn outcomes(replies: &[Reply]) -> Vec<(StatusCode, &str)> {
    replies.iter().map(|r| (r.status, r.code())).collect()
}

async fn replies(handles: Vec<JoinHandle<Reply>>) -> Vec<Reply> {
    let mut replies = Vec::new();
    for handle in handles {
        replies.push(handle.await.unwrap());
    }
    replies
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_units_go_to_the_orders_they_cover_in_one_lock_cycle() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 5, "max_per_order": 3, "per_user_limit": 3, "batch_max": 64 }),
    )
    .await;
    // 4 left after the first: 3 fits, 2 does not, 1 does, the last 1 does not.
    let (first, queued) = queue_behind(
        &app,
        product,
        ("first", 1),
        &[("b", 3), ("c", 2), ("d", 1), ("e", 1)],
    )
    .await;
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    let replies = replies(queued).await;
    assert_eq!(
        outcomes(&replies),
        [
            (StatusCode::CREATED, ""),
            (StatusCode::CONFLICT, "sold_out"),
            (StatusCode::CREATED, ""),
            (StatusCode::CONFLICT, "sold_out"),
        ],
        "{replies:?}"
    );
    // One lock cycle decided all four, and said so in each answer and row.
    assert_eq!(replies[0].body["batch_size"], 4, "{replies:?}");
    assert_eq!(replies[0].body["fence"], replies[2].body["fence"]);
    let sold_out_id = replies[1].body["order_id"].as_str().expect("an order row");
    let (status, batch): (String, Option<i32>) =
        sqlx::query_as("SELECT status, batch_size FROM orders WHERE id = $1::uuid")
            .bind(sold_out_id)
            .fetch_one(&env.db)
            .await
            .unwrap();
    assert_eq!((status.as_str(), batch), ("sold_out", Some(4)));
    assert_eq!(env.stock(product).await, 0);
    let audit = audit(&app.base_url, product).await;
    assert_eq!(
        (audit["sold"].as_i64(), audit["consistent"].as_bool()),
        (Some(5), Some(true))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_buyer_twice_in_a_batch_gets_only_the_limit() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 10, "per_user_limit": 1, "batch_max": 64 }),
    )
    .await;
    let (first, queued) = queue_behind(
        &app,
        product,
        ("first", 1),
        &[("twice", 1), ("twice", 1), ("other", 1)],
    )
    .await;
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    let replies = replies(queued).await;
    assert_eq!(
        outcomes(&replies),
        [
            (StatusCode::CREATED, ""),
            (StatusCode::CONFLICT, "purchase_limit"),
            (StatusCode::CREATED, ""),
        ],
        "{replies:?}"
    );
    let held: i32 = sqlx::query_scalar(
        "SELECT units FROM purchases WHERE product_id = $1 AND user_id = 'twice'",
    )
    .bind(product)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(held, 1);
    assert_eq!(env.stock(product).await, 7);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_whose_token_went_stale_sells_nothing() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product_with(&app.base_url, json!({ "stock": 10, "batch_max": 64 })).await;
    // The second lock cycle (three orders) is held inside its critical section too.
    let (first, queued, second) = queue_behind_holding(
        &app,
        product,
        ("first", 1),
        &[("a", 1), ("b", 1), ("c", 1)],
        true,
    )
    .await;
    let mut second = second.expect("the second cycle is held");
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    second.reached().await;
    let token = env.fence(product).await;
    // A newer holder claims the row, as after our session expired under a long pause.
    sqlx::query("UPDATE products SET fence = $2 WHERE id = $1")
        .bind(product)
        .bind(token + 1)
        .execute(&env.db)
        .await
        .unwrap();
    second.release();
    let replies = replies(queued).await;
    for reply in &replies {
        assert_eq!(
            (reply.status, reply.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
            "{reply:?}"
        );
        let id = reply.body["order_id"].as_str().expect("an order row");
        assert_eq!(
            env.order_row(id).await,
            ("failed".to_string(), Some("lock_lost".to_string()))
        );
    }
    assert_eq!(env.stock(product).await, 9, "only the first cycle sold");
    // The next lock grant's token is newer than the claim: the sale goes on.
    let next = place_order(&http(), &app.base_url, product, "next")
        .await
        .unwrap();
    assert_eq!(next.status, StatusCode::CREATED, "{next:?}");
    assert!(next.body["fence"].as_i64() > Some(token + 1));
    assert_eq!(audit(&app.base_url, product).await["consistent"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_who_hangs_up_in_the_local_queue_leaves_it_and_writes_no_row() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product_with(&app.base_url, json!({ "stock": 5, "batch_max": 64 })).await;
    let mut hold = app.holds.hold_next(product);
    let held = order(&app.base_url, product, "first", 1);
    hold.reached().await;

    // A buyer whose order waits in the instance's queue behind the held cycle, then hangs up.
    let base = app.base_url.clone();
    let gone =
        tokio::spawn(async move { order_with_key(&base, product, "gone", "gone-key").await });
    wait_until(Duration::from_secs(10), "the order to queue", || async {
        (app.combiner.queued(product) == 2 && env.key_exists("gone-key").await).then_some(())
    })
    .await;
    gone.abort();
    env.assert_hang_up_left_no_row("gone-key", "gone").await;
    assert_eq!(
        app.combiner.queued(product),
        1,
        "only the held cycle's order is left"
    );
    assert!(!held.is_finished());
    hold.release();
    assert_eq!(held.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(
        env.stock(product).await,
        4,
        "the hung-up buyer bought nothing"
    );
}

/// The lock cycles of every product whose lock the instance holds at one moment share one
/// transaction. The test holds one product's row (PostgreSQL's row lock), so that product's
/// cycle stays inside its transaction; two more products' cycles take their locks and wait
/// for the next one (the instance's gauge shows all three); once the row is let go, the two
/// are written by one transaction (their orders' `xmin`: reservations, which no later
/// update rewrites), not the first's.
#[tokio::test(flavor = "multi_thread")]
async fn lock_cycles_of_products_held_at_one_moment_share_one_transaction() {
    let env = TestEnv::new().await;
    let app = env.spawn_process("shared", &[]).await;
    let base = &app.base_url;
    let blocked = create_product(base, 10, "zk").await;
    let (a, b) = (
        create_product(base, 10, "zk").await,
        create_product(base, 10, "zk").await,
    );
    let waiting = |n: f64| async move {
        let metrics = scrape(base).await;
        (metrics.get("seckill_shared_cycles").copied().unwrap_or(0.0) >= n).then_some(())
    };
    let mut row = env.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM products WHERE id = $1 FOR UPDATE")
        .bind(blocked)
        .execute(&mut *row)
        .await
        .unwrap();
    let reserving = |product: i64, user: &'static str| {
        let base = base.clone();
        tokio::spawn(async move { reserve(&base, product, user).await })
    };
    let first = reserving(blocked, "first");
    wait_until(
        Duration::from_secs(20),
        "the first cycle in its transaction",
        || waiting(1.0),
    )
    .await;
    let others = [reserving(a, "a"), reserving(b, "b")];
    wait_until(
        Duration::from_secs(20),
        "both cycles waiting for the next",
        || waiting(3.0),
    )
    .await;
    row.rollback().await.unwrap();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    for other in others {
        assert_eq!(other.await.unwrap().status, StatusCode::CREATED);
    }
    let transactions = |products: &'static str| {
        let sql = format!(
            "SELECT COUNT(DISTINCT xmin::TEXT) FROM orders WHERE product_id IN ({products})"
        );
        let env = &env;
        async move { count(env, &sql).await }
    };
    let (a_b, all) = (format!("{a}, {b}"), format!("{blocked}, {a}, {b}"));
    assert_eq!(
        transactions(a_b.leak()).await,
        1,
        "a and b in one transaction"
    );
    assert_eq!(
        transactions(all.leak()).await,
        2,
        "the first in one of its own"
    );
}

/// A queue that cannot serve one more order within the lock timeout, at the pace its lock
/// cycles keep, turns it away at once: 429 `too_busy` before anything is written, with a
/// `Retry-After` computed from the queue, not the constant 1. The first cycle is held for at
/// least 2 s, so the queue's cycle time is at least 2 s; the second is held with two orders
/// (`batch_max` 2): one more needs two more cycles, at least 4 s, past the 3-s lock timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_that_cannot_serve_in_time_refuses_at_once_with_its_own_retry_after() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--lock-timeout-ms", "3000"]).await;
    let product = create_product_with(&app.base_url, json!({ "stock": 10, "batch_max": 2 })).await;
    let mut first_hold = app.holds.hold_next(product);
    let started = std::time::Instant::now();
    let first = order(&app.base_url, product, "first", 1);
    first_hold.reached().await;
    let mut second_hold = app.holds.hold_next(product);
    let queued = [
        order(&app.base_url, product, "b", 1),
        order(&app.base_url, product, "c", 1),
    ];
    wait_until(Duration::from_secs(30), "both orders to queue", || async {
        (app.combiner.queued(product) == 3).then_some(())
    })
    .await;
    // Time, not a race: the longer the first cycle is held, the slower the queue's pace.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
    first_hold.release();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    second_hold.reached().await;
    let rows_before = count(&env, "SELECT COUNT(*) FROM orders").await;

    let refused = place_order(&http(), &app.base_url, product, "late")
        .await
        .unwrap();
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::TOO_MANY_REQUESTS, "too_busy"),
        "{refused:?}"
    );
    let retry_after: u64 = refused
        .retry_after
        .as_deref()
        .and_then(|s| s.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(
        (4..=60).contains(&retry_after),
        "two cycles of at least 2 s: {retry_after}"
    );
    assert_eq!(
        count(&env, "SELECT COUNT(*) FROM orders").await,
        rows_before,
        "the refusal wrote nothing"
    );
    second_hold.release();
    for reply in replies(queued.into()).await {
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    }
}
