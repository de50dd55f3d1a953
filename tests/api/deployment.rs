//! What a real deployment needs beyond the sale: TLS to PostgreSQL (`sslmode=require`) and to
//! a payment provider over https (its certificate trusted through `SSL_CERT_FILE`), a
//! `/readyz` that says when the provider cannot be used, a provider that wants its API key
//! and stops on SIGTERM, error answers as RFC 9457 problem details, a bounded request head,
//! and product views that do not scan the orders.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// A CA and a certificate it signed for 127.0.0.1, made with `openssl` in a directory of the
/// test's own: (CA, certificate, key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let path = |name: &str| dir.join(name);
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl (scripts/test installs it)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509", "-days", "2", "-subj", "/CN=seckill test CA"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req", "-subj", "/CN=127.0.0.1"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
        ]
        .concat(),
    );
    std::fs::write(
        path("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-days",
        "2",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]);
    (path("ca.pem"), path("server.pem"), path("server.key"))
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("seckill-{name}-{}", uuid::Uuid::new_v4().simple()))
}

/// `url` with query parameters added.
fn with_params(url: &str, params: &str) -> String {
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}{params}")
}

/// Whether every connection named `application` is encrypted, and how many there are.
async fn encrypted(env: &TestEnv, application: &str) -> (i64, bool) {
    sqlx::query_as(
        "SELECT COUNT(*), COALESCE(bool_and(s.ssl), false)
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
         WHERE a.application_name = $1",
    )
    .bind(application)
    .fetch_one(&env.db)
    .await
    .unwrap()
}

async fn readiness(base: &str) -> Reply {
    send(http().get(format!("{base}/readyz"))).await.unwrap()
}

