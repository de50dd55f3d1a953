//! Buyers signed in by a real issuer (`--buyer-auth jwks`): tokens checked against a JWKS the
//! test serves over HTTP. Every bad token is refused 401 `invalid_token` and changes nothing;
//! a rotated key is taken after a refresh and the withdrawn one refused; forged `kid`s make
//! no fetch storm.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::tokens::*;

async fn jwks_app(env: &TestEnv, jwks: &JwksServer, min_refresh_ms: &str) -> TestApp {
    env.spawn_app(&[
        "--buyer-auth",
        "jwks",
        "--buyer-jwks-url",
        &jwks.url,
        "--buyer-issuer",
        ISSUER,
        "--buyer-audience",
        AUDIENCE,
        "--buyer-jwks-min-refresh-ms",
        min_refresh_ms,
    ])
    .await
}

/// An order sent with `authorization` as its header (none: no header), and an
/// Idempotency-Key, which a refused order must not leave behind.
async fn order_as(base: &str, authorization: Option<&str>, product: i64) -> Reply {
    let mut request = http()
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", format!("key-{}", uuid::Uuid::new_v4()))
        .json(&json!({ "product_id": product }));
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    send(request).await.unwrap()
}

fn b64(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_token_is_refused_and_changes_nothing() {
    let env = TestEnv::new().await;
    let (rsa, ec) = (TestKey::rsa("r1"), TestKey::es256("e1"));
    let jwks = JwksServer::start(&[&rsa, &ec]).await;
    // No refresh for a minute: every unknown `kid` below is answered from the keys read
    // at start-up, whatever their number.
    let app = jwks_app(&env, &jwks, "60000").await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let fence = env.fence(product).await;
    let fetched = jwks.fetches();
    assert_eq!(fetched, 1, "the keys are read once at start-up");

    let missing = order_as(&app.base_url, None, product).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED, "{missing:?}");
    assert_eq!(missing.code(), "unauthenticated");
    assert!(!missing.retryable());
    let challenge = http()
        .post(format!("{}/orders", app.base_url))
        .json(&json!({"product_id": product}));
    let challenge = challenge.send().await.unwrap();
    let www = challenge.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(www.starts_with("Bearer"), "{www}");

    let good = claims("alice");
    let with = |field: &str, value: Value| {
        let mut c = good.clone();
        c[field] = value;
        c
    };
    let valid = rsa.sign(&good);
    let (head, rest) = valid.split_once('.').unwrap();
    let signature = rest.rsplit_once('.').unwrap().1;
    let tampered = format!("{head}.{}.{signature}", b64(&with("sub", json!("mallory"))));
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT", "kid": "r1"})),
        b64(&good)
    );
    // The key-confusion attack: HS256 "signed" with the RSA public key everyone can read.
    let mut hs = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    hs.kid = Some("r1".into());
    let confused = jsonwebtoken::encode(
        &hs,
        &good,
        &jsonwebtoken::EncodingKey::from_secret(rsa.public_pem.as_ref().unwrap()),
    )
    .unwrap();
    let huge = rsa.sign(&with("padding", json!("x".repeat(9000))));
    let bad: Vec<(&str, String)> = vec![
        ("expired", rsa.sign(&with("exp", json!(now() - 300)))),
        ("not yet valid", rsa.sign(&with("nbf", json!(now() + 600)))),
        ("bad signature", tampered),
        (
            "wrong issuer",
            rsa.sign(&with("iss", json!("https://evil.test"))),
        ),
        (
            "wrong audience",
            rsa.sign(&with("aud", json!("another-api"))),
        ),
        (
            "no sub",
            rsa.sign(&json!({"iss": ISSUER, "aud": AUDIENCE, "exp": now() + 600})),
        ),
        ("alg none", none),
        ("HS256 with the public key", confused),
        ("an ES256 token naming the RSA key", ec.sign_as("r1", &good)),
        ("unknown kid", rsa.sign_as("r9", &good)),
        ("over the size bound", huge),
        ("not a JWT", "not.a.jwt".to_string()),
    ];
    for (what, token) in &bad {
        let reply = order_as(&app.base_url, Some(&format!("Bearer {token}")), product).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{what}: {reply:?}");
        assert_eq!(reply.code(), "invalid_token", "{what}: {reply:?}");
        assert!(!reply.retryable(), "{what}");
    }
    for header in [
        "Basic YWxpY2U6cHc=",
        "Bearer",
        "Bearer ",
        "bearer abc",
        "Bearerabc",
    ] {
        let reply = order_as(&app.base_url, Some(header), product).await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{header:?}: {reply:?}"
        );
        assert_eq!(reply.code(), "invalid_token", "{header:?}");
    }
    // Forged kids by the dozen, at once: no fetch storm (none at all within the bound).
    let storm = (0..30).map(|i| {
        let (base, token) = (
            app.base_url.clone(),
            rsa.sign_as(&format!("forged-{i}"), &good),
        );
        tokio::spawn(
            async move { order_as(&base, Some(&format!("Bearer {token}")), product).await },
        )
    });
    for reply in futures::future::join_all(storm).await {
        assert_eq!(reply.unwrap().code(), "invalid_token");
    }
    assert_eq!(
        jwks.fetches(),
        fetched,
        "forged kids fetched the keys again"
    );

    // Nothing of any refused order exists: no row, no key, no lock node, no stock taken.
    assert_eq!(env.total_orders().await, 0);
    assert_eq!(
        count(&env, "SELECT COUNT(*) FROM idempotency_keys").await,
        0
    );
    assert!(env
        .lock_queue(&env.zk_client().await, product)
        .await
        .is_empty());
    assert_eq!(
        env.fence(product).await,
        fence,
        "a refused order took the lock"
    );
    assert_eq!(env.stock(product).await, 5);

    // The same issuer's good tokens buy, with either key, as their `sub` (the scheme's name
    // in any case).
    for (key, buyer, scheme) in [(&rsa, "alice", "Bearer"), (&ec, "bob", "bearer")] {
        let reply = order_as(
            &app.base_url,
            Some(&format!("{scheme} {}", key.sign(&claims(buyer)))),
            product,
        )
        .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        assert_eq!(reply.body["user_id"], buyer);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_key_is_taken_after_a_refresh_and_the_withdrawn_one_refused() {
    let env = TestEnv::new().await;
    let (old, new) = (TestKey::rsa("2026-old"), TestKey::ed25519("2026-new"));
    let jwks = JwksServer::start(&[&old]).await;
    let app = jwks_app(&env, &jwks, "200").await;
    let product =
        create_product_with(&app.base_url, json!({ "stock": 10, "per_user_limit": 10 })).await;
    let before = old.sign(&claims("alice"));
    let bought = order_as(&app.base_url, Some(&format!("Bearer {before}")), product).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");

    jwks.publish(&[&new]);
    let after = new.sign(&claims("alice"));
    // The first sight of the new kid fetches the keys again (at most every 200 ms).
    let reply = wait_until(
        Duration::from_secs(20),
        "the new key to be taken",
        || async {
            let reply = order_as(&app.base_url, Some(&format!("Bearer {after}")), product).await;
            if reply.status != StatusCode::CREATED {
                assert_eq!(reply.code(), "invalid_token", "{reply:?}");
            }
            (reply.status == StatusCode::CREATED).then_some(reply)
        },
    )
    .await;
    assert_eq!(reply.body["user_id"], "alice");
    // The very token that bought before (remembered as verified) names a withdrawn key now.
    let withdrawn = order_as(&app.base_url, Some(&format!("Bearer {before}")), product).await;
    assert_eq!(withdrawn.status, StatusCode::UNAUTHORIZED, "{withdrawn:?}");
    assert_eq!(withdrawn.code(), "invalid_token");
    // A kid the issuer never published is refused after its refresh too.
    let fetched = jwks.fetches();
    let never = wait_until(
        Duration::from_secs(20),
        "a refresh for an unknown kid",
        || async {
            let reply = order_as(
                &app.base_url,
                Some(&format!(
                    "Bearer {}",
                    new.sign_as("never", &claims("alice"))
                )),
                product,
            )
            .await;
            (jwks.fetches() > fetched).then_some(reply)
        },
    )
    .await;
    assert_eq!(never.code(), "invalid_token", "{never:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_issuer_that_cannot_be_reached_is_passing_trouble_not_a_bad_token() {
    let env = TestEnv::new().await;
    // An issuer whose keys answer 500, for as long as the test runs.
    let down = axum::Router::new().route(
        "/keys",
        axum::routing::get(|| async { axum::http::StatusCode::INTERNAL_SERVER_ERROR }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/keys", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, down).await });
    let app = env
        .spawn_app(&[
            "--buyer-auth",
            "jwks",
            "--buyer-jwks-url",
            &url,
            "--buyer-jwks-min-refresh-ms",
            "100",
        ])
        .await;
    let ready = send(http().get(format!("{}/readyz", app.base_url)))
        .await
        .unwrap();
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
    assert_eq!(ready.body["buyer_keys"], "unavailable");
    assert_eq!(ready.body["buyer_auth"], "jwks");
    let product = create_product(&app.base_url, 5, "zk").await;
    let token = TestKey::es256("k").sign(&claims("alice"));
    let reply = order_as(&app.base_url, Some(&format!("Bearer {token}")), product).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert_eq!(reply.code(), "unavailable");
    assert!(reply.retryable());
    assert_eq!(env.total_orders().await, 0);
}
