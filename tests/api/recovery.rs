//! Nothing stays stuck after a fault: orders a dead process left behind, sold-out flags the
//! stock contradicts, an order the sweep cannot settle, orders in flight at shutdown.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::*;

/// An order row as a process that died (or an earlier version) could leave it, with the
/// Idempotency-Key that placed it and no answer kept.
async fn leave_order(env: &TestEnv, product: i64, user: &str, key: &str, status: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO orders (id, product_id, user_id, quantity, amount_cents, status, created_at)
         VALUES ($1, $2, $3, 1, 1999, $4, now() - interval '10 minutes')",
    )
    .bind(id)
    .bind(product)
    .bind(user)
    .bind(status)
    .execute(&env.db)
    .await
    .unwrap();
    // Kept as the server keeps it: scoped to its buyer.
    sqlx::query("INSERT INTO idempotency_keys (key, request, order_id) VALUES ($2 || chr(31) || $1, $3, $4)")
        .bind(key)
        .bind(user)
        .bind(json!({ "product_id": product, "user_id": user, "quantity": 1, "pay": true }))
        .bind(id)
        .execute(&env.db)
        .await
        .unwrap();
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn orders_left_behind_are_closed_and_their_keys_answer_their_outcome() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--expiry-interval-ms", "50"]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let created = leave_order(&env, product, "left-created", "k-created", "created").await;
    let failed = leave_order(&env, product, "left-failed", "k-failed", "failed").await;
    let expired = leave_order(&env, product, "left-expired", "k-expired", "expired").await;

    let closed = wait_until(
        Duration::from_secs(10),
        "the sweep to close the `created` order",
        || async {
            let row = env.order_row(&created.to_string()).await;
            (row.0 != "created").then_some(row)
        },
    )
    .await;
    assert_eq!(
        closed,
        ("failed".to_string(), Some("abandoned".to_string()))
    );

    // Nothing was sold by either failed order: their keys place an order afresh.
    for (key, user, old) in [
        ("k-created", "left-created", created),
        ("k-failed", "left-failed", failed),
    ] {
        let retry = order_with_key(&app.base_url, product, user, key).await;
        assert_eq!(retry.status, StatusCode::CREATED, "{key}: {retry:?}");
        assert_ne!(retry.body["id"], old.to_string(), "{key}: a new order");
        assert_eq!(retry.body["status"], "paid");
        let again = order_with_key(&app.base_url, product, user, key).await;
        assert_eq!(
            (again.status, &again.raw),
            (retry.status, &retry.raw),
            "{key}: kept"
        );
    }
    // The expired reservation happened: its key answers with it, as it ended.
    let retry = order_with_key(&app.base_url, product, "left-expired", "k-expired").await;
    assert_eq!(retry.status, StatusCode::CREATED, "{retry:?}");
    assert_eq!(retry.body["id"], expired.to_string());
    assert_eq!(retry.body["status"], "expired");
    assert_eq!(
        env.stock(product).await,
        3,
        "two units sold, by the two fresh orders"
    );
    assert_eq!(audit(&app.base_url, product).await["consistent"], true);
}

async fn flagged(base_url: &str, product: i64) -> bool {
    let reply = send(http().get(format!("{base_url}/api/products/{product}")))
        .await
        .unwrap();
    reply.body["sold_out"] == true
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sold_out_flag_the_stock_contradicts_is_lowered() {
    let env = TestEnv::new().await;
    // This instance never sweeps: it shows what a stray flag does, and when it is gone.
    let bystander = env.spawn_app(&["--expiry-interval-ms", "3600000"]).await;
    let product = create_product(&bystander.base_url, 5, "zk").await;
    let zk = env.zk_client().await;
    // A flag of ours (its data is our seal) left behind, e.g. by a sweep that died.
    // Raised as an instance raises one: the node, then its seal over its creation zxid.
    let path = format!("{}/soldout/{product}", env.zk_root);
    let (made, _) = zk
        .create(
            &path,
            b"seckill-flag:v3:pending",
            &zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .expect("raise a stray flag");
    let seal = seckill::flags::Seal::new(Some(ADMIN_TOKEN)).mark(&path, made.czxid);
    zk.set_data(&path, &seal, Some(made.version))
        .await
        .expect("seal it");
    wait_until(
        Duration::from_secs(10),
        "the bystander to see the flag",
        || async { flagged(&bystander.base_url, product).await.then_some(()) },
    )
    .await;
    let refused = place_order(&http(), &bystander.base_url, product, "early")
        .await
        .unwrap();
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::CONFLICT, "sold_out")
    );

    let _sweeper = env.spawn_app(&["--expiry-interval-ms", "50"]).await;
    wait_until(
        Duration::from_secs(10),
        "the sweep to lower the flag",
        || async { (!flagged(&bystander.base_url, product).await).then_some(()) },
    )
    .await;
    let sold = place_order(&http(), &bystander.base_url, product, "later")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    assert_eq!(env.stock(product).await, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sweep_skips_an_order_it_cannot_settle_and_settles_the_rest() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--expiry-interval-ms", "50"]).await;
    let product =
        create_product_with(&app.base_url, json!({ "stock": 5, "per_user_limit": 5 })).await;
    let mut ids = Vec::new();
    for user in ["unsettleable", "settleable"] {
        let reserved = reserve(&app.base_url, product, user).await;
        assert_eq!(reserved.status, StatusCode::CREATED, "{reserved:?}");
        ids.push(
            reserved.body["id"]
                .as_str()
                .unwrap()
                .parse::<Uuid>()
                .unwrap(),
        );
    }
    // Both abandoned in `paying`; the older one cannot go back on sale (its units would
    // overflow the stock), and it comes first.
    for (id, age, quantity) in [(ids[0], "20 minutes", i32::MAX), (ids[1], "10 minutes", 1)] {
        sqlx::query(&format!(
            "UPDATE orders SET status = 'paying', quantity = $2, updated_at = now() - interval '{age}' WHERE id = $1"
        ))
        .bind(id)
        .bind(quantity)
        .execute(&env.db)
        .await
        .unwrap();
    }
    wait_until(
        Duration::from_secs(10),
        "the settleable order to be settled",
        || async { (env.order_row(&ids[1].to_string()).await.0 == "payment_failed").then_some(()) },
    )
    .await;
    let (status, leased): (String, bool) =
        sqlx::query_as("SELECT status, sweep_after > now() FROM orders WHERE id = $1")
            .bind(ids[0])
            .fetch_one(&env.db)
            .await
            .unwrap();
    assert_eq!(status, "paying", "left for a later try");
    assert!(leased, "and left alone until its lease runs out");
}
