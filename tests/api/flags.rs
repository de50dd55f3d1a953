//! Sold-out flags that cannot be replayed or swapped: a flag's seal covers its node itself
//! (its path and creation zxid), and a flag whose data changes is checked again.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use zookeeper_client as zk;

use crate::helpers::*;

/// Whether the product shows as sold out on `base`.
async fn shown_sold_out(base: &str, product: i64) -> bool {
    let view = send(http().get(format!("{base}/api/products/{product}")))
        .await
        .unwrap();
    view.body["sold_out"] == true
}

async fn until_shown(base: &str, product: i64, sold_out: bool) {
    wait_until(Duration::from_secs(10), "the flag as expected", || async {
        (shown_sold_out(base, product).await == sold_out).then_some(())
    })
    .await;
}

async fn restock(base: &str, product: i64) {
    let restocked = send(
        http()
            .post(format!("{base}/api/products/{product}/restock"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "quantity": 1 })),
    )
    .await
    .unwrap();
    assert_eq!(restocked.status, StatusCode::OK, "{restocked:?}");
}

/// Sells out a product of its own and waits until every instance shows it: the instances
/// have processed every change made to the flags before it (a watch delivers in order).
async fn in_step(bases: &[&str], n: usize) {
    let marker = create_product(bases[0], 1, "zk").await;
    let sold = place_order(&http(), bases[0], marker, &format!("marker-{n}"))
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    for base in bases {
        until_shown(base, marker, true).await;
    }
}

/// Instances that never sweep (the sweep lowers a flag the stock contradicts).
const QUIET: [&str; 2] = ["--expiry-interval-ms", "3600000"];

/// An instance, and a product of one unit it sold out (its flag raised): the flag's path.
async fn sold_out(env: &TestEnv) -> (TestApp, i64, String) {
    let app = env.spawn_app(&QUIET).await;
    let product = create_product(&app.base_url, 1, "zk").await;
    let sold = place_order(&http(), &app.base_url, product, "first")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    until_shown(&app.base_url, product, true).await;
    let path = format!("{}/soldout/{product}", env.zk_root);
    (app, product, path)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flags_data_copied_into_a_node_made_again_flags_nothing() {
    let env = TestEnv::new().await;
    let (app, product, path) = sold_out(&env).await;
    let zk = env.zk_client().await;
    let (sealed, _) = zk.get_data(&path).await.unwrap();
    // Restocked: the flag goes. Then its data is replayed into a node made again there.
    restock(&app.base_url, product).await;
    until_shown(&app.base_url, product, false).await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    zk.create(&path, &sealed, &open).await.unwrap();
    let started = env.spawn_app(&QUIET).await;
    in_step(&[&app.base_url, &started.base_url], 0).await;
    for (i, base) in [&app.base_url, &started.base_url].into_iter().enumerate() {
        assert!(
            !shown_sold_out(base, product).await,
            "the replay counts on {base}"
        );
        let sold = place_order(&http(), base, product, &format!("after-{i}"))
            .await
            .unwrap();
        // One unit: the first instance's buyer gets it, the second is told by the guard.
        let expected = [StatusCode::CREATED, StatusCode::CONFLICT][i];
        assert_eq!(sold.status, expected, "{sold:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flag_whose_data_was_swapped_flags_nothing_and_the_product_sells_again() {
    let env = TestEnv::new().await;
    let (app, product, path) = sold_out(&env).await;
    // Someone who reaches ZooKeeper swaps the flag's data (here: a seal of no node).
    let zk = env.zk_client().await;
    zk.set_data(&path, b"seckill-flag:v3:00", None)
        .await
        .unwrap();
    in_step(&[&app.base_url], 0).await;
    assert!(
        !shown_sold_out(&app.base_url, product).await,
        "a swapped flag still counts"
    );
    // Restocked, it sells again: nothing we no longer recognise keeps it closed.
    restock(&app.base_url, product).await;
    let again = place_order(&http(), &app.base_url, product, "second")
        .await
        .unwrap();
    assert_eq!(again.status, StatusCode::CREATED, "{again:?}");
    let (data, _) = zk.get_data(&path).await.unwrap();
    assert_eq!(
        data, b"seckill-flag:v3:00",
        "left as it was: not ours to change"
    );
}
