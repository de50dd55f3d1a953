//! A product's line: one place per buyer; who joined before the opening are shuffled at it,
//! who join after queue behind them in order; the line lets in and gives passes; a pass buys
//! once, and a missing, forged, expired, another buyer's or another product's pass never; an
//! instance's restart loses no place; sold out ends the wait.

use chrono::{Duration, SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn in_an_hour() -> String {
    (Utc::now() + Duration::hours(1)).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A line product opening in an hour.
async fn upcoming(base: &str, stock: i64) -> i64 {
    create_product_with(base, json!({ "stock": stock, "opens_at": in_an_hour() })).await
}

/// A line product on sale now, its line drawn (at the first tick: nobody came before), so
/// who join get places in order.
async fn open_line(base: &str, stock: i64) -> i64 {
    let id = create_product_with(base, json!({ "stock": stock, "line": true })).await;
    wait_until(std::time::Duration::from_secs(30), "the draw", || async {
        (summary(base, id).await["drawn"] == true).then_some(())
    })
    .await;
    id
}

async fn join(base: &str, id: i64, buyer: &str) -> Reply {
    send(
        http()
            .post(format!("{base}/api/products/{id}/line"))
            .json(&json!({ "user_id": buyer })),
    )
    .await
    .unwrap()
}

async fn look(base: &str, id: i64, buyer: &str) -> Reply {
    send(http().get(format!("{base}/api/products/{id}/line/me?user_id={buyer}")))
        .await
        .unwrap()
}

async fn summary(base: &str, id: i64) -> Value {
    send(http().get(format!("{base}/api/products/{id}/line")))
        .await
        .unwrap()
        .body
}

/// Opens the sale now, through the admin's terms change.
async fn open_now(base: &str, id: i64) {
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
    let reply = send(
        http()
            .put(format!("{base}/api/products/{id}/terms"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "opens_at": now })),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

/// Waits until the buyer's look says `state`; returns that look.
async fn until_state(base: &str, id: i64, buyer: &str, state: &str) -> Value {
    wait_until(std::time::Duration::from_secs(30), state, || async {
        let reply = look(base, id, buyer).await;
        (reply.body["state"] == state).then_some(reply.body)
    })
    .await
}

async fn buy(base: &str, id: i64, buyer: &str, pass: Option<&str>) -> Reply {
    let mut body = json!({ "product_id": id, "user_id": buyer });
    if let Some(pass) = pass {
        body["pass"] = json!(pass);
    }
    send(http().post(format!("{base}/orders")).json(&body))
        .await
        .unwrap()
}

/// Spearman's rank correlation of two rankings of the same n items (no ties).
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

#[tokio::test(flavor = "multi_thread")]
async fn joining_again_keeps_the_one_place_and_before_the_opening_nobody_has_one() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    let id = upcoming(base, 5).await;
    let first = join(base, id, "alice").await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert_eq!(first.body["state"], "waiting");
    assert_eq!(first.body["place"], Value::Null);
    let again = join(base, id, "alice").await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(again.body["joined_at"], first.body["joined_at"]);
    let me = look(base, id, "alice").await;
    assert_eq!(me.body["state"], "waiting", "{me:?}");
    // Told to come back at the opening, an hour away (at most the longest look).
    let retry: u64 = me.retry_after.as_deref().unwrap().parse().unwrap();
    assert_eq!(retry, 30, "{me:?}");
    assert_eq!(summary(base, id).await["joined"], 1);
    assert_eq!(look(base, id, "bob").await.code(), "not_in_line");
    // Before the opening, no pass helps: not open.
    assert_eq!(buy(base, id, "alice", None).await.code(), "not_open");
    // A product without a line has none to join.
    let plain = create_product(base, 5, "zk").await;
    assert_eq!(join(base, plain, "alice").await.code(), "no_line");
    assert_eq!(join(base, 999_999, "alice").await.code(), "unknown_product");
    assert_eq!(env.total_orders().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_opening_shuffles_who_came_before_and_who_come_after_queue_in_order() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    let id = upcoming(base, 1000).await;
    let early: Vec<String> = (0..200).map(|i| format!("early-{i:03}")).collect();
    for buyer in &early {
        assert_eq!(join(base, id, buyer).await.status, StatusCode::CREATED);
    }
    open_now(base, id).await;
    wait_until(std::time::Duration::from_secs(30), "the draw", || async {
        (summary(base, id).await["drawn"] == true).then_some(())
    })
    .await;
    let mut places = Vec::new();
    for buyer in &early {
        let me = look(base, id, buyer).await;
        places.push(
            me.body["place"]
                .as_i64()
                .unwrap_or_else(|| panic!("{me:?}")),
        );
    }
    let mut sorted = places.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        (1..=200).collect::<Vec<i64>>(),
        "each a place of its own"
    );
    // Joining order says nothing of the place: |ρ| < 0.4 fails by chance once in ~10⁸.
    let order: Vec<f64> = (1..=200).map(f64::from).collect();
    let drawn: Vec<f64> = places.iter().map(|&p| p as f64).collect();
    let rho = spearman(&order, &drawn);
    assert!(
        rho.abs() < 0.4,
        "rank correlation {rho} between joining and place"
    );
    // After the draw: first come, first served, behind everyone drawn.
    for (i, buyer) in ["late-a", "late-b", "late-c"].iter().enumerate() {
        let joined = join(base, id, buyer).await;
        assert_eq!(joined.body["place"], 201 + i as i64, "{joined:?}");
    }
    let line = summary(base, id).await;
    assert_eq!(
        (line["joined"].clone(), line["drawn_places"].clone()),
        (json!(203), json!(200))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pass_buys_once_and_no_bad_pass_buys_at_all() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    let (id, other) = (open_line(base, 10).await, open_line(base, 10).await);
    for (product, buyer) in [(id, "alice"), (id, "bob"), (other, "alice")] {
        assert_eq!(join(base, product, buyer).await.status, StatusCode::CREATED);
    }
    let alice = until_state(base, id, "alice", "admitted").await;
    let bob = until_state(base, id, "bob", "admitted").await;
    let elsewhere = until_state(base, other, "alice", "admitted").await;
    let pass = alice["pass"].as_str().unwrap();
    assert!(alice["pass_expires_at"].is_string());

    let refused = |reply: Reply, status: StatusCode, code: &str| {
        assert_eq!((reply.status, reply.code()), (status, code), "{reply:?}");
        assert!(!reply.retryable());
    };
    refused(
        buy(base, id, "alice", None).await,
        StatusCode::FORBIDDEN,
        "not_admitted",
    );
    let forged = format!("{}x", &pass[..pass.len() - 1]);
    refused(
        buy(base, id, "alice", Some(&forged)).await,
        StatusCode::FORBIDDEN,
        "invalid_pass",
    );
    refused(
        buy(base, id, "alice", bob["pass"].as_str()).await,
        StatusCode::FORBIDDEN,
        "invalid_pass",
    );
    refused(
        buy(base, id, "alice", elsewhere["pass"].as_str()).await,
        StatusCode::FORBIDDEN,
        "invalid_pass",
    );
    // Expired: signed with the deployment's own key, its validity over a second ago.
    let secret: Vec<u8> = sqlx::query_scalar("SELECT secret FROM line_key")
        .fetch_one(&env.db)
        .await
        .unwrap();
    let place = alice["place"].as_i64().unwrap();
    let stale = seckill::line::Key::new(&secret).sign(&seckill::line::Pass {
        product_id: id,
        buyer: "alice".into(),
        place,
        expires: Utc::now().timestamp() - 1,
    });
    let expired = buy(base, id, "alice", Some(&stale)).await;
    refused(expired, StatusCode::FORBIDDEN, "invalid_pass");
    assert_eq!(env.total_orders().await, 0, "no bad pass wrote a row");
    assert_eq!(env.stock(id).await, 10);

    let bought = buy(base, id, "alice", Some(pass)).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    assert_eq!(look(base, id, "alice").await.body["state"], "bought");
    refused(
        buy(base, id, "alice", Some(pass)).await,
        StatusCode::CONFLICT,
        "pass_used",
    );
    assert_eq!(env.total_orders().await, 1);
    assert_eq!(env.stock(id).await, 9);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_of_an_instance_mid_line_loses_no_place() {
    let env = TestEnv::new().await;
    let mut one = env.spawn_process("one", &[]).await;
    let two = env.spawn_process("two", &[]).await;
    let id = upcoming(&one.base_url, 100).await;
    let buyers: Vec<String> = (0..20).map(|i| format!("buyer-{i}")).collect();
    for buyer in &buyers {
        assert_eq!(
            join(&one.base_url, id, buyer).await.status,
            StatusCode::CREATED
        );
    }
    open_now(&one.base_url, id).await;
    wait_until(std::time::Duration::from_secs(30), "the draw", || async {
        (summary(&one.base_url, id).await["drawn"] == true).then_some(())
    })
    .await;
    let mut before = Vec::new();
    for buyer in &buyers {
        before.push(look(&one.base_url, id, buyer).await.body["place"].clone());
    }
    one.child.kill().await.expect("kill instance one");
    let restarted = env.spawn_process("one-again", &[]).await;
    for (buyer, place) in buyers.iter().zip(&before) {
        for base in [&two.base_url, &restarted.base_url] {
            assert_eq!(&look(base, id, buyer).await.body["place"], place, "{buyer}");
        }
    }
    // The line goes on from where it was, through either instance.
    let admitted = until_state(&two.base_url, id, "buyer-7", "admitted").await;
    let bought = buy(
        &restarted.base_url,
        id,
        "buyer-7",
        admitted["pass"].as_str(),
    )
    .await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    assert_eq!(
        join(&restarted.base_url, id, "buyer-3").await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sold_out_ends_the_wait_of_everyone_not_let_in() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = &app.base_url;
    // Two units: the line never has more passes in hands than units left, so two are let in.
    let id = open_line(base, 2).await;
    // The first two join, are let in and look (their passes are in hands: they hold the
    // window), then the crowd behind them.
    for i in 0..2 {
        assert_eq!(
            join(base, id, &format!("b{i}")).await.status,
            StatusCode::CREATED
        );
    }
    let first = until_state(base, id, "b0", "admitted").await;
    let second = until_state(base, id, "b1", "admitted").await;
    assert_eq!(
        (first["place"].clone(), second["place"].clone()),
        (json!(1), json!(2))
    );
    for i in 2..50 {
        assert_eq!(
            join(base, id, &format!("b{i}")).await.status,
            StatusCode::CREATED
        );
    }
    let last = look(base, id, "b49").await;
    assert_eq!(last.body["state"], "in_line", "{last:?}");
    assert!(last.body["ahead"].as_i64().unwrap() > 40, "{last:?}");
    let bought = buy(base, id, "b0", first["pass"].as_str()).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    // A refused order gives its pass back: over b1's limit of one unit, then one unit.
    let pass = second["pass"].as_str();
    let body = json!({ "product_id": id, "user_id": "b1", "quantity": 2, "pass": pass });
    let over = send(http().post(format!("{base}/orders")).json(&body))
        .await
        .unwrap();
    assert_eq!(over.code(), "purchase_limit", "{over:?}");
    assert_eq!(look(base, id, "b1").await.body["state"], "admitted");
    let bought = buy(base, id, "b1", pass).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    // Sold out: everyone still in line is told so at their next look, and nobody joins.
    let told = until_state(base, id, "b49", "sold_out").await;
    assert_eq!(told["pass"], Value::Null);
    assert_eq!(join(base, id, "newcomer").await.code(), "sold_out");
    // Let in: the two the stock could serve, and at most a few more while an order was in
    // flight (its pass spent, its units not yet taken) or a place was let in but not looked
    // at for 2 s.
    let admitted = summary(base, id).await["admitted"].as_i64().unwrap();
    assert!((2..10).contains(&admitted), "{admitted} let in for 2 units");
    assert_eq!(audit(base, id).await["consistent"], true);
}
