//! `Idempotency-Key` under concurrency across instances: a retry storm sells each key once
//! and replays its first answer byte for byte, another body under a key is refused, and a
//! buyer whose answer was lost (a timeout, a dropped reply) learns the outcome by retrying.

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_storm_sells_each_key_once_and_replays_it_identically() {
    let env = TestEnv::new().await;
    let (_servers, urls) = three_instances(&env, &["--lock-timeout-ms", "30000"]).await;
    let stock = 50;
    let product = create_product(&urls[0], stock, "zk").await;

    // 100 buyers, each sending its order 3 times at once, to 3 different instances.
    let attempts = (0..100)
        .flat_map(|i| (0..3).map(move |copy| (i, copy)))
        .map(|(i, copy)| {
            let base = urls[copy].clone();
            async move {
                (
                    i,
                    order_with_key(&base, product, &format!("buyer-{i}"), &format!("key-{i}"))
                        .await,
                )
            }
        });
    let replies = futures::future::join_all(attempts).await;

    let mut first_final: HashMap<usize, Reply> = HashMap::new();
    for (i, reply) in replies {
        assert!(
            [StatusCode::CREATED, StatusCode::CONFLICT].contains(&reply.status),
            "buyer {i}: {reply:?}"
        );
        if reply.retryable() {
            continue;
        }
        match first_final.get(&i) {
            Some(seen) => assert_eq!(
                (seen.status, &seen.raw),
                (reply.status, &reply.raw),
                "buyer {i}: replay differs"
            ),
            None => {
                first_final.insert(i, reply);
            }
        }
    }
    // Once everything is done, every key replays its one outcome, byte for byte.
    for i in 0..100 {
        let replay = order_with_key(
            &urls[i % 3],
            product,
            &format!("buyer-{i}"),
            &format!("key-{i}"),
        )
        .await;
        assert!(replay.replayed, "buyer {i}: {replay:?}");
        if let Some(original) = first_final.get(&i) {
            assert_eq!(
                (original.status, &original.raw),
                (replay.status, &replay.raw),
                "buyer {i}"
            );
        }
        first_final.entry(i).or_insert(replay);
    }
    let winners = first_final
        .values()
        .filter(|r| r.status == StatusCode::CREATED)
        .count() as i64;
    assert_eq!(winners, stock);
    let orders = env.order_counts(product).await;
    assert_eq!(orders.get("paid"), Some(&winners), "{orders:?}");
    let most_orders_per_buyer: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM orders WHERE product_id = $1 GROUP BY user_id) c",
    )
    .bind(product)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(
        most_orders_per_buyer, 1,
        "a retried key created a second order"
    );
    let audit = audit(&urls[0], product).await;
    assert_eq!(
        (audit["stock"].as_i64(), audit["consistent"].as_bool()),
        (Some(0), Some(true)),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_key_with_another_body_is_refused() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let first = order_with_key(&app.base_url, product, "alice", "k1").await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other = send(
        http()
            .post(format!("{}/orders", app.base_url))
            .header("Idempotency-Key", "k1")
            .json(&json!({ "product_id": product, "user_id": "alice", "pay": false })),
    )
    .await
    .unwrap();
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY, "{other:?}");
    assert_eq!(other.code(), "idempotency_mismatch");
    // A key is its buyer's: bob's k1 is another key, and another order.
    let bobs = order_with_key(&app.base_url, product, "bob", "k1").await;
    assert_eq!(bobs.status, StatusCode::CREATED, "{bobs:?}");
    assert_ne!(bobs.body["id"], first.body["id"]);
    let bad = send(
        http()
            .post(format!("{}/orders", app.base_url))
            .header("Idempotency-Key", "k".repeat(129))
            .json(&json!({ "product_id": product, "user_id": "carol" })),
    )
    .await
    .unwrap();
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    assert_eq!(env.stock(product).await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_buyer_learns_the_outcome_by_retrying_the_key() {
    let env = TestEnv::new().await;
    // Long enough for the order to reach its lock on a busy machine: one that timed out
    // still queued would leave the queue, and never reach the hold below.
    let app = env.spawn_app(&["--request-timeout-ms", "2000"]).await;
    // Set up through an instance with the default timeout: on a busy machine creating the
    // product may itself take longer than that.
    let setup = env.spawn_app(&[]).await;
    let product = create_product(&setup.base_url, 5, "zk").await;

    // The order stays inside its critical section until the request has timed out; an order
    // past its deadline is never written or charged, so the buyer's retry of the key buys it.
    let mut hold = app.holds.hold_next(product);
    let base_url = app.base_url.clone();
    let order =
        tokio::spawn(async move { order_with_key(&base_url, product, "patient", "slow-1").await });
    tokio::time::timeout(Duration::from_secs(30), hold.reached())
        .await
        .expect("the order reached its critical section before its request timed out");
    let timed_out = order.await.unwrap();
    assert_eq!(
        (timed_out.status, timed_out.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    assert!(timed_out.retry_after.is_some());
    hold.release();
    // Its lock cycle ends (its lock node gone) having written nothing that holds a unit:
    // the order was past its deadline when the hold let it go.
    let zk = env.zk_client().await;
    env.wait_for_queue(&zk, product, 0, "the held lock cycle to end")
        .await;
    let live = format!(
        "SELECT COUNT(*) FROM orders WHERE product_id = {product}
         AND status IN ('reserved', 'paying', 'paid')"
    );
    assert_eq!(count(&env, &live).await, 0, "the held order was written");

    let outcome = wait_until(Duration::from_secs(10), "the order to finish", || async {
        let retry = order_with_key(&app.base_url, product, "patient", "slow-1").await;
        // Still in progress, or this retry timed out too: ask again.
        (!retry.retryable()).then_some(retry)
    })
    .await;
    assert_eq!(outcome.status, StatusCode::CREATED, "{outcome:?}");
    // Paid; or, on a machine so busy that the retry's own charge no longer fit before its
    // answer's deadline, a reservation not charged, which the buyer then pays.
    if outcome.body["status"] == "reserved" {
        let id = outcome.body["id"].as_str().unwrap().to_string();
        let url = format!("{}/orders/{id}/pay", app.base_url);
        let paid = wait_until(Duration::from_secs(10), "the reservation paid", || async {
            let reply = send(http().post(&url)).await.ok()?;
            (!reply.retryable()).then_some(reply)
        })
        .await;
        assert_eq!(paid.body["status"], "paid", "{paid:?}");
    } else {
        assert_eq!(outcome.body["status"], "paid", "{outcome:?}");
    }
    // The held order, released past its deadline, was never written as a sale nor charged
    // (its buyer had been told 503 without an order id): the key's retry bought the unit.
    let counts = env.order_counts(product).await;
    assert_eq!(counts.get("paid"), Some(&1), "{counts:?}");
    assert_eq!(env.provider.ledger().await.len(), 1, "one charge");
    assert_eq!(env.stock(product).await, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_whose_answer_was_lost_answers_from_its_order() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let paid = place_order(&http(), &app.base_url, product, "lost-answer")
        .await
        .unwrap();
    assert_eq!(paid.status, StatusCode::CREATED);
    // The key knows its order but not the answer: the attempt failed after the order was paid.
    sqlx::query(
        "INSERT INTO idempotency_keys (key, request, order_id) VALUES ('lost-answer' || chr(31) || 'lost', $1, $2::uuid)",
    )
    .bind(json!({ "product_id": product, "user_id": "lost-answer", "quantity": 1, "pay": true }))
    .bind(paid.body["id"].as_str().unwrap())
    .execute(&env.db)
    .await
    .unwrap();

    let retry = order_with_key(&app.base_url, product, "lost-answer", "lost").await;
    assert_eq!(retry.status, StatusCode::CREATED, "{retry:?}");
    assert!(retry.replayed);
    assert_eq!(
        retry.body["id"], paid.body["id"],
        "the same order, not a second one"
    );
    assert_eq!(env.stock(product).await, 4);
    let again = order_with_key(&app.base_url, product, "lost-answer", "lost").await;
    assert_eq!(
        (again.status, &again.raw),
        (retry.status, &retry.raw),
        "kept from now on"
    );
}
