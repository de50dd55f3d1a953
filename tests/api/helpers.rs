//! Test harness: a fresh database and ZooKeeper root per test, the app in-process or as
//! separate `seckill` processes, typed request helpers, and bounded waits for conditions.
//!
//! Backing services come from `TEST_DATABASE_URL` (a URL whose role may CREATE DATABASE) and
//! `SECKILL_ZK`, which `scripts/test` sets after starting them.

use std::collections::HashMap;
use std::future::Future;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use reqwest::StatusCode;
use seckill::{Application, Config};
use serde_json::{json, Value};
use sqlx::Connection;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};
use zookeeper_client as zk;

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The test providers' API key (`seckill-provider --api-key`, the apps' `--payment-api-key`).
pub const PROVIDER_KEY: &str = "test-provider-api-key";

/// One test's private world: its own database and ZooKeeper root.
pub struct TestEnv {
    pub database_url: String,
    pub zk_connect: String,
    pub zk_root: String,
    /// For assertions straight against the tables.
    pub db: PgPool,
    /// The test's own payment provider: a `seckill-provider` process with its own ledger.
    pub provider: Provider,
}

/// A `seckill-provider` process (killed with its test) and its ledger's database, on the
/// test PostgreSQL server (a provider is another company's system: the fault tests' own
/// PostgreSQL, which they restart, is not where its ledger lives).
pub struct Provider {
    pub url: String,
    pub database_url: String,
    /// Its flags beyond the defaults (a restart keeps them).
    extra: Vec<String>,
    child: Option<Child>,
}

impl Provider {
    pub async fn start(database_url: &str, extra: &[&str]) -> Provider {
        let mut child = Command::new(env!("CARGO_BIN_EXE_seckill-provider"))
            .args(["--test-controls", "--database-url", database_url])
            .args(["--api-key", PROVIDER_KEY])
            // Port 0 unless the caller names an address (a restart on the same one).
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start seckill-provider");
        let url = listening(&mut child, "seckill-provider").await;
        Provider {
            url,
            database_url: database_url.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: Some(child),
        }
    }

