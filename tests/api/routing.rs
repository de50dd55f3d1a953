//! Orders sent where the lock is: `POST /api/products/{id}/orders` names the product in the
//! path, and `deploy/nginx.conf` (run here by a real nginx, its upstream names pointed at
//! instances on loopback) hashes on it, so each product's orders reach one instance.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use std::process::Stdio;

use crate::helpers::*;

async fn order_of_product(base: &str, product: i64, body: serde_json::Value) -> Reply {
    send(
        http()
            .post(format!("{base}/api/products/{product}/orders"))
            .json(&body),
    )
    .await
    .expect("answered")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_path_names_the_product_and_the_answers_are_those_of_post_orders() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 2, "zk").await;
    let paid = order_of_product(&app.base_url, product, json!({ "user_id": "ada" })).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{paid:?}");
    assert_eq!(paid.body["product_id"], product);
    assert_eq!(paid.body["status"], "paid");

    // The product is the path's: a body naming one is malformed, and writes nothing.
    let named = order_of_product(
        &app.base_url,
        product,
        json!({ "user_id": "bob", "product_id": product }),
    )
    .await;
    assert_eq!(
        (named.status, named.code()),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{named:?}"
    );
    let unknown = order_of_product(&app.base_url, 999_999, json!({ "user_id": "bob" })).await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "unknown_product"),
        "{unknown:?}"
    );
    let malformed = order_of_product(&app.base_url, -1, json!({ "user_id": "bob" })).await;
    assert_eq!(malformed.status.as_u16() / 100, 4, "{malformed:?}");
    assert_eq!(env.stock(product).await, 1, "only the first order sold");
    assert_eq!(env.total_orders().await, 1);

    // The same limits as `POST /orders`: one per buyer, as the product's terms say.
    let again = order_of_product(&app.base_url, product, json!({ "user_id": "ada" })).await;
    assert_eq!(again.code(), "purchase_limit", "{again:?}");
}

/// `deploy/nginx.conf` as shipped, with its two upstream names pointed at two instances on
/// loopback and its own port and files moved into a scratch directory.
fn nginx_conf(dir: &Path, listen: u16, instances: &[String]) -> String {
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx.conf"))
            .expect("deploy/nginx.conf");
    let dir = dir.display();
    let mut conf = shipped
        .replace("listen 8080;", &format!("listen 127.0.0.1:{listen};"))
        .replace("/var/log/nginx/", &format!("{dir}/"))
        .replace("/var/run/nginx.pid", &format!("{dir}/nginx.pid"));
    for (i, url) in instances.iter().enumerate() {
        let addr = url.trim_start_matches("http://");
        conf = conf.replace(
            &format!("server seckill{}:8080", i + 1),
            &format!("server {addr}"),
        );
    }
    assert!(!conf.contains("seckill1:8080") && !conf.contains("seckill2:8080"));
    conf
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_sends_each_products_orders_to_one_instance() {
    let env = TestEnv::new().await;
    let one = env.spawn_app(&[]).await;
    let two = env.spawn_app(&[]).await;
    let dir = tempdir("nginx");
    let port = free_port();
    let conf = nginx_conf(&dir, port, &[one.base_url.clone(), two.base_url.clone()]);
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let _nginx = Nginx::start(&dir);
    let edge = format!("http://127.0.0.1:{port}");
    wait_until(Duration::from_secs(30), "nginx to answer", || async {
        let reply = http()
            .get(format!("{edge}/nginx-health"))
            .send()
            .await
            .ok()?;
        (reply.status() == StatusCode::OK).then_some(())
    })
    .await;

    let products: Vec<i64> =
        futures::future::join_all((0..8).map(|_| create_product(&one.base_url, 100, "zk"))).await;
    for round in 0..5 {
        for product in &products {
            let reply =
                order_of_product(&edge, *product, json!({ "user_id": format!("b{round}") })).await;
            assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        }
    }
    // The orders as nginx logged them: which instance each product's went to.
    let log = std::fs::read_to_string(dir.join("access.log")).expect("nginx's access log");
    let mut went: HashMap<i64, HashSet<String>> = HashMap::new();
    for line in log.lines().filter(|l| l.contains("POST /api/products/")) {
        let product: i64 = line
            .split("/api/products/")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|id| id.parse().ok())
            .expect("a product in the path");
        let upstream = line
            .split("upstream=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .expect("an upstream");
        went.entry(product)
            .or_default()
            .insert(upstream.to_string());
    }
    assert_eq!(went.len(), products.len(), "{log}");
    for (product, upstreams) in &went {
        assert_eq!(
            upstreams.len(),
            1,
            "product {product} went to {upstreams:?}"
        );
    }
    let used: HashSet<&String> = went.values().flatten().collect();
    assert!(
        !used.is_empty() && used.len() <= 2,
        "only the two instances: {used:?}"
    );
    // An order that names its product in the body only still goes to either instance.
    let plain = send(
        http()
            .post(format!("{edge}/orders"))
            .json(&json!({ "product_id": products[0], "user_id": "plain" })),
    )
    .await
    .unwrap();
    assert_eq!(plain.status, StatusCode::CREATED, "{plain:?}");
    for product in &products {
        let audit = audit(&one.base_url, *product).await;
        assert_eq!(audit["consistent"], true, "{audit}");
    }
}

/// An nginx master process, stopped with its test (pass or fail): SIGTERM, so that it stops
/// its workers too (a SIGKILL would leave them running, holding the test's port and pipes).
struct Nginx(std::process::Child);

impl Nginx {
    fn start(dir: &Path) -> Nginx {
        let child = std::process::Command::new(which_nginx())
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off; user root;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        Nginx(child)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Our child's pid stays its own until we wait for it below.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn which_nginx() -> &'static str {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nginx is installed (scripts/test installs Debian's)")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tempdir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("seckill-{what}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every charge in flight on one HTTP/2 connection to the provider (`seckill-provider`
/// speaks it in plain HTTP): a crowd's orders are all paid, each charged once.
#[tokio::test(flavor = "multi_thread")]
async fn charges_go_to_the_provider_over_http2() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--payment-protocol", "http2"]).await;
    let product = create_product(&app.base_url, 30, "zk").await;
    let orders: Vec<_> = (0..20)
        .map(|i| spawn_order(&app.base_url, product, &format!("h2-{i}")))
        .collect();
    for order in orders {
        let reply = order.await.unwrap().unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        assert_eq!(reply.body["status"], "paid", "{reply:?}");
    }
    let ledger = env.provider.ledger().await;
    assert_eq!(ledger.len(), 20, "one charge per order: {ledger:?}");
    assert_eq!(env.stock(product).await, 10);
}
