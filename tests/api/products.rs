//! Setting up a sale: creating, reading and seeding products.

use reqwest::StatusCode;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn demo_products_are_seeded_once_however_many_instances_start() {
    let env = TestEnv::new().await;
    let first = env
        .spawn_app(&["--seed-demo", "--allow-unsafe-guards"])
        .await;
    let second = env.spawn_app(&["--seed-demo"]).await;

    let products = send(http().get(format!("{}/api/products", second.base_url)))
        .await
        .unwrap();
    assert_eq!(products.status, StatusCode::OK);
    let guards: Vec<&str> = products
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["guard"].as_str().unwrap())
        .collect();
    assert_eq!(guards, ["zk", "none", "zk-herd"]);
    drop(first);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_product_reads_back_as_created() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let id = create_product(&app.base_url, 7, "pg-atomic").await;
    let product = send(http().get(format!("{}/api/products/{id}", app.base_url)))
        .await
        .unwrap();
    assert_eq!(product.status, StatusCode::OK);
    for (field, value) in [
        ("stock", 7),
        ("stocked_total", 7),
        ("sold", 0),
        ("max_per_order", 10),
        ("price_cents", 1999),
    ] {
        assert_eq!(product.body[field], value, "{field}: {}", product.body);
    }
    assert_eq!(product.body["guard"], "pg-atomic");
}
