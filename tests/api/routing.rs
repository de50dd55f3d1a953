//! Orders sent where the lock is: `POST /api/products/{id}/orders` names the product in the
//! path, and `deploy/nginx.conf` (run here by a real nginx, its upstream names pointed at
//! instances on loopback) hashes on it, so each product's orders reach one instance. The same
//! nginx serves them over TLS too, as shipped (HTTP/2, HSTS).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
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

/// Where a test nginx listens, on 127.0.0.1: the shipped 8080 (plain), 8443 (TLS) and 8081
/// (stub_status) moved to free ports.
struct EdgePorts {
    plain: u16,
    tls: u16,
    status: u16,
}

/// `deploy/nginx.conf` as shipped, with its two upstream names pointed at two instances on
/// loopback, its ports moved to `ports`, its TLS certificate and key (Docker secrets in
/// compose) to `cert` and `key`, and its own files moved into a scratch directory, beside a
/// copy of the `deploy/nginx-locations.conf` it includes (from its own directory).
fn nginx_conf(
    dir: &Path,
    ports: &EdgePorts,
    (cert, key): (&Path, &Path),
    instances: &[String],
) -> String {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let shipped = std::fs::read_to_string(deploy.join("nginx.conf")).expect("deploy/nginx.conf");
    std::fs::copy(
        deploy.join("nginx-locations.conf"),
        dir.join("nginx-locations.conf"),
    )
    .expect("deploy/nginx-locations.conf");
    let dir = dir.display();
    let mut conf = shipped;
    for (from, to) in [
        ("listen 8080;", format!("listen 127.0.0.1:{};", ports.plain)),
        (
            "listen 8443 ssl http2;",
            format!("listen 127.0.0.1:{} ssl http2;", ports.tls),
        ),
        (
            "listen 8081;",
            format!("listen 127.0.0.1:{};", ports.status),
        ),
        ("/run/secrets/tls_cert", cert.display().to_string()),
        ("/run/secrets/tls_key", key.display().to_string()),
        ("/var/log/nginx/", format!("{dir}/")),
        ("/var/run/nginx.pid", format!("{dir}/nginx.pid")),
    ] {
        // A directive changed in deploy/nginx.conf fails here, not as an nginx that never
        // answers (or one on the shipped ports).
        assert!(
            conf.contains(from),
            "deploy/nginx.conf has no `{from}`: update this rewrite"
        );
        conf = conf.replace(from, &to);
    }
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

/// A self-signed certificate for 127.0.0.1 and its key, made by openssl in `dir`: (cert, key).
/// Named by its IP address in subjectAltName (rustls reads no CN), and not a CA: rustls
/// refuses a CA certificate as a server's own (openssl's `req -x509` makes one by default).
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-days",
            "1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-keyout",
            "tls.key",
            "-out",
            "tls.pem",
        ])
        .current_dir(dir)
        .output()
        .expect("run openssl (scripts/test installs it)");
    assert!(out.status.success(), "openssl req -x509: {out:?}");
    (dir.join("tls.pem"), dir.join("tls.key"))
}

/// A real nginx on `deploy/nginx.conf` in front of `instances`, with its TLS server, once it
/// answers on its plain port. Stopped when dropped.
struct Edge {
    _nginx: Nginx,
    /// Its scratch directory: the rewritten config, its logs (access.log), the certificate.
    dir: PathBuf,
    ports: EdgePorts,
    /// The certificate its TLS server presents (PEM), for a client to trust.
    cert: PathBuf,
}

impl Edge {
    async fn start(instances: &[String]) -> Edge {
        let dir = tempdir("nginx");
        let (cert, key) = self_signed(&dir);
        let [plain, tls, status] = free_ports::<3>();
        let ports = EdgePorts { plain, tls, status };
        let conf = nginx_conf(&dir, &ports, (&cert, &key), instances);
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let nginx = Nginx::start(&dir);
        let edge = format!("http://127.0.0.1:{}", ports.plain);
        wait_until(Duration::from_secs(30), "nginx to answer", || async {
            let reply = http()
                .get(format!("{edge}/nginx-health"))
                .send()
                .await
                .ok()?;
            (reply.status() == StatusCode::OK).then_some(())
        })
        .await;
        Edge {
            _nginx: nginx,
            dir,
            ports,
            cert,
        }
    }

