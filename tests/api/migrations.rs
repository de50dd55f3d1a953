//! Migrations that backfill while the service writes: a backfill must lock what it reads,
//! or a transaction that commits during it leaves the backfilled figure wrong for good.

use std::borrow::Cow;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::{Connection, PgPool};

use crate::helpers::*;

/// A database migrated up to `version`, on the test server (no template: the test runs the
/// later migrations itself).
async fn migrated_to(version: i64) -> (PgPool, String) {
    let name = format!("seckill_test_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{}?sslmode=disable", empty_database(&name).await);
    let db = PgPool::connect(&url).await.expect("connect to it");
    up_to(version).run(&db).await.expect("migrate");
    (db, url)
}

/// The project's migrations up to `version`.
fn up_to(version: i64) -> Migrator {
    let all = sqlx::migrate!();
    Migrator {
        migrations: Cow::Owned(
            all.iter()
                .filter(|m| m.version <= version)
                .cloned()
                .collect(),
        ),
        ..all
    }
}

/// A product's kept `sold` (0013) against the sum of its counted orders, after the kept count
/// was backfilled while a transaction that takes a unit back (a counted order moved to a
/// status that is not, as an operator's SQL may) was open, and committed during the
/// migration. The backfill that summed before that commit counted the unit; the migration
/// after it sums again with the orders locked (0014).
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_count_backfilled_while_an_order_changes_ends_right() {
    let (db, url) = migrated_to(12).await;
    let product: i64 = sqlx::query_scalar(
        "INSERT INTO products (name, stock, stocked_total, price_cents)
         VALUES ('backfilled', 8, 10, 100) RETURNING id",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO orders (id, product_id, user_id, quantity, amount_cents, status)
         SELECT gen_random_uuid(), $1, 'u' || n, 1, 100, 'reserved' FROM generate_series(1, 2) n",
    )
    .bind(product)
    .execute(&db)
    .await
    .unwrap();
    // A writer, open across the migration: one reservation lapses (not counted any more).
    let mut writer = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = writer.begin().await.unwrap();
    sqlx::query("UPDATE orders SET status = 'expired' WHERE user_id = 'u1'")
        .execute(&mut *tx)
        .await
        .unwrap();
    let migrating = tokio::spawn({
        let db = db.clone();
        async move { sqlx::migrate!().run(&db).await }
    });
    // The migration is under way and waits for the writer (a lock it cannot have): a state
    // the test sees, not a timer.
    wait_until(
        Duration::from_secs(30),
        "the migration waiting for the writer",
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&db)
            .await
            .ok()?;
            (waiting > 0).then_some(())
        },
    )
    .await;
    tx.commit().await.unwrap();
    migrating.await.unwrap().expect("the migrations ran");
    let (sold, counted): (i64, i64) = sqlx::query_as(
        "SELECT p.sold, (SELECT COALESCE(SUM(quantity), 0) FROM orders o
                         WHERE o.product_id = p.id AND o.status IN ('reserved', 'paying', 'paid'))
         FROM products p WHERE p.id = $1",
    )
    .bind(product)
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((sold, counted), (1, 1), "the kept count is the orders'");
    db.close().await;
}

/// The keys kept before 0015 are moved under their buyer, answered ones too (the 0012 trigger
/// that keeps a first answer would have skipped them): a retry across the upgrade replays.
#[tokio::test(flavor = "multi_thread")]
async fn keys_kept_before_buyers_are_scoped_to_their_buyer_answered_or_not() {
    let (db, _) = migrated_to(14).await;
    for (key, user, answered) in [("k-answered", "alice", true), ("k-pending", "bob", false)] {
        sqlx::query(
            "INSERT INTO idempotency_keys (key, request, status_code, response)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(key)
        .bind(serde_json::json!({ "product_id": 1, "user_id": user, "quantity": 1, "pay": true }))
        .bind(answered.then_some(201_i16))
        .bind(answered.then_some("{\"status\":\"paid\"}"))
        .execute(&db)
        .await
        .unwrap();
    }
    sqlx::migrate!().run(&db).await.expect("the migrations ran");
    let mut kept: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT key, response FROM idempotency_keys ORDER BY key")
            .fetch_all(&db)
            .await
            .unwrap();
    kept.sort();
    assert_eq!(
        kept,
        [
            (
                "alice\u{1f}k-answered".to_string(),
                Some("{\"status\":\"paid\"}".to_string())
            ),
            ("bob\u{1f}k-pending".to_string(), None),
        ]
    );
    db.close().await;
}
