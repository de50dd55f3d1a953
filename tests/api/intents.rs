//! Payment intents remember whether their charge was sent: a buyer told "not charged" stays
//! not charged, whatever the sweep later finds.

use std::time::Duration;

use reqwest::StatusCode;

use crate::helpers::*;
use crate::money::money_is_exact;

/// An order claimed for payment whose charge was never sent (no lease, no time left, the
/// database away when it was given back) and whose own attempt is long over: the sweep
/// drops its intent and returns its units. It never charges it.
#[tokio::test(flavor = "multi_thread")]
async fn the_sweep_never_charges_an_intent_that_was_never_sent() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--expiry-interval-ms", "100"]).await;
    let product = create_product(&app.base_url, 3, "zk").await;
    let reply = reserve(&app.base_url, product, "una").await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    let id = reply.body["id"].as_str().unwrap().to_string();
    // As a payment left it that gave up before sending: `paying`, its intent pending and
    // unmarked, its attempt's window long past. (Written by hand: the paths that leave it so
    // need the database to fail between two statements.)
    sqlx::query(
        "WITH o AS (UPDATE orders SET status = 'paying', updated_at = now() - interval '1 hour'
                    WHERE id = $1::uuid RETURNING id, amount_cents)
         INSERT INTO payments (order_id, key, amount_cents, created_at)
         SELECT id, 'seckill-' || id::text, amount_cents, now() - interval '1 hour' FROM o",
    )
    .bind(&id)
    .execute(&env.db)
    .await
    .unwrap();
    wait_until(
        Duration::from_secs(30),
        "the sweep to settle it",
        || async {
            let status: String =
                sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
                    .bind(&id)
                    .fetch_one(&env.db)
                    .await
                    .ok()?;
            (status != "paying").then_some(status)
        },
    )
    .await;
    let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
        .bind(&id)
        .fetch_one(&env.db)
        .await
        .unwrap();
    assert_eq!(status, "payment_failed");
    assert!(
        env.provider.ledger().await.is_empty(),
        "a charge never sent was made by the sweep"
    );
    assert_eq!(env.stock(product).await, 3, "its unit is back on sale");
    money_is_exact(&env).await;
}
