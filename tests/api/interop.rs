//! Our recipes and Apache Curator's are the same recipes on the same paths: the stock lock
//! and `InterProcessMutex` exclude each other on `{root}/locks/stock/{id}`; the payment
//! semaphore and `InterProcessSemaphoreV2` count against one N on `{root}/semaphores/payment`;
//! a product's terms lock and `InterProcessReadWriteLock` share and exclude as one lock on
//! `{root}/locks/terms/{id}`. Curator runs in a JVM from Debian's libcurator-recipes-java
//! (installed by scripts/test).

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

/// The credentials our instances and Curator share in these tests: ZooKeeper closed to
/// strangers, as `scripts/demo` and compose run it.
const AUTH: &str = "seckill:interop-s3cret";

/// Our instance `seckill`, with the credentials Curator has, waiting as long as Curator
/// holds (60 s). A holder these tests pause keeps its transaction open while a JVM starts,
/// which on a busy machine can take longer than the default statement bound's idle limit
/// (4 s): PostgreSQL must not end the paused holder's transaction before the test lets it
/// go (idle limit 20 s; the session must outlive a statement, as the app checks at start).
async fn patient_app(env: &TestEnv) -> TestApp {
    env.spawn_app(&[
        "--lock-timeout-ms",
        "60000",
        "--db-statement-timeout-ms",
        "10000",
        "--zk-session-timeout-ms",
        "30000",
        "--instance",
        "seckill",
        "--zk-auth",
        AUTH,
    ])
    .await
}

fn curator(env: &TestEnv, product: i64, args: &[&str]) -> Command {
    let mut all = vec![env.lock_dir(product)];
    all.extend(args.iter().map(|a| a.to_string()));
    java(env, "CuratorMutex.java", &all)
}