    /// The provider goes down (SIGKILL): its ledger stays.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.expect("kill seckill-provider");
        }
    }

    /// Sends SIGTERM and waits for it to exit (it drains its requests first).
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running provider");
        let pid = child.id().expect("a running provider has a pid") as i32;
        // SAFETY: kill(2) on our own child's pid, which has not been reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("the provider exited within 30s of SIGTERM")
            .expect("wait for the provider")
    }

    /// Back up, on the same address and ledger.
    pub async fn restart(&mut self) {
        self.kill().await;
        let listen = self.url.split_once("://").map_or(&*self.url, |(_, a)| a);
        let mut extra: Vec<&str> = vec!["--listen", listen];
        let mut kept = self.extra.iter().map(String::as_str);
        while let Some(flag) = kept.next() {
            match flag {
                "--listen" => {
                    kept.next();
                }
                _ => extra.push(flag),
            }
        }
        let again = Provider::start(&self.database_url, &extra).await;
        assert_eq!(again.url, self.url, "the provider came back on its address");
        *self = again;
    }

    /// Changes its faults (`PUT /v1/settings`): rates, `fail_next`, `lose_next`.
    pub async fn set(&self, settings: Value) {
        let reply = send(
            http()
                .put(format!("{}/v1/settings", self.url))
                .bearer_auth(PROVIDER_KEY)
                .json(&settings),
        )
        .await
        .expect("reach the provider");
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    }

    /// Its ledger: every charge it made, oldest first.
    pub async fn ledger(&self) -> Vec<Value> {
        let reply = send(
            http()
                .get(format!("{}/v1/charges", self.url))
                .bearer_auth(PROVIDER_KEY),
        )
        .await
        .expect("reach the provider");
        reply.body["charges"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl TestEnv {
    pub async fn new() -> TestEnv {
        let base = std::env::var("TEST_DATABASE_URL")
            .or_else(|_| std::env::var("DATABASE_URL"))
            .unwrap_or_else(|_| "postgres://seckill:seckill@127.0.0.1:5433/seckill".into());
        let zk_connect = std::env::var("SECKILL_ZK").unwrap_or_else(|_| "127.0.0.1:2181".into());
        TestEnv::on(&base, &zk_connect).await
    }

    /// A fresh database on the server of `base` (a URL whose role may CREATE DATABASE) and a
    /// fresh root on the ZooKeeper at `zk_connect`: the fault tests bring servers of their own.
    pub async fn on(base: &str, zk_connect: &str) -> TestEnv {
        let zk_connect = zk_connect.to_string();
        let name = format!("seckill_test_{}", uuid::Uuid::new_v4().simple());
        let template = template(base).await;
        let admin = PgPool::connect(base)
            .await
            .expect("connect to the test PostgreSQL (run scripts/test)");
        sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let (prefix, _) = base.rsplit_once('/').expect("database URL ends in /<name>");
        let database_url = format!("{prefix}/{name}");
        let db = PgPool::connect(&database_url)
            .await
            .expect("connect to the test database");
        let zk_root = format!("/seckill-tests/{}", uuid::Uuid::new_v4().simple());
        let provider = Provider::start(&ledger_database(&name).await, &[]).await;
        TestEnv {
            database_url,
            zk_connect,
            zk_root,
            db,
            provider,
        }
    }

    /// Flags every instance of this test shares, then the test's own.
    pub fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &self.database_url,
            "--zk",
            &self.zk_connect,
            "--zk-root",
            &self.zk_root,
            "--db-max-connections",
            "10",
            "--payment-url",
            &self.provider.url,
            "--payment-api-key",
            PROVIDER_KEY,
            // Tests read a lock view right after changing the lock: no snapshot age (the
            // snapshots themselves are tested in `access`, which sets its own).
            "--view-refresh-ms",
            "0",
            // Buyers as the body names them; the identity tests append their own mode (a
            // later flag wins).
            "--buyer-auth",
            "open",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// The app in this process: tests can reach its state (ZooKeeper session, pool).
    pub async fn spawn_app(&self, extra: &[&str]) -> TestApp {
        let mut args = vec!["--admin-token", ADMIN_TOKEN];
        args.extend(extra);
        self.spawn_app_exactly(&args).await
    }

    /// Like [`Self::spawn_app`], without the admin token.
    pub async fn spawn_app_exactly(&self, extra: &[&str]) -> TestApp {
        let mut argv = vec!["seckill".to_string()];
        argv.extend(self.args(extra));
        let config = <Config as clap::Parser>::try_parse_from(argv).expect("valid test flags");
        let app = Application::build(config).await.expect("build the app");
        let base_url = format!("http://{}", app.local_addr());
        let zk = app.zk().clone();
        let holds = app.teaching().holds().clone();
        let combiner = app.shop().combiner().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run(async move {
            let _ = stopped.await;
        }));
        TestApp {
            base_url,
            zk,
            holds,
            combiner,
            _stop: stop,
        }
    }

    /// The app as a separate `seckill` process, as in production: its own ZooKeeper session,
    /// killable with SIGKILL.
    pub async fn spawn_process(&self, instance: &str, extra: &[&str]) -> ServerProcess {
        self.spawn_process_logging(instance, extra, "warn", Stdio::inherit())
            .await
    }

    /// [`Self::spawn_process`], logging at `rust_log` to `log` (its stderr).
    pub async fn spawn_process_logging(
        &self,
        instance: &str,
        extra: &[&str],
        rust_log: &str,
        log: Stdio,
    ) -> ServerProcess {
        self.spawn_process_in(instance, extra, rust_log, log, &[])
            .await
    }

    /// [`Self::spawn_process_logging`] with environment variables of its own (`SSL_CERT_FILE`).
    pub async fn spawn_process_in(
        &self,
        instance: &str,
        extra: &[&str],
        rust_log: &str,
        log: Stdio,
        vars: &[(&str, &str)],
    ) -> ServerProcess {
        let mut args = self.args(extra);
        args.extend(["--instance", instance, "--admin-token", ADMIN_TOKEN].map(String::from));
        let mut child = Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(&args)
            .envs(vars.iter().copied())
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start seckill");
        let base_url = listening(&mut child, "seckill").await;
        ServerProcess { child, base_url }
    }

    /// A client of our own on the test's ZooKeeper, for looking at (or meddling with) locks.
    pub async fn zk_client(&self) -> zk::Client {
        zk::Client::connect(&self.zk_connect)
            .await
            .expect("connect to ZooKeeper")
    }

    /// [`Self::zk_client`] with digest credentials (`user:password`), as an instance
    /// started with `--zk-auth` has.
    pub async fn zk_client_as(&self, auth: &str) -> zk::Client {
        zk::Client::connector()
            .with_auth("digest", auth.as_bytes())
            .connect(&self.zk_connect)
            .await
            .expect("connect to ZooKeeper")
    }

    pub fn lock_dir(&self, product_id: i64) -> String {
        format!("{}/locks/stock/{product_id}", self.zk_root)
    }

    /// The lock queue's nodes, in sequence order, with the data each owner wrote.
    pub async fn lock_queue(&self, zk: &zk::Client, product_id: i64) -> Vec<(String, String)> {
        let dir = self.lock_dir(product_id);
        let mut children = match zk.list_children(&dir).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Vec::new(),
            Err(e) => panic!("listing {dir}: {e}"),
        };
        children.sort_by(|a, b| a.rsplit('-').next().cmp(&b.rsplit('-').next()));
        let mut queue = Vec::new();
        for child in children {
            if let Ok((data, _)) = zk.get_data(&format!("{dir}/{child}")).await {
                queue.push((child, String::from_utf8_lossy(&data).into_owned()));
            }
        }
        queue
    }

    /// Waits until the product's fair lock queue holds exactly `len` nodes.
    pub async fn wait_for_queue(&self, zk: &zk::Client, product_id: i64, len: usize, what: &str) {
        wait_until(Duration::from_secs(30), what, || async {
            (self.lock_queue(zk, product_id).await.len() == len).then_some(())
        })
        .await
    }

    /// Order counts by status, straight from the table.
    pub async fn order_counts(&self, product_id: i64) -> HashMap<String, i64> {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT status, COUNT(*) FROM orders WHERE product_id = $1 GROUP BY status",
        )
        .bind(product_id)
        .fetch_all(&self.db)
        .await
        .expect("count orders")
        .into_iter()
        .collect()
    }

    /// The newest fencing token that claimed the product's row (0 before any).
    pub async fn fence(&self, product_id: i64) -> i64 {
        sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
            .bind(product_id)
            .fetch_one(&self.db)
            .await
            .expect("read fence")
    }

    /// The product row's fence: the epoch of the ensemble that claimed it, and the token.
    pub async fn fence_of(&self, product_id: i64) -> (i64, i64) {
        sqlx::query_as("SELECT fence_epoch, fence FROM products WHERE id = $1")
            .bind(product_id)
            .fetch_one(&self.db)
            .await
            .expect("read the fence")
    }

    /// Waits until a holder newer than `past` has claimed the product's row (inside its
    /// critical section: it holds the lock); returns that holder's token.
    pub async fn wait_for_fence_past(&self, product_id: i64, past: i64, what: &str) -> i64 {
        wait_until(Duration::from_secs(30), what, || async {
            let fence = self.fence(product_id).await;
            (fence > past).then_some(fence)
        })
        .await
    }

    /// Waits until a statement of this test's database whose text is `LIKE` `pattern` waits
    /// for a lock: the state a test holding that lock needs before it lets go.
    pub async fn wait_for_lock_wait(&self, pattern: &str, what: &str) {
        wait_until(Duration::from_secs(15), what, || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND query LIKE $1",
            )
            .bind(pattern)
            .fetch_one(&self.db)
            .await
            .ok()?;
            (waiting > 0).then_some(())
        })
        .await
    }

    /// An order's status and failure reason, from its row.
    pub async fn order_row(&self, order_id: &str) -> (String, Option<String>) {
        sqlx::query_as("SELECT status, failure FROM orders WHERE id = $1::uuid")
            .bind(order_id)
            .fetch_one(&self.db)
            .await
            .expect("the order's row")
    }

    pub async fn stock(&self, product_id: i64) -> i32 {
        sqlx::query_scalar("SELECT stock FROM products WHERE id = $1")
            .bind(product_id)
            .fetch_one(&self.db)
            .await
            .expect("read stock")
    }

    /// Whether an Idempotency-Key has a record (taken, in progress or answered).
    pub async fn key_exists(&self, key: &str) -> bool {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE split_part(key, chr(31), 2) = $1)",
        )
        .bind(key)
        .fetch_one(&self.db)
        .await
        .unwrap()
    }

    /// After a buyer with `key` hung up while queued: waits until its order's task has
    /// answered (the key is freed then, after anything the order wrote), and checks that
    /// `user` has no order row.
    pub async fn assert_hang_up_left_no_row(&self, key: &str, user: &str) {
        wait_until(
            Duration::from_secs(10),
            "the hung-up order to end",
            || async { (!self.key_exists(key).await).then_some(()) },
        )
        .await;
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE user_id = $1")
            .bind(user)
            .fetch_one(&self.db)
            .await
            .unwrap();
        assert_eq!(
            rows, 0,
            "a hang-up before any lock cycle leaves no order row"
        );
    }

    pub async fn total_orders(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM orders")
            .fetch_one(&self.db)
            .await
            .expect("count orders")
    }
}

