//! The payment provider, as the shop reaches it: over HTTP, at `--payment-url` (in tests and
//! the demo, `seckill-provider`, a separate process with its own ledger; in production, where
//! a real gateway's client would plug in). Requests are Stripe-shaped and idempotent: every
//! charge carries its intent's key, and a retry — after a timeout, a 5xx, a dropped
//! connection — goes out under the same key, so the provider charges at most once.
//!
//! An answer that never came is not a decline: [`Unknown`] says so, and the caller leaves the
//! intent pending for the sweep, which asks again under the same key.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::telemetry::metrics;

/// The payment provider's semaphore (`--payment-concurrency`), under `{root}/semaphores/`.
pub const PAYMENT_SEMAPHORE: &str = "payment";

#[derive(Clone, Debug)]
pub struct Provider {
    http: reqwest::Client,
    /// e.g. `http://127.0.0.1:8090`
    url: String,
    /// How long one request may take before it is retried (under the same key).
    pub timeout: Duration,
}

/// The provider's answer to one charge: when it started and ended there, kept with the
/// payment (a test checks `--payment-concurrency` with them).
#[derive(Clone, Debug, Deserialize, Serialize, utoipa::ToSchema)]
pub struct Charge {
    /// `succeeded` or `declined`.
    status: String,
    /// What the provider charged (its ledger's amount, to check against the order's).
    pub amount_cents: i64,
    pub reference: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

impl Charge {
    pub fn approved(&self) -> bool {
        self.status == "succeeded"
    }
}

/// The provider's answer did not arrive (timeout, connection lost, 5xx until the deadline):
/// the charge may or may not have been made.
#[derive(Debug, thiserror::Error)]
#[error("the payment provider's answer is unknown: {0}")]
pub struct Unknown(String);

impl Provider {
    /// A client for the provider at `url` (`http://` or `https://`: rustls, trusting the
    /// platform's roots, or those of `SSL_CERT_FILE` instead when it is set, as OpenSSL
    /// does), sending `api_key` as a bearer token.
    pub fn new(url: &str, timeout: Duration, api_key: Option<&str>) -> anyhow::Result<Provider> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| anyhow::anyhow!("--payment-url {url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            anyhow::bail!(
                "--payment-url {url:?}: its scheme {:?} cannot be served (http or https)",
                parsed.scheme()
            );
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = api_key {
            let mut bearer = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| anyhow::anyhow!("--payment-api-key cannot be sent in a header"))?;
            // Kept out of debug output and HTTP/2's header compression tables.
            bearer.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, bearer);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .default_headers(headers)
            .build()?;
        Ok(Provider {
            http,
            url: url.trim_end_matches('/').to_string(),
            timeout,
        })
    }

    /// Whether the provider can be reached and takes our key: one lookup of a charge nobody
    /// made, within `limit`. Its answer must be the provider's own 404 (`no_such_charge`):
    /// any 404 would also be a wrong `--payment-url` (another server, a path prefix too
    /// many), which can charge nothing. The error says why not, for the log and `/readyz`.
    pub async fn check(&self, limit: Duration) -> Result<(), String> {
        let response = self
            .http
            .get(format!("{}/v1/charges/seckill-readiness-probe", self.url))
            .timeout(self.timeout.min(limit))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "the payment provider at {} did not answer: {}",
                    self.url,
                    chain(&e)
                )
            })?;
        match response.status().as_u16() {
            200 => Ok(()),
            404 => match response.json::<serde_json::Value>().await {
                Ok(body) if body["error"] == "no_such_charge" => Ok(()),
                _ => Err(format!(
                    "{} answers 404 but not as a payment provider: is --payment-url right?",
                    self.url
                )),
            },
            401 | 403 => Err(format!(
                "the payment provider at {} refused our API key ({}): check --payment-api-key",
                self.url,
                response.status()
            )),
            _ => Err(format!(
                "the payment provider at {} answered {}",
                self.url,
                response.status()
            )),
        }
    }

    /// Charges `amount_cents` under `key`, retrying under the same key until `deadline`.
    pub async fn charge(
        &self,
        key: &str,
        amount_cents: i64,
        deadline: Instant,
    ) -> Result<Charge, Unknown> {
        metrics::payments_in_flight(1.0);
        let answer = self
            .retry(deadline, || {
                self.http
                    .post(format!("{}/v1/charges", self.url))
                    .header("Idempotency-Key", key)
                    .json(&serde_json::json!({ "amount_cents": amount_cents }))
            })
            .await;
        metrics::payments_in_flight(-1.0);
        match answer? {
            Some(charge) => Ok(charge),
            None => Err(Unknown(format!(
                "the provider has no charge under {key} after a POST"
            ))),
        }
    }

    /// The charge made under `key`, if any (`None`: nothing was charged under it).
    pub async fn lookup(&self, key: &str, deadline: Instant) -> Result<Option<Charge>, Unknown> {
        self.retry(deadline, || {
            self.http.get(format!("{}/v1/charges/{key}", self.url))
        })
        .await
    }

    /// Whether the provider takes test controls (`seckill-provider --test-controls`): the
    /// page's money demo changes its faults. A real gateway takes none.
    pub async fn test_controls(&self) -> Result<(), String> {
        self.settings(serde_json::json!({})).await
    }

    /// Test control: every charge under `key` is made and its answer lost, until
    /// [`Provider::answer_again`].
    pub async fn lose_answers(&self, key: &str) -> Result<(), String> {
        self.settings(serde_json::json!({ "lose_answers_of": key }))
            .await
    }

    /// Test control: charges under `key` are answered again.
    pub async fn answer_again(&self, key: &str) -> Result<(), String> {
        self.settings(serde_json::json!({ "answer_again": key }))
            .await
    }

    async fn settings(&self, change: serde_json::Value) -> Result<(), String> {
        let response = self
            .http
            .put(format!("{}/v1/settings", self.url))
            .json(&change)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| format!("the payment provider did not answer: {e}"))?;
        match response.status().as_u16() {
            200 => Ok(()),
            403 => Err("the payment provider takes no test controls (start seckill-provider with --test-controls)".into()),
            status => Err(format!("the payment provider answered {status} to a test control")),
        }
    }

    /// Sends the request until the provider answers with a charge (or says it has none),
    /// while `deadline` allows another try.
    async fn retry(
        &self,
        deadline: Instant,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Option<Charge>, Unknown> {
        let mut pause = Duration::from_millis(50);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Unknown("no answer before the deadline".into()));
            }
            let last = match self.once(request().timeout(self.timeout.min(left))).await {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            tracing::debug!(error = %last, "payment provider did not answer; retrying under the same key");
            if Instant::now() + pause >= deadline {
                return Err(Unknown(last));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    async fn once(&self, request: reqwest::RequestBuilder) -> Result<Option<Charge>, String> {
        let response = request.send().await.map_err(|e| chain(&e))?;
        match response.status().as_u16() {
            200 => response
                .json::<Charge>()
                .await
                .map(Some)
                .map_err(|e| format!("reading the answer: {e}")),
            404 => Ok(None),
            status => Err(format!("answered {status}")),
        }
    }
}

/// An error with its causes: reqwest's own message ("error sending request") hides what went
/// wrong (a refused connection, a certificate nobody trusts).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}
