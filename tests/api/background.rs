//! The work behind the sale keeps pace with it and tells buyers only what is true: lapsed
//! reservations come back by the hundred per lock cycle, a stray instance on another
//! ZooKeeper touches nothing, a hanging provider delays no return, a COMMIT late in the
//! network never leaves a buyer told "failed" who is then charged, no intent is orphaned,
//! and a key's first recorded answer is its answer for good.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;
use crate::money::money_is_exact;

/// A short reservation, as a flash sale's unpaid orders lapse: `ttl_s` seconds.
async fn product_with_reservations(base: &str, stock: i64, ttl_s: i64) -> i64 {
    create_product_with(
        base,
        json!({ "stock": stock, "guard": "zk", "reservation_ttl_s": ttl_s }),
    )
    .await
}

/// Waits until every reservation has been given back (none left `reserved`).
async fn wait_all_returned(env: &TestEnv, limit: Duration, what: &str) {
    wait_until(limit, what, || async {
        let left = count(env, "SELECT COUNT(*) FROM orders WHERE status = 'reserved'").await;
        (left == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reservations_that_lapse_together_come_back_in_a_few_lock_cycles() {
    let env = TestEnv::new().await;
    // This instance does not sweep: every reservation is made and lapses before the sweeper
    // below starts, as a sale's unpaid reservations lapse together.
    let app = env.spawn_app(&["--expiry-interval-ms", "3600000"]).await;
    let product = product_with_reservations(&app.base_url, 400, 1).await;
    let base = &app.base_url;
    let reserved = futures_util::future::join_all(
        (0..200).map(|i| async move { reserve(base, product, &format!("buyer-{i}")).await }),
    )
    .await;
    assert!(
        reserved.iter().all(|r| r.status == StatusCode::CREATED),
        "{:?}",
        reserved.iter().find(|r| r.status != StatusCode::CREATED)
    );
    assert_eq!(env.stock(product).await, 200);
    wait_until(Duration::from_secs(30), "every reservation due", || async {
        let due = count(
            &env,
            "SELECT COUNT(*) FROM orders WHERE status = 'reserved' AND expires_at <= now()",
        )
        .await;
        (due == 200).then_some(())
    })
    .await;
    let _sweeper = env.spawn_app(&["--expiry-interval-ms", "100"]).await;
    wait_all_returned(
        &env,
        Duration::from_secs(30),
        "the lapsed reservations back",
    )
    .await;
    assert_eq!(env.stock(product).await, 400, "every unit back on sale");
    // One transaction stamps its rows with one `now()`: the returns took a transaction or
    // two, not one per reservation.
    let transactions = count(
        &env,
        "SELECT COUNT(DISTINCT updated_at) FROM orders WHERE status = 'expired'",
    )
    .await;
    assert!(
        transactions <= 2,
        "{transactions} transactions for 200 returns"
    );
    let held = count(&env, "SELECT COALESCE(SUM(units), 0) FROM purchases").await;
    assert_eq!(held, 0, "the buyers' holdings went back with the units");
    let audit = audit(&app.base_url, product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
}

/// A stray instance (another ZooKeeper over the same database) sweeping ten times as often
/// as the fleet: it must take nothing, so the fleet returns every reservation as if the
/// stray were not there (before, it took them under a 30-s lease and failed every return).
#[tokio::test(flavor = "multi_thread")]
async fn a_stray_instance_on_another_zookeeper_takes_no_background_work() {
    let env = TestEnv::new().await;
    let fleet = env
        .spawn_process("fleet", &["--expiry-interval-ms", "500"])
        .await;
    let product = product_with_reservations(&fleet.base_url, 10, 1).await;
    let elsewhere = format!("{}-stray", env.zk_root);
    let stray = env
        .spawn_process(
            "stray",
            &["--zk-root", &elsewhere, "--expiry-interval-ms", "20"],
        )
        .await;
    let ready = send(http().get(format!("{}/readyz", stray.base_url)))
        .await
        .unwrap();
    assert_eq!(ready.body["ensemble"], "outranked", "{ready:?}");
    let refused = place_order(&http(), &stray.base_url, product, "at-the-stray")
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);

    for buyer in ["a", "b", "c"] {
        let r = reserve(&fleet.base_url, product, buyer).await;
        assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    }
    // Well within the stray's old 30-s lease: the fleet's sweep alone returns them.
    wait_all_returned(&env, Duration::from_secs(15), "the fleet to return them").await;
    assert_eq!(env.stock(product).await, 10);
    let touched = count(
        &env,
        "SELECT COUNT(*) FROM orders WHERE sweep_after IS NOT NULL OR failure IS NOT NULL",
    )
    .await;
    assert_eq!(touched, 0, "the stray took no row");
    let written = count(
        &env,
        "SELECT COUNT(*) FROM orders WHERE user_id = 'at-the-stray'",
    )
    .await;
    assert_eq!(written, 0, "the stray wrote no order row");
    let standing = scrape(&stray.base_url).await;
    assert_eq!(
        standing.get("seckill_zk_ensemble_standing{standing=\"outranked\"}"),
        Some(&1.0),
        "the stray says so in a metric"
    );
}

/// The provider hangs on every charge for minutes: the payment the sweep is settling waits,
/// and a reservation lapsing meanwhile is back on sale all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_provider_delays_no_return() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--expiry-interval-ms",
            "100",
            "--request-timeout-ms",
            "1000",
            "--payment-timeout-ms",
            "120000",
        ])
        .await;
    let product = product_with_reservations(&app.base_url, 10, 1).await;
    env.provider.set(json!({ "latency_ms": 300_000 })).await;
    // A paid order whose charge hangs: its request gives up, and the sweep takes it over
    // (and hangs at the provider in turn).
    let paying = spawn_order(&app.base_url, product, "payer");
    wait_until(
        Duration::from_secs(30),
        "the sweep settling the hanging payment",
        || async {
            let taken = count(
                &env,
                "SELECT COUNT(*) FROM orders WHERE status = 'paying' AND sweep_after IS NOT NULL",
            )
            .await;
            (taken == 1).then_some(())
        },
    )
    .await;
    let r = reserve(&app.base_url, product, "reserver").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    wait_all_returned(
        &env,
        Duration::from_secs(15),
        "the reservation back on sale",
    )
    .await;
    assert_eq!(
        env.stock(product).await,
        9,
        "only the paying order holds a unit"
    );
    paying.abort();
}

/// A lock cycle's COMMIT held in the network past the service's patience, then delivered:
/// whatever the buyer was told must be what happened — never "failed" and then charged.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_late_in_the_network_never_leaves_a_buyer_told_failed_charged() {
    let env = TestEnv::new().await;
    let (prefix, name) = env.database_url.rsplit_once('/').unwrap();
    let target = prefix.rsplit_once('@').unwrap().1.to_string();
    let mut proxy = CommitDropper::delaying(target).await;
    let via_proxy = format!(
        "{}@{}/{name}?sslmode=disable",
        prefix.rsplit_once('@').unwrap().0,
        proxy.addr
    );
    let app = env
        .spawn_app(&["--database-url", &via_proxy, "--expiry-interval-ms", "100"])
        .await;
    let product = create_per_request_product(&app.base_url, 5, "zk").await;
    proxy.arm();
    let reply = place_order(&http(), &app.base_url, product, "dave")
        .await
        .unwrap();
    assert_eq!(proxy.dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
    // PostgreSQL could tell: the transaction was still open, its COMMIT held in the network,
    // so the service ended its backend and learnt it aborted: the buyer is told it failed.
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{reply:?}"
    );
    assert!(reply.body["order_id"].is_null(), "{reply:?}");
    // The late COMMIT arrives now, at a backend that is gone; then the books are read.
    assert_eq!(proxy.deliver().await, Delivered::Refused);
    let live = format!(
        "SELECT COUNT(*) FROM orders WHERE product_id = {product}
         AND status IN ('reserved', 'paying', 'paid')"
    );
    assert_eq!(
        count(&env, &live).await,
        0,
        "told failed, yet an order holds a unit"
    );
    assert_eq!(env.stock(product).await, 5);
    money_is_exact(&env).await;
}

