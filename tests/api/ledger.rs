//! The shop's books beside the provider's ledger while an answer is lost: the order is seen
//! pending beside the ledger's charge until the sweep settles it, and an order and its
//! payment are read as of one moment.

use crate::helpers::*;
use crate::money::{money_is_exact, order_id, wait_paid};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

/// The page's money demo, through the API: a charge made whose every answer is lost. The
/// order shows `paying` with its intent pending while the provider's ledger already has the
/// charge; then the sweep settles it `paid`, `settled_by: sweep`, charged once. An ordinary
/// order shows its intent settled by its own answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_answer_is_seen_pending_beside_the_ledgers_charge_then_settled_by_the_sweep() {
    let env = TestEnv::new().await;
    let app = env
        .spawn_app(&[
            "--allow-unsafe-guards",
            "--request-timeout-ms",
            "3000",
            "--expiry-interval-ms",
            "100",
        ])
        .await;
    let base = &app.base_url;
    let product = create_product(base, 5, "zk").await;
    let plain = place_order(&http(), base, product, "carol").await.unwrap();
    let shown = send(http().get(format!("{base}/orders/{}", order_id(&plain))))
        .await
        .unwrap();
    assert_eq!(shown.body["status"], "paid", "{shown:?}");
    assert_eq!(
        (
            &shown.body["payment"]["outcome"],
            &shown.body["payment"]["settled_by"]
        ),
        (&json!("succeeded"), &json!("answer")),
        "{shown:?}"
    );

    let demo = send(
        http()
            .post(format!("{base}/api/products/{product}/lost-answer"))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(demo.status, StatusCode::ACCEPTED, "{demo:?}");
    let order = order_id(&demo);
    let charge_of = || async {
        send(
            http()
                .get(format!("{base}/api/orders/{order}/charge"))
                .bearer_auth(ADMIN_TOKEN),
        )
        .await
        .unwrap()
    };
    // The provider has charged while the shop still waits for its answer.
    let (shop, ledger) = wait_until(
        Duration::from_secs(30),
        "a charge the shop has not heard of",
        || async {
            let shop = send(http().get(format!("{base}/orders/{order}")))
                .await
                .ok()?;
            let ledger = charge_of().await;
            let pending =
                shop.body["status"] == "paying" && shop.body["payment"]["outcome"] == "pending";
            (pending && ledger.body["charge"]["status"] == "succeeded").then_some((shop, ledger))
        },
    )
    .await;
    assert_eq!(shop.body["payment"]["key"], ledger.body["key"]);
    assert_eq!(
        ledger.body["charge"]["amount_cents"], shop.body["amount_cents"],
        "the ledger charged the order's amount"
    );
    wait_paid(&env, &order).await;
    let settled = send(http().get(format!("{base}/orders/{order}")))
        .await
        .unwrap();
    assert_eq!(
        (
            &settled.body["payment"]["outcome"],
            &settled.body["payment"]["settled_by"],
            &settled.body["payment"]["provider_ref"]
        ),
        (
            &json!("succeeded"),
            &json!("sweep"),
            &ledger.body["charge"]["reference"]
        ),
        "{settled:?}"
    );
    let tries = env.provider.ledger().await;
    assert_eq!(
        tries.len(),
        2,
        "one charge per order, whatever the tries: {tries:?}"
    );
    money_is_exact(&env).await;

    // Not on a production server, and never for a stranger.
    let stranger = send(http().post(format!("{base}/api/products/{product}/lost-answer")))
        .await
        .unwrap();
    assert_eq!(stranger.status, StatusCode::UNAUTHORIZED, "{stranger:?}");
    let production = env.spawn_app(&[]).await;
    let refused = send(
        http()
            .post(format!(
                "{}/api/products/{product}/lost-answer",
                production.base_url
            ))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(refused.code(), "demo_disabled", "{refused:?}");
}

/// `GET /orders/{id}` reads an order and its payment as of one moment. A settlement moves
/// both in one transaction; read in two statements, one committing in between showed a
/// settled intent on an order still `paying` (the page's money demo stopped on it and said
/// the books disagree). Here the settlement is held open with the payments table locked:
/// that blocks a read of `payments`, never one of `orders`, so the read is made to wait in
/// its middle, and the settlement commits only once it is seen waiting.
#[tokio::test(flavor = "multi_thread")]
async fn an_order_and_its_payment_are_read_as_of_one_moment() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let base = app.base_url.clone();
    let product = create_product(&base, 5, "pg-atomic").await;
    let order = order_id(&place_order(&http(), &base, product, "dora").await.unwrap());
    // Back to where a lost answer leaves an order: `paying`, its intent pending.
    for sql in [
        "UPDATE orders SET status = 'paying', updated_at = now() WHERE id = $1::uuid",
        "UPDATE payments SET outcome = NULL, settled_at = NULL, settled_by = NULL
         WHERE order_id = $1::uuid",
    ] {
        let moved = sqlx::query(sql)
            .bind(&order)
            .execute(&env.db)
            .await
            .unwrap();
        assert_eq!(moved.rows_affected(), 1, "{sql}");
    }

    // The settlement, as the sweep commits it: the intent and the order together.
    let mut settlement = env.db.begin().await.unwrap();
    for sql in [
        "LOCK TABLE payments IN ACCESS EXCLUSIVE MODE",
        "UPDATE payments SET outcome = 'succeeded', settled_at = now(), settled_by = 'sweep'
         WHERE order_id = $1::uuid",
        "UPDATE orders SET status = 'paid', updated_at = now() WHERE id = $1::uuid",
    ] {
        let query = sqlx::query(sql);
        let query = if sql.contains("$1") {
            query.bind(&order)
        } else {
            query
        };
        query.execute(&mut *settlement).await.unwrap();
    }
    let read = {
        let url = format!("{base}/orders/{order}");
        tokio::spawn(async move { send(http().get(url)).await.unwrap() })
    };
    // The read of `payments` (the settlement's own writes, and the sweep's record, have no
    // `FROM payments` after `settled_at`).
    env.wait_for_lock_wait(
        "%settled_at%FROM payments%",
        "the read to wait for the payments table",
    )
    .await;
    settlement.commit().await.unwrap();

    let shown = read.await.unwrap();
    assert_eq!(shown.status, StatusCode::OK, "{shown:?}");
    assert_eq!(
        (
            &shown.body["status"],
            &shown.body["payment"]["outcome"],
            &shown.body["payment"]["settled_by"]
        ),
        (&json!("paid"), &json!("succeeded"), &json!("sweep")),
        "the order and its payment as the settlement left them: {shown:?}"
    );
}
