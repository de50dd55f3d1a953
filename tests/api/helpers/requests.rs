//! Typed requests to an instance: products, orders, the views tests read.

use super::*;

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