/// A fresh database for a provider's ledger, named after the test's, on the test server.
pub async fn ledger_database(test: &str) -> String {
    empty_database(&format!("{test}_ledger_{}", fastrand::u32(..))).await
}

/// A fresh, empty database `name` on the test server: its URL.
pub async fn empty_database(name: &str) -> String {
    let base = std::env::var("TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://seckill:seckill@127.0.0.1:5433/seckill".into());
    let admin = PgPool::connect(&base)
        .await
        .expect("connect to the test PostgreSQL (run scripts/test)");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("create the database");
    admin.close().await;
    let (prefix, _) = base.rsplit_once('/').expect("database URL ends in /<name>");
    format!("{prefix}/{name}")
}

/// The migrated database every test database is cloned from (`CREATE DATABASE … TEMPLATE`),
/// one per PostgreSQL server and set of migrations: made once (by whichever test asks first)
/// instead of migrating once per test. Named after the migrations, so a changed migration
/// makes a new one; made under another name and renamed when complete, so an interrupted run
/// never leaves a half-migrated template behind.
async fn template(base: &str) -> String {
    static MADE: tokio::sync::Mutex<Vec<String>> = tokio::sync::Mutex::const_new(Vec::new());
    let migrator = sqlx::migrate!();
    let mut fingerprint = 0u64;
    for migration in migrator.iter() {
        for byte in migration.checksum.iter() {
            fingerprint = fingerprint.wrapping_mul(31).wrapping_add(u64::from(*byte));
        }
    }
    let name = format!("seckill_template_{fingerprint:016x}");
    let mut made = MADE.lock().await;
    if made.contains(&format!("{base} {name}")) {
        return name;
    }
    let admin = PgPool::connect(base)
        .await
        .expect("connect to the test PostgreSQL (run scripts/test)");
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&admin)
            .await
            .expect("look for the template database");
    if !exists {
        // Within PostgreSQL's 63 bytes: a longer name is cut short, and the checks on
        // pg_stat_activity below would look for a name no database has.
        let building = format!(
            "{name}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        sqlx::query(&format!("CREATE DATABASE {building}"))
            .execute(&admin)
            .await
            .expect("create the template database");
        let (prefix, _) = base.rsplit_once('/').expect("database URL ends in /<name>");
        // One connection of our own, not a pool: the rename below needs every session on it
        // gone, and sqlx's `Pool::close` can leave one open for good — a connection still on
        // its way back to the pool (the migration's, pinged after its advisory unlock) when
        // `close` waits for its last permit is pushed to the idle queue after `close` has
        // emptied it, and nothing closes it (seen under load: 9 of 40 rounds left a session
        // idle after `SELECT pg_advisory_unlock`, 0 of 40 with a lone connection). This was
        // the flake "timed out after 30s waiting for the template's connections to end".
        let mut db = sqlx::PgConnection::connect(&format!("{prefix}/{building}?sslmode=disable"))
            .await
            .expect("connect to the template database");
        migrator
            .run(&mut db)
            .await
            .expect("migrate the template database");
        db.close().await.expect("close the template's connection");
        // A closed connection's server process may still be leaving: wait until none is
        // left on the database, or the rename (and every clone) is refused.
        wait_until(
            Duration::from_secs(30),
            "the template's connections to end",
            || async {
                let left: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1")
                        .bind(&building)
                        .fetch_one(&admin)
                        .await
                        .ok()?;
                (left == 0).then_some(())
            },
        )
        .await;
        // And a backend seen gone can still hold on (the rename then says "being accessed by
        // other users", as a fresh clone's fault run met): try again until it has left.
        wait_until(Duration::from_secs(30), "the template's name", || async {
            let renamed = sqlx::query(&format!("ALTER DATABASE {building} RENAME TO {name}"))
                .execute(&admin)
                .await;
            match renamed {
                Ok(_) => Some(()),
                Err(e) if e.to_string().contains("being accessed by other users") => {
                    // Whatever still sits on our own scratch database goes.
                    let _ = sqlx::query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = $1 AND pid <> pg_backend_pid()",
                    )
                    .bind(&building)
                    .execute(&admin)
                    .await;
                    None
                }
                Err(e) => panic!("name the template database: {e}"),
            }
        })
        .await;
    }
    admin.close().await;
    made.push(format!("{base} {name}"));
    name
}

