//! Setting up a sale: creating, reading and seeding products.

use std::time::Duration;

use reqwest::StatusCode;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn demo_products_are_seeded_once_however_many_instances_start() {
    let env = TestEnv::new().await;
    // Hold the seeders' advisory lock ourselves, so both instances queue on it and must
    // really contend for it when we let go.
    let mut blocker = env.db.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('seckill.seed_demo'))")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let seeders_waiting = async {
        wait_until(
            Duration::from_secs(30),
            "both seeders to wait for the lock",
            || async {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                     WHERE d.datname = current_database() AND l.locktype = 'advisory'
                       AND NOT l.granted
                       AND l.objid::bigint = hashtext('seckill.seed_demo')::bigint & 4294967295",
                )
                .fetch_one(&env.db)
                .await
                .ok()?;
                (waiting == 2).then_some(())
            },
        )
        .await;
        blocker.rollback().await.unwrap();
    };
    let (first, second, ()) = tokio::join!(
        env.spawn_app(&["--seed-demo", "--allow-unsafe-guards"]),
        env.spawn_app(&["--seed-demo"]),
        seeders_waiting,
    );

    let products = send(http().get(format!("{}/api/products", second.base_url)))
        .await
        .unwrap();
    assert_eq!(products.status, StatusCode::OK);
    let guards: Vec<(&str, i64)> = products
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["guard"].as_str().unwrap(),
                p["batch_max"].as_i64().unwrap(),
            )
        })
        .collect();
    // One set, from whichever seeder won: the unsafe set or the safe one, never both. The
    // batched products take the instance's `--batch-max` (default 256). The unsafe set ends
    // with the line's demo: a sale that opens a minute after the start.
    let unsafe_set = [
        ("zk", 1),
        ("none", 1),
        ("zk-herd", 1),
        ("zk", 256),
        ("zk", 256),
    ];
    let safe_set = [("zk", 256), ("pg-atomic", 256)];
    assert!(guards == unsafe_set || guards == safe_set, "{guards:?}");
    let lines: Vec<bool> = products
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["line"] == true)
        .collect();
    if guards == unsafe_set {
        assert_eq!(lines, [false, false, false, false, true]);
        assert_eq!(products.body[4]["state"], "upcoming");
    } else {
        assert!(lines.iter().all(|line| !line));
    }
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