    fn plain_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.plain)
    }

    fn tls_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.tls)
    }

    /// An HTTPS client that trusts this nginx's certificate, and no other.
    fn tls_client(&self) -> reqwest::Client {
        let pem = std::fs::read(&self.cert).expect("the test's certificate");
        reqwest::Client::builder()
            .tls_built_in_native_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a PEM certificate"))
            .timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(0)
            .build()
            .expect("build HTTPS client")
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_sends_each_products_orders_to_one_instance() {
    let env = TestEnv::new().await;
    let one = env.spawn_app(&[]).await;
    let two = env.spawn_app(&[]).await;
    let nginx = Edge::start(&[one.base_url.clone(), two.base_url.clone()]).await;
    let edge = nginx.plain_url();

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
    let log = std::fs::read_to_string(nginx.dir.join("access.log")).expect("nginx's access log");
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

/// The TLS server as shipped: an order over https (HTTP/2, the test's certificate trusted as
/// the only root) reaches an instance and is placed; its answers carry HSTS and the plain
/// port's do not; stub_status (nginx-exporter's source) answers on its own port only.
#[tokio::test(flavor = "multi_thread")]
async fn nginx_serves_orders_over_tls_with_http2_and_hsts() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    // Both upstream entries at the one instance: every order reaches it.
    let nginx = Edge::start(&[app.base_url.clone(), app.base_url.clone()]).await;
    let tls = nginx.tls_client();
    let secure = nginx.tls_url();

    let health = tls
        .get(format!("{secure}/nginx-health"))
        .send()
        .await
        .expect("nginx answers over TLS");
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(
        health.version(),
        reqwest::Version::HTTP_2,
        "HTTP/2 over TLS (ALPN)"
    );
    let hsts = health
        .headers()
        .get("strict-transport-security")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        hsts.starts_with("max-age="),
        "HSTS over TLS: {:?}",
        health.headers()
    );
    let plain = http()
        .get(format!("{}/nginx-health", nginx.plain_url()))
        .send()
        .await
        .expect("nginx answers in plain HTTP");
    assert_eq!(plain.status(), StatusCode::OK);
    assert!(
        plain.headers().get("strict-transport-security").is_none(),
        "no HSTS on the plain port: {:?}",
        plain.headers()
    );

    let product = create_product(&app.base_url, 5, "zk").await;
    let order = send(
        tls.post(format!("{secure}/api/products/{product}/orders"))
            .json(&json!({ "user_id": "tls" })),
    )
    .await
    .expect("an order over TLS answered");
    assert_eq!(order.status, StatusCode::CREATED, "{order:?}");
    assert_eq!(order.body["product_id"], product);
    assert_eq!(order.body["status"], "paid", "{order:?}");
    // `POST /orders` (the other location) over TLS too.
    let body_named = send(
        tls.post(format!("{secure}/orders"))
            .json(&json!({ "product_id": product, "user_id": "tls-body" })),
    )
    .await
    .expect("an order over TLS answered");
    assert_eq!(body_named.status, StatusCode::CREATED, "{body_named:?}");
    assert_eq!(env.stock(product).await, 3, "both orders sold");

    // stub_status, for nginx-exporter: on its own port, not the clients'.
    let status = http()
        .get(format!(
            "http://127.0.0.1:{}/stub_status",
            nginx.ports.status
        ))
        .send()
        .await
        .expect("stub_status answers");
    assert_eq!(status.status(), StatusCode::OK);
    let counters = status.text().await.unwrap();
    assert!(counters.contains("Active connections"), "{counters}");
    let outside = http()
        .get(format!("{}/stub_status", nginx.plain_url()))
        .send()
        .await
        .expect("nginx answers");
    let outside = outside.text().await.unwrap_or_default();
    assert!(!outside.contains("Active connections"), "{outside}");
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

/// N free ports on 127.0.0.1, all different: their listeners are held until every one is read.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: [std::net::TcpListener; N] =
        std::array::from_fn(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    listeners.map(|listener| listener.local_addr().unwrap().port())
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