pub struct TestApp {
    pub base_url: String,
    pub zk: seckill::lock::Zk,
    /// Pauses this app's next lock holder of a product inside its critical section.
    pub holds: seckill::teaching::Holds,
    /// This app's per-product queues of orders waiting for a lock cycle.
    pub combiner: seckill::orders::combiner::Combiner,
    /// Dropping it shuts the app down.
    _stop: oneshot::Sender<()>,
}

/// The address a `seckill` or `seckill-provider` process (`name`) prints on its stdout
/// (piped) once it listens.
pub async fn listening(child: &mut Child, name: &str) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{name} printed its address within 30s"))
        .expect("read its stdout")
        .unwrap_or_else(|| panic!("{name} exited before listening"));
    line.strip_prefix(&format!("{name} listening on "))
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string()
}

pub struct ServerProcess {
    pub child: Child,
    pub base_url: String,
}

/// A response, reduced to what tests look at.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    /// The body exactly as sent, for byte-for-byte replay checks.
    pub raw: String,
    pub retry_after: Option<String>,
    pub replayed: bool,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }

    /// Whether the answer invites the same request again: what tests, like clients, decide
    /// retries from (never a list of codes).
    pub fn retryable(&self) -> bool {
        self.body["retryable"] == true
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        // Tests speak plain HTTP to 127.0.0.1, and build a client per request: loading the
        // platform's root certificates each time blocked a storm's runtime for seconds (its
        // connections sat unread past the server's header timeout).
        .tls_built_in_native_certs(false)
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .expect("build HTTP client")
}

