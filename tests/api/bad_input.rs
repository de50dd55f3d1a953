//! Every client error: the right status and code, and no change to stock or orders.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::*;

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    auth: Option<&'static str>,
    idempotency_key: Option<&'static str>,
    body: String,
    status: StatusCode,
    code: &'static str,
}

fn case(
    name: &'static str,
    method: Method,
    path: impl Into<String>,
    body: impl Into<String>,
) -> Case {
    Case {
        name,
        method,
        path: path.into(),
        content_type: Some("application/json"),
        auth: None,
        idempotency_key: None,
        body: body.into(),
        status: StatusCode::BAD_REQUEST,
        code: "invalid_request",
    }
}

impl Case {
    fn expect(mut self, status: StatusCode, code: &'static str) -> Case {
        (self.status, self.code) = (status, code);
        self
    }
    fn content_type(mut self, ct: Option<&'static str>) -> Case {
        self.content_type = ct;
        self
    }
    fn key(mut self, key: &'static str) -> Case {
        self.idempotency_key = Some(key);
        self
    }
    fn auth(mut self, token: &'static str) -> Case {
        self.auth = Some(token);
        self
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_a_json_error_and_change_nothing() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let reply = send(
        http()
            .post(format!("{}/api/products", app.base_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({
                "name": "capped", "price_cents": 500, "stock": 5, "max_per_order": 2
            })),
    )
    .await
    .unwrap();
    let product = reply.body["id"].as_i64().unwrap();
    // Near the lifetime limit, so one more restock of 10^8 would pass it.
    sqlx::query("UPDATE products SET stocked_total = 950000000 WHERE id = $1")
        .bind(product)
        .execute(&env.db)
        .await
        .unwrap();
    let order = |fields: serde_json::Value| {
        let mut body = json!({ "product_id": product, "user_id": "mallory", "quantity": 1 });
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        body.to_string()
    };
    let post = Method::POST;
    let get = Method::GET;
    let cases = vec![
        case("no content type", post.clone(), "/orders", order(json!({})))
            .content_type(None)
            .expect(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        case("text body", post.clone(), "/orders", order(json!({})))
            .content_type(Some("text/plain"))
            .expect(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        case("broken JSON", post.clone(), "/orders", "{\"product_id\": "),
        case("not an object", post.clone(), "/orders", "[1, 2]"),
        // serde would build the struct from its fields in order; a body is an object.
        case(
            "fields as an array",
            post.clone(),
            "/orders",
            format!("[{product}, \"mallory\", 1, true]"),
        ),
        case(
            "terms as an array",
            Method::PUT,
            format!("/api/products/{product}/terms"),
            "[null, null]",
        )
        .auth(ADMIN_TOKEN),
        case(
            "terms out of bounds",
            Method::PUT,
            format!("/api/products/{product}/terms"),
            json!({ "max_per_order": 0 }).to_string(),
        )
        .auth(ADMIN_TOKEN),
        case(
            "missing user",
            post.clone(),
            "/orders",
            json!({ "product_id": product }).to_string(),
        ),
        case(
            "product id as string",
            post.clone(),
            "/orders",
            order(json!({ "product_id": "one" })),
        ),
        case(
            "fractional quantity",
            post.clone(),
            "/orders",
            order(json!({ "quantity": 1.5 })),
        ),
        case(
            "unknown field",
            post.clone(),
            "/orders",
            order(json!({ "price_cents": 1 })),
        ),
        case(
            "zero quantity",
            post.clone(),
            "/orders",
            order(json!({ "quantity": 0 })),
        ),
        // 2.0 is the integer 2 (as JSON Schema counts it); 1.5 is no integer at all.
        case(
            "fractional quantity",
            post.clone(),
            "/orders",
            order(json!({ "quantity": 1.5 })),
        ),
        case(
            "negative quantity",
            post.clone(),
            "/orders",
            order(json!({ "quantity": -1 })),
        ),
        // Well-formed, but against the product's terms: 422, not 400.
        case(
            "over max_per_order",
            post.clone(),
            "/orders",
            order(json!({ "quantity": 3 })),
        )
        .expect(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
        case(
            "empty user",
            post.clone(),
            "/orders",
            order(json!({ "user_id": "" })),
        ),
        case(
            "user over 64 chars",
            post.clone(),
            "/orders",
            order(json!({ "user_id": "u".repeat(65) })),
        ),
        // Found by the property test: a NUL must be refused before the key is stored.
        case(
            "NUL in user_id, with an Idempotency-Key",
            post.clone(),
            "/orders",
            order(json!({ "user_id": "\u{0}" })),
        )
        .key("k-nul"),
        case(
            "Idempotency-Key with a space",
            post.clone(),
            "/orders",
            order(json!({})),
        )
        .key("has space"),
        case(
            "unknown product",
            post.clone(),
            "/orders",
            order(json!({ "product_id": 999_999 })),
        )
        .expect(StatusCode::NOT_FOUND, "unknown_product"),
        case(
            "body over 16 KiB",
            post.clone(),
            "/orders",
            order(json!({ "user_id": "x".repeat(17 * 1024) })),
        )
        .expect(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        case(
            "big body on an admin route",
            post.clone(),
            "/api/products",
            "x".repeat(20 * 1024),
        )
        .expect(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        case("malformed order id", get.clone(), "/orders/not-a-uuid", ""),
        case(
            "unknown order",
            get.clone(),
            format!("/orders/{}", uuid::Uuid::new_v4()),
            "",
        )
        .expect(StatusCode::NOT_FOUND, "order_not_found"),
        case("malformed product id", get.clone(), "/api/products/abc", ""),
        case(
            "unknown product page",
            get.clone(),
            "/api/products/424242",
            "",
        )
        .expect(StatusCode::NOT_FOUND, "unknown_product"),
        case(
            "unknown audit",
            get.clone(),
            "/api/products/424242/audit",
            "",
        )
        .expect(StatusCode::NOT_FOUND, "unknown_product"),
        case("no such route", get.clone(), "/api/nothing-here", "")
            .expect(StatusCode::NOT_FOUND, "not_found"),
        case("wrong method", Method::DELETE, "/orders", "")
            .expect(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        case(
            "admin without token",
            post.clone(),
            "/api/products",
            json!({"name": "x", "price_cents": 1, "stock": 1}).to_string(),
        )
        .expect(StatusCode::UNAUTHORIZED, "unauthorized"),
        case(
            "admin with wrong token",
            post.clone(),
            "/api/products",
            json!({"name": "x", "price_cents": 1, "stock": 1}).to_string(),
        )
        .auth("not-the-token")
        .expect(StatusCode::UNAUTHORIZED, "unauthorized"),
        case(
            "negative stock",
            post.clone(),
            "/api/products",
            json!({"name": "x", "price_cents": 1, "stock": -1}).to_string(),
        )
        .auth(ADMIN_TOKEN),
        case(
            "unknown guard",
            post.clone(),
            "/api/products",
            json!({"name": "x", "price_cents": 1, "stock": 1, "guard": "redis"}).to_string(),
        )
        .auth(ADMIN_TOKEN),
        case(
            "unsafe guard not allowed",
            post.clone(),
            "/api/products",
            json!({"name": "x", "price_cents": 1, "stock": 1, "guard": "none"}).to_string(),
        )
        .auth(ADMIN_TOKEN)
        .expect(StatusCode::FORBIDDEN, "demo_disabled"),
        // Found in review: both used to reach PostgreSQL and answer 500.
        case(
            "control character in a product name",
            post.clone(),
            "/api/products",
            json!({"name": "a\u{0}b", "price_cents": 1, "stock": 1}).to_string(),
        )
        .auth(ADMIN_TOKEN),
        case(
            "restock past the lifetime stock limit",
            post.clone(),
            format!("/api/products/{product}/restock"),
            json!({ "quantity": 100_000_000 }).to_string(),
        )
        .auth(ADMIN_TOKEN)
        .expect(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
        case(
            "restock of nothing",
            post.clone(),
            format!("/api/products/{product}/restock"),
            json!({ "quantity": 0 }).to_string(),
        )
        .auth(ADMIN_TOKEN),
        // Every answer is JSON, also where axum or the static files answer for us.
        case(
            "invalid UTF-8 in a product id",
            get.clone(),
            "/api/products/%FF",
            "",
        ),
        case(
            "invalid UTF-8 in an order id",
            get.clone(),
            "/orders/%C3%28",
            "",
        ),
        case(
            "invalid UTF-8 in an order to pay",
            post.clone(),
            "/orders/%FF/pay",
            "",
        ),
        case(
            "invalid UTF-8 on an admin route",
            post.clone(),
            "/api/products/%FF/restock",
            json!({ "quantity": 1 }).to_string(),
        )
        .auth(ADMIN_TOKEN),
        case(
            "restock of an unknown product",
            post.clone(),
            "/api/products/424242/restock",
            json!({ "quantity": 1 }).to_string(),
        )
        .auth(ADMIN_TOKEN)
        .expect(StatusCode::NOT_FOUND, "unknown_product"),
        case(
            "restock without a body",
            post.clone(),
            format!("/api/products/{product}/restock"),
            "",
        )
        .auth(ADMIN_TOKEN),
        case(
            "demo with an unknown mode",
            post.clone(),
            format!("/api/products/{product}/demo"),
            json!({ "mode": "meteor" }).to_string(),
        )
        .auth(ADMIN_TOKEN),
        case(
            "wrong method on an admin route",
            Method::DELETE,
            format!("/api/products/{product}/restock"),
            "",
        )
        .auth(ADMIN_TOKEN)
        .expect(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        case("POST to a static file", post.clone(), "/index.html", "")
            .expect(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        case(
            "PUT to an unknown static path",
            Method::PUT,
            "/nothing.css",
            "",
        )
        .expect(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        case("unknown static file", get.clone(), "/nothing.css", "")
            .expect(StatusCode::NOT_FOUND, "not_found"),
        case(
            "a path out of the static folder",
            get.clone(),
            "/..%2fCargo.toml",
            "",
        )
        .expect(StatusCode::NOT_FOUND, "not_found"),
    ];

    let client = http();
    for c in cases {
        let mut request = client
            .request(c.method.clone(), format!("{}{}", app.base_url, c.path))
            .body(c.body.clone());
        if let Some(ct) = c.content_type {
            request = request.header("content-type", ct);
        }
        if let Some(token) = c.auth {
            request = request.bearer_auth(token);
        }
        if let Some(key) = c.idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let reply = send(request).await.unwrap();
        assert_eq!(reply.status, c.status, "{}: {reply:?}", c.name);
        assert_eq!(reply.code(), c.code, "{}: {reply:?}", c.name);
        assert!(
            reply.body["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{}: {reply:?}",
            c.name
        );
        assert_eq!(env.stock(product).await, 5, "{}: stock changed", c.name);
        let terms: i32 = sqlx::query_scalar("SELECT terms_version FROM products WHERE id = $1")
            .bind(product)
            .fetch_one(&env.db)
            .await
            .unwrap();
        assert_eq!(terms, 1, "{}: the terms changed", c.name);
        assert_eq!(
            env.total_orders().await,
            0,
            "{}: an order was created",
            c.name
        );
        let products: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM products")
            .fetch_one(&env.db)
            .await
            .unwrap();
        assert_eq!(products, 1, "{}: a product was created", c.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_endpoints_are_off_without_a_token() {
    let env = TestEnv::new().await;
    let app = env.spawn_app_exactly(&[]).await;
    let base = &app.base_url;
    let reply = send(
        http()
            .post(format!("{base}/api/products"))
            .bearer_auth("anything")
            .json(&json!({
                "name": "x", "price_cents": 1, "stock": 1
            })),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{reply:?}");
    assert_eq!(reply.code(), "admin_disabled");
}
