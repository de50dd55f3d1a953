//! Running it like production: `GET /metrics` counts what happened, and a request's id
//! follows its order through the logs.
//!
//! Metrics are process-wide, so these tests scrape a `seckill` process of their own.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// The value of one series, with its labels in the order the exporter writes them.
fn value(metrics: &HashMap<String, f64>, series: &str) -> f64 {
    metrics.get(series).copied().unwrap_or(0.0)
}

/// Sum of every series of `name` whose labels contain `label` (e.g. `op="create"`).
fn sum(metrics: &HashMap<String, f64>, name: &str, label: &str) -> f64 {
    metrics
        .iter()
        .filter(|(series, _)| series.starts_with(&format!("{name}{{")) && series.contains(label))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test]
async fn metrics_count_orders_by_guard_and_outcome_and_the_work_behind_them() {
    let env = TestEnv::new().await;
    let server = env
        .spawn_process("metrics", &["--expiry-interval-ms", "100"])
        .await;
    let base = &server.base_url;
    let zk = create_per_request_product(base, 3, "zk").await;
    let pg = create_product_with(
        base,
        json!({ "stock": 5, "guard": "pg-atomic", "reservation_ttl_s": 1 }),
    )
    .await;
    let before = scrape(base).await;
    let creates_before = sum(&before, "seckill_zk_operations_total", r#"op="create""#);

    let client = http();
    let mut statuses = Vec::new();
    // One after another: three sales, then two buyers the sold-out flag turns away.
    for i in 0..5 {
        let reply = place_order(&client, base, zk, &format!("buyer-{i}"))
            .await
            .unwrap();
        statuses.push(reply.status.as_u16());
    }
    assert_eq!(statuses, [201, 201, 201, 409, 409]);
    assert_eq!(
        reserve(base, pg, "holder").await.status,
        StatusCode::CREATED
    );
    let unknown = place_order(&client, base, 999_999, "nobody").await.unwrap();
    assert_eq!(unknown.code(), "unknown_product");

    // The reservation expires after 1 s; the sweep returns it, and counts it.
    let after = wait_until(
        Duration::from_secs(30),
        "the sweep to expire it",
        || async {
            let m = scrape(base).await;
            (value(&m, r#"seckill_sweep_actions_total{action="expired"}"#) == 1.0).then_some(m)
        },
    )
    .await;
    let orders = |guard: &str, outcome: &str| {
        value(
            &after,
            &format!(r#"seckill_orders_total{{guard="{guard}",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(orders("zk", "paid"), 3.0);
    assert_eq!(orders("zk", "sold_out"), 2.0);
    assert_eq!(orders("pg-atomic", "reserved"), 1.0);
    assert_eq!(orders("unknown", "unknown_product"), 1.0);
    let http_count = |status: u16| {
        value(
            &after,
            &format!(
                r#"seckill_http_request_duration_seconds_count{{method="POST",route="/orders",status="{status}"}}"#
            ),
        )
    };
    assert_eq!(
        (http_count(201), http_count(409), http_count(404)),
        (4.0, 2.0, 1.0)
    );

    // Every order a lock cycle decided has a row; every grant was released.
    let decided_in_cycles = value(&after, r#"seckill_lock_cycle_orders_sum{guard="zk"}"#);
    let rows = env.order_counts(zk).await.values().sum::<i64>() as f64;
    assert_eq!(decided_in_cycles, rows);
    assert!(rows >= 3.0, "three sales were decided under the lock");
    let granted = value(&after, r#"seckill_lock_wait_seconds_count{recipe="fair"}"#);
    assert_eq!(
        granted,
        value(&after, r#"seckill_lock_cycle_orders_count{guard="zk"}"#)
    );
    assert_eq!(
        granted,
        value(&after, r#"seckill_lock_hold_seconds_count{recipe="fair"}"#)
    );
    // One lock node per grant, at least (and the product's directory, the sold-out flag).
    let creates = sum(&after, "seckill_zk_operations_total", r#"op="create""#) - creates_before;
    assert!(creates >= granted, "{creates} creates for {granted} grants");
    assert!(
        sum(
            &after,
            "seckill_zk_operations_total",
            r#"op="get_children""#
        ) > 0.0
    );
    assert_eq!(
        value(&after, r#"seckill_zk_session_state{state="SyncConnected"}"#),
        1.0
    );
    let pool = |state: &str| {
        value(
            &after,
            &format!(r#"seckill_db_pool_connections{{state="{state}"}}"#),
        )
    };
    assert!(
        pool("idle") + pool("in_use") >= 1.0,
        "the pool holds connections"
    );
    assert!(pool("idle") + pool("in_use") <= pool("max"));
}

/// Log lines as the server wrote them (JSON, one per line), once `found` holds for them.
async fn wait_for_lines(path: &std::path::Path, what: &str, found: impl Fn(&[Value]) -> bool) {
    wait_until(Duration::from_secs(20), what, || async {
        let text = tokio::fs::read_to_string(path).await.ok()?;
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        found(&lines).then_some(())
    })
    .await
}

/// A `seckill` process of the test's own writing JSON log lines at `rust_log` to a file.
async fn logging_json(
    env: &TestEnv,
    instance: &str,
    rust_log: &str,
) -> (ServerProcess, std::path::PathBuf) {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("seckill-{}.log", uuid::Uuid::new_v4().simple()));
    let file = std::fs::File::create(&log).unwrap();
    let server = env
        .spawn_process_logging(
            instance,
            &["--log-format", "json"],
            rust_log,
            Stdio::from(file),
        )
        .await;
    (server, log)
}

/// Whether the line is inside a span with `field` = `value`.
fn in_span(line: &Value, field: &str, value: &Value) -> bool {
    line["spans"]
        .as_array()
        .is_some_and(|spans| spans.iter().any(|s| &s[field] == value))
}

#[tokio::test]
async fn a_request_id_follows_its_order_from_http_to_zookeeper_and_postgres() {
    let env = TestEnv::new().await;
    let (server, log) = logging_json(&env, "traced", "info,seckill=debug,sqlx=debug").await;
    let base = &server.base_url;
    let alone = create_per_request_product(base, 5, "zk").await;
    let batched = create_product(base, 5, "zk").await;

    for (product, request_id) in [(alone, "trace-alone-1"), (batched, "trace-batched-1")] {
        let response = http()
            .post(format!("{base}/orders"))
            .header("x-request-id", request_id)
            .json(&json!({ "product_id": product, "user_id": "tracer" }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["x-request-id"], request_id, "echoed");
        let order: Value = response.json().await.unwrap();
        let (order_id, fence) = (order["id"].clone(), order["fence"].clone());
        let id = json!(request_id);
        // The order's line: the request's id, its order and fencing token.
        wait_for_lines(&log, "the order's line", |lines| {
            lines.iter().any(|l| {
                l["message"] == "order answered"
                    && in_span(l, "request_id", &id)
                    && l["order_id"] == order_id
                    && l["fence"] == fence
            })
        })
        .await;
        if product == alone {
            // The lock and the transaction ran in the request's own span.
            wait_for_lines(
                &log,
                "ZooKeeper and Postgres lines of the request",
                |lines| {
                    let mine = |l: &&Value| in_span(l, "request_id", &id);
                    let granted = lines
                        .iter()
                        .filter(mine)
                        .any(|l| l["message"] == "lock granted" && l["fence"] == fence);
                    let sql = lines
                        .iter()
                        .filter(mine)
                        .any(|l| l["target"] == "sqlx::query");
                    let committed = lines
                        .iter()
                        .filter(mine)
                        .any(|l| l["message"] == "stock written and committed");
                    granted && sql && committed
                },
            )
            .await;
        } else {
            // A cycle serves many requests: the order names it by its fence, and the cycle's
            // ZooKeeper lines carry that fence; its transaction, shared with the cycles of
            // other products, names the cycle by its fence, and its Postgres lines carry the
            // transaction's number.
            wait_for_lines(&log, "the batched order's cycle", |lines| {
                let served = lines.iter().any(|l| {
                    l["message"] == "served by a lock cycle"
                        && in_span(l, "request_id", &id)
                        && l["fence"] == fence
                });
                let granted = lines
                    .iter()
                    .any(|l| l["message"] == "lock granted" && l["fence"] == fence);
                let committed = lines.iter().any(|l| {
                    l["message"] == "stock written and committed" && in_span(l, "fence", &fence)
                });
                let transaction = lines.iter().find_map(|l| {
                    (l["message"] == "lock cycle served in a shared transaction"
                        && l["fence"] == fence)
                        .then(|| {
                            l["spans"]
                                .as_array()?
                                .iter()
                                .find_map(|s| s.get("transaction").cloned())
                        })
                        .flatten()
                });
                let sql = transaction.is_some_and(|t| {
                    lines
                        .iter()
                        .any(|l| l["target"] == "sqlx::query" && in_span(l, "transaction", &t))
                });
                served && granted && committed && sql
            })
            .await;
        }
    }

    // An id no log pipeline should carry is replaced by one of ours.
    let response = http()
        .get(format!("{base}/healthz"))
        .header("x-request-id", "has spaces in it")
        .send()
        .await
        .unwrap();
    let given = response.headers()["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(given).is_ok(), "replaced: {given}");
    let _ = std::fs::remove_file(&log);
}

/// A flash sale draws many times its stock in requests: the ones turned away before anything
/// was written (an unknown product, a sold-out flag, a full queue) are counted, not logged one
/// line each at the default level, while every order the database holds keeps its line.
#[tokio::test]
async fn refusals_that_wrote_nothing_are_counted_not_logged_at_info() {
    let env = TestEnv::new().await;
    let (server, log) = logging_json(&env, "quiet", "info").await;
    let base = &server.base_url;
    let one = create_product(base, 1, "zk").await;
    let other = create_product(base, 5, "zk").await;
    let before = scrape(base).await;
    let client = http();
    let order = |product: i64, user: &str, request_id: String| {
        client
            .post(format!("{base}/orders"))
            .header("x-request-id", request_id)
            .json(&json!({ "product_id": product, "user_id": user }))
            .send()
    };

    let sold = order(one, "first", "sold-1".into()).await.unwrap();
    assert_eq!(sold.status(), StatusCode::CREATED);
    let unknown = order(999_999, "nobody", "refused-unknown".into())
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    // Until the sold-out flag answers: a refusal with no order row (a lock cycle's sold-out
    // answer names the row it wrote, and that one keeps its line).
    let mut flagged = None;
    for n in 0..50 {
        let reply = order(one, &format!("late-{n}"), format!("late-{n}"))
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::CONFLICT);
        let body: Value = reply.json().await.unwrap();
        assert_eq!(body["error"], "sold_out");
        if body.get("order_id").is_none_or(Value::is_null) {
            flagged = Some(n);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let flagged = flagged.expect("the sold-out flag answers within 50 tries");
    // A sale after the refusals: once its line is written, theirs would have been too (each
    // is written before its answer is sent).
    let after = order(other, "after", "sold-2".into()).await.unwrap();
    assert_eq!(after.status(), StatusCode::CREATED);
    wait_for_lines(&log, "the later sale's line", |lines| {
        lines
            .iter()
            .any(|l| l["message"] == "order answered" && in_span(l, "request_id", &json!("sold-2")))
    })
    .await;

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let of = |id: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| in_span(l, "request_id", &json!(id)))
            .collect()
    };
    for id in ["refused-unknown".to_string(), format!("late-{flagged}")] {
        assert!(of(&id).is_empty(), "{id} logged: {:?}", of(&id));
    }
    let answered = |id: &str| of(id).iter().any(|l| l["message"] == "order answered");
    assert!(answered("sold-1"), "the sale keeps its line");
    // Sold out in a lock cycle: an order row, so a line.
    for n in 0..flagged {
        assert!(
            answered(&format!("late-{n}")),
            "late-{n} wrote a row: it keeps its line"
        );
    }

    let after = scrape(base).await;
    let counted = |outcome: &str| {
        sum(
            &after,
            "seckill_orders_total",
            &format!(r#"outcome="{outcome}""#),
        ) - sum(
            &before,
            "seckill_orders_total",
            &format!(r#"outcome="{outcome}""#),
        )
    };
    assert_eq!(counted("unknown_product"), 1.0);
    // Every sold-out answer is counted: the lock cycle's (with rows) and the flag's.
    assert_eq!(counted("sold_out"), (flagged + 1) as f64);
    let _ = std::fs::remove_file(&log);
}
