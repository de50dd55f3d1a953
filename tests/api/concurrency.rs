//! The headline claim, under real concurrency across separate server processes.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

const STOCK: i64 = 50;
const BUYERS: usize = 300;

fn count(replies: &[anyhow::Result<Reply>], status: StatusCode) -> usize {
    replies
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status == status))
        .count()
}

/// BUYERS buyers over three server processes for STOCK units under the zk guard, lock
/// cycles serving up to `batch_max` orders: exactly STOCK sold, the books balance.
async fn zk_sale(batch_max: i64) -> (TestEnv, i64) {
    let env = TestEnv::new().await;
    let (_servers, urls) = three_instances(&env, &["--lock-timeout-ms", "30000"]).await;
    let product =
        create_product_with(&urls[0], json!({ "stock": STOCK, "batch_max": batch_max })).await;

    let replies = flash_sale(&urls, product, BUYERS).await;

    for reply in &replies {
        let reply = reply.as_ref().expect("every request answered");
        assert!(
            [StatusCode::CREATED, StatusCode::CONFLICT].contains(&reply.status),
            "only sold or sold out expected, got {reply:?}"
        );
    }
    assert_eq!(
        count(&replies, StatusCode::CREATED),
        STOCK as usize,
        "one 201 per unit"
    );
    assert_eq!(
        count(&replies, StatusCode::CONFLICT),
        BUYERS - STOCK as usize,
        "every other buyer told sold out"
    );
    let orders = env.order_counts(product).await;
    assert_eq!(orders.get("paid"), Some(&STOCK));
    // A buyer who arrives after the sold-out flag went up is answered without an order row
    // (the flood after a sale costs no write); how many do depends on the machine's pace.
    let sold_out_rows = orders.get("sold_out").copied().unwrap_or(0);
    assert!(sold_out_rows <= BUYERS as i64 - STOCK, "{orders:?}");
    assert_eq!(env.stock(product).await, 0);
    let audit = audit(&urls[1], product).await;
    assert_eq!(audit["oversold"], 0, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
    (env, product)
}

#[tokio::test(flavor = "multi_thread")]
async fn zk_guard_sells_exactly_the_stock_across_three_instances() {
    let (env, product) = zk_sale(1).await;
    // A lock per order: no two paid orders went through the same lock grant.
    let distinct_fences: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT fence) FROM orders WHERE product_id = $1 AND status = 'paid'",
    )
    .bind(product)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(distinct_fences, STOCK);
}

#[tokio::test(flavor = "multi_thread")]
async fn combined_zk_orders_sell_exactly_the_stock_each_lock_grant_serving_its_batch() {
    let (env, product) = zk_sale(256).await;
    // Every lock cycle decided exactly the orders its batch says it served: a token (one lock
    // node, kept for as many cycles as the orders kept coming) served whole batches, so its
    // orders of each batch size come in multiples of it.
    let batches: Vec<(i64, Option<i32>, i64)> = sqlx::query_as(
        "SELECT fence, batch_size, COUNT(*) FROM orders
         WHERE product_id = $1 AND fence IS NOT NULL GROUP BY fence, batch_size",
    )
    .bind(product)
    .fetch_all(&env.db)
    .await
    .unwrap();
    assert!(!batches.is_empty());
    for (fence, size, orders) in &batches {
        let size = i64::from(size.expect("a fenced order knows its batch"));
        assert_eq!(
            orders % size,
            0,
            "token {fence}: {orders} orders in batches of {size}"
        );
    }
    let fenced_sales: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM orders WHERE product_id = $1 AND status = 'paid' AND fence IS NOT NULL",
    )
    .bind(product)
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(
        fenced_sales, STOCK,
        "every sale carried its lock grant's token"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn none_guard_oversells_under_the_same_load() {
    let env = TestEnv::new().await;
    let (_servers, urls) =
        three_instances(&env, &["--allow-unsafe-guards", "--stock-think-ms", "5"]).await;
    let product = create_product(&urls[0], STOCK, "none").await;

    let replies = flash_sale(&urls, product, BUYERS).await;

    let sold = count(&replies, StatusCode::CREATED) as i64;
    let audit = audit(&urls[2], product).await;
    assert!(
        sold > STOCK,
        "the unguarded read-check-write must oversell: {sold} sold of {STOCK}"
    );
    assert_eq!(audit["sold"], sold, "{audit}");
    assert!(audit["oversold"].as_i64().unwrap() > 0, "{audit}");
    assert_eq!(audit["consistent"], false, "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pg_atomic_guard_sells_exactly_the_stock() {
    let env = TestEnv::new().await;
    let (_servers, urls) = three_instances(&env, &[]).await;
    let product = create_product(&urls[0], STOCK, "pg-atomic").await;

    let replies = flash_sale(&urls, product, BUYERS).await;

    assert_eq!(count(&replies, StatusCode::CREATED), STOCK as usize);
    assert_eq!(
        count(&replies, StatusCode::CONFLICT),
        BUYERS - STOCK as usize
    );
    let audit = audit(&urls[0], product).await;
    assert_eq!(audit["stock"], 0, "{audit}");
    assert_eq!(audit["sold"], STOCK, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
    // No lock: no fence and no lock wait on the orders.
    let order = &replies
        .iter()
        .flatten()
        .find(|r| r.status == StatusCode::CREATED)
        .unwrap()
        .body;
    assert!(
        order["fence"].is_null() && order["lock_wait_ms"].is_null(),
        "{order}"
    );
}
