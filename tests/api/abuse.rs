//! Abuse: rejections that cost PostgreSQL no write, a cap on unpaid reservations, and caps on
//! connections, event streams and a client's rate that keep an instance answering. (Stray
//! ZooKeeper nodes are `strays`.)

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

/// Rows in the tables a request could write: orders and Idempotency-Keys.
async fn rows(env: &TestEnv) -> (i64, i64) {
    sqlx::query_as("SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM idempotency_keys)")
        .fetch_one(&env.db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_orders_write_no_row_and_a_refused_keys_replay_is_decided_again() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--max-waiters-per-product", "1"]).await;
    let sold_out = create_product(&app.base_url, 1, "zk").await;
    let limited = create_product(&app.base_url, 10, "zk").await;
    let busy = create_product(&app.base_url, 10, "zk").await;
    for (product, user) in [(sold_out, "winner"), (limited, "hog")] {
        let bought = order_with_key(&app.base_url, product, user, &format!("{user}-first")).await;
        assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    }
    wait_until(Duration::from_secs(10), "the sold-out flag", || async {
        let p = send(http().get(format!("{}/api/products/{sold_out}", app.base_url)))
            .await
            .ok()?;
        (p.body["sold_out"] == true).then_some(())
    })
    .await;
    // The busy product's one place is taken: an order holds its lock cycle.
    let mut hold = app.holds.hold_next(busy);
    let holder = spawn_order(&app.base_url, busy, "holder");
    hold.reached().await;

    let before = rows(&env).await;
    let mut flood = Vec::new();
    for i in 0..10 {
        let key = format!("flood-{i}");
        flood.push((
            order_with_key(&app.base_url, sold_out, &format!("late-{i}"), &key).await,
            "sold_out",
        ));
        flood.push((
            order_with_key(&app.base_url, limited, "hog", &format!("{key}-hog")).await,
            "purchase_limit",
        ));
        flood.push((
            order_with_key(&app.base_url, 999_999, "nobody", &format!("{key}-none")).await,
            "unknown_product",
        ));
        flood.push((
            order_with_key(
                &app.base_url,
                busy,
                &format!("crowd-{i}"),
                &format!("{key}-busy"),
            )
            .await,
            "too_busy",
        ));
        flood.push((
            place_order(&http(), &app.base_url, limited, "hog")
                .await
                .unwrap(),
            "purchase_limit",
        ));
    }
    for (reply, code) in &flood {
        assert_eq!(reply.code(), *code, "{reply:?}");
    }
    // No rejection wrote a row: not an order, not a key. A refusal decided before any work
    // (sold out, over the limit, an unknown product) keeps nothing, keyed or not; nor does a
    // too-busy answer (try again).
    assert_eq!(rows(&env).await, before, "{} rejections", flood.len());
    // So a refused key's replay is decided again: after a restock it buys (its first attempt
    // sold nothing, so this is still one order for the key).
    let restocked = send(
        http()
            .post(format!("{}/api/products/{sold_out}/restock", app.base_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "quantity": 5 })),
    )
    .await
    .unwrap();
    assert_eq!(restocked.status, StatusCode::OK, "{restocked:?}");
    let replay = order_with_key(&app.base_url, sold_out, "late-0", "flood-0").await;
    assert_eq!(
        (replay.status, replay.replayed),
        (StatusCode::CREATED, false),
        "{replay:?}"
    );
    let again = order_with_key(&app.base_url, sold_out, "late-0", "flood-0").await;
    assert_eq!(
        (again.status, again.replayed, again.body["id"].clone()),
        (StatusCode::CREATED, true, replay.body["id"].clone()),
        "from now on the key answers with its order: {again:?}"
    );

    hold.release();
    assert_eq!(holder.await.unwrap().unwrap().status, StatusCode::CREATED);
    // A known key still answers as it first did, not as a check would now.
    let replay = order_with_key(&app.base_url, sold_out, "winner", "winner-first").await;
    assert_eq!(
        (replay.status, replay.replayed),
        (StatusCode::CREATED, true),
        "{replay:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unpaid_reservations_stop_at_their_share_of_the_stock() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--max-unpaid-share", "0.5"]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let mut answers = Vec::new();
    for i in 0..8 {
        let reply = reserve(&app.base_url, product, &format!("hoarder-{i}")).await;
        answers.push((reply.status, reply.code().to_string()));
    }
    let reserved = answers
        .iter()
        .filter(|a| a.0 == StatusCode::CREATED)
        .count();
    let refused = answers.iter().filter(|a| a.1 == "too_many_unpaid").count();
    assert_eq!((reserved, refused), (5, 3), "{answers:?}");
    // Paying buyers are not held up by the hoard.
    let paid = place_order(&http(), &app.base_url, product, "payer")
        .await
        .unwrap();
    assert_eq!(paid.status, StatusCode::CREATED, "{paid:?}");
    assert_eq!(env.total_orders().await, 6, "refusals wrote no rows");
    assert_eq!(env.stock(product).await, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn more_event_streams_than_the_cap_leave_the_instance_answering() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--max-event-streams", "5"]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let client = http();
    let mut open = Vec::new();
    let mut refused = Vec::new();
    // Two streams from each of four addresses: within each client's share (half the
    // instance's), so the instance's own cap is what refuses.
    for i in 0..8 {
        let from: std::net::IpAddr = format!("127.0.0.{}", 10 + i / 2).parse().unwrap();
        let response = reqwest::Client::builder()
            .local_address(from)
            .build()
            .unwrap()
            .get(format!("{}/api/events", app.base_url))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            open.push(response); // held open: its stream goes on
        } else {
            refused.push(response);
        }
    }
    assert_eq!((open.len(), refused.len()), (5, 3));
    for response in refused {
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key("retry-after"));
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"], "overloaded", "{body}");
    }
    let health = send(http().get(format!("{}/healthz", app.base_url)))
        .await
        .unwrap();
    assert_eq!(health.status, StatusCode::OK);
    let sold = place_order(&http(), &app.base_url, product, "streamer")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");

    drop(open);
    wait_until(
        Duration::from_secs(10),
        "a stream slot to come back",
        || async {
            let response = client
                .get(format!("{}/api/events", app.base_url))
                .send()
                .await
                .ok()?;
            (response.status() == StatusCode::OK).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_stream_ends_after_its_lifetime() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--event-stream-max-s", "1"]).await;
    let response = http()
        .get(format!("{}/api/events", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The body ends (the server closed the stream) instead of running for ever.
    let body = tokio::time::timeout(Duration::from_secs(30), response.bytes()).await;
    assert!(matches!(body, Ok(Ok(_))), "{body:?}");
}

/// Reads what the server sends until it closes the connection (bounded).
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the server kept the connection open");
    String::from_utf8_lossy(&received).into_owned()
}

fn addr(base_url: &str) -> String {
    base_url.trim_start_matches("http://").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_beyond_the_cap_get_503_and_are_closed() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--max-connections", "3"]).await;
    // One connection from each of three addresses (one client may hold half the instance's,
    // here 1): the instance's cap is full, and a fourth client is refused.
    let connect_from = |from: String| {
        let to = addr(&app.base_url);
        async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
            socket.connect(to.parse().unwrap()).await.unwrap()
        }
    };
    let mut idle = Vec::new();
    for i in 0..3 {
        idle.push(connect_from(format!("127.0.0.{}", 20 + i)).await);
    }
    let mut extra = connect_from("127.0.0.23".to_string()).await;
    let answer = read_until_closed(&mut extra).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("retry-after: 1") && answer.contains("\"overloaded\""),
        "{answer}"
    );
    drop(idle);
    wait_until(
        Duration::from_secs(10),
        "a connection slot to come back",
        || async {
            let health = send(http().get(format!("{}/healthz", app.base_url)))
                .await
                .ok()?;
            (health.status == StatusCode::OK).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_slow_to_send_headers_or_idle_after_a_request_is_disconnected() {
    use tokio::io::AsyncWriteExt;
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--header-read-timeout-ms", "300"]).await;
    // Slowloris: half a request, then nothing.
    let mut slow = tokio::net::TcpStream::connect(addr(&app.base_url))
        .await
        .unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut slow).await;
    assert!(!answer.contains("200 OK"), "{answer}");
    // Keep-alive: one request answered, then the idle connection is closed.
    let mut idle = tokio::net::TcpStream::connect(addr(&app.base_url))
        .await
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn orders_beyond_a_clients_rate_answer_429_and_write_nothing() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--orders-per-client-per-s",
            "1",
            "--orders-burst-per-client",
            "2",
        ])
        .await;
    let product = create_product(&app.base_url, 50, "zk").await;
    let started = std::time::Instant::now();
    let orders = (0..20).map(|i| {
        let base = app.base_url.clone();
        async move {
            place_order(&http(), &base, product, &format!("bot-{i}"))
                .await
                .unwrap()
        }
    });
    let replies = futures::future::join_all(orders).await;
    let elapsed = started.elapsed();
    let sold = replies
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .count();
    let limited: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.code() == "rate_limited")
        .collect();
    assert_eq!(sold + limited.len(), 20, "{replies:?}");
    // Two at once, then one a second, however slowly the machine went.
    assert!(
        sold as u64 <= 2 + elapsed.as_secs() + 1,
        "{sold} sold in {elapsed:?}"
    );
    assert!(!limited.is_empty(), "{replies:?}");
    for reply in &limited {
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(reply
            .retry_after
            .as_deref()
            .is_some_and(|s| s.parse::<u64>().unwrap() >= 1));
    }
    assert_eq!(
        env.total_orders().await,
        sold as i64,
        "rate-limited orders wrote no rows"
    );
}
