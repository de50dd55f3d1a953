//! What happens when parts fail: a crashed lock holder, a lock wait that times out, a
//! declined payment.

use std::time::Duration;

use reqwest::StatusCode;

use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_lock_holder_does_not_stall_the_sale() {
    let env = TestEnv::new().await;
    // Short sessions so the dead holder's node goes quickly. Only the doomed instance thinks,
    // and for far longer than the test needs to kill it: it cannot finish its order first.
    let common = [
        "--zk-session-timeout-ms",
        "2000",
        "--db-statement-timeout-ms",
        "1000",
        "--lock-timeout-ms",
        "30000",
    ];
    let doomed_flags = [&common[..], &["--stock-think-ms", "600000"]].concat();
    let mut doomed_instance = env.spawn_process("instance-0", &doomed_flags).await;
    let mut survivors = Vec::new();
    for i in 1..3 {
        survivors.push(env.spawn_process(&format!("instance-{i}"), &common).await);
    }
    let urls: Vec<String> = survivors.iter().map(|s| s.base_url.clone()).collect();
    let stock = 5;
    let product = create_product(&urls[0], stock, "zk").await;

    // Instance-0 takes the lock first and claims the row: it is inside the critical section.
    let doomed = spawn_order(&doomed_instance.base_url, product, "doomed");
    let token = env
        .wait_for_fence_past(product, 0, "instance-0 to claim the row")
        .await;
    let watcher = env.zk_client().await;
    let queue = env.lock_queue(&watcher, product).await;
    assert!(
        queue
            .first()
            .is_some_and(|(_, owner)| owner == "instance-0"),
        "instance-0 holds the lock: {queue:?}"
    );
    // The crowd queues behind it on the others.
    let sale = tokio::spawn({
        let urls = urls.clone();
        async move { flash_sale(&urls, product, 30).await }
    });
    wait_until(
        Duration::from_secs(30),
        "buyers queued behind instance-0",
        || async { (env.lock_queue(&watcher, product).await.len() > 1).then_some(()) },
    )
    .await;
    assert_eq!(env.fence(product).await, token, "nobody else got in yet");
    doomed_instance
        .child
        .start_kill()
        .expect("kill -9 instance-0");
    assert!(
        doomed.await.unwrap().is_err(),
        "the killed instance answered nobody"
    );

    let replies = tokio::time::timeout(Duration::from_secs(60), sale)
        .await
        .expect("the sale finishes")
        .unwrap();

    let survivors: Vec<&Reply> = replies.iter().flatten().collect();
    assert!(
        survivors
            .iter()
            .all(|r| [StatusCode::CREATED, StatusCode::CONFLICT].contains(&r.status)),
        "{survivors:?}"
    );
    // Every 201 a buyer saw is a paid order.
    for reply in survivors.iter().filter(|r| r.status == StatusCode::CREATED) {
        let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
            .bind(reply.body["id"].as_str().unwrap())
            .fetch_one(&env.db)
            .await
            .unwrap();
        assert_eq!(status, "paid");
    }
    let audit = audit(&urls[1], product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
    // Killed before its commit: the doomed order was never written, so it sold nothing.
    let doomed_rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE user_id = 'doomed'")
            .fetch_one(&env.db)
            .await
            .unwrap();
    assert_eq!(doomed_rows, 0, "the killed order sold nothing");
    assert_eq!(
        audit["sold"], stock,
        "the survivors sold everything: {audit}"
    );
    assert_eq!(audit["stock"], 0, "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_that_times_out_leaves_no_node_and_the_queue_moves_on() {
    let env = TestEnv::new().await;
    let holder = env.spawn_app(&["--instance", "holder"]).await;
    let impatient = env
        .spawn_app(&["--lock-timeout-ms", "300", "--instance", "impatient"])
        .await;
    let product = create_product(&holder.base_url, 5, "zk").await;
    let watcher = env.zk_client().await;

    // The holder stays inside its critical section until we let it go.
    let mut hold = holder.holds.hold_next(product);
    let held = spawn_order(&holder.base_url, product, "first");
    hold.reached().await;

    let timed_out = place_order(&http(), &impatient.base_url, product, "second")
        .await
        .unwrap();
    assert_eq!(
        timed_out.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{timed_out:?}"
    );
    assert_eq!(timed_out.code(), "lock_timeout");
    assert_eq!(timed_out.retry_after.as_deref(), Some("1"));

    // The impatient instance's session is alive, so only an explicit delete removes its node.
    wait_until(
        Duration::from_secs(5),
        "the timed-out node to be deleted",
        || async {
            let queue = env.lock_queue(&watcher, product).await;
            (!queue.iter().any(|(_, owner)| owner == "impatient")).then_some(())
        },
    )
    .await;

    assert!(!held.is_finished(), "the holder held throughout");
    hold.release();
    assert_eq!(held.await.unwrap().unwrap().status, StatusCode::CREATED);
    let retried = place_order(&http(), &impatient.base_url, product, "second")
        .await
        .unwrap();
    assert_eq!(retried.status, StatusCode::CREATED, "{retried:?}");
    let counts = env.order_counts(product).await;
    assert_eq!(counts.get("paid"), Some(&2));
    assert_eq!(
        counts.get("failed"),
        Some(&1),
        "the timed-out order ended failed: {counts:?}"
    );
    assert_eq!(env.stock(product).await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declined_payment_returns_the_stock() {
    let env = TestEnv::new().await;
    env.provider.set(json!({ "decline_rate": 1.0 })).await;
    let app = env.spawn_app(&[]).await;
    for guard in ["zk", "pg-atomic"] {
        let product = create_product(&app.base_url, 3, guard).await;
        let reply = place_order(&http(), &app.base_url, product, "unlucky")
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::PAYMENT_REQUIRED, "{reply:?}");
        assert_eq!(reply.code(), "payment_failed");

        let order_id = reply.body["order_id"].as_str().unwrap();
        let (status, payments): (String, i64) = sqlx::query_as(
            "SELECT o.status, (SELECT COUNT(*) FROM payments p WHERE p.order_id = o.id AND p.outcome = 'failed')
             FROM orders o WHERE o.id = $1::uuid",
        )
        .bind(order_id)
        .fetch_one(&env.db)
        .await
        .unwrap();
        assert_eq!(
            (status.as_str(), payments),
            ("payment_failed", 1),
            "{guard}"
        );
        assert_eq!(
            env.stock(product).await,
            3,
            "{guard}: the unit went back on sale"
        );
        let audit = audit(&app.base_url, product).await;
        assert_eq!(
            (audit["sold"].as_i64(), audit["consistent"].as_bool()),
            (Some(0), Some(true)),
            "{guard}: {audit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_who_hangs_up_while_queued_leaves_the_queue_and_writes_no_row() {
    let env = TestEnv::new().await;
    let holder = env.spawn_app(&["--instance", "holder"]).await;
    let waiter = env
        .spawn_app(&["--lock-timeout-ms", "60000", "--instance", "waiter"])
        .await;
    let product = create_product(&holder.base_url, 5, "zk").await;
    let watcher = env.zk_client().await;

    let mut hold = holder.holds.hold_next(product);
    let held = spawn_order(&holder.base_url, product, "first");
    hold.reached().await;

    // A buyer whose order waits in the ZooKeeper queue behind the holder, then hangs up.
    let base = waiter.base_url.clone();
    let gone =
        tokio::spawn(async move { order_with_key(&base, product, "gone", "gone-key").await });
    wait_until(
        Duration::from_secs(10),
        "the buyer's node in the queue",
        || async {
            let queue = env.lock_queue(&watcher, product).await;
            let queued = queue.iter().any(|(_, owner)| owner == "waiter");
            (queued && env.key_exists("gone-key").await).then_some(())
        },
    )
    .await;
    gone.abort();

    wait_until(
        Duration::from_secs(10),
        "the hung-up buyer's node to be deleted",
        || async {
            let queue = env.lock_queue(&watcher, product).await;
            (!queue.iter().any(|(_, owner)| owner == "waiter")).then_some(())
        },
    )
    .await;
    env.assert_hang_up_left_no_row("gone-key", "gone").await;
    assert!(!held.is_finished(), "the holder held throughout");
    hold.release();
    assert_eq!(held.await.unwrap().unwrap().status, StatusCode::CREATED);
    assert_eq!(env.stock(product).await, 4);
}
