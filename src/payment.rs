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

use crate::config::PaymentProtocol;
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
    pub fn new(
        url: &str,
        timeout: Duration,
        api_key: Option<&str>,
        protocol: PaymentProtocol,
    ) -> anyhow::Result<Provider> {
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
            .default_headers(headers);
        let http = match protocol {
            // Over https, ALPN offers both and the provider picks; over http, HTTP/1.1.
            PaymentProtocol::Auto => http,
            PaymentProtocol::Http1 => http.http1_only(),
            // One connection carries every charge in flight (a connection per charge costs
            // the instance its buffers under a crowd); a dead connection is noticed by its
            // pings, not by a charge's timeout.
            PaymentProtocol::Http2 => http
                .http2_prior_knowledge()
                .http2_keep_alive_interval(Duration::from_secs(5))
                .http2_keep_alive_timeout(timeout)
                .http2_keep_alive_while_idle(true),
        }
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
                // The provider's final word (a refused key, a request it will never take):
                // asking again under the same key cannot change it.
                Err(Failed::Final(e)) => return Err(Unknown(e)),
                Err(Failed::Again(e)) => e,
            };
            tracing::debug!(error = %last, "payment provider did not answer; retrying under the same key");
            if Instant::now() + pause >= deadline {
                return Err(Unknown(last));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// One request. `Ok(None)` only on the provider's own answer that it has no charge under
    /// the key (`no_such_charge`): any other 404 (a wrong `--payment-url`, a proxy's page)
    /// says nothing about what was charged.
    async fn once(&self, request: reqwest::RequestBuilder) -> Result<Option<Charge>, Failed> {
        let response = request.send().await.map_err(|e| Failed::Again(chain(&e)))?;
        let status = response.status().as_u16();
        if status == 200 {
            return response
                .json::<Charge>()
                .await
                .map(Some)
                .map_err(|e| Failed::Again(format!("reading the answer: {e}")));
        }
        let problem = response.json::<serde_json::Value>().await.ok();
        let code = problem.as_ref().and_then(|p| p["error"].as_str());
        if status == 404 && code == Some("no_such_charge") {
            return Ok(None);
        }
        let said = format!(
            "answered {status} {}",
            code.unwrap_or("(not a problem answer)")
        );
        let retryable = problem.as_ref().and_then(|p| p["retryable"].as_bool());
        Err(match retryable {
            Some(true) => Failed::Again(said),
            Some(false) => Failed::Final(said),
            // Not the provider's own answer: a refusal of the request itself (a 4xx other
            // than a timeout or a rate limit) will not change; anything else may.
            None if (400..500).contains(&status) && !matches!(status, 408 | 429) => {
                Failed::Final(said)
            }
            None => Failed::Again(said),
        })
    }
}

/// Why one request got no charge back.
#[derive(Debug)]
enum Failed {
    /// Worth asking again under the same key (no answer, a 5xx, a retryable problem).
    Again(String),
    /// The provider's final answer to this request (`retryable: false`).
    Final(String),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A server on 127.0.0.1 that answers every request with `status` and `body`, counting
    /// them: the provider's client talks to it over HTTP as it would to a gateway.
    async fn answering(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let app = axum::Router::new().fallback(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    [("content-type", "application/problem+json")],
                    body,
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, asked)
    }

    fn client(url: &str) -> Provider {
        Provider::new(
            url,
            Duration::from_millis(500),
            Some("key"),
            PaymentProtocol::Auto,
        )
        .unwrap()
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(2)
    }

    #[tokio::test]
    async fn only_the_providers_own_no_such_charge_means_nothing_was_charged() {
        let (url, _) = answering(404, r#"{"error":"no_such_charge","retryable":false}"#).await;
        assert!(client(&url).lookup("k", soon()).await.unwrap().is_none());
        // A 404 from anything else (a wrong --payment-url, a proxy's page) says nothing.
        let (url, _) = answering(404, "<html>Not Found</html>").await;
        assert!(client(&url).lookup("k", soon()).await.is_err());
        let (url, _) = answering(404, r#"{"error":"no_route"}"#).await;
        assert!(client(&url).lookup("k", soon()).await.is_err());
    }

    #[tokio::test]
    async fn a_final_answer_is_not_asked_again_and_a_retryable_one_is() {
        let (url, asked) = answering(400, r#"{"error":"invalid_request","retryable":false}"#).await;
        assert!(client(&url).charge("k", 100, soon()).await.is_err());
        assert_eq!(asked.load(Ordering::SeqCst), 1, "a final answer is final");
        // Not the provider's own answer: a refusal of the request (401) is final too.
        let (url, asked) = answering(401, "unauthorized").await;
        assert!(client(&url).lookup("k", soon()).await.is_err());
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        let (url, asked) =
            answering(503, r#"{"error":"provider_unavailable","retryable":true}"#).await;
        assert!(client(&url).charge("k", 100, soon()).await.is_err());
        assert!(
            asked.load(Ordering::SeqCst) >= 2,
            "a retryable answer is asked again under the same key"
        );
    }
}
