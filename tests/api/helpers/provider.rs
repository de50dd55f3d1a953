//! The test's payment provider: a `seckill-provider` process of its own.

use super::*;

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
