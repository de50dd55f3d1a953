//! Access: one client cannot take what every client needs (connections, event streams, its
//! rate budget), a trusted proxy's clients are told apart, public views of ZooKeeper cost
//! one read per refresh however many ask, and the instance cleans up after itself (a worker
//! that panics, its lock nodes at shutdown).

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::*;

fn addr(base_url: &str) -> SocketAddr {
    base_url.trim_start_matches("http://").parse().unwrap()
}

/// A connection from `from` (any 127.x address: a client of its own to the server).
async fn connect_from(from: &str, base_url: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr(base_url)).await.unwrap()
}

/// Reads until the server closes the connection (bounded): what it sent.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the server kept the connection open");
    String::from_utf8_lossy(&received).into_owned()
}

/// Opens an event stream on `stream` and returns its status line once the headers are in.
async fn open_stream(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the stream's headers");
    let head = String::from_utf8_lossy(&head).into_owned();
    head.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_flooding_connections_and_streams_leaves_room_for_everyone_else() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--max-connections",
            "40",
            "--max-connections-per-client",
            "10",
            "--max-event-streams",
            "20",
            "--max-event-streams-per-client",
            "4",
            // Idle sockets must stay open for the whole test, however slow the machine.
            "--header-read-timeout-ms",
            "600000",
        ])
        .await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let flooder = "127.0.0.3";

    // Event streams: four, then a fifth refused, and its connection closed, not kept alive.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = connect_from(flooder, &app.base_url).await;
        assert_eq!(open_stream(&mut stream).await, "HTTP/1.1 200 OK");
        held.push(stream);
    }
    let mut refused = connect_from(flooder, &app.base_url).await;
    refused
        .write_all(b"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut refused).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("\"overloaded\""), "{answer}");
    assert!(
        answer.to_lowercase().contains("connection: close"),
        "{answer}"
    );

    // Sockets up to the client's cap, each known to be held once the server answers on it
    // (the refused stream's slot comes back just after its close: a socket refused for
    // that is simply opened again).
    let mut refusals = 0;
    while held.len() < 10 {
        let mut socket = connect_from(flooder, &app.base_url).await;
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut status = [0u8; 12];
        socket.read_exact(&mut status).await.unwrap();
        if &status == b"HTTP/1.1 200" {
            held.push(socket);
        } else {
            refusals += 1;
            assert!(refusals < 50, "the flooder never got its tenth socket");
        }
    }
    // Every further one refused and closed.
    for _ in 0..5 {
        let mut extra = connect_from(flooder, &app.base_url).await;
        let answer = read_until_closed(&mut extra).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("\"overloaded\""), "{answer}");
    }

    // Another client is served at once, while the flooder holds everything it may.
    let other = async {
        let health = send(http().get(format!("{}/healthz", app.base_url)))
            .await
            .unwrap();
        assert_eq!(health.status, StatusCode::OK);
        let events = http()
            .get(format!("{}/api/events", app.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(events.status(), StatusCode::OK);
        drop(events);
        place_order(&http(), &app.base_url, product, "another-client")
            .await
            .unwrap()
    };
    let sold = tokio::time::timeout(Duration::from_secs(5), other)
        .await
        .expect("the other client was served within 5 s");
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    drop(held);
}

/// A client that sends through the proxy at 127.0.0.2 (or, untrusted, from 127.0.0.1),
/// naming `client` in X-Forwarded-For.
fn via(proxy: &str, client: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-forwarded-for", client.parse().unwrap());
    reqwest::Client::builder()
        .local_address(proxy.parse::<std::net::IpAddr>().unwrap())
        .default_headers(headers)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_trusted_proxy_each_client_is_counted_apart_and_nobody_else_can_claim_to_be_one() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--trusted-proxy",
            "127.0.0.2/32",
            "--max-event-streams-per-client",
            "1",
            "--orders-per-client-per-s",
            "1",
            "--orders-burst-per-client",
            "1",
        ])
        .await;
    let product = create_product(&app.base_url, 50, "zk").await;
    let events = format!("{}/api/events", app.base_url);
    let stream = |client: reqwest::Client| {
        let events = events.clone();
        async move { client.get(events).send().await.unwrap() }
    };

    // Through the proxy, one stream per client: two clients, two streams.
    let (proxy, untrusted) = ("127.0.0.2", "127.0.0.1");
    let alice = stream(via(proxy, "198.51.100.1")).await;
    let bob = stream(via(proxy, "198.51.100.2")).await;
    assert_eq!(
        (alice.status(), bob.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let alice_again = stream(via(proxy, "198.51.100.1")).await;
    assert_eq!(alice_again.status(), StatusCode::SERVICE_UNAVAILABLE);

    // From a peer we do not trust, the header is the client's own word: ignored. Both
    // requests are the peer's, whatever they name.
    let direct = stream(via(untrusted, "198.51.100.3")).await;
    assert_eq!(direct.status(), StatusCode::OK);
    let posing = stream(via(untrusted, "198.51.100.4")).await;
    assert_eq!(posing.status(), StatusCode::SERVICE_UNAVAILABLE);

    // The rate limit keys on the same client: alice spends her budget, bob still has his.
    let mut limited = None;
    for i in 0..10 {
        let reply = place_order(
            &via(proxy, "198.51.100.1"),
            &app.base_url,
            product,
            &format!("alice-{i}"),
        )
        .await
        .unwrap();
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(reply);
            break;
        }
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    }
    let limited = limited.expect("alice was limited");
    assert_eq!(limited.code(), "rate_limited");
    let bob_buys = place_order(&via(proxy, "198.51.100.2"), &app.base_url, product, "bob")
        .await
        .unwrap();
    assert_eq!(bob_buys.status, StatusCode::CREATED, "{bob_buys:?}");
    drop((alice, bob, direct));
}

