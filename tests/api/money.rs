//! Money is exact: what the payment provider's own ledger charged and what the shop calls
//! paid agree, whatever was lost on the way — an answer, the provider itself, the service, a
//! commit's acknowledgement. After each: every succeeded charge belongs to exactly one
//! `paid` order and every `paid` order has exactly one succeeded charge, no order is left
//! `paying`, and the key replays the order's final outcome.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use seckill::inventory::{self, Change, Outcome, Protection};
use seckill::lock::Token;
use serde_json::json;
use tokio::sync::oneshot;

use crate::helpers::*;

/// The invariants over the provider's ledger and the shop's orders.
pub async fn money_is_exact(env: &TestEnv) {
    let ledger = env.provider.ledger().await;
    let charged: Vec<String> = ledger
        .iter()
        .filter(|c| c["status"] == "succeeded")
        .map(|c| c["key"].as_str().unwrap().to_string())
        .collect();
    let paid: Vec<String> = sqlx::query_scalar(
        "SELECT 'seckill-' || id::text FROM orders WHERE status = 'paid' ORDER BY 1",
    )
    .fetch_all(&env.db)
    .await
    .unwrap();
    let mut charged_sorted = charged.clone();
    charged_sorted.sort();
    assert_eq!(
        charged_sorted, paid,
        "succeeded charges = paid orders, one each"
    );
    let paying = count(env, "SELECT COUNT(*) FROM orders WHERE status = 'paying'").await;
    assert_eq!(paying, 0, "no order left paying");
    let pending = count(env, "SELECT COUNT(*) FROM payments WHERE outcome IS NULL").await;
    assert_eq!(pending, 0, "no intent left pending");
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT key FROM payments WHERE outcome = 'succeeded' ORDER BY key")
            .fetch_all(&env.db)
            .await
            .unwrap();
    assert_eq!(recorded, paid, "one succeeded payment row per paid order");
}

/// Waits until the order is `paid` (settled by its task or the sweep); the database may be
/// coming back meanwhile.
pub async fn wait_paid(env: &TestEnv, order_id: &str) {
    wait_until(Duration::from_secs(60), "the order to be paid", || async {
        let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
            .bind(order_id)
            .fetch_one(&env.db)
            .await
            .ok()?;
        (status == "paid").then_some(())
    })
    .await
}

