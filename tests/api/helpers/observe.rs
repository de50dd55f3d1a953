//! Reading what happened: metrics, the test database, and bounded waits for a condition.

use super::*;

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
