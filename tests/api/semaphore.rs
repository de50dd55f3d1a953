//! The payment semaphore across instances: never more than N charges at the provider, a
//! crashed holder's lease goes with its session, and a payment waits for a lease until its
//! deadline without holding the stock. (Curator interop is in `interop`.)

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

/// Peak concurrency of the recorded charges, from when each started and ended at the
/// provider: +1 at each start, −1 at each end (ends first on a tie).
/// The most charges the provider had in flight at once, from its own ledger.
async fn peak_charges(env: &TestEnv) -> i64 {
    let mut edges: Vec<(String, i64)> = Vec::new();
    for charge in env.provider.ledger().await {
        edges.push((charge["started_at"].as_str().unwrap().to_string(), 1));
        edges.push((charge["ended_at"].as_str().unwrap().to_string(), -1));
    }
    // RFC 3339 in UTC orders as text; an end sorts before a start at the same instant.
    edges.sort();
    let (mut running, mut peak) = (0, 0);
    for (_, delta) in edges {
        running += delta;
        peak = peak.max(running);
    }
    peak
}

#[tokio::test(flavor = "multi_thread")]
async fn three_instances_never_have_more_than_n_charges_at_the_provider() {
    let env = TestEnv::new().await;
    env.provider.set(json!({ "latency_ms": 1000 })).await;
    let flags = ["--payment-concurrency", "2"];
    let (_servers, urls) = three_instances(&env, &flags).await;
    let product = create_product(&urls[0], 10, "zk").await;

    let replies = flash_sale(&urls, product, 6).await;
    for reply in &replies {
        let reply = reply.as_ref().unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        assert_eq!(reply.body["status"], "paid", "{reply:?}");
    }
    // Six charges of a second each, from three instances at once: the provider saw two at
    // a time, never three.
    assert_eq!(peak_charges(&env).await, 2);
    // Every lease is given back (each node is deleted in the background after its charge).
    let view = wait_until(Duration::from_secs(30), "every lease back", || async {
        let view = semaphore(&urls[1]).await;
        view["leases"].as_array()?.is_empty().then_some(view)
    })
    .await;
    assert_eq!(view["max_leases"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_instances_lease_goes_with_its_session_and_the_waiter_gets_it() {
    let env = TestEnv::new().await;
    // Charges that outlast the test: what moves the queue is the crash, not a charge ending.
    env.provider.set(json!({ "latency_ms": 60000 })).await;
    let flags = [
        "--payment-concurrency",
        "2",
        "--request-timeout-ms",
        "120000",
        "--shutdown-grace-ms",
        "125000",
        "--zk-session-timeout-ms",
        "4000",
    ];
    let (mut servers, urls) = three_instances(&env, &flags).await;
    let product = create_product(&urls[0], 10, "zk").await;

    let _first = spawn_order(&urls[0], product, "buyer-0");
    let _second = spawn_order(&urls[1], product, "buyer-1");
    wait_until(Duration::from_secs(30), "two leases held", || async {
        let view = semaphore(&urls[2]).await;
        let mut held = each(&view["leases"], "owner");
        held.sort();
        (held == ["instance-0", "instance-1"]).then_some(())
    })
    .await;
    let third = spawn_order(&urls[2], product, "buyer-2");
    wait_until(
        Duration::from_secs(30),
        "the third charge waiting",
        || async {
            let view = semaphore(&urls[2]).await;
            (each(&view["waiters"], "owner") == ["instance-2"]).then_some(())
        },
    )
    .await;
    assert!(!third.is_finished());

    servers[0].child.kill().await.unwrap();
    let view = wait_until(Duration::from_secs(30), "the waiter holding", || async {
        let view = semaphore(&urls[2]).await;
        let mut held = each(&view["leases"], "owner");
        held.sort();
        (held == ["instance-1", "instance-2"]).then_some(view)
    })
    .await;
    assert!(view["waiters"].as_array().unwrap().is_empty(), "{view}");
    // The crashed instance's charge was never recorded; nobody else finished one either.
    assert_eq!(peak_charges(&env).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payment_waits_for_a_lease_until_its_deadline_without_holding_the_stock() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--allow-unsafe-guards",
            "--payment-concurrency",
            "1",
            "--request-timeout-ms",
            "10000",
        ])
        .await;
    let product = create_per_request_product(&app.base_url, 5, "zk").await;
    let lab = format!("{}/api/payments/semaphore", app.base_url);
    let act = |action: &'static str| {
        let lab = lab.clone();
        async move {
            let request = http().post(lab).bearer_auth(ADMIN_TOKEN);
            let reply = send(request.json(&json!({ "action": action })))
                .await
                .unwrap();
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{reply:?}");
        }
    };
    // The one lease is taken by a charge that hangs.
    act("acquire").await;
    wait_until(
        Duration::from_secs(30),
        "the lab holding the lease",
        || async {
            (semaphore(&app.base_url).await["leases"].as_array()?.len() == 1).then_some(())
        },
    )
    .await;

    let waiting = spawn_order(&app.base_url, product, "payer");
    wait_until(Duration::from_secs(30), "the payment waiting", || async {
        let view = semaphore(&app.base_url).await;
        (view["waiters"].as_array()?.len() == 1).then_some(())
    })
    .await;
    // Its units are taken and its lock cycle is over: the stock lock is free, and another
    // buyer is served while the payment waits.
    assert_eq!(env.stock(product).await, 4);
    let queue = lock_view(&app.base_url, product).await;
    assert!(queue["holder"].is_null(), "{queue}");
    let other = reserve(&app.base_url, product, "other").await;
    assert_eq!(other.status, StatusCode::CREATED, "{other:?}");
    assert!(!waiting.is_finished(), "the payment still waits");

    // At its deadline it gives up: nothing charged, the units still reserved for the buyer.
    let busy = waiting.await.unwrap().unwrap();
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE, "{busy:?}");
    assert_eq!(busy.code(), "payment_busy");
    assert_eq!(busy.retry_after.as_deref(), Some("1"));
    let order = busy.body["order_id"].as_str().unwrap().to_string();
    assert_eq!(env.order_row(&order).await.0, "reserved");
    let charged: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM payments")
        .fetch_one(&env.db)
        .await
        .unwrap();
    assert_eq!(charged, 0);

    // Once the lease is free, the buyer pays the reservation.
    act("clear").await;
    let paid = send(http().post(format!("{}/orders/{order}/pay", app.base_url)))
        .await
        .unwrap();
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    assert_eq!(paid.body["status"], "paid");
    assert_eq!(env.stock(product).await, 3);
}
