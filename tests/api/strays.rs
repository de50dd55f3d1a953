//! ZooKeeper nodes only our credentials can touch, and lock queues, leases and flags a
//! stray node (one we did not make) cannot block or fool.

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;
use zookeeper_client as zk;

#[tokio::test(flavor = "multi_thread")]
async fn with_zk_auth_our_nodes_are_ours_alone() {
    let env = TestEnv::new().await;
    let auth = ["--zk-auth", "seckill:s3cret-for-tests"];
    let app = env.spawn_app(&auth).await;
    let product = create_per_request_product(&app.base_url, 5, "zk").await;
    let sold = place_order(&http(), &app.base_url, product, "first")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");

    // Anyone else who can reach ZooKeeper: no auth.
    let stranger = env.zk_client().await;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let root = &env.zk_root;
    for path in [
        format!("{root}/soldout/{product}"),
        format!("{root}/demo/{product}-crash"),
        format!("{}/_c_stray-lock-0000000000", env.lock_dir(product)),
    ] {
        let created = stranger.create(&path, &[], &persistent).await;
        assert!(
            matches!(created, Err(zk::Error::NoAuth)),
            "{path}: {created:?}"
        );
    }
    let read = stranger.get_data(&format!("{root}/ensemble")).await;
    assert!(matches!(read, Err(zk::Error::NoAuth)), "{read:?}");
    // Nor change or remove what is there: the fencing identity, the flag and lock
    // directories. (A delete is checked against the parent's ACL, a write against the node's.)
    for path in [
        format!("{root}/ensemble"),
        format!("{root}/soldout"),
        format!("{root}/locks/stock"),
        env.lock_dir(product),
    ] {
        let set = stranger.set_data(&path, b"mine now", None).await;
        assert!(matches!(set, Err(zk::Error::NoAuth)), "set {path}: {set:?}");
        let deleted = stranger.delete(&path, None).await;
        assert!(
            matches!(deleted, Err(zk::Error::NoAuth)),
            "delete {path}: {deleted:?}"
        );
        let listed = stranger.list_children(&path).await;
        assert!(
            matches!(listed, Err(zk::Error::NoAuth)),
            "list {path}: {listed:?}"
        );
    }

    // Another instance with the same credentials shares everything.
    let other = env.spawn_app(&auth).await;
    let sold = place_order(&http(), &other.base_url, product, "second")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    assert_eq!(env.stock(product).await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stray_persistent_node_in_a_lock_queue_blocks_nobody() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_per_request_product(&app.base_url, 5, "zk").await;
    let zk = env.zk_client().await;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    zk.mkdir(&env.lock_dir(product), &persistent).await.unwrap();
    // Named like a contender, sequence 0: first in the queue, and no session owns it.
    let stray = format!(
        "{}/_c_00000000-0000-0000-0000-000000000000-lock-0000000000",
        env.lock_dir(product)
    );
    zk.create(&stray, b"not a contender", &persistent)
        .await
        .unwrap();

    for buyer in ["after-stray-1", "after-stray-2"] {
        let sold = place_order(&http(), &app.base_url, product, buyer)
            .await
            .unwrap();
        assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    }
    assert!(
        zk.check_stat(&stray).await.unwrap().is_some(),
        "left where it is"
    );
    assert_eq!(env.stock(product).await, 3);
}

/// A node named like one of ours, made persistent by a client without credentials: no
/// session owns it, so it would never go by itself.
async fn plant(zk: &zk::Client, dir: &str, name: &str) -> String {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match zk.mkdir(dir, &persistent).await {
        Ok(()) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("making {dir}: {e}"),
    }
    let path = format!("{dir}/{name}");
    zk.create(&path, b"not ours", &persistent).await.unwrap();
    path
}

/// Curator's protected-mode prefix with the smallest uuid, as a stranger would forge it.
const ZERO: &str = "_c_00000000-0000-0000-0000-000000000000-";

#[tokio::test(flavor = "multi_thread")]
async fn a_stray_writer_in_a_terms_lock_freezes_neither_sales_nor_terms_changes() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let zk = env.zk_client().await;
    let dir = format!("{}/locks/terms/{product}", env.zk_root);
    // First in the queue: a writer every reader would wait for, and a reader behind it.
    let strays = [
        plant(&zk, &dir, &format!("{ZERO}__WRIT__0000000000")).await,
        plant(&zk, &dir, &format!("{ZERO}__READ__0000000001")).await,
    ];

    let sold = place_order(&http(), &app.base_url, product, "before-change")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    let changed = send(
        http()
            .put(format!("{}/api/products/{product}/terms", app.base_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "price_cents": 2500 })),
    )
    .await
    .unwrap();
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    assert_eq!(changed.body["price_cents"], 2500, "{changed:?}");
    let after = place_order(&http(), &app.base_url, product, "after-change")
        .await
        .unwrap();
    assert_eq!(after.status, StatusCode::CREATED, "{after:?}");
    assert_left_alone(&zk, &strays).await;
    assert_eq!(env.stock(product).await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn stray_nodes_in_the_payment_leases_take_no_lease() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--payment-concurrency", "1"]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let zk = env.zk_client().await;
    let leases = format!("{}/semaphores/payment/leases", env.zk_root);
    // Counted as Curator counts, they would fill the one lease for good.
    plant(&zk, &leases, &format!("{ZERO}lease-0000000000")).await;
    plant(&zk, &leases, "not-a-lease").await;

    for buyer in ["payer-1", "payer-2"] {
        let paid = place_order(&http(), &app.base_url, product, buyer)
            .await
            .unwrap();
        assert_eq!(paid.status, StatusCode::CREATED, "{paid:?}");
        assert_eq!(paid.body["status"], "paid", "{paid:?}");
    }
    // Our leases go in the background once their charges are done: wait for them, and the
    // strays must be what is left.
    let left = wait_until(Duration::from_secs(10), "our leases to go", || async {
        let left = zk.list_children(&leases).await.ok()?;
        (left.len() <= 2).then_some(left)
    })
    .await;
    assert_eq!(left.len(), 2, "only the strays left, untouched: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_persistent_node_holding_the_herd_lock_is_refused_at_once() {
    let env = TestEnv::new().await;
    // Waited for, the node would hold every order until the request's own timeout (15 s).
    let app = env.spawn_app(&["--lock-timeout-ms", "60000"]).await;
    let product = create_product(&app.base_url, 5, "zk-herd").await;
    let zk = env.zk_client().await;
    let dir = format!("{}/locks/herd/{product}", env.zk_root);
    let stray = plant(&zk, &dir, "lock").await;

    let started = std::time::Instant::now();
    let refused = place_order(&http(), &app.base_url, product, "buyer")
        .await
        .unwrap();
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered in {:?}",
        started.elapsed()
    );
    assert!(
        zk.check_stat(&stray).await.unwrap().is_some(),
        "not ours to delete"
    );
    assert_eq!(env.stock(product).await, 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn flag_nodes_a_stranger_made_neither_stop_sales_nor_arm_demos() {
    let env = TestEnv::new().await;
    let flags = ["--allow-unsafe-guards"];
    let running = env.spawn_app(&flags).await;
    let product = create_product(&running.base_url, 5, "zk").await;
    let other = create_product(&running.base_url, 1, "zk").await;
    let zk = env.zk_client().await;
    let strays = [
        plant(
            &zk,
            &format!("{}/soldout", env.zk_root),
            &product.to_string(),
        )
        .await,
        plant(
            &zk,
            &format!("{}/demo", env.zk_root),
            &format!("{product}-crash"),
        )
        .await,
        plant(
            &zk,
            &format!("{}/demo", env.zk_root),
            &format!("{product}-zombie"),
        )
        .await,
    ];
    // This one read the strays as it started; the running one sees them through its watch,
    // before it sees the flag raised after them.
    let started = env.spawn_app(&flags).await;
    let sold_out = place_order(&http(), &started.base_url, other, "last-unit")
        .await
        .unwrap();
    assert_eq!(sold_out.status, StatusCode::CREATED, "{sold_out:?}");
    for base in [&running.base_url, &started.base_url] {
        wait_until(
            Duration::from_secs(10),
            "the real sold-out flag",
            || async {
                let p = send(http().get(format!("{base}/api/products/{other}")))
                    .await
                    .ok()?;
                (p.body["sold_out"] == true).then_some(())
            },
        )
        .await;
    }

    for (i, base) in [&running.base_url, &started.base_url]
        .into_iter()
        .enumerate()
    {
        let shown = send(http().get(format!("{base}/api/products/{product}")))
            .await
            .unwrap();
        assert_eq!(shown.body["sold_out"], false, "{shown:?}");
        // Neither refused as sold out nor lost to a crash or zombie demo.
        let sold = place_order(&http(), base, product, &format!("buyer-{i}"))
            .await
            .unwrap();
        assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    }
    assert_left_alone(&zk, &strays).await;
    assert_eq!(env.stock(product).await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_zk_auth_a_root_open_to_anyone_is_refused_at_start() {
    let env = TestEnv::new().await;
    // Made before auth was turned on, or by a stranger who got there first.
    let stranger = env.zk_client().await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    stranger.mkdir(&env.zk_root, &open).await.unwrap();
    let argv = [
        "seckill",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &env.database_url,
        "--zk",
        &env.zk_connect,
        "--zk-root",
        &env.zk_root,
        "--zk-auth",
        "seckill:s3cret-for-tests",
        "--buyer-auth",
        "open",
    ];
    let config = <seckill::Config as clap::Parser>::try_parse_from(argv).unwrap();
    let refused = seckill::Application::build(config)
        .await
        .err()
        .expect("refused");
    assert!(
        format!("{refused:#}").contains("open to anyone"),
        "{refused:#}"
    );
}

/// Nodes we did not make are never deleted by the service: they are still there.
async fn assert_left_alone(zk: &zk::Client, strays: &[String]) {
    for stray in strays {
        assert!(
            zk.check_stat(stray).await.unwrap().is_some(),
            "{stray} left"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_zk_auth_a_flag_an_older_version_raised_is_kept_and_marked() {
    let env = TestEnv::new().await;
    let auth = "seckill:s3cret-for-tests";
    // This instance never sweeps: the sweep lowers a flag on a product with stock, which
    // would take the flag away between its marking and the read below.
    let app = env
        .spawn_app(&["--zk-auth", auth, "--expiry-interval-ms", "3600000"])
        .await;
    let product = create_product(&app.base_url, 5, "zk").await;
    // As an older instance raised flags: no data, our credentials' ACL.
    let ours = env.zk_client_as(auth).await;
    let path = format!("{}/soldout/{product}", env.zk_root);
    let closed = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    ours.create(&path, &[], &closed).await.unwrap();
    wait_until(Duration::from_secs(10), "the old flag to count", || async {
        let p = send(http().get(format!("{}/api/products/{product}", app.base_url)))
            .await
            .ok()?;
        (p.body["sold_out"] == true).then_some(())
    })
    .await;
    let (data, _) = ours.get_data(&path).await.unwrap();
    assert!(
        data.starts_with(b"seckill-flag:v3:") && data != b"seckill-flag:v3:pending",
        "sealed as ours now: {}",
        String::from_utf8_lossy(&data)
    );
}
