//! Property test of `POST /orders` over arbitrary bodies and headers: never a 5xx, every
//! error has a string `error` code, and the stock moves by exactly what the 201s reserved.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

use crate::helpers::*;

fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-3i64..12).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,80}".prop_map(Value::from),
        Just(json!([1, 2])),
        Just(json!({ "nested": true })),
    ]
}

/// Mostly order-shaped JSON with wrong, missing or extra fields; sometimes plain garbage.
fn body(product: i64) -> impl Strategy<Value = String> {
    let field = |good: Value| prop_oneof![3 => Just(Some(good)), 1 => json_value().prop_map(Some), 1 => Just(None)];
    let order = (
        field(json!(product)),
        field(json!("fuzzer")),
        field(json!(1)),
        prop::option::of(any::<bool>()),
        prop::option::of(("[a-z_]{1,12}", json_value())),
    )
        .prop_map(|(product_id, user_id, quantity, pay, extra)| {
            let mut body = serde_json::Map::new();
            for (name, value) in [
                ("product_id", product_id),
                ("user_id", user_id),
                ("quantity", quantity),
            ] {
                if let Some(v) = value {
                    body.insert(name.into(), v);
                }
            }
            if let Some(pay) = pay {
                body.insert("pay".into(), pay.into());
            }
            if let Some((name, value)) = extra {
                body.insert(name, value);
            }
            Value::Object(body).to_string()
        });
    prop_oneof![4 => order, 1 => ".{0,200}"]
}

fn content_type() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        6 => Just(Some("application/json")),
        1 => Just(Some("application/json; charset=utf-8")),
        1 => Just(Some("text/plain")),
        1 => Just(None),
    ]
}

fn idempotency_key() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        3 => Just(None),
        2 => "[!-~]{1,16}".prop_map(|k| Some(k.into_bytes())),
        1 => prop::collection::vec(32u8..127, 0..140).prop_map(Some),
    ]
}

#[test]
fn arbitrary_order_requests_never_fail_the_server_or_leak_stock() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (env, app, product) = rt.block_on(async {
        let env = TestEnv::new().await;
        let app = env.spawn_app(&[]).await;
        let product = create_product_with(
            &app.base_url,
            json!({ "stock": 1_000_000, "per_user_limit": 1_000_000, "reservation_ttl_s": 3600 }),
        )
        .await;
        (env, app, product)
    });
    let client = http();
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (body(product), content_type(), idempotency_key());
    let sold = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&strategy, |(body, content_type, key)| {
            rt.block_on(async {
                let before = env.stock(product).await;
                let mut request = client
                    .post(format!("{}/orders", app.base_url))
                    .body(body.clone());
                if let Some(ct) = content_type {
                    request = request.header("content-type", ct);
                }
                if let Some(key) = &key {
                    if let Ok(value) = reqwest::header::HeaderValue::from_bytes(key) {
                        request = request.header("idempotency-key", value);
                    }
                }
                let reply = send(request)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
                prop_assert!(reply.status.as_u16() < 500, "{body} -> {reply:?}");
                let reserved = if reply.status.as_u16() == 201 {
                    sold.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    reply.body["quantity"].as_i64().unwrap_or(0)
                } else {
                    prop_assert!(reply.body["error"].is_string(), "{body} -> {reply:?}");
                    0
                };
                let after = env.stock(product).await;
                // A replayed 201 reserved nothing new.
                let expected = if reply.replayed { 0 } else { reserved };
                prop_assert_eq!(
                    i64::from(before - after),
                    expected,
                    "{} -> {:?}",
                    body,
                    reply
                );
                Ok(())
            })
        })
        .unwrap();
    let sold = sold.into_inner();
    assert!(
        sold > 0,
        "no generated request was a valid order: the stock property was never exercised"
    );
    eprintln!("fuzz: {sold} of 96 generated requests were valid orders");
}
