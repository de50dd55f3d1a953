//! The rules of a real flash sale, under concurrency across instances: one per customer,
//! reserve-then-pay with expiry, the sold-out short-circuit, bounded queues, and graceful
//! shutdown. (Idempotent retries are `keys`.)

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn one_user_hammering_gets_exactly_the_per_user_limit() {
    let env = TestEnv::new().await;
    let (_servers, urls) = three_instances(&env, &["--lock-timeout-ms", "30000"]).await;
    for guard in ["zk", "pg-atomic"] {
        let product = create_product_with(
            &urls[0],
            json!({ "stock": 50, "guard": guard, "per_user_limit": 2 }),
        )
        .await;
        let client = http();
        let hammer = (0..20).map(|i| {
            let (client, base) = (client.clone(), urls[i % 3].clone());
            async move {
                place_order(&client, &base, product, "hammer")
                    .await
                    .unwrap()
            }
        });
        let replies = futures::future::join_all(hammer).await;
        let bought = replies
            .iter()
            .filter(|r| r.status == StatusCode::CREATED)
            .count();
        let limited = replies
            .iter()
            .filter(|r| r.code() == "purchase_limit")
            .count();
        let statuses: Vec<_> = replies
            .iter()
            .map(|r| (r.status.as_u16(), r.code().to_string()))
            .collect();
        assert_eq!((bought, limited), (2, 18), "{guard}: {statuses:?}");
        let held: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(quantity), 0)::BIGINT FROM orders WHERE product_id = $1 AND user_id = 'hammer' AND status = 'paid'",
        )
        .bind(product)
        .fetch_one(&env.db)
        .await
        .unwrap();
        assert_eq!(held, 2, "{guard}");
        assert_eq!(env.stock(product).await, 48, "{guard}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unpaid_reservation_expires_and_its_stock_returns() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--expiry-interval-ms", "50"]).await;
    let product =
        create_product_with(&app.base_url, json!({ "stock": 5, "reservation_ttl_s": 1 })).await;

    let reserved = reserve(&app.base_url, product, "dawdler").await;
    assert_eq!(reserved.status, StatusCode::CREATED, "{reserved:?}");
    assert_eq!(reserved.body["status"], "reserved");
    assert!(reserved.body["expires_at"].is_string());
    assert_eq!(env.stock(product).await, 4);

    let id = reserved.body["id"].as_str().unwrap().to_string();
    let db = env.db.clone();
    wait_until(
        Duration::from_secs(10),
        "the reservation to expire",
        || async {
            let status: String =
                sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
                    .bind(&id)
                    .fetch_one(&db)
                    .await
                    .ok()?;
            (status == "expired").then_some(())
        },
    )
    .await;
    assert_eq!(env.stock(product).await, 5, "the unit went back on sale");
    let late = send(http().post(format!("{}/orders/{id}/pay", app.base_url)))
        .await
        .unwrap();
    assert_eq!(
        (late.status, late.code()),
        (StatusCode::CONFLICT, "reservation_expired")
    );
    // The expired unit no longer counts against the buyer's limit.
    let again = place_order(&http(), &app.base_url, product, "dawdler")
        .await
        .unwrap();
    assert_eq!(again.status, StatusCode::CREATED, "{again:?}");
    assert_eq!(audit(&app.base_url, product).await["consistent"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payment_racing_the_expiry_ends_paid_or_expired_never_both() {
    let env = TestEnv::new().await;
    // The think time widens the sweep's window between finding a due reservation and
    // expiring it: payments land inside it, which is the race under test.
    let flags = ["--expiry-interval-ms", "20", "--stock-think-ms", "100"];
    let app = env.spawn_app(&flags).await;
    // A second instance sweeps the same reservations: each must still expire once.
    let _second_sweeper = env.spawn_app(&flags).await;
    let trials = 20;
    // Twice the trials: unpaid reservations may hold half the stock (--max-unpaid-share).
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 2 * trials, "reservation_ttl_s": 1 }),
    )
    .await;

    // Each trial reserves, then pays somewhere between 0.5 s and 1.5 s later: around the
    // 1 s deadline, where the payment's claim and the sweep's expiry meet.
    let race = (0..trials).map(|i| {
        let base = app.base_url.clone();
        async move {
            let reserved = reserve(&base, product, &format!("racer-{i}")).await;
            assert_eq!(reserved.status, StatusCode::CREATED, "{reserved:?}");
            let id = reserved.body["id"].as_str().unwrap().to_string();
            tokio::time::sleep_until(
                (Instant::now() + Duration::from_millis(500 + 1000 * i as u64 / trials as u64))
                    .into(),
            )
            .await;
            let paid = send(http().post(format!("{base}/orders/{id}/pay")))
                .await
                .unwrap();
            (id, paid)
        }
    });
    let outcomes = futures::future::join_all(race).await;

    let db = env.db.clone();
    wait_until(
        Duration::from_secs(10),
        "every reservation to settle",
        || async {
            let open: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM orders WHERE status IN ('reserved', 'paying')",
            )
            .fetch_one(&db)
            .await
            .ok()?;
            (open == 0).then_some(())
        },
    )
    .await;
    let mut paid = 0;
    for (id, reply) in &outcomes {
        let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
            .bind(id)
            .fetch_one(&env.db)
            .await
            .unwrap();
        match reply.status {
            StatusCode::OK => {
                assert_eq!(status, "paid", "{reply:?}");
                paid += 1;
            }
            StatusCode::CONFLICT => {
                assert_eq!(reply.code(), "reservation_expired", "{reply:?}");
                assert_eq!(status, "expired");
            }
            other => panic!("unexpected {other}: {reply:?}"),
        }
    }
    assert!(
        paid > 0 && paid < trials,
        "the race was not exercised: {paid} of {trials} paid"
    );
    assert_eq!(
        i64::from(env.stock(product).await),
        2 * trials - paid,
        "expired units returned, paid ones did not"
    );
    let audit = audit(&app.base_url, product).await;
    assert_eq!(
        (audit["sold"].as_i64(), audit["consistent"].as_bool()),
        (Some(paid), Some(true)),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_sell_out_the_flood_costs_no_lock_and_no_write_until_restock() {
    let env = TestEnv::new().await;
    let (_servers, urls) = three_instances(&env, &[]).await;
    let product = create_product(&urls[0], 3, "zk").await;
    for i in 0..4 {
        place_order(&http(), &urls[i % 3], product, &format!("early-{i}"))
            .await
            .unwrap();
    }
    let flag_on_all = |expected: bool| {
        let urls = urls.clone();
        move || {
            let urls = urls.clone();
            async move {
                for url in &urls {
                    let p = send(http().get(format!("{url}/api/products/{product}")))
                        .await
                        .ok()?;
                    if p.body["sold_out"] != expected {
                        return None;
                    }
                }
                Some(())
            }
        }
    };
    wait_until(
        Duration::from_secs(10),
        "every instance to see the sold-out flag",
        flag_on_all(true),
    )
    .await;

    let zk = env.zk_client().await;
    // The last early order's holder may keep its node a moment for orders that might follow
    // (`--lock-linger-ms`); its release would count as a change of the lock's directory.
    wait_until(
        Duration::from_secs(10),
        "the last holder's node to go",
        || async {
            let (nodes, _) = zk.get_children(&env.lock_dir(product)).await.ok()?;
            nodes.is_empty().then_some(())
        },
    )
    .await;
    let (_, lock_dir_before) = zk.get_children(&env.lock_dir(product)).await.unwrap();
    let orders_before = env.total_orders().await;
    let flood = flash_sale(&urls, product, 150).await;
    for reply in &flood {
        let reply = reply.as_ref().unwrap();
        assert_eq!(
            (reply.status, reply.code()),
            (StatusCode::CONFLICT, "sold_out"),
            "{reply:?}"
        );
        assert!(
            reply.body.get("order_id").is_none(),
            "no order row: {reply:?}"
        );
    }
    let (_, lock_dir_after) = zk.get_children(&env.lock_dir(product)).await.unwrap();
    assert_eq!(
        lock_dir_after.cversion, lock_dir_before.cversion,
        "no lock node was created"
    );
    assert_eq!(
        env.total_orders().await,
        orders_before,
        "no order row was written"
    );

    let restocked = send(
        http()
            .post(format!("{}/api/products/{product}/restock", urls[0]))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "quantity": 2 })),
    )
    .await
    .unwrap();
    assert_eq!(restocked.status, StatusCode::OK, "{restocked:?}");
    assert_eq!(
        (
            restocked.body["stock"].as_i64(),
            restocked.body["stocked_total"].as_i64()
        ),
        (Some(2), Some(5))
    );
    wait_until(
        Duration::from_secs(10),
        "every instance to drop the flag",
        flag_on_all(false),
    )
    .await;
    for (i, url) in urls.iter().enumerate().skip(1) {
        let reply = place_order(&http(), url, product, &format!("late-{i}"))
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "instance {i}: {reply:?}");
    }
    assert_eq!(audit(&urls[0], product).await["consistent"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_answers_too_busy_and_sells_nothing_wrong() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--max-waiters-per-product",
            "2",
            "--lock-timeout-ms",
            "30000",
        ])
        .await;
    let watcher = env.zk_client().await;
    // A lock per order (the places are lock nodes) and combined (the places are the local queue).
    for batch_max in [1, 64] {
        let product = create_product_with(
            &app.base_url,
            json!({ "stock": 10, "batch_max": batch_max }),
        )
        .await;
        // One holder kept inside, one waiter behind it: the instance's two places are taken.
        let mut hold = app.holds.hold_next(product);
        let holder = spawn_order(&app.base_url, product, "holder");
        hold.reached().await;
        let waiter = spawn_order(&app.base_url, product, "waiter");
        if batch_max == 1 {
            env.wait_for_queue(&watcher, product, 2, "the waiter to queue")
                .await;
        } else {
            wait_until(Duration::from_secs(30), "the waiter to queue", || async {
                (app.combiner.queued(product) == 2).then_some(())
            })
            .await;
        }
        let crowd = flash_sale(std::slice::from_ref(&app.base_url), product, 6).await;
        hold.release();
        let mut replies: Vec<Reply> = crowd.into_iter().map(Result::unwrap).collect();
        replies.push(holder.await.unwrap().unwrap());
        replies.push(waiter.await.unwrap().unwrap());
        let sold = replies
            .iter()
            .filter(|r| r.status == StatusCode::CREATED)
            .count();
        let busy: Vec<&Reply> = replies
            .iter()
            .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
            .collect();
        assert_eq!(
            (sold, busy.len()),
            (2, 6),
            "batch_max {batch_max}: {replies:?}"
        );
        assert!(
            busy.iter()
                .all(|r| r.code() == "too_busy" && r.retry_after.is_some()),
            "{busy:?}"
        );
        assert_eq!(env.stock(product).await, 10 - sold as i32);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_waiters_elsewhere_proceed_long_before_the_session_timeout() {
    let env = TestEnv::new().await;
    let session_timeout = Duration::from_secs(30);
    let timeout_ms = session_timeout.as_millis().to_string();
    let leaving = env
        .spawn_process(
            "leaving",
            &[
                // Far longer than the other instance needs to queue behind it (asserted
                // below: both nodes seen at once), well inside the shutdown grace.
                "--stock-think-ms",
                "5000",
                "--zk-session-timeout-ms",
                &timeout_ms,
            ],
        )
        .await;
    let staying = env
        .spawn_process("staying", &["--lock-timeout-ms", "60000"])
        .await;
    let product = create_product(&leaving.base_url, 5, "zk").await;
    let watcher = env.zk_client().await;

    let held = spawn_order(&leaving.base_url, product, "in-flight");
    env.wait_for_queue(
        &watcher,
        product,
        1,
        "the leaving instance to hold the lock",
    )
    .await;
    let waiting = spawn_order(&staying.base_url, product, "waiter");
    env.wait_for_queue(&watcher, product, 2, "the other instance to queue")
        .await;

    let signalled = Instant::now();
    let pid = leaving.child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());

    let in_flight = held.await.unwrap().unwrap();
    assert_eq!(
        in_flight.status,
        StatusCode::CREATED,
        "the in-flight order finished: {in_flight:?}"
    );
    let waiter = waiting.await.unwrap().unwrap();
    assert_eq!(waiter.status, StatusCode::CREATED, "{waiter:?}");
    let waited = signalled.elapsed();
    assert!(
        waited < session_timeout / 2,
        "the waiter proceeded after {waited:?}"
    );
    let mut leaving = leaving;
    let exit = tokio::time::timeout(Duration::from_secs(15), leaving.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "clean exit: {exit:?}");
    assert_eq!(env.stock(product).await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_the_orders_of_clients_that_hung_up() {
    let env = TestEnv::new().await;
    let server = env
        .spawn_process(
            "stopping",
            // Longer than shutdown took before it waited for order tasks (the ZooKeeper
            // close, 2 s at most, then the pool's, 5 s at most); well inside the grace.
            &["--stock-think-ms", "9000", "--shutdown-grace-ms", "30000"],
        )
        .await;
    let product = create_product(&server.base_url, 5, "zk").await;
    let order = spawn_order(&server.base_url, product, "hung-up");
    // The order holds the lock and has claimed the row: it is inside its critical section,
    // thinking. Its client hangs up, so no connection is left open.
    env.wait_for_fence_past(product, 0, "the order to enter its critical section")
        .await;
    order.abort();
    let pid = server.child.id().expect("running").to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(signalled.success());
    let mut server = server;
    let exit = tokio::time::timeout(Duration::from_secs(40), server.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "clean exit: {exit:?}");

    let (status, failure): (String, Option<String>) =
        sqlx::query_as("SELECT status, failure FROM orders WHERE user_id = 'hung-up'")
            .fetch_one(&env.db)
            .await
            .expect("the order was recorded");
    assert_eq!(
        (status.as_str(), failure),
        ("paid", None),
        "shutdown waited for it"
    );
    assert_eq!(env.stock(product).await, 4);
}
