//! What an operator runs and reads: `seckill admin` against a live instance, secrets read
//! from files (Docker secrets), the payment provider's own `/metrics`, and the background
//! audit's gauges the alert rules watch.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::helpers::*;

/// A scratch file holding `text`, removed with the test's temp dir by the OS (its name is
/// unique).
fn secret_file(text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("seckill-secret-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).expect("write a secret file");
    path
}

/// `seckill admin --url <base> --token-file <token> <args>`: its exit, stdout and stderr.
async fn admin(base: &str, token: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["admin", "--url", base, "--token-file"])
        .arg(token)
        .args(args)
        .env_remove("SECKILL_ADMIN_TOKEN")
        .env_remove("SECKILL_ADMIN_TOKEN_FILE")
        .output()
        .await
        .expect("run seckill admin");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Its JSON answer; panics (with stderr) if it failed.
async fn admin_ok(base: &str, token: &Path, args: &[&str]) -> Value {
    let (ok, out, err) = admin(base, token, args).await;
    assert!(ok, "seckill admin {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} printed {out:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_command_runs_each_action_against_a_live_instance() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = app.base_url.as_str();
    let token = secret_file(&format!("{ADMIN_TOKEN}\n"));

    let created = admin_ok(
        base,
        &token,
        &[
            "create-product",
            "--name",
            "Lantern",
            "--price-cents",
            "900",
            "--stock",
            "5",
            "--max-per-order",
            "2",
        ],
    )
    .await;
    let id = created["id"].as_i64().expect("the new product's id");
    assert_eq!(
        (created["stock"].as_i64(), created["guard"].as_str()),
        (Some(5), Some("zk"))
    );
    let id_arg = id.to_string();
    let listed = admin_ok(base, &token, &["products"]).await;
    assert!(listed.to_string().contains("Lantern"), "{listed}");

    let changed = admin_ok(base, &token, &["terms", &id_arg, "--price-cents", "1200"]).await;
    assert_eq!(changed["price_cents"], 1200, "{changed}");
    let restocked = admin_ok(base, &token, &["restock", &id_arg, "--quantity", "3"]).await;
    assert_eq!(restocked["stock"], 8, "{restocked}");

    let paused = admin_ok(base, &token, &["pause", &id_arg]).await;
    assert_eq!(paused["paused"], true, "{paused}");
    let refused = place_order(&http(), base, id, "ada").await.unwrap();
    assert_eq!(refused.code(), "paused", "{refused:?}");
    admin_ok(base, &token, &["resume", &id_arg]).await;
    let paid = place_order(&http(), base, id, "ada").await.unwrap();
    assert_eq!(paid.body["status"], "paid", "{paid:?}");

    let orders = admin_ok(base, &token, &["orders", "--user", "ada"]).await;
    assert_eq!(
        orders["orders"].as_array().map(Vec::len),
        Some(1),
        "{orders}"
    );
    let order_id = paid.body["id"].as_str().unwrap();
    let order = admin_ok(base, &token, &["order", order_id]).await;
    assert_eq!(order["status"], "paid", "{order}");
    // The provider's own word on its charge.
    let charge = admin_ok(base, &token, &["charge", order_id]).await;
    assert!(charge.to_string().contains("succeeded"), "{charge}");
    let audit = admin_ok(base, &token, &["audit", &id_arg]).await;
    assert_eq!(
        (
            audit["consistent"].as_bool(),
            audit["stock"].as_i64(),
            audit["sold"].as_i64()
        ),
        (Some(true), Some(7), Some(1)),
        "{audit}"
    );

    // Refusals are the instance's, named, and change nothing.
    let (ok, _, err) = admin(base, &token, &["restock", &id_arg, "--quantity", "0"]).await;
    assert!(!ok && err.contains("invalid_request"), "{err}");
    let wrong = secret_file("not-the-admin-token-at-all");
    let (ok, _, err) = admin(base, &wrong, &["pause", &id_arg]).await;
    assert!(
        !ok && err.contains("401") && err.contains("unauthorized"),
        "{err}"
    );
    assert_eq!(env.stock(id).await, 7);

    // Each action says what it does.
    for action in [
        "create-product",
        "terms",
        "restock",
        "pause",
        "resume",
        "audit",
        "orders",
        "order",
        "charge",
        "products",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(["admin", action, "--help"])
            .output()
            .await
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && help.contains("Usage: seckill admin"),
            "{action}: {help}"
        );
    }
}

/// The test's instance flags with the URL's password wrong and no payment key: both must
/// come from their files.
fn without_secrets(env: &TestEnv) -> Vec<String> {
    let mut args = env.args(&["--instance", "files"]);
    let key = args.iter().position(|a| a == "--payment-api-key").unwrap();
    args.drain(key..=key + 1);
    let url = args
        .iter_mut()
        .find(|a| a.starts_with("postgres://"))
        .unwrap();
    *url = url.replacen("seckill:seckill@", "seckill:wrong@", 1);
    args
}

#[tokio::test(flavor = "multi_thread")]
async fn every_secret_can_come_from_a_file() {
    let env = TestEnv::new().await;
    let files = [
        ("SECKILL_DB_PASSWORD_FILE", secret_file("seckill\n")),
        (
            "SECKILL_ADMIN_TOKEN_FILE",
            secret_file(&format!("{ADMIN_TOKEN}\n")),
        ),
        (
            "SECKILL_PAYMENT_API_KEY_FILE",
            secret_file(&format!("{PROVIDER_KEY}\n")),
        ),
        ("SECKILL_ZK_AUTH_FILE", secret_file("seckill:from-a-file\n")),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(without_secrets(&env))
        .envs(files.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = listening(&mut child, "seckill").await;
    // PostgreSQL took the file's password, the provider the file's key.
    let ready = wait_until(Duration::from_secs(30), "the instance is ready", || async {
        let r = http().get(format!("{base}/readyz")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
    assert_eq!(ready, ());
    // The admin token is the file's.
    let product = create_product(&base, 2, "zk").await;
    assert_eq!(
        place_order(&http(), &base, product, "ada")
            .await
            .unwrap()
            .body["status"],
        "paid"
    );
    // Its lock nodes carry the file's ZooKeeper credentials: a stranger cannot read the root.
    let stranger = env.zk_client_as("someone:else").await;
    assert!(
        stranger.get_data(&env.zk_root).await.is_err(),
        "the root is closed to others"
    );
    let owner = env.zk_client_as("seckill:from-a-file").await;
    assert!(
        owner.get_data(&env.zk_root).await.is_ok(),
        "and open to the file's user"
    );

    // A secret given twice is refused before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(without_secrets(&env))
        .envs(files.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("both set"), "{err}");
    assert!(
        !err.contains(ADMIN_TOKEN),
        "the refusal shows no secret: {err}"
    );

    // The provider too: its key and its ledger's password from files.
    let ledger = ledger_database("secret_files").await;
    let no_password = ledger.replacen("seckill:seckill@", "seckill@", 1);
    let mut provider = Command::new(env!("CARGO_BIN_EXE_seckill-provider"))
        .args(["--database-url", &no_password, "--listen", "127.0.0.1:0"])
        .env(
            "PROVIDER_API_KEY_FILE",
            secret_file(&format!("{PROVIDER_KEY}\n")),
        )
        .env("PROVIDER_DATABASE_PASSWORD_FILE", secret_file("seckill"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = listening(&mut provider, "seckill-provider").await;
    let ledger = http()
        .get(format!("{url}/v1/charges"))
        .bearer_auth(PROVIDER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(ledger.status(), 200, "the provider took the file's key");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_provider_counts_its_charges_by_outcome() {
    let env = TestEnv::new().await;
    let url = &env.provider.url;
    let charge = |key: &'static str| {
        http()
            .post(format!("{url}/v1/charges"))
            .bearer_auth(PROVIDER_KEY)
            .header("Idempotency-Key", key)
            .json(&json!({ "amount_cents": 100 }))
            .send()
    };
    assert_eq!(charge("one").await.unwrap().status(), 200);
    env.provider.set(json!({ "decline_rate": 1.0 })).await;
    assert_eq!(charge("two").await.unwrap().status(), 200);
    env.provider
        .set(json!({ "decline_rate": 0.0, "error_rate": 1.0 }))
        .await;
    assert_eq!(charge("three").await.unwrap().status(), 500);

    // Open like /healthz: Prometheus holds no API key.
    let metrics = scrape(url).await;
    let series = |s: &str| metrics.get(s).copied().unwrap_or(-1.0);
    assert_eq!(
        series("provider_charges_total{outcome=\"succeeded\"}"),
        1.0,
        "{metrics:?}"
    );
    assert_eq!(series("provider_charges_total{outcome=\"declined\"}"), 1.0);
    assert_eq!(series("provider_charges_total{outcome=\"failed\"}"), 1.0);
    assert_eq!(series("provider_charge_duration_seconds_count"), 3.0);
    assert_eq!(series("provider_charges_in_flight"), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_background_audit_reports_the_books_and_overdue_work() {
    let env = TestEnv::new().await;
    // The audit every 100 ms; the other background loops not at all (they would do the
    // overdue work this test leaves on purpose).
    let server = env
        .spawn_process(
            "audit",
            &[
                "--audit-interval-ms",
                "100",
                "--expiry-interval-ms",
                "3600000",
            ],
        )
        .await;
    let base = server.base_url.as_str();
    let product = create_product(base, 5, "zk").await;
    let sold = place_order(&http(), base, product, "ada").await.unwrap();
    assert_eq!(sold.body["status"], "paid");
    let stock = format!("seckill_product_stock{{product=\"{product}\"}}");
    let gauge = |name: String, want: f64| async move {
        wait_until(
            Duration::from_secs(30),
            &format!("{name} = {want}"),
            || async { (scrape(base).await.get(&name) == Some(&want)).then_some(()) },
        )
        .await
    };
    gauge(stock.clone(), 4.0).await;
    gauge("seckill_audit_inconsistent_products".into(), 0.0).await;
    let at = scrape(base).await["seckill_audit_timestamp_seconds"];
    assert!(at > 1.7e9, "a unix time: {at}");

    // Books that do not balance (a unit appears from nowhere) show at the next pass.
    sqlx::query("UPDATE products SET stock = stock + 1 WHERE id = $1")
        .bind(product)
        .execute(&env.db)
        .await
        .unwrap();
    gauge("seckill_audit_inconsistent_products".into(), 1.0).await;
    gauge(stock, 5.0).await;

    // A reservation long past its deadline, and a payment stuck half way with its intent.
    let reserved = reserve(base, product, "bob").await;
    let late = reserve(base, product, "cy").await;
    let (reserved, late) = (reserved.body["id"].clone(), late.body["id"].clone());
    for (sql, id) in [
        ("UPDATE orders SET expires_at = now() - interval '1 hour' WHERE id = $1::uuid", &reserved),
        (
            "UPDATE orders SET status = 'paying', updated_at = now() - interval '1 hour' WHERE id = $1::uuid",
            &late,
        ),
        (
            "INSERT INTO payments (order_id, key, amount_cents, created_at)
             VALUES ($1::uuid, 'stuck-intent', 100, now() - interval '1 hour')",
            &late,
        ),
    ] {
        sqlx::query(sql)
            .bind(id.as_str().unwrap())
            .execute(&env.db)
            .await
            .unwrap();
    }
    gauge("seckill_overdue{work=\"returns\"}".into(), 1.0).await;
    gauge("seckill_overdue{work=\"settlement\"}".into(), 1.0).await;
    gauge("seckill_overdue{work=\"intents\"}".into(), 1.0).await;
}
