//! Buyers are who their token says (`--buyer-auth demo`): a token from one instance buys on
//! another; an order is its buyer's alone (anyone else is told it does not exist); the
//! per-customer limit and Idempotency-Keys count the token's buyer, not the body's.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;
use crate::tokens::*;

const DEMO: [&str; 2] = ["--buyer-auth", "demo"];

async fn get(base: &str, path: &str, token: &str) -> Reply {
    send(http().get(format!("{base}{path}")).bearer_auth(token))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_demo_token_from_one_instance_buys_on_another() {
    let env = TestEnv::new().await;
    let (one, two) = (env.spawn_app(&DEMO).await, env.spawn_app(&DEMO).await);
    let product = create_product(&one.base_url, 5, "zk").await;
    let token = sign_in(&one.base_url, "alice").await;
    let session = get(&two.base_url, "/api/session", &token).await;
    assert_eq!(session.body["buyer"], "alice", "{session:?}");
    assert_eq!(session.body["buyer_auth"], "demo");
    let bought = buy_with(&two.base_url, &token, json!({ "product_id": product })).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    assert_eq!(bought.body["user_id"], "alice");
    // Its public key, as any verifier would read it, is the same on both.
    let keys = |base: String| async move {
        send(http().get(format!("{base}/.well-known/jwks.json")))
            .await
            .unwrap()
            .body
    };
    let published = keys(one.base_url.clone()).await;
    assert_eq!(published["keys"][0]["kty"], "OKP");
    assert_eq!(published, keys(two.base_url.clone()).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn another_buyers_order_is_no_order_to_them() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&DEMO).await;
    let base = &app.base_url;
    let product = create_product(base, 5, "zk").await;
    let (alice, bob) = (sign_in(base, "alice").await, sign_in(base, "bob").await);
    let reserved = buy_with(base, &alice, json!({ "product_id": product, "pay": false })).await;
    assert_eq!(reserved.status, StatusCode::CREATED, "{reserved:?}");
    let id = reserved.body["id"].as_str().unwrap().to_string();

    // To bob it is exactly what an order that does not exist is.
    let nobody = uuid::Uuid::new_v4().to_string();
    let absent = get(base, &format!("/orders/{nobody}"), &bob).await;
    let read = get(base, &format!("/orders/{id}"), &bob).await;
    assert_eq!(read.status, StatusCode::NOT_FOUND, "{read:?}");
    assert_eq!(read.code(), absent.code());
    assert_eq!(
        read.raw.replace(&id, "ID"),
        absent.raw.replace(&nobody, "ID")
    );
    let pay = |token: String| {
        let url = format!("{base}/orders/{id}/pay");
        async move { send(http().post(url).bearer_auth(token)).await.unwrap() }
    };
    let paid_by_bob = pay(bob.clone()).await;
    assert_eq!(paid_by_bob.status, StatusCode::NOT_FOUND, "{paid_by_bob:?}");
    assert_eq!(paid_by_bob.code(), "order_not_found");
    assert_eq!(
        env.order_row(&id).await.0,
        "reserved",
        "bob's pay touched alice's order"
    );
    assert_eq!(get(base, "/orders", &bob).await.body["orders"], json!([]));
    // Without a token nobody reads it at all.
    let anonymous = send(http().get(format!("{base}/orders/{id}")))
        .await
        .unwrap();
    assert_eq!(anonymous.code(), "unauthenticated");

    // Alice and the admin see it; alice pays it.
    assert_eq!(
        get(base, &format!("/orders/{id}"), &alice).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(base, &format!("/orders/{id}"), ADMIN_TOKEN)
            .await
            .status,
        StatusCode::OK
    );
    let paid = pay(alice.clone()).await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    assert_eq!(paid.body["status"], "paid");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_lists_their_own_orders_newest_first_a_page_at_a_time() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&DEMO).await;
    let base = &app.base_url;
    let product = create_product_with(base, json!({ "stock": 20, "per_user_limit": 10 })).await;
    let (alice, bob) = (sign_in(base, "alice").await, sign_in(base, "bob").await);
    let mut placed = Vec::new();
    for _ in 0..3 {
        let reply = buy_with(base, &alice, json!({ "product_id": product })).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        placed.push(reply.body["id"].as_str().unwrap().to_string());
    }
    assert_eq!(
        buy_with(base, &bob, json!({ "product_id": product }))
            .await
            .status,
        StatusCode::CREATED
    );
    // Three older ones made in the same microsecond: a page's end between them loses none.
    let mut tied: Vec<String> = sqlx::query_scalar(
        "INSERT INTO orders (id, product_id, user_id, quantity, amount_cents, status, created_at)
         SELECT gen_random_uuid(), $1, 'alice', 1, 1999, 'failed', now() - interval '1 hour'
         FROM generate_series(1, 3) RETURNING id::text",
    )
    .bind(product)
    .fetch_all(&env.db)
    .await
    .unwrap();
    tied.sort();
    let mut listed = Vec::new();
    let mut path = "/orders?limit=2".to_string();
    for _ in 0..4 {
        let page = get(base, &path, &alice).await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        for order in page.body["orders"].as_array().unwrap() {
            assert_eq!(order["user_id"], "alice");
            listed.push(order["id"].as_str().unwrap().to_string());
        }
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/orders?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    placed.reverse();
    // Newest first; among equals, by id, highest first.
    placed.extend(tied.into_iter().rev());
    assert_eq!(listed, placed, "alice's orders, newest first, each once");
    let bad = get(base, "/orders?cursor=nonsense", &alice).await;
    assert_eq!(bad.code(), "invalid_request");
    // Asking for bob's by name is refused, not answered with alice's.
    assert_eq!(
        get(base, "/orders?user_id=bob", &alice).await.code(),
        "not_your_account"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_names_the_buyer_for_the_limit_and_the_keys_not_the_body() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&DEMO).await;
    let base = &app.base_url;
    let product = create_product_with(base, json!({ "stock": 10, "per_user_limit": 1 })).await;
    let (alice, bob) = (sign_in(base, "alice").await, sign_in(base, "bob").await);

    let posing = buy_with(
        base,
        &alice,
        json!({ "product_id": product, "user_id": "bob" }),
    )
    .await;
    assert_eq!(posing.status, StatusCode::FORBIDDEN, "{posing:?}");
    assert_eq!(posing.code(), "not_your_account");
    assert!(!posing.retryable());
    assert_eq!(env.total_orders().await, 0);

    // One each, with the same key: two buyers, two keys, two orders.
    let keyed = |token: String| {
        let url = format!("{base}/orders");
        async move {
            send(
                http()
                    .post(url)
                    .bearer_auth(token)
                    .header("Idempotency-Key", "same-key")
                    .json(&json!({ "product_id": product })),
            )
            .await
            .unwrap()
        }
    };
    let (a, b) = (keyed(alice.clone()).await, keyed(bob.clone()).await);
    assert_eq!(
        (a.status, b.status),
        (StatusCode::CREATED, StatusCode::CREATED),
        "{a:?} {b:?}"
    );
    assert_ne!(a.body["id"], b.body["id"]);
    assert_eq!(
        (a.body["user_id"].as_str(), b.body["user_id"].as_str()),
        (Some("alice"), Some("bob"))
    );
    let again = keyed(alice.clone()).await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.body["id"], a.body["id"]);

    // One per customer: the token's customer, whatever name the body would have typed.
    let second = buy_with(
        base,
        &alice,
        json!({ "product_id": product, "user_id": "alice" }),
    )
    .await;
    assert_eq!(second.code(), "purchase_limit", "{second:?}");
    assert_eq!(env.total_orders().await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_modes_say_what_they_are() {
    let env = TestEnv::new().await;
    // Without a mode the server does not start, and says which there are.
    let mut argv = vec!["seckill".to_string()];
    argv.extend(env.args(&[]));
    let mut config = <seckill::Config as clap::Parser>::try_parse_from(argv).unwrap();
    config.buyers.buyer_auth = None;
    let refused = seckill::Application::build(config)
        .await
        .err()
        .expect("no mode, no server");
    let said = format!("{refused:#}");
    for mode in ["jwks", "demo", "open"] {
        assert!(said.contains(&format!("`{mode}`")), "{said}");
    }

    let open = env.spawn_app(&[]).await;
    let ready = send(http().get(format!("{}/readyz", open.base_url)))
        .await
        .unwrap();
    assert_eq!(ready.body["buyer_auth"], "open", "{ready:?}");
    assert!(ready.body["warning"].as_str().unwrap().contains("anyone"));
    let issued = send(
        http()
            .post(format!("{}/api/session", open.base_url))
            .json(&json!({"name": "alice"})),
    )
    .await
    .unwrap();
    assert_eq!(issued.status, StatusCode::FORBIDDEN, "{issued:?}");
    assert_eq!(issued.code(), "no_demo_issuer");
    let keys = send(http().get(format!("{}/.well-known/jwks.json", open.base_url)))
        .await
        .unwrap();
    assert_eq!(keys.status, StatusCode::NOT_FOUND);

    let demo = env.spawn_app(&DEMO).await;
    for (name, code) in [("", "invalid_request"), ("a\u{7}b", "invalid_request")] {
        let reply = send(
            http()
                .post(format!("{}/api/session", demo.base_url))
                .json(&json!({ "name": name })),
        )
        .await
        .unwrap();
        assert_eq!(reply.code(), code, "{name:?}: {reply:?}");
    }
    let session = send(http().get(format!("{}/api/session", demo.base_url)))
        .await
        .unwrap();
    assert_eq!(
        session.body,
        json!({"buyer_auth": "demo", "buyer": null, "admin": false})
    );
}