pub fn order_id(reply: &Reply) -> String {
    reply.body["order_id"]
        .as_str()
        .or(reply.body["id"].as_str())
        .unwrap_or_else(|| panic!("an order id: {reply:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_lost_after_the_charge_is_asked_again_under_its_key_and_charged_once() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    // The provider charges, then drops the answer, twice in a row.
    env.provider.set(json!({ "lose_next": 2 })).await;
    let reply = order_with_key(&app.base_url, product, "alice", "lost-1").await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(reply.body["status"], "paid");
    let ledger = env.provider.ledger().await;
    assert_eq!(ledger.len(), 1, "one charge for three tries: {ledger:?}");
    money_is_exact(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_down_past_the_deadline_leaves_an_intent_the_sweep_settles() {
    let mut env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--request-timeout-ms",
            "3000",
            "--expiry-interval-ms",
            "100",
        ])
        .await;
    let product = create_product(&app.base_url, 5, "zk").await;
    env.provider.kill().await;
    let reply = order_with_key(&app.base_url, product, "bob", "down-1").await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "outcome_pending"),
        "{reply:?}"
    );
    let order = order_id(&reply);
    assert_eq!(
        env.order_row(&order).await.0,
        "paying",
        "not declared failed"
    );
    let pending: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM payments WHERE order_id = $1::uuid AND outcome IS NULL",
    )
    .bind(&order)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(pending, 1, "its intent was written before the charge");
    // Still pending, the key answers "in progress", never a guess.
    let retry = order_with_key(&app.base_url, product, "bob", "down-1").await;
    assert_eq!(retry.code(), "idempotency_in_progress", "{retry:?}");
    // With a time to ask again: without one, clients poll as fast as they can.
    assert_eq!(retry.retry_after.as_deref(), Some("1"), "{retry:?}");

    env.provider.restart().await;
    wait_paid(&env, &order).await;
    let replay = order_with_key(&app.base_url, product, "bob", "down-1").await;
    assert_eq!(replay.status, StatusCode::CREATED, "{replay:?}");
    assert!(replay.replayed);
    assert_eq!(replay.body["status"], "paid");
    money_is_exact(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_killed_between_charge_and_record_is_settled_from_the_ledger() {
    let env = TestEnv::new().await;
    let mut doomed = env.spawn_process("doomed", &[]).await;
    let product = create_product(&doomed.base_url, 5, "zk").await;
    // The ledger has the charge, and its answer takes a minute: the service is killed in
    // between.
    env.provider
        .set(json!({ "slow_rate": 1.0, "slow_ms": 60000 }))
        .await;
    let base = doomed.base_url.clone();
    let _order =
        tokio::spawn(async move { order_with_key(&base, product, "carol", "kill-1").await });
    wait_until(
        Duration::from_secs(30),
        "the charge in the ledger",
        || async { (env.provider.ledger().await.len() == 1).then_some(()) },
    )
    .await;
    doomed.child.kill().await.unwrap();
    env.provider.set(json!({ "slow_rate": 0.0 })).await;

    let sweeper = env
        .spawn_app(&[
            "--request-timeout-ms",
            "3000",
            "--expiry-interval-ms",
            "100",
        ])
        .await;
    let order: String = sqlx::query_scalar("SELECT id::text FROM orders WHERE user_id = 'carol'")
        .fetch_one(&env.db)
        .await
        .unwrap();
    wait_paid(&env, &order).await;
    let replay = order_with_key(&sweeper.base_url, product, "carol", "kill-1").await;
    assert_eq!(replay.status, StatusCode::CREATED, "{replay:?}");
    assert_eq!(replay.body["status"], "paid");
    money_is_exact(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_whose_answer_is_lost_is_read_back_and_its_orders_charged() {
    let env = TestEnv::new().await;
    let (prefix, name) = env.database_url.rsplit_once('/').unwrap();
    let target = prefix.rsplit_once('@').unwrap().1.to_string();
    let proxy = CommitDropper::start(target.clone()).await;
    let via_proxy = format!(
        "{}@{}/{name}?sslmode=disable",
        prefix.rsplit_once('@').unwrap().0,
        proxy.addr
    );
    let app = env.spawn_app(&["--database-url", &via_proxy]).await;
    let product = create_per_request_product(&app.base_url, 5, "zk").await;
    proxy.arm();
    let reply = order_with_key(&app.base_url, product, "dave", "commit-1").await;
    assert_eq!(proxy.dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(reply.body["status"], "paid");
    let counts = env.order_counts(product).await;
    assert_eq!(
        counts.get("failed"),
        None,
        "nothing written over it: {counts:?}"
    );
    assert_eq!(env.stock(product).await, 4);
    money_is_exact(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_none_product_never_oversells_on_a_server_without_unsafe_guards() {
    let env = TestEnv::new().await;
    let demo = env.spawn_app(&["--allow-unsafe-guards"]).await;
    let product =
        create_product_with(&demo.base_url, json!({ "stock": 10, "guard": "none" })).await;
    drop(demo);
    // Production servers on the same database, thinking between read and write so that an
    // unguarded read-check-write would lose updates.
    let (_servers, urls) = three_instances(&env, &["--stock-think-ms", "20"]).await;
    let replies = flash_sale(&urls, product, 60).await;
    let sold = replies
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status == StatusCode::CREATED))
        .count();
    assert_eq!(sold, 10);
    let audit = audit(&urls[0], product).await;
    assert_eq!(
        (audit["oversold"].as_i64(), audit["consistent"].as_bool()),
        (Some(0), Some(true)),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_whose_holder_was_killed_mid_order_gets_a_final_answer_soon_after_its_deadline() {
    let env = TestEnv::new().await;
    let flags = [
        "--request-timeout-ms",
        "3000",
        "--zk-session-timeout-ms",
        "4000",
    ];
    // The holder thinks for ten minutes inside its critical section: it dies holding the lock.
    let mut holder_flags = flags.to_vec();
    holder_flags.extend(["--stock-think-ms", "600000"]);
    let mut holder = env.spawn_process("holder", &holder_flags).await;
    let other = env.spawn_process("other", &flags).await;
    let product = create_per_request_product(&other.base_url, 5, "zk").await;
    let base = holder.base_url.clone();
    let _first =
        tokio::spawn(async move { order_with_key(&base, product, "erin", "killed-1").await });
    env.wait_for_fence_past(product, 0, "the holder inside its critical section")
        .await;
    holder.child.kill().await.unwrap();
    let killed = Instant::now();

    let last: Reply = wait_until(
        Duration::from_secs(60),
        "a final answer for the key",
        || async {
            let retry = order_with_key(&other.base_url, product, "erin", "killed-1").await;
            (!retry.retryable()).then_some(retry)
        },
    )
    .await;
    let took = killed.elapsed();
    assert_eq!(last.status, StatusCode::CREATED, "{last:?}");
    // The attempt's own deadline (3 s + 2 s margin) and the dead session (4 s), not a fixed
    // minute.
    assert!(
        took < Duration::from_secs(20),
        "final answer after {took:?}"
    );
    let orders = count(&env, "SELECT COUNT(*) FROM orders WHERE user_id = 'erin'").await;
    assert_eq!(orders, 1, "one order for the key");
    money_is_exact(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_transactions_under_one_token_both_take_their_units() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    // One token, two transactions: an owner's re-entries.
    let token = Token {
        ensemble: app.zk.ensemble(),
        zxid: 1,
    };
    let protection = Protection::Fenced(token);
    let (read, has_read) = oneshot::channel::<()>();
    let (go, wait) = oneshot::channel::<()>();
    let db = env.db.clone();
    let first = tokio::spawn(async move {
        let pause = async move {
            let _ = read.send(());
            let _ = wait.await;
        };
        match inventory::change_stock(&db, product, Change::Take(1), protection, pause).await {
            Ok(Outcome::Applied(written)) => written.tx.commit().await.unwrap(),
            _ => panic!("the first change applied"),
        }
    });
    has_read.await.unwrap();
    // The second reads the same stock, writes and commits while the first waits.
    match inventory::change_stock(&env.db, product, Change::Take(2), protection, async {}).await {
        Ok(Outcome::Applied(written)) => written.tx.commit().await.unwrap(),
        _ => panic!("the second change applied"),
    }
    go.send(()).unwrap();
    first.await.unwrap();
    assert_eq!(
        env.stock(product).await,
        7,
        "10 less 1 less 2: neither update lost"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paying_order_that_gets_no_lease_never_takes_unpaid_reservations_past_their_cap() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--allow-unsafe-guards",
            "--payment-concurrency",
            "1",
            "--request-timeout-ms",
            "4000",
            "--max-unpaid-share",
            "0.5",
        ])
        .await;
    let product = create_product_with(
        &app.base_url,
        json!({ "stock": 4, "per_user_limit": 4, "batch_max": 1 }),
    )
    .await;
    // Unpaid reservations hold their whole share (2 of 4).
    for user in ["r1", "r2"] {
        assert_eq!(
            reserve(&app.base_url, product, user).await.status,
            StatusCode::CREATED
        );
    }
    // The one payment lease is held by a charge that hangs (the lock lab's).
    let lab = format!("{}/api/payments/semaphore", app.base_url);
    let acquire = http().post(&lab).bearer_auth(ADMIN_TOKEN);
    let taken = send(acquire.json(&json!({ "action": "acquire" })))
        .await
        .unwrap();
    assert_eq!(taken.status, StatusCode::ACCEPTED, "{taken:?}");
    wait_until(
        Duration::from_secs(30),
        "the lab holding the lease",
        || async {
            let view = send(http().get(&lab)).await.ok()?.body;
            (view["leases"].as_array()?.len() == 1).then_some(())
        },
    )
    .await;

    // A paying order gets no lease: it may not become a third unpaid reservation.
    let reply = place_order(&http(), &app.base_url, product, "payer")
        .await
        .unwrap();
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::CONFLICT, "too_many_unpaid"),
        "{reply:?}"
    );
    let reserved: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM orders WHERE product_id = $1 AND status = 'reserved'",
    )
    .bind(product)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(reserved, 2, "no reservation past the cap");
    assert_eq!(env.stock(product).await, 2, "its unit went back on sale");
    assert!(env.provider.ledger().await.is_empty(), "nothing charged");
    let clear = http().post(&lab).bearer_auth(ADMIN_TOKEN);
    send(clear.json(&json!({ "action": "clear" })))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_payment_is_settled_by_the_sweep() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--expiry-interval-ms", "50"]).await;
    let product =
        create_product_with(&app.base_url, json!({ "stock": 5, "per_user_limit": 5 })).await;
    let mut ids = Vec::new();
    for user in ["charged", "never-charged"] {
        let reserved = reserve(&app.base_url, product, user).await;
        ids.push(reserved.body["id"].as_str().unwrap().to_string());
    }
    // Both stuck in `paying` for ten minutes, as if their instance had died mid-payment; the
    // first one's charge had gone through and was recorded (recorded first: the sweep runs
    // every 50 ms).
    sqlx::query("INSERT INTO payments (order_id, key, amount_cents, outcome, provider_ref) VALUES ($1::uuid, 'seckill-' || $1, 1999, 'succeeded', 'sim_test')")
        .bind(&ids[0])
        .execute(&env.db)
        .await
        .unwrap();

    sqlx::query("UPDATE orders SET status = 'paying', updated_at = now() - interval '10 minutes' WHERE product_id = $1")
        .bind(product)
        .execute(&env.db)
        .await
        .unwrap();
    let db = env.db.clone();
    let statuses = wait_until(
        Duration::from_secs(10),
        "the sweep to settle both",
        || async {
            let mut statuses = Vec::new();
            for id in &ids {
                let status: String =
                    sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
                        .bind(id)
                        .fetch_one(&db)
                        .await
                        .ok()?;
                statuses.push(status);
            }
            (!statuses.iter().any(|s| s == "paying")).then_some(statuses)
        },
    )
    .await;
    assert_eq!(statuses, ["paid", "payment_failed"]);
    assert_eq!(
        env.stock(product).await,
        4,
        "the uncharged unit went back on sale"
    );
    assert_eq!(audit(&app.base_url, product).await["consistent"], true);
}