/// One of `tests/interop/*.java` on the test's ZooKeeper, with `args` after the connect string.
fn java(env: &TestEnv, program: &str, args: &[String]) -> Command {
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
        .arg(format!(
            "{}/tests/interop/{program}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(&env.zk_connect)
        .args(args)
        .env("SECKILL_ZK_AUTH", AUTH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// A Curator process holding the product's lock (it says so before this returns); it
/// releases on `release` at its stdin and then prints `released`.
async fn curator_holds(env: &TestEnv, product: i64) -> (Child, Lines<BufReader<ChildStdout>>) {
    holding(curator(env, product, &["hold"])).await
}

/// Starts a Curator `hold` command and waits until it says it holds.
async fn holding(mut command: Command) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut holder = command.spawn().expect("start java");
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
    let app = patient_app(&env).await;
    let product = create_product(&app.base_url, 3, "zk").await;

    let (mut holder, mut out) = curator_holds(&env, product).await;

    let order = spawn_order(&app.base_url, product, "behind-curator");
    let watcher = env.zk_client_as(AUTH).await;
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

    let reply = let_go_to(&mut holder, &mut out, order).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(env.stock(product).await, 2);
}

/// Right behind the head, our waiter holds the lock as soon as the head's node goes: nobody
/// can be ahead of it (a new node always takes a higher number), so it does not list the
/// queue again as Curator does. A ZooKeeper read fewer per handoff. Its own process, so the
/// listings counted are its alone; it keeps no lock after its cycle (a kept lock lists the
/// queue to watch who comes behind it: that listing is the kept lock's, not the handoff's).
#[tokio::test(flavor = "multi_thread")]
async fn right_behind_the_head_our_waiter_takes_the_lock_without_listing_again() {
    let env = TestEnv::new().await;
    let server = env
        .spawn_process(
            "seckill",
            &[
                "--lock-timeout-ms",
                "60000",
                "--zk-auth",
                AUTH,
                "--lock-linger-ms",
                "0",
            ],
        )
        .await;
    let product = create_product(&server.base_url, 3, "zk").await;
    let (mut holder, mut out) = curator_holds(&env, product).await;

    let order = spawn_order(&server.base_url, product, "behind-curator");
    // Watching Curator's node: its create, listing and watch are behind it.
    view_until(
        &format!("{}/api/products/{product}/lock", server.base_url),
        "our waiter watching Curator's node",
        |view| view["stats"]["watching"] == 1,
    )
    .await;
    let listings = |metrics: &std::collections::HashMap<String, f64>| {
        metrics
            .get(r#"seckill_zk_operations_total{op="get_children"}"#)
            .copied()
            .unwrap_or_default()
    };
    let before = listings(&scrape(&server.base_url).await);
    assert!(
        before >= 1.0,
        "the waiter listed the queue once to find its place"
    );

    let reply = let_go_to(&mut holder, &mut out, order).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    assert_eq!(
        listings(&scrape(&server.base_url).await),
        before,
        "granted on the head's deletion, without listing the queue again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn our_holder_blocks_curator() {
    let env = TestEnv::new().await;
    let app = patient_app(&env).await;
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
    let app = patient_app(&env).await;
    let product = create_product_with(
        &app.base_url,
        serde_json::json!({ "stock": 10, "batch_max": 64 }),
    )
    .await;
    let (mut holder, mut out) = curator_holds(&env, product).await;

    let orders: Vec<_> = (0..5)
        .map(|i| spawn_order(&app.base_url, product, &format!("buyer-{i}")))
        .collect();
    wait_until(
        Duration::from_secs(30),
        "five orders queued here",
        || async { (app.combiner.queued(product) == 5).then_some(()) },
    )
    .await;
    // Five buyers, one place in the lock queue: the instance's, behind Curator's. (Queued
    // here before the worker's node is made: wait for the node, then look at the queue.)
    let watcher = env.zk_client_as(AUTH).await;
    env.wait_for_queue(&watcher, product, 2, "our node behind Curator's")
        .await;
    let queue = env.lock_queue(&watcher, product).await;
    assert_eq!(queue.len(), 2, "{queue:?}");
    assert_eq!(queue[1].1, "seckill", "{queue:?}");

    let_go(&mut holder, &mut out).await;
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

/// Tells a Curator holder to let go, and waits until it has.
async fn let_go(holder: &mut Child, out: &mut Lines<BufReader<ChildStdout>>) {
    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(b"release\n").await.unwrap();
    let released = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .expect("curator releases");
    assert_eq!(released.unwrap().as_deref(), Some("released"));
}

/// Lets a Curator holder go, and waits for the answer of our order queued behind it.
async fn let_go_to(
    holder: &mut Child,
    out: &mut Lines<BufReader<ChildStdout>>,
    order: tokio::task::JoinHandle<anyhow::Result<Reply>>,
) -> Reply {
    let_go(holder, out).await;
    tokio::time::timeout(Duration::from_secs(30), order)
        .await
        .expect("order proceeds")
        .unwrap()
        .unwrap()
}

/// What a Curator `try` printed: `acquired` or `timeout`.
async fn attempt(command: &mut Command) -> String {
    let output = command.output().await.expect("run java");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A lab request (`POST` with the admin token); answers 202.
async fn lab(url: &str, action: &str) -> serde_json::Value {
    let reply = send(
        http()
            .post(url)
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({ "action": action })),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{reply:?}");
    reply.body
}

/// Polls a lock view (`GET url`) until `check` accepts it.
async fn view_until(
    url: &str,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    wait_until(Duration::from_secs(30), what, || async {
        let reply = send(http().get(url)).await.ok()?;
        check(&reply.body).then_some(reply.body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn curators_semaphore_and_ours_count_against_the_same_n() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--allow-unsafe-guards",
            "--payment-concurrency",
            "2",
            "--zk-auth",
            AUTH,
        ])
        .await;
    let url = format!("{}/api/payments/semaphore", app.base_url);
    let path = format!("{}/semaphores/payment", env.zk_root);
    let semaphore = |args: &[&str]| {
        let mut all = vec![path.clone(), "2".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        java(&env, "CuratorSemaphore.java", &all)
    };

    // Curator takes one of the two leases, we take the other: Curator's next one must wait.
    let (mut curator, mut out) = holding(semaphore(&["hold"])).await;
    lab(&url, "acquire").await;
    view_until(&url, "our lease held beside Curator's", |v| {
        v["leases"].as_array().unwrap().len() == 2 && v["waiters"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(attempt(&mut semaphore(&["try", "500"])).await, "timeout");

    // Our next one waits for a lease, and gets Curator's when Curator returns it.
    lab(&url, "acquire").await;
    let waiting = view_until(&url, "our second charge waiting", |v| {
        each(&v["waiters"], "label").contains(&"lab-2".to_string())
    })
    .await;
    assert_eq!(waiting["leases"].as_array().unwrap().len(), 2, "{waiting}");
    let_go(&mut curator, &mut out).await;
    view_until(&url, "our waiter holding Curator's lease", |v| {
        let held = each(&v["leases"], "label");
        held.len() == 2 && held.iter().all(|l| l.starts_with("lab-"))
    })
    .await;
    // Both leases are ours now: Curator waits on them just the same.
    assert_eq!(attempt(&mut semaphore(&["try", "500"])).await, "timeout");
    lab(&url, "clear").await;
    assert_eq!(attempt(&mut semaphore(&["try", "10000"])).await, "acquired");
}

#[tokio::test(flavor = "multi_thread")]
async fn curators_read_write_lock_and_ours_share_and_exclude_as_one() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&["--allow-unsafe-guards", "--zk-auth", AUTH])
        .await;
    let product = create_product(&app.base_url, 3, "zk").await;
    let url = format!("{}/api/products/{product}/terms-lock", app.base_url);
    let path = format!("{}/locks/terms/{product}", env.zk_root);
    let rw = |args: &[&str]| {
        let mut all = vec![path.clone()];
        all.extend(args.iter().map(|a| a.to_string()));
        java(&env, "CuratorRwLock.java", &all)
    };

    // A Curator reader and ours share the lock; a writer of either side waits.
    let (mut reader, mut out) = holding(rw(&["read", "hold"])).await;
    lab(&url, "read").await;
    view_until(&url, "our reader sharing with Curator's", |v| {
        v["holders"].as_array().unwrap().len() == 2
    })
    .await;
    assert_eq!(attempt(&mut rw(&["write", "try", "500"])).await, "timeout");

    // Our writer queues behind both readers, and a Curator reader after it waits too: no
    // writer starvation across the two implementations.
    lab(&url, "write").await;
    view_until(&url, "our writer waiting", |v| {
        each(&v["waiters"], "label") == ["lab-2"]
    })
    .await;
    assert_eq!(attempt(&mut rw(&["read", "try", "500"])).await, "timeout");

    // Both readers go: our writer holds alone, and excludes Curator's reader.
    let_go(&mut reader, &mut out).await;
    lab(&url, "release").await;
    let view = view_until(&url, "our writer holding", |v| {
        each(&v["holders"], "label") == ["lab-2"]
    })
    .await;
    assert_eq!(view["holders"][0]["access"], "write", "{view}");
    assert_eq!(attempt(&mut rw(&["read", "try", "500"])).await, "timeout");
    lab(&url, "clear").await;
    assert_eq!(
        attempt(&mut rw(&["write", "try", "10000"])).await,
        "acquired"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_curator_writer_excludes_every_sale_cycle_though_the_sale_keeps_its_read_node() {
    let env = TestEnv::new().await;
    let app = patient_app(&env).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let path = format!("{}/locks/terms/{product}", env.zk_root);
    let rw = |args: &[&str]| {
        let mut all = vec![path.clone()];
        all.extend(args.iter().map(|a| a.to_string()));
        java(&env, "CuratorRwLock.java", &all)
    };
    let zk = env.zk_client_as(AUTH).await;
    let order = |buyer: &str| spawn_order(&app.base_url, product, buyer);

    // Two lock cycles, one read node: the sale keeps it across its cycles.
    assert_eq!(
        order("a").await.unwrap().unwrap().status,
        StatusCode::CREATED
    );
    let kept = zk.list_children(&path).await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].contains("__READ__"), "{kept:?}");
    assert_eq!(
        order("b").await.unwrap().unwrap().status,
        StatusCode::CREATED
    );
    assert_eq!(zk.list_children(&path).await.unwrap(), kept);

    // No cycle in flight: a Curator writer that queues gets the write side (the kept node
    // goes once it is seen), and no cycle decides while it holds.
    let (mut writer, mut out) = holding(rw(&["write", "hold"])).await;
    assert!(!zk.list_children(&path).await.unwrap().contains(&kept[0]));
    let behind = order("c");
    wait_until(
        Duration::from_secs(30),
        "our cycle's reader queued behind Curator's writer",
        || async {
            let queue = zk.list_children(&path).await.ok()?;
            (queue.iter().filter(|n| n.contains("__READ__")).count() == 1).then_some(())
        },
    )
    .await;
    assert!(!behind.is_finished());
    assert_eq!(env.stock(product).await, 8);
    let_go(&mut writer, &mut out).await;
    assert_eq!(behind.await.unwrap().unwrap().status, StatusCode::CREATED);
    let fresh = zk.list_children(&path).await.unwrap();
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert_ne!(fresh, kept, "a read node of its own, after the writer's");

    // A cycle in flight holds the kept node: a Curator writer waits for it.
    let mut hold = app.holds.hold_next(product);
    let held = order("d");
    hold.reached().await;
    assert_eq!(attempt(&mut rw(&["write", "try", "500"])).await, "timeout");
    assert!(!held.is_finished(), "the cycle held throughout");
    hold.release();
    assert_eq!(held.await.unwrap().unwrap().status, StatusCode::CREATED);
    assert_eq!(
        attempt(&mut rw(&["write", "try", "10000"])).await,
        "acquired"
    );
    assert_eq!(env.stock(product).await, 6);
}