#[tokio::test]
async fn a_sale_pays_over_https_and_postgres_at_sslmode_require() {
    let env = TestEnv::new().await;
    let dir = scratch("tls");
    let (ca, cert, key) = certificates(&dir);
    let ledger_app = format!("ledger-{}", fastrand::u32(..));
    let ledger_base = ledger_database("seckill_tls").await;
    let ledger = with_params(
        &ledger_base,
        &format!("sslmode=require&application_name={ledger_app}"),
    );
    let provider = Provider::start(
        &ledger,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    )
    .await;
    assert!(provider.url.starts_with("https://"), "{}", provider.url);
    let shop_app = format!("shop-{}", fastrand::u32(..));
    let shop = with_params(
        &env.database_url,
        &format!("sslmode=require&application_name={shop_app}"),
    );
    // The CA is trusted only through SSL_CERT_FILE, as a private CA is in a deployment.
    let server = env
        .spawn_process_in(
            "tls",
            &["--database-url", &shop, "--payment-url", &provider.url],
            "warn",
            Stdio::inherit(),
            &[("SSL_CERT_FILE", ca.to_str().unwrap())],
        )
        .await;
    let ready = wait_until(Duration::from_secs(30), "/readyz to answer 200", || async {
        let reply = readiness(&server.base_url).await;
        (reply.status == StatusCode::OK).then_some(reply)
    })
    .await;
    assert_eq!(ready.body["payment_provider"], "ok", "{ready:?}");

    let product = create_product(&server.base_url, 3, "zk").await;
    let mut paid = 0;
    for buyer in 0..5 {
        let reply = place_order(&http(), &server.base_url, product, &format!("tls-{buyer}"))
            .await
            .unwrap();
        match reply.status {
            StatusCode::CREATED => {
                assert_eq!(reply.body["status"], "paid", "{reply:?}");
                paid += 1;
            }
            _ => assert_eq!(reply.code(), "sold_out", "{reply:?}"),
        }
    }
    assert_eq!(paid, 3, "the stock, paid");
    let audit = audit(&server.base_url, product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
    // The charges are in the provider's ledger, written over its own encrypted connections.
    let ledger_db = sqlx::PgPool::connect(&ledger_base).await.unwrap();
    let charged: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE status = 'succeeded'")
        .fetch_one(&ledger_db)
        .await
        .unwrap();
    assert_eq!(charged, 3, "one charge per paid order");
    for application in [&shop_app, &ledger_app] {
        let (connections, all_encrypted) = encrypted(&env, application).await;
        assert!(connections > 0, "{application} has connections");
        assert!(all_encrypted, "{application}'s connections are all TLS");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_instance_that_cannot_charge_is_not_ready_and_says_the_payment_provider() {
    let env = TestEnv::new().await;
    let good = env.spawn_app(&[]).await;
    let ready = readiness(&good.base_url).await;
    assert_eq!(ready.status, StatusCode::OK, "{ready:?}");
    assert_eq!(ready.body["payment_provider"], "ok");

    // A URL whose server answers 404 to everything it does not know (here: seckill itself)
    // is not a payment provider, however readily it answers.
    let elsewhere = env.spawn_app(&["--payment-url", &good.base_url]).await;
    let ready = readiness(&elsewhere.base_url).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
    assert_eq!(ready.body["payment_provider"], "unavailable");

    // A key the provider refuses.
    let wrong_key = env.spawn_app(&["--payment-api-key", "not-the-key"]).await;
    let ready = readiness(&wrong_key.base_url).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
    assert_eq!(ready.body["payment_provider"], "unavailable");
    assert_eq!(ready.body["postgres"], "ok", "only the provider is named");

    // https to a certificate nobody here trusts.
    let dir = scratch("untrusted");
    let (_, cert, key) = certificates(&dir);
    let tls = Provider::start(
        &ledger_database("seckill_untrusted").await,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    )
    .await;
    let untrusted = env.spawn_app(&["--payment-url", &tls.url]).await;
    let ready = readiness(&untrusted.base_url).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
    assert_eq!(ready.body["payment_provider"], "unavailable");

    // A scheme no client here speaks is refused at start-up, naming the flag.
    let mut argv = vec!["seckill".to_string()];
    argv.extend(env.args(&["--payment-url", "ftp://127.0.0.1:21"]));
    let config = <seckill::Config as clap::Parser>::try_parse_from(argv).unwrap();
    let refused = seckill::Application::build(config)
        .await
        .err()
        .expect("an ftp payment URL is refused");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("--payment-url") && refused.contains("ftp"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_provider_wants_its_api_key_and_drains_on_sigterm() {
    let env = TestEnv::new().await;
    let url = &env.provider.url;
    let key = "seckill-test-charge";
    for (what, request) in [
        (
            "POST /v1/charges",
            http()
                .post(format!("{url}/v1/charges"))
                .header("Idempotency-Key", key)
                .json(&json!({"amount_cents": 100})),
        ),
        ("GET /v1/charges", http().get(format!("{url}/v1/charges"))),
        (
            "GET /v1/charges/{key}",
            http().get(format!("{url}/v1/charges/{key}")),
        ),
        (
            "PUT /v1/settings",
            http().put(format!("{url}/v1/settings")).json(&json!({})),
        ),
        (
            "a wrong key",
            http()
                .get(format!("{url}/v1/charges"))
                .bearer_auth("not-the-key"),
        ),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer", "{what}");
        // A problem-details answer that says it is final: a client stops asking.
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{what}"
        );
        assert!(response.headers().get("retry-after").is_none(), "{what}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            (&body["error"], &body["retryable"], &body["status"]),
            (&json!("unauthorized"), &json!(false), &json!(401)),
            "{what}: {body}"
        );
    }
    let health = send(http().get(format!("{url}/healthz"))).await.unwrap();
    assert_eq!(health.status, StatusCode::OK, "health checks need no key");
    assert!(
        env.provider.ledger().await.is_empty(),
        "nothing was charged"
    );

    // Docker and systemd stop a service with SIGTERM: it drains and exits cleanly.
    let mut provider = Provider::start(&ledger_database("seckill_sigterm").await, &[]).await;
    let status = provider.terminate().await;
    assert!(status.success(), "exited {status:?} on SIGTERM");
}

#[tokio::test]
async fn a_request_head_over_the_bound_is_refused_and_the_server_goes_on() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--max-header-bytes", "8192"]).await;
    let big = "x".repeat(12 * 1024);
    // hyper answers 431 and closes; the close may reach the client first (it is still
    // sending its head): either way the head was not taken.
    let refused = http()
        .get(format!("{}/healthz", app.base_url))
        .header("x-padding", &big)
        .send()
        .await;
    if let Ok(response) = &refused {
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
    }
    let small = send(
        http()
            .get(format!("{}/healthz", app.base_url))
            .header("x-padding", "x".repeat(4 * 1024)),
    )
    .await
    .unwrap();
    assert_eq!(
        small.status,
        StatusCode::OK,
        "a head within the bound is served"
    );
    // A whole 12 KiB head is served where the bound allows it: the refusal above was the bound.
    let roomy = env.spawn_app(&["--max-header-bytes", "65536"]).await;
    let served = send(
        http()
            .get(format!("{}/healthz", roomy.base_url))
            .header("x-padding", &big),
    )
    .await
    .unwrap();
    assert_eq!(served.status, StatusCode::OK);
    assert!(refused.is_err() || refused.is_ok_and(|r| r.status() != StatusCode::OK));
}

#[tokio::test]
async fn every_error_is_problem_details_whose_type_resolves() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    for request in [
        http().get(format!("{base}/api/products/424242")),
        http().get(format!("{base}/no/such/route")),
        http()
            .post(format!("{base}/orders"))
            .header("content-type", "application/json")
            .body("{not json"),
        http().delete(format!("{base}/api/products")),
        // The static files' own refusal (416), put in our shape with its status kept.
        http()
            .get(format!("{base}/"))
            .header("range", "bytes=99999999-"),
    ] {
        let response = request.send().await.unwrap();
        let status = response.status();
        assert!(status.is_client_error(), "{status}");
        let retry_after = response.headers().get("retry-after").cloned();
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{status}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], status.as_u16(), "{body}");
        assert_eq!(body["detail"], body["message"], "{body}");
        let code = body["error"].as_str().expect("the code is kept");
        assert_eq!(body["type"], format!("/problems/{code}"), "{body}");
        let described = send(http().get(format!("{base}{}", body["type"].as_str().unwrap())))
            .await
            .unwrap();
        assert_eq!(described.status, StatusCode::OK, "{described:?}");
        assert_eq!(described.body["code"], code);
        assert_eq!(described.body["title"], body["title"], "one title per type");
        // None of these can succeed as sent: final, so no Retry-After either.
        assert_eq!(body["retryable"], false, "{body}");
        assert_eq!(described.body["retryable"], false, "{described:?}");
        // The type's own status (a last-net answer keeps the status it had: 416 here).
        assert!(described.body["status"].is_u64(), "{described:?}");
        assert!(
            retry_after.is_none(),
            "{status}: Retry-After {retry_after:?}"
        );
    }
    // A success is plain JSON, kept answers (a replay) included.
    let product = create_product(base, 1, "zk").await;
    for _ in 0..2 {
        let sold = http()
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", "problem-test-key")
            .json(&json!({"product_id": product, "user_id": "p"}))
            .send()
            .await
            .unwrap();
        assert_eq!(sold.status(), StatusCode::CREATED);
        assert_eq!(sold.headers()["content-type"], "application/json");
    }
    let all = send(http().get(format!("{base}/problems"))).await.unwrap();
    assert!(
        all.body.as_array().is_some_and(|types| types.len() > 20),
        "{all:?}"
    );
    let unknown = send(http().get(format!("{base}/problems/no_such_code")))
        .await
        .unwrap();
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.code(), "not_found");
}

#[tokio::test]
async fn product_views_do_not_read_the_orders() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    let product = create_product(base, 5, "zk").await;
    for buyer in 0..3 {
        let reply = place_order(&http(), base, product, &format!("view-{buyer}"))
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    }
    // Nobody can read the orders while this transaction holds the table: a view that summed
    // them would wait out its statement timeout and answer 503.
    let mut lock = env.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let one = send(http().get(format!("{base}/api/products/{product}")))
        .await
        .unwrap();
    assert_eq!(one.status, StatusCode::OK, "{one:?}");
    assert_eq!(one.body["sold"], 3, "{one:?}");
    let all = send(http().get(format!("{base}/api/products")))
        .await
        .unwrap();
    assert_eq!(all.status, StatusCode::OK, "{all:?}");
    lock.rollback().await.unwrap();
    // The audit sums the orders (it is the check) and finds the kept count right.
    let audit = audit(base, product).await;
    assert_eq!(
        (audit["sold"].as_i64(), audit["kept_sold"].as_i64()),
        (Some(3), Some(3)),
        "{audit}"
    );
    assert_eq!(audit["consistent"], true, "{audit}");
}
