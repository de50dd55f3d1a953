//! The dangerous case of the source material: a holder whose session expired while it was in
//! the critical section. ZooKeeper grants the lock to the next contender; the stale holder
//! must not be able to write the stock.

use std::time::Duration;

use reqwest::StatusCode;
use seckill::inventory::{self, Change, Outcome, Protection};
use zookeeper_client as zk;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_session_expired_cannot_write_the_stock() {
    let env = TestEnv::new().await;
    // The stale holder thinks for 3 s between reading and writing the stock.
    // Its ZooKeeper connection runs through a proxy we can cut: a network partition.
    let partition = ChaosProxy::start(env.zk_connect.clone()).await;
    let stale = env
        .spawn_app(&[
            "--stock-think-ms",
            "3000",
            "--instance",
            "stale",
            "--zk",
            &partition.addr,
        ])
        .await;
    let fresh = env
        .spawn_app(&["--lock-timeout-ms", "20000", "--instance", "fresh"])
        .await;
    let product = create_product(&stale.base_url, 5, "zk").await;

    let stale_order = {
        let base = stale.base_url.clone();
        tokio::spawn(async move { place_order(&http(), &base, product, "stale-buyer").await })
    };
    // Inside the critical section: the row is claimed with the stale holder's token.
    let db = env.db.clone();
    let stale_token: i64 = wait_until(
        Duration::from_secs(10),
        "the stale holder's claim",
        || async {
            let fence: i64 = sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
                .bind(product)
                .fetch_one(&db)
                .await
                .ok()?;
            (fence > 0).then_some(fence)
        },
    )
    .await;

    // Partition the stale holder from ZooKeeper, then take its session over and close it:
    // ZooKeeper ends the session and deletes its lock node, as it does once a long GC pause
    // or partition outlasts the session timeout. (Cut first, or its client would win the
    // session back.)
    partition.cut();
    let hijack = zk::Client::connector()
        .with_session(stale.zk.session())
        .connect(&env.zk_connect)
        .await
        .expect("take over the session");
    drop(hijack);
    let watcher = env.zk_client().await;
    wait_until(
        Duration::from_secs(10),
        "the stale lock node to vanish",
        || async {
            env.lock_queue(&watcher, product)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;

    let fresh_reply = place_order(&http(), &fresh.base_url, product, "fresh-buyer")
        .await
        .unwrap();
    assert_eq!(fresh_reply.status, StatusCode::CREATED, "{fresh_reply:?}");
    assert!(fresh_reply.body["fence"].as_i64().unwrap() > stale_token);

    let stale_reply = stale_order.await.unwrap().unwrap();
    assert_eq!(
        stale_reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{stale_reply:?}"
    );
    assert_eq!(stale_reply.code(), "lock_lost");
    assert!(stale_reply.retry_after.is_some());

    let stale_id = stale_reply.body["order_id"].as_str().unwrap().to_string();
    let (status, failure): (String, Option<String>) =
        sqlx::query_as("SELECT status, failure FROM orders WHERE id = $1::uuid")
            .bind(&stale_id)
            .fetch_one(&env.db)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), failure.as_deref()),
        ("failed", Some("lock_lost"))
    );
    assert_eq!(env.stock(product).await, 4, "only the fresh holder sold");
    let audit = audit(&fresh.base_url, product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_database_rejects_an_older_token_after_a_newer_claim() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let db = env.db.clone();

    // Token 10 reads, then thinks; token 20 claims and sells in the meantime.
    let older = tokio::spawn({
        let db = db.clone();
        async move {
            inventory::change_stock(
                &db,
                product,
                Change::Take(1),
                Protection::Fenced(10),
                tokio::time::sleep(Duration::from_millis(1500)),
            )
            .await
        }
    });
    wait_until(Duration::from_secs(10), "token 10's claim", || async {
        let fence: i64 = sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
            .bind(product)
            .fetch_one(&db)
            .await
            .ok()?;
        (fence == 10).then_some(())
    })
    .await;
    match inventory::change_stock(
        &db,
        product,
        Change::Take(1),
        Protection::Fenced(20),
        async {},
    )
    .await
    {
        Ok(Outcome::Applied(tx)) => tx.commit().await.unwrap(),
        _ => panic!("the newer token must be able to write"),
    }
    assert!(
        matches!(older.await.unwrap(), Ok(Outcome::Fenced)),
        "the older token's write must be refused"
    );

    // And once a newer token has claimed the row, an older one cannot even claim it.
    let late = inventory::change_stock(
        &db,
        product,
        Change::Take(1),
        Protection::Fenced(15),
        async {},
    )
    .await;
    assert!(matches!(late, Ok(Outcome::Fenced)));
    assert_eq!(env.stock(product).await, 9);
}