pub async fn send(request: reqwest::RequestBuilder) -> anyhow::Result<Reply> {
    let response = request.send().await.context("sending request")?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let raw = response.text().await.context("reading body")?;
    let body: Value = serde_json::from_str(&raw).unwrap_or(Value::String(raw.clone()));
    // Every error answer of ours says whether to retry, and a retryable one says when: held
    // on every answer any test reads.
    if body.get("error").is_some() && (status.is_client_error() || status.is_server_error()) {
        let retryable = body["retryable"].as_bool();
        assert!(retryable.is_some(), "{status} without `retryable`: {raw}");
        assert_eq!(
            retry_after.is_some(),
            retryable == Some(true),
            "{status}: Retry-After {retry_after:?} with {raw}"
        );
    }
    Ok(Reply {
        status,
        body,
        raw,
        retry_after,
        replayed,
    })
}

pub async fn create_product(base_url: &str, stock: i64, guard: &str) -> i64 {
    create_product_with(base_url, json!({ "stock": stock, "guard": guard })).await
}

/// A product whose every order takes the lock for itself (`batch_max` 1): one lock node per
/// buyer, as the teaching page's queue shows it.
pub async fn create_per_request_product(base_url: &str, stock: i64, guard: &str) -> i64 {
    create_product_with(
        base_url,
        json!({ "stock": stock, "guard": guard, "batch_max": 1 }),
    )
    .await
}

