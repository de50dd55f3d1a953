//! One test's world (`TestEnv`: its database, ZooKeeper root and payment provider) and
//! the apps it starts, in this process or as `seckill` processes.

use super::*;

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

/// Three `seckill` processes, `instance-0..2`, with the same flags.
pub async fn three_instances(env: &TestEnv, extra: &[&str]) -> (Vec<ServerProcess>, Vec<String>) {
    let mut servers = Vec::new();
    for i in 0..3 {
        servers.push(env.spawn_process(&format!("instance-{i}"), extra).await);
    }
    let urls = servers.iter().map(|s| s.base_url.clone()).collect();
    (servers, urls)
}
