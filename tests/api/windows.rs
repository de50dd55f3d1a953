//! A sale's window: an order before the opening is refused (`not_open`, Retry-After to it),
//! after the closing too (`closed`), and while paused (`paused`); each decided before any
//! row, lock node or key is written. A window changed through one instance holds on another
//! whose copy of the terms is older: the lock cycle decides from the row.

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

async fn product(base: &str, id: i64) -> Value {
    send(http().get(format!("{base}/api/products/{id}")))
        .await
        .unwrap()
        .body
}

/// The answering server's clock, as a product view says it.
async fn server_time(base: &str, id: i64) -> DateTime<Utc> {
    product(base, id).await["server_time"]
        .as_str()
        .expect("server_time")
        .parse()
        .expect("RFC 3339")
}

async fn change_terms(base: &str, id: i64, change: Value) -> Reply {
    send(
        http()
            .put(format!("{base}/api/products/{id}/terms"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&change),
    )
    .await
    .unwrap()
}

async fn admin_post(base: &str, path: &str) -> Reply {
    send(
        http()
            .post(format!("{base}{path}"))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_order_before_the_opening_is_refused_and_once_it_opens_taken() {
    let env = TestEnv::new().await;
    let (one, two) = (env.spawn_app(&[]).await, env.spawn_app(&[]).await);
    let base = &one.base_url;
    let opens = Utc::now() + Duration::hours(1);
    let id = create_product_with(
        base,
        json!({ "stock": 5, "opens_at": rfc3339(opens), "line": false }),
    )
    .await;
    let view = product(base, id).await;
    assert_eq!(view["state"], "upcoming", "{view}");
    assert_eq!(view["line"], false);
    let opens_at: DateTime<Utc> = view["opens_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(opens_at.timestamp_millis(), opens.timestamp_millis());

    let early = order_with_key(base, id, "alice", "early-1").await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{early:?}");
    assert_eq!(early.code(), "not_open");
    assert!(early.retryable());
    let wait: u64 = early.retry_after.as_deref().unwrap().parse().unwrap();
    assert!(
        (3500..=3600).contains(&wait),
        "Retry-After {wait}s to the opening"
    );
    let said: DateTime<Utc> = early.body["opens_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(said.timestamp_millis(), opens.timestamp_millis());
    // Decided before anything was written: no row, no key, no lock node, the stock whole.
    assert_eq!(env.total_orders().await, 0);
    assert!(!env.key_exists("early-1").await);
    let zk = env.zk_client().await;
    assert!(env.lock_queue(&zk, id).await.is_empty());
    assert_eq!(env.stock(id).await, 5);

    // The opening moved a second into the past through the other instance: this one's copy
    // of the terms still says an hour, and reads the row before refusing.
    let now = server_time(&two.base_url, id).await;
    let moved = change_terms(
        &two.base_url,
        id,
        json!({ "opens_at": rfc3339(now - Duration::seconds(1)) }),
    )
    .await;
    assert_eq!(moved.status, StatusCode::OK, "{moved:?}");
    assert_eq!(moved.body["state"], "open");
    let bought = place_order(&http(), base, id, "alice").await.unwrap();
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    assert_eq!(product(base, id).await["state"], "open");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closing_or_a_pause_through_one_instance_holds_on_another() {
    let env = TestEnv::new().await;
    let (one, two) = (env.spawn_app(&[]).await, env.spawn_app(&[]).await);
    let base = &one.base_url;
    let closes = Utc::now() + Duration::hours(1);
    let id = create_product_with(
        base,
        json!({ "stock": 10, "per_user_limit": 10, "closes_at": rfc3339(closes) }),
    )
    .await;
    assert_eq!(
        product(base, id).await["line"],
        false,
        "no opening, no line"
    );
    // Instance one keeps the terms: open, closing in an hour.
    let first = place_order(&http(), base, id, "alice").await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");

    // Paused through two: one's copy says open, its lock cycle reads the row.
    let paused = admin_post(&two.base_url, &format!("/api/products/{id}/pause")).await;
    assert_eq!(paused.status, StatusCode::OK, "{paused:?}");
    assert_eq!(
        (paused.body["paused"].clone(), paused.body["state"].clone()),
        (json!(true), json!("paused"))
    );
    let refused = place_order(&http(), base, id, "alice").await.unwrap();
    assert_eq!(refused.status, StatusCode::CONFLICT, "{refused:?}");
    assert_eq!(refused.code(), "paused");
    assert!(refused.retryable());
    assert_eq!(product(base, id).await["state"], "paused");
    let resumed = admin_post(&two.base_url, &format!("/api/products/{id}/resume")).await;
    assert_eq!(resumed.body["state"], "open", "{resumed:?}");
    let again = place_order(&http(), base, id, "alice").await.unwrap();
    assert_eq!(again.status, StatusCode::CREATED, "{again:?}");

    // Closed a second ago through two: one still thinks an hour is left.
    let now = server_time(&two.base_url, id).await;
    let closing = change_terms(
        &two.base_url,
        id,
        json!({ "opens_at": rfc3339(now - Duration::seconds(10)), "closes_at": rfc3339(now - Duration::seconds(1)) }),
    )
    .await;
    assert_eq!(closing.body["state"], "closed", "{closing:?}");
    let late = place_order(&http(), base, id, "alice").await.unwrap();
    assert_eq!(late.status, StatusCode::CONFLICT, "{late:?}");
    assert_eq!(late.code(), "closed");
    assert!(!late.retryable());
    assert_eq!(
        env.stock(id).await,
        8,
        "two sold, nothing after the pause or the closing"
    );
    assert_eq!(audit(base, id).await["consistent"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_window_is_the_admins_and_its_closing_comes_after_its_opening() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    let now = Utc::now();
    let create = |body: Value| {
        let url = format!("{base}/api/products");
        async move {
            let mut full = json!({ "name": "x", "price_cents": 1, "stock": 1 });
            full.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            send(http().post(url).bearer_auth(ADMIN_TOKEN).json(&full))
                .await
                .unwrap()
        }
    };
    let backwards = create(
        json!({ "opens_at": rfc3339(now), "closes_at": rfc3339(now - Duration::seconds(1)) }),
    )
    .await;
    assert_eq!(
        (backwards.status, backwards.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable")
    );
    let garbled = create(json!({ "opens_at": "tomorrow at noon" })).await;
    assert_eq!(garbled.code(), "invalid_request", "{garbled:?}");
    let id = create_product(base, 1, "zk").await;
    let anonymous = send(http().post(format!("{base}/api/products/{id}/pause")))
        .await
        .unwrap();
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{anonymous:?}");
    let unknown = admin_post(base, "/api/products/999999/pause").await;
    assert_eq!(unknown.code(), "unknown_product");
    let backwards = change_terms(base, id, json!({ "opens_at": rfc3339(now + Duration::hours(2)), "closes_at": rfc3339(now + Duration::hours(1)) })).await;
    assert_eq!(backwards.code(), "unprocessable", "{backwards:?}");
    assert_eq!(
        product(base, id).await["terms_version"],
        1,
        "nothing changed"
    );
    assert_eq!(env.total_orders().await, 0);
}
