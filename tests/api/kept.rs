//! The kept lock: an instance whose orders for a product keep coming serves them on the
//! same lock node, cycle after cycle; it gives the lock up when another instance waits; and
//! keeping a node changes nothing about the fence: a holder whose session expired while it
//! kept its node cannot write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;

use crate::helpers::*;

/// Long enough that no test here sees a lock go for want of orders.
const LINGER: &str = "60000";

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_lock_serves_several_cycles_on_one_node() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--lock-linger-ms", LINGER]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let watcher = env.zk_client().await;
    let mut fences = Vec::new();
    for buyer in ["first", "second", "third"] {
        // One at a time: each order is a lock cycle of its own.
        let reply = place_order(&http(), &app.base_url, product, buyer)
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        fences.push(reply.body["fence"].as_i64().expect("a fence"));
        let queue = env.lock_queue(&watcher, product).await;
        assert_eq!(queue.len(), 1, "the node stays after its cycle: {queue:?}");
    }
    assert!(
        fences.iter().all(|f| *f == fences[0]),
        "one node, one token: {fences:?}"
    );
    let stats = &lock_view(&app.base_url, product).await["stats"];
    assert_eq!(stats["acquisitions"], 1, "{stats}");
    assert_eq!(stats["kept_cycles"], 2, "{stats}");
    assert_eq!(stats["orders"], 3, "{stats}");
    assert_eq!(env.stock(product).await, 7);
}

/// A node queued behind a kept lock gets it although the holder would linger a minute: the
/// holder, busy with a stream of orders until then, gives it up at the fairness bound.
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_lock_is_given_up_when_another_instance_waits() {
    let env = TestEnv::new().await;
    // Each cycle at least 50 ms (a pause between read and write): the holder is never done
    // with its stream before the waiter is seen.
    let holder = env
        .spawn_app(&[
            "--lock-linger-ms",
            LINGER,
            "--stock-think-ms",
            "50",
            "--lock-handover-cycles",
            "2",
        ])
        .await;
    let waiter = env.spawn_app(&["--lock-timeout-ms", "30000"]).await;
    let product = create_product(&holder.base_url, 1000, "zk").await;
    let first = place_order(&http(), &holder.base_url, product, "opener")
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let held = first.body["fence"].as_i64().unwrap();

    // The holder's stream: orders one after another from four buyers' loops, until the
    // waiter is served (at most 100 each).
    let served = Arc::new(AtomicBool::new(false));
    let stream: Vec<_> = (0..4)
        .map(|i| {
            let (base, served) = (holder.base_url.clone(), served.clone());
            tokio::spawn(async move {
                let mut fences = Vec::new();
                for n in 0..100 {
                    if served.load(Ordering::SeqCst) {
                        break;
                    }
                    let reply = place_order(&http(), &base, product, &format!("s{i}-{n}"))
                        .await
                        .unwrap();
                    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
                    fences.push(reply.body["fence"].as_i64().unwrap());
                }
                fences
            })
        })
        .collect();
    wait_until(
        Duration::from_secs(30),
        "the holder to serve its stream on the kept node",
        || async {
            let stats = lock_view(&holder.base_url, product).await["stats"].clone();
            (stats["kept_cycles"].as_u64() >= Some(2)).then_some(())
        },
    )
    .await;
    let reply = place_order(&http(), &waiter.base_url, product, "waiter")
        .await
        .unwrap();
    served.store(true, Ordering::SeqCst);
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert!(reply.body["fence"].as_i64().unwrap() > held, "{reply:?}");
    let mut streamed = Vec::new();
    for task in stream {
        streamed.extend(task.await.unwrap());
    }
    assert!(
        streamed.len() < 400,
        "the waiter was served before the stream ran out"
    );
    let stats = &lock_view(&holder.base_url, product).await["stats"];
    assert!(
        stats["longest_handover_ms"].as_u64().is_some(),
        "the holder measured the wait it ended: {stats}"
    );
    let sold = 1 + streamed.len() as i32 + 1;
    assert_eq!(env.stock(product).await, 1000 - sold);
    let audit = audit(&holder.base_url, product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
}

/// The source material's danger, with the node kept between cycles: the holder's session
/// expires while it keeps its node, ZooKeeper grants the lock to another instance, and the
/// holder's next write, under the kept node's token, is refused by PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_lock_whose_session_expired_is_refused_by_the_fence() {
    let env = TestEnv::new().await;
    let partition = ChaosProxy::start(env.zk_connect.clone()).await;
    let stale = env
        .spawn_app(&[
            "--instance",
            "stale",
            "--zk",
            &partition.addr,
            "--lock-linger-ms",
            LINGER,
        ])
        .await;
    let fresh = env
        .spawn_app(&["--lock-timeout-ms", "20000", "--instance", "fresh"])
        .await;
    let product = create_product(&stale.base_url, 5, "zk").await;
    let first = place_order(&http(), &stale.base_url, product, "first")
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let kept = first.body["fence"].as_i64().unwrap();
    let watcher = env.zk_client().await;
    assert_eq!(env.lock_queue(&watcher, product).await.len(), 1, "kept");

    // The next cycle, on the kept node, stops between its read and its write.
    let mut pause = stale.holds.hold_next(product);
    let stale_order = spawn_order(&stale.base_url, product, "stale-buyer");
    pause.reached().await;
    assert_eq!(env.fence(product).await, kept, "the kept node's token");
    assert_eq!(
        lock_view(&stale.base_url, product).await["stats"]["acquisitions"],
        1
    );

    // The session ends (partitioned, then taken over and closed): its node goes.
    crate::fencing::end_session(&env, &partition, &stale, product).await;
    let fresh_reply = place_order(&http(), &fresh.base_url, product, "fresh-buyer")
        .await
        .unwrap();
    assert_eq!(fresh_reply.status, StatusCode::CREATED, "{fresh_reply:?}");
    assert!(fresh_reply.body["fence"].as_i64().unwrap() > kept);

    pause.release();
    let stale_reply = stale_order.await.unwrap().unwrap();
    assert_eq!(
        (stale_reply.status, stale_reply.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
        "{stale_reply:?}"
    );
    assert_eq!(
        env.stock(product).await,
        3,
        "the first order and the fresh one"
    );
    let audit = audit(&fresh.base_url, product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
}