/// A product with the given fields over the defaults (price 1999, stock 10, guard zk).
pub async fn create_product_with(base_url: &str, fields: Value) -> i64 {
    let mut body =
        json!({ "name": "test product", "price_cents": 1999, "stock": 10, "guard": "zk" });
    body.as_object_mut()
        .unwrap()
        .extend(fields.as_object().expect("an object").clone());
    let reply = send(
        http()
            .post(format!("{base_url}/api/products"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body),
    )
    .await
    .expect("create product");
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    reply.body["id"].as_i64().expect("product id")
}

pub async fn place_order(
    client: &reqwest::Client,
    base_url: &str,
    product_id: i64,
    user: &str,
) -> anyhow::Result<Reply> {
    place_order_of(client, base_url, product_id, user, 1).await
}

/// [`place_order`] for `quantity` units.
pub async fn place_order_of(
    client: &reqwest::Client,
    base_url: &str,
    product_id: i64,
    user: &str,
    quantity: i64,
) -> anyhow::Result<Reply> {
    send(client.post(format!("{base_url}/orders")).json(&json!({
        "product_id": product_id, "user_id": user, "quantity": quantity
    })))
    .await
}

/// A reservation without payment (`"pay": false`) of one unit.
pub async fn reserve(base_url: &str, product_id: i64, user: &str) -> Reply {
    send(http().post(format!("{base_url}/orders")).json(&json!({
        "product_id": product_id, "user_id": user, "pay": false
    })))
    .await
    .expect("reservation answered")
}

/// One unit, with an Idempotency-Key.
pub async fn order_with_key(base: &str, product: i64, user: &str, key: &str) -> Reply {
    send(
        http()
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", key)
            .json(&json!({ "product_id": product, "user_id": user })),
    )
    .await
    .expect("order answered")
}

/// Places an order in the background (it may wait in a lock queue).
pub fn spawn_order(
    base_url: &str,
    product_id: i64,
    user: &str,
) -> tokio::task::JoinHandle<anyhow::Result<Reply>> {
    let (base, user) = (base_url.to_string(), user.to_string());
    tokio::spawn(async move { place_order(&http(), &base, product_id, &user).await })
}

/// Three `seckill` processes, `instance-0..2`, with the same flags.
pub async fn three_instances(env: &TestEnv, extra: &[&str]) -> (Vec<ServerProcess>, Vec<String>) {
    let mut servers = Vec::new();
    for i in 0..3 {
        servers.push(env.spawn_process(&format!("instance-{i}"), extra).await);
    }
    let urls = servers.iter().map(|s| s.base_url.clone()).collect();
    (servers, urls)
}

/// `name{labels}` → value, from a scrape of `GET /metrics` (Prometheus' text format).
pub async fn scrape(base: &str) -> HashMap<String, f64> {
    let text = http()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics body");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// One number from the test's database (a `COUNT(*)`, a `SUM`), for assertions.
pub async fn count(env: &TestEnv, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&env.db).await.unwrap()
}

/// The payment semaphore's view (`GET /api/payments/semaphore`): leases and waiters.
pub async fn semaphore(base: &str) -> Value {
    send(http().get(format!("{base}/api/payments/semaphore")))
        .await
        .unwrap()
        .body
}

/// The product's lock view on that instance (`GET /api/products/{id}/lock`), which must answer.
pub async fn lock_view(base: &str, product: i64) -> Value {
    let reply = send(http().get(format!("{base}/api/products/{product}/lock")))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    reply.body
}

/// One field of each ticket of a lock view's list (`holders`, `waiters`, `leases`...), ""
/// where a ticket has none (a Curator node has no label).
pub fn each(tickets: &Value, field: &str) -> Vec<String> {
    tickets
        .as_array()
        .expect("a list of tickets")
        .iter()
        .map(|t| t[field].as_str().unwrap_or_default().to_string())
        .collect()
}

pub async fn audit(base_url: &str, product_id: i64) -> Value {
    let reply = send(http().get(format!("{base_url}/api/products/{product_id}/audit")))
        .await
        .expect("audit");
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    reply.body
}

/// One order per user, all at once, spread round-robin over the instances.
pub async fn flash_sale(
    base_urls: &[String],
    product_id: i64,
    buyers: usize,
) -> Vec<anyhow::Result<Reply>> {
    let client = http();
    let orders = (0..buyers).map(|i| {
        let client = client.clone();
        let base = base_urls[i % base_urls.len()].clone();
        async move { place_order(&client, &base, product_id, &format!("buyer-{i}")).await }
    });
    futures::future::join_all(orders).await
}

/// Waits until `check` yields a value, polling every 20 ms, failing after `limit`.
pub async fn wait_until<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Forwards 127.0.0.1:<port> to `target` until cut; while cut, drops every connection.
pub struct ChaosProxy {
    pub addr: String,
    up: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
}

impl ChaosProxy {
    pub async fn start(target: String) -> ChaosProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, _) = watch::channel(0u64);
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused in all but name
                }
                let target = target.clone();
                let mut cuts = cut2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        ChaosProxy { addr, up, cut }
    }

    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// A TCP proxy in front of PostgreSQL that, once armed, takes the next `COMMIT` and closes