#[tokio::test]
async fn a_crowd_reading_the_public_views_costs_zookeeper_one_read_per_view() {
    let env = TestEnv::new().await;
    // A process of its own: metrics are process-wide. One refresh for the whole test.
    let server = env
        .spawn_process(
            "views",
            &["--view-refresh-ms", "600000", "--payment-concurrency", "2"],
        )
        .await;
    let base = &server.base_url;
    let product = create_product(base, 5, "zk").await;
    let paths = [
        format!("/api/products/{product}/lock"),
        format!("/api/products/{product}/terms-lock"),
        "/api/payments/semaphore".to_string(),
        "/readyz".to_string(),
    ];
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let before = scrape(base).await;
    let asks = (0..800).map(|i| {
        let (client, url) = (client.clone(), format!("{base}{}", paths[i % paths.len()]));
        async move { client.get(url).send().await.unwrap().status() }
    });
    let answers = futures::future::join_all(asks).await;
    assert!(
        answers.iter().all(|s| *s == StatusCode::OK),
        "{:?}",
        answers
            .iter()
            .filter(|s| **s != StatusCode::OK)
            .collect::<Vec<_>>()
    );
    let metrics = scrape(base).await;
    // /readyz asks ZooKeeper nothing (it reads the session's state): no `exists` probe, the
    // one operation nothing else here sends.
    let exists = "seckill_zk_operations_total{op=\"exists\"}";
    assert_eq!(
        metrics.get(exists).copied().unwrap_or(0.0),
        before.get(exists).copied().unwrap_or(0.0),
        "200 readiness probes"
    );
    for view in ["lock", "terms_lock", "semaphore"] {
        let series = format!("seckill_view_refreshes_total{{view=\"{view}\"}}");
        assert_eq!(
            metrics.get(&series).copied(),
            Some(1.0),
            "{view}: 200 asks, one ZooKeeper read"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_cycle_worker_that_panics_is_started_again() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let mut hold = app.holds.panic_next(product);
    let doomed = spawn_order(&app.base_url, product, "doomed");
    hold.reached().await;
    hold.release();
    let doomed = doomed.await.unwrap().unwrap();
    assert!(doomed.status.is_server_error(), "{doomed:?}");
    // The product's queue on this instance has a worker again: the next order sells.
    let next = place_order(&http(), &app.base_url, product, "next")
        .await
        .unwrap();
    assert_eq!(next.status, StatusCode::CREATED, "{next:?}");
    assert_eq!(
        env.stock(product).await,
        4,
        "the panicked cycle sold nothing"
    );
    let metrics = send(http().get(format!("{}/metrics", app.base_url)))
        .await
        .unwrap();
    let text = metrics.body.as_str().unwrap_or_default().to_string();
    assert!(
        text.contains("seckill_worker_restarts_total{worker=\"combiner\"}"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_deletes_its_own_lock_nodes_without_waiting_for_its_session_to_end() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--instance", "leaving"]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let watcher = env.zk_client().await;
    let mut hold = app.holds.hold_next(product);
    let holder = spawn_order(&app.base_url, product, "holder");
    hold.reached().await;
    let queue = env.lock_queue(&watcher, product).await;
    assert!(
        queue.iter().any(|(_, owner)| owner == "leaving"),
        "{queue:?}"
    );

    // What shutdown does before closing the session: our nodes go, the session stays.
    let deleted = app.zk.delete_own_nodes().await.unwrap();
    assert!(deleted >= 1, "{deleted}");
    let queue = env.lock_queue(&watcher, product).await;
    assert!(
        !queue.iter().any(|(_, owner)| owner == "leaving"),
        "{queue:?}"
    );
    assert!(app.zk.connected(), "the session is still open");
    hold.release();
    let _ = holder.await.unwrap();
}