/// Takes the one payment lease (`--payment-concurrency 1`) with the lab's hanging charge,
/// and waits until it is held.
async fn hold_the_payment_lease(base: &str) {
    let request = http()
        .post(format!("{base}/api/payments/semaphore"))
        .bearer_auth(ADMIN_TOKEN);
    let reply = send(request.json(&json!({ "action": "acquire" })))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{reply:?}");
    wait_until(
        Duration::from_secs(30),
        "the lab holding the lease",
        || async { (semaphore(base).await["leases"].as_array()?.len() == 1).then_some(()) },
    )
    .await;
}

async fn wait_for_a_payment_waiting(base: &str) {
    wait_until(Duration::from_secs(30), "the payment waiting", || async {
        (semaphore(base).await["waiters"].as_array()?.len() == 1).then_some(())
    })
    .await;
}

/// Room for one unpaid unit (2 in stock, half may be unpaid), payments bounded to one.
const ONE_UNPAID: [&str; 10] = [
    "--allow-unsafe-guards",
    "--payment-concurrency",
    "1",
    "--request-timeout-ms",
    "10000",
    "--payment-timeout-ms",
    "1000",
    "--max-unpaid-share",
    "0.5",
    "--expiry-interval-ms",
];

async fn orphaned_intents(env: &TestEnv) -> i64 {
    count(
        env,
        "SELECT COUNT(*) FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE p.outcome IS NULL AND o.status <> 'paying'",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn paying_a_reservation_without_a_lease_keeps_the_reservation_though_its_room_was_taken() {
    let env = TestEnv::new().await;
    let mut flags = ONE_UNPAID.to_vec();
    flags.push("3600000");
    let app = env.spawn_app(&flags).await;
    let product = create_per_request_product(&app.base_url, 2, "zk").await;
    let alice = reserve(&app.base_url, product, "alice").await;
    assert_eq!(alice.status, StatusCode::CREATED, "{alice:?}");
    let id = alice.body["id"].as_str().unwrap().to_string();
    let deadline = alice.body["expires_at"].clone();
    hold_the_payment_lease(&app.base_url).await;
    let pay = {
        let url = format!("{}/orders/{id}/pay", app.base_url);
        tokio::spawn(async move { send(http().post(url)).await })
    };
    wait_for_a_payment_waiting(&app.base_url).await;
    // While alice's order is `paying`, bob takes the room for an unpaid unit.
    let bob = reserve(&app.base_url, product, "bob").await;
    assert_eq!(bob.status, StatusCode::CREATED, "{bob:?}");

    let busy = pay.await.unwrap().unwrap();
    assert_eq!(
        (busy.status, busy.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "payment_busy"),
        "{busy:?}"
    );
    let order = send(http().get(format!("{}/orders/{id}", app.base_url)))
        .await
        .unwrap();
    assert_eq!(order.body["status"], "reserved", "{order:?}");
    assert_eq!(order.body["expires_at"], deadline, "its deadline unchanged");
    assert_eq!(orphaned_intents(&env).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_order_given_up_for_want_of_room_takes_its_intent_with_it() {
    let env = TestEnv::new().await;
    let mut flags = ONE_UNPAID.to_vec();
    flags.push("100");
    let app = env.spawn_app(&flags).await;
    let product = create_per_request_product(&app.base_url, 2, "zk").await;
    hold_the_payment_lease(&app.base_url).await;
    let paying = spawn_order(&app.base_url, product, "carol");
    wait_for_a_payment_waiting(&app.base_url).await;
    let dan = reserve(&app.base_url, product, "dan").await;
    assert_eq!(dan.status, StatusCode::CREATED, "{dan:?}");

    let refused = paying.await.unwrap().unwrap();
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::CONFLICT, "too_many_unpaid"),
        "{refused:?}"
    );
    let failed = count(
        &env,
        "SELECT COUNT(*) FROM orders WHERE user_id = 'carol' AND status = 'failed'",
    )
    .await;
    assert_eq!(failed, 1, "its units went back on sale");
    assert_eq!(orphaned_intents(&env).await, 0, "no intent left pending");
    assert_eq!(env.stock(product).await, 1, "only dan's unit is out");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keys_first_recorded_answer_is_never_replaced() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let first = order_with_key(&app.base_url, product, "erin", "first-wins").await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    // Its answer is recorded once the key's row has it (in the background past 500 ms).
    wait_until(Duration::from_secs(30), "the key's answer recorded", || async {
        let kept = count(
            &env,
            "SELECT COUNT(*) FROM idempotency_keys WHERE split_part(key, chr(31), 2) = 'first-wins' AND response IS NOT NULL",
        )
        .await;
        (kept == 1).then_some(())
    })
    .await;
    // What an attempt's late retry of its record wrote before: another answer over it.
    sqlx::query(
        "UPDATE idempotency_keys SET status_code = 201, response = '{\"status\":\"reserved\"}'
         WHERE split_part(key, chr(31), 2) = 'first-wins'",
    )
    .execute(&env.db)
    .await
    .unwrap();
    let replay = order_with_key(&app.base_url, product, "erin", "first-wins").await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.body, first.body, "the replay is the first answer");
}

/// A node made by hand with the old public mark as its data, where a sold-out flag goes: it
/// closes no sale (before, anyone able to write to ZooKeeper could close one so).
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_flag_with_the_old_public_mark_closes_no_sale() {
    let env = TestEnv::new().await;
    let quiet = ["--expiry-interval-ms", "3600000"];
    let first = env.spawn_app(&quiet).await;
    let product = create_product(&first.base_url, 5, "zk").await;
    let zk = env.zk_client().await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let forged = format!("{}/soldout/{product}", env.zk_root);
    zk.create(&forged, b"seckill-flag", &open).await.unwrap();
    // An instance started now reads every flag node as it starts.
    let app = env.spawn_app(&quiet).await;
    let view = send(http().get(format!("{}/api/products/{product}", app.base_url)))
        .await
        .unwrap();
    assert_eq!(view.body["sold_out"], false, "{view:?}");
    let sold = place_order(&http(), &app.base_url, product, "buyer")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    let (data, _) = zk.get_data(&forged).await.unwrap();
    assert_eq!(data, b"seckill-flag", "left as it was: not ours to change");
}
