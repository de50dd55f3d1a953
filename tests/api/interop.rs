//! Our lock and Apache Curator's InterProcessMutex are the same lock: each excludes the
//! other on `{root}/locks/stock/{id}`. Curator runs in a JVM from Debian's
//! libcurator-recipes-java (installed by scripts/test).

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::helpers::*;

const JARS: &[&str] = &[
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

fn curator(env: &TestEnv, product: i64, args: &[&str]) -> Command {
    let classpath: Vec<String> = JARS
        .iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .collect();
    for jar in &classpath {
        assert!(
            std::path::Path::new(jar).exists(),
            "{jar} missing: scripts/test installs libcurator-recipes-java"
        );
    }
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(classpath.join(":"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/CuratorMutex.java"
        ))
        .arg(&env.zk_connect)
        .arg(env.lock_dir(product))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// A Curator process holding the product's lock (it says so before this returns); it
/// releases on `release` at its stdin and then prints `released`.
async fn curator_holds(env: &TestEnv, product: i64) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut holder = curator(env, product, &["hold"])
        .spawn()
        .expect("start java");
    let mut out = BufReader::new(holder.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
        .await
        .expect("curator answers");
    assert_eq!(line.unwrap().as_deref(), Some("acquired"));
    (holder, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_curator_holder_blocks_our_order_until_it_releases() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&["--lock-timeout-ms", "60000", "--instance", "seckill"])
        .await;
    let product = create_product(&app.base_url, 3, "zk").await;

    let (mut holder, mut out) = curator_holds(&env, product).await;

    let order = spawn_order(&app.base_url, product, "behind-curator");
    let watcher = env.zk_client().await;
    wait_until(
        Duration::from_secs(10),
        "our node queued behind Curator's",
        || async {
            let queue = env.lock_queue(&watcher, product).await;
            (queue.len() == 2 && queue[1].1 == "seckill").then_some(())
        },
    )
    .await;
    // Queued, not served: no order decided while Curator holds the lock.
    assert!(env.order_counts(product).await.is_empty());
    assert_eq!(env.stock(product).await, 3);
    assert!(!order.is_finished());

    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(b"release\n").await.unwrap();
    let released = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .expect("curator releases");
    assert_eq!(released.unwrap().as_deref(), Some("released"));
    let reply = tokio::time::timeout(Duration::from_secs(30), order)
        .await
        .expect("order proceeds")
        .unwrap()
        .unwrap();
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(env.stock(product).await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn our_holder_blocks_curator() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--instance", "seckill"]).await;
    let product = create_product(&app.base_url, 3, "zk").await;

    let mut hold = app.holds.hold_next(product);
    let order = spawn_order(&app.base_url, product, "holder");
    hold.reached().await;

    let attempt = curator(&env, product, &["try", "300"])
        .output()
        .await
        .expect("run java");
    assert!(!order.is_finished(), "our order held the lock throughout");
    assert_eq!(
        String::from_utf8_lossy(&attempt.stdout).trim(),
        "timeout",
        "Curator must not get our lock"
    );
    hold.release();

    assert_eq!(order.await.unwrap().unwrap().status, StatusCode::CREATED);
    let attempt = curator(&env, product, &["try", "5000"])
        .output()
        .await
        .expect("run java");
    assert_eq!(
        String::from_utf8_lossy(&attempt.stdout).trim(),
        "acquired",
        "free again after our release"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn combined_orders_queue_behind_curator_as_one_node_and_go_in_one_cycle() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&["--lock-timeout-ms", "60000", "--instance", "seckill"])
        .await;
    let product = create_product_with(
        &app.base_url,
        serde_json::json!({ "stock": 10, "batch_max": 64 }),
    )
    .await;
    let (mut holder, _out) = curator_holds(&env, product).await;

    let orders: Vec<_> = (0..5)
        .map(|i| spawn_order(&app.base_url, product, &format!("buyer-{i}")))
        .collect();
    wait_until(
        Duration::from_secs(30),
        "five orders queued here",
        || async { (app.combiner.queued(product) == 5).then_some(()) },
    )
    .await;
    // Five buyers, one place in the lock queue: the instance's, behind Curator's.
    let watcher = env.zk_client().await;
    let queue = env.lock_queue(&watcher, product).await;
    assert_eq!(queue.len(), 2, "{queue:?}");
    assert_eq!(queue[1].1, "seckill", "{queue:?}");

    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(b"release\n").await.unwrap();
    for order in orders {
        let reply = order.await.unwrap().unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        assert_eq!(
            reply.body["batch_size"], 5,
            "one lock cycle served all: {reply:?}"
        );
    }
    assert_eq!(env.stock(product).await, 5);
}