/// the client's connection with no answer. [`CommitDropper::start`] lets that COMMIT through
/// at once (it happened, and the client cannot know it); [`CommitDropper::delaying`] holds it
/// until [`CommitDropper::deliver`] (a COMMIT late in the network: the client has given up
/// on it, and it may still land). Clients must connect with `sslmode=disable` (it reads the
/// protocol's messages).
pub struct CommitDropper {
    /// `host:port` to use in place of PostgreSQL's.
    pub addr: String,
    armed: Arc<AtomicBool>,
    /// Commits whose answer it dropped.
    pub dropped: Arc<std::sync::atomic::AtomicUsize>,
    /// Delaying: opened to let the held COMMIT go on to PostgreSQL.
    deliver: watch::Sender<bool>,
    /// Delaying: how the held COMMIT ended once delivered (see [`Delivered`]).
    delivered: watch::Receiver<Option<Delivered>>,
}

/// What PostgreSQL did with a COMMIT delivered late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// It answered `CommandComplete`: the transaction was still open, and the COMMIT landed.
    Committed,
    /// An error (its backend was ended meanwhile: PostgreSQL's FATAL), or the connection was
    /// gone: the COMMIT landed nowhere.
    Refused,
}

impl CommitDropper {
    pub async fn start(target: String) -> CommitDropper {
        Self::spawn(target, false).await
    }

    /// A proxy that holds the dropped COMMIT until [`Self::deliver`]. It takes only the
    /// COMMIT of a transaction that wrote orders (a lock cycle's), not a heartbeat's.
    pub async fn delaying(target: String) -> CommitDropper {
        Self::spawn(target, true).await
    }

    async fn spawn(target: String, delay: bool) -> CommitDropper {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let armed = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (deliver, deliver_rx) = watch::channel(!delay);
        let (delivered_tx, delivered) = watch::channel(None);
        let delivered_tx = Arc::new(delivered_tx);
        let (armed2, dropped2) = (armed.clone(), dropped.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (target, armed, dropped) = (target.clone(), armed2.clone(), dropped2.clone());
                let (deliver, delivered) = (deliver_rx.clone(), delivered_tx.clone());
                tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(&target).await {
                        let commit = Commit {
                            armed,
                            dropped,
                            deliver,
                            delivered,
                            after: delay.then_some(&b"INSERT INTO orders"[..]),
                        };
                        relay(inbound, outbound, commit).await;
                    }
                });
            }
        });
        CommitDropper {
            addr,
            armed,
            dropped,
            deliver,
            delivered,
        }
    }

    /// Drops the answer to the next COMMIT any client sends.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Lets the held COMMIT go on to PostgreSQL, and waits (bounded) for what became of it.
    pub async fn deliver(&mut self) -> Delivered {
        self.deliver.send_replace(true);
        let became = tokio::time::timeout(
            Duration::from_secs(30),
            self.delivered.wait_for(Option::is_some),
        );
        became
            .await
            .expect("the late COMMIT was delivered within 30 s")
            .expect("the proxy is running")
            .expect("waited for Some")
    }
}

