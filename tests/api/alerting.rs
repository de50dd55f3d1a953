//! The alert rules as Prometheus runs them: Debian's real Prometheus scrapes two instances
//! and the payment provider, evaluates `deploy/prometheus/alerts.yml` as shipped, and an
//! alert fires when its cause is made on purpose (the provider stopped). The rules' logic
//! case by case is `promtool test rules` (tests/deploy/alerts.sh); this is the wiring.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

use crate::helpers::*;

/// A Prometheus server on loopback, killed with the test.
struct Prometheus {
    url: String,
    dir: std::path::PathBuf,
    _child: Child,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    /// Scrapes each job's targets every second and evaluates the shipped rules as often.
    async fn start(jobs: &[(&str, Vec<String>)]) -> Prometheus {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let shipped = std::fs::read_to_string(root.join("deploy/prometheus/prometheus.yml"))
            .expect("deploy/prometheus/prometheus.yml");
        let mut config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}}\n\
             rule_files: [\"{}\"]\nscrape_configs:\n",
            root.join("deploy/prometheus/alerts.yml").display()
        );
        for (job, targets) in jobs {
            // The rules name the shipped jobs: a renamed job would leave them blind.
            assert!(
                shipped.contains(&format!("job_name: {job}")),
                "no job {job} shipped"
            );
            let targets: Vec<String> = targets
                .iter()
                .map(|t| format!("\"{}\"", t.trim_start_matches("http://")))
                .collect();
            config += &format!(
                "  - job_name: {job}\n    static_configs: [{{targets: [{}]}}]\n",
                targets.join(", ")
            );
        }
        let dir = std::env::temp_dir().join(format!("seckill-prometheus-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("Debian's prometheus (scripts/test installs it)");
        let url = format!("http://127.0.0.1:{port}");
        let ready = wait_until(Duration::from_secs(60), "Prometheus is ready", || async {
            let r = http().get(format!("{url}/-/ready")).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        assert_eq!(ready, ());
        Prometheus {
            url,
            dir,
            _child: child,
        }
    }

    async fn api(&self, path: &str) -> Value {
        let body: Value = http()
            .get(format!("{}/api/v1/{path}", self.url))
            .send()
            .await
            .expect("Prometheus answers")
            .json()
            .await
            .expect("JSON");
        assert_eq!(body["status"], "success", "{body}");
        body["data"].clone()
    }

    /// One number: the first series of an instant query.
    async fn number(&self, query: &str) -> Option<f64> {
        let path = format!("query?query={}", urlencode(query));
        let data = self.api(&path).await;
        data["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// The state (`pending`, `firing`) of each alert named `name`.
    async fn alert(&self, name: &str) -> Vec<String> {
        let data = self.api("alerts").await;
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == name)
            .map(|a| a["state"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

/// A port free now on loopback (Prometheus takes an address, not a listener).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_scrapes_every_part_and_fires_when_the_provider_stops() {
    let mut env = TestEnv::new().await;
    let one = env.spawn_process("alerting-1", &[]).await;
    let two = env.spawn_process("alerting-2", &[]).await;
    let prometheus = Prometheus::start(&[
        ("seckill", vec![one.base_url.clone(), two.base_url.clone()]),
        ("provider", vec![env.provider.url.clone()]),
    ])
    .await;
    let targets = wait_until(Duration::from_secs(60), "every target up", || async {
        let data = prometheus.api("targets").await;
        let active = data["activeTargets"].as_array()?.clone();
        (active.len() == 3 && active.iter().all(|t| t["health"] == "up")).then_some(active)
    })
    .await;
    assert_eq!(targets.len(), 3);

    // A short sale on both instances: 3 units, 6 buyers.
    let product = create_product(&one.base_url, 3, "zk").await;
    for (i, base) in [&one.base_url, &two.base_url]
        .iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        place_order(&http(), base, product, &format!("buyer{i}"))
            .await
            .unwrap();
    }
    let paid = "sum(seckill_orders_total{outcome=\"paid\"})";
    let sold = wait_until(
        Duration::from_secs(30),
        "Prometheus sees the sale",
        || async { prometheus.number(paid).await.filter(|n| *n == 3.0) },
    )
    .await;
    assert_eq!(sold, 3.0);
    let charged = "sum(provider_charges_total{outcome=\"succeeded\"})";
    let charged = wait_until(
        Duration::from_secs(30),
        "and the provider's side",
        || async { prometheus.number(charged).await.filter(|n| *n == 3.0) },
    )
    .await;
    assert_eq!(charged, 3.0);
    assert!(prometheus.alert("PaymentProviderDown").await.is_empty());

    // The provider goes away: the alert pends, then fires.
    env.provider.kill().await;
    let fired = wait_until(
        Duration::from_secs(120),
        "PaymentProviderDown fires",
        || async {
            let states = prometheus.alert("PaymentProviderDown").await;
            states.iter().any(|s| s == "firing").then_some(states)
        },
    )
    .await;
    assert_eq!(fired, ["firing"]);
    // The instances are still scraped: only the provider's target is down.
    let data = prometheus.api("targets").await;
    let down: Vec<&Value> = data["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["health"] != "up")
        .collect();
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0]["labels"]["job"], "provider");
}