/// The next message a PostgreSQL client sends, whole, and its body: the startup message
/// (before `started`) has no type byte; every later one is a type byte and a length that
/// counts itself.
pub async fn read_message(
    client: &mut (impl tokio::io::AsyncRead + Unpin),
    started: bool,
) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut message = Vec::new();
    if started {
        let mut kind = [0u8; 1];
        client.read_exact(&mut kind).await?;
        message.push(kind[0]);
    }
    let mut len = [0u8; 4];
    client.read_exact(&mut len).await?;
    message.extend_from_slice(&len);
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    client.read_exact(&mut body).await?;
    message.extend_from_slice(&body);
    Ok((message, body))
}

/// One connection's part in the COMMIT it may drop.
struct Commit {
    armed: Arc<AtomicBool>,
    dropped: Arc<std::sync::atomic::AtomicUsize>,
    deliver: watch::Receiver<bool>,
    delivered: Arc<watch::Sender<Option<Delivered>>>,
    /// Only a COMMIT of a transaction that sent a statement containing this.
    after: Option<&'static [u8]>,
}

async fn relay(inbound: TcpStream, outbound: TcpStream, commit: Commit) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Commit {
        armed,
        dropped,
        mut deliver,
        delivered,
        after,
    } = commit;
    let (mut client_rx, mut client_tx) = inbound.into_split();
    let (mut server_rx, mut server_tx) = outbound.into_split();
    let (cut, mut cut_rx) = watch::channel(false);
    let (sent, mut sent_rx) = watch::channel(false);
    let upstream = async move {
        let mut started = false;
        let mut marked = after.is_none();
        loop {
            let (message, body) = read_message(&mut client_rx, started).await?;
            let is_commit = started
                && message[0] == b'Q'
                && String::from_utf8_lossy(&body)
                    .trim_start()
                    .to_ascii_uppercase()
                    .starts_with("COMMIT");
            if let Some(marker) = after {
                marked |= body.windows(marker.len()).any(|w| w == marker);
            }
            if is_commit && marked && armed.swap(false, Ordering::SeqCst) {
                // From now on nothing goes back to this client: the commit runs (now, or
                // once delivered), its answer read by nobody.
                cut.send_replace(true);
                dropped.fetch_add(1, Ordering::SeqCst);
                let go = deliver.wait_for(|go| *go).await.map(|_| ());
                drop(go);
                let written = server_tx.write_all(&message).await;
                sent.send_replace(true);
                written?;
                return Ok::<_, std::io::Error>(());
            }
            if is_commit {
                marked = after.is_none();
            }
            server_tx.write_all(&message).await?;
            started = true;
        }
    };
    let downstream = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                read = server_rx.read(&mut buf) => {
                    let n = read?;
                    if n == 0 {
                        return Ok(());
                    }
                    client_tx.write_all(&buf[..n]).await?;
                }
                _ = async { cut_rx.wait_for(|cut| *cut).await.map(|_| ()) } => break,
            }
        }
        // The client sees its connection close, with no answer to its commit.
        drop(client_tx);
        // What PostgreSQL does with the COMMIT once it is sent: an answer, or a connection
        // its backend already closed.
        let sent = sent_rx.wait_for(|sent| *sent).await.map(|_| ());
        if sent.is_err() {
            return Ok(()); // the client went away first
        }
        // The first message of the answer: `C` (CommandComplete) if the COMMIT ran. A backend
        // ended before it came had sent its FATAL (`E`) already, then closed.
        let became = match server_rx.read(&mut buf).await {
            Ok(n) if n > 0 && buf[0] == b'C' => Delivered::Committed,
            _ => Delivered::Refused,
        };
        delivered.send_replace(Some(became));
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::join!(upstream, downstream);
}
