//! The demo's products: made once, by whichever instance starts first, when the database has
//! none (`--seed-demo`).

use sqlx::PgPool;

use super::guard::Guard;

/// Creates the demo products unless some product exists. Several instances may start at
/// once, so the check and the inserts run under a transaction-scoped advisory lock.
pub async fn seed_demo(
    db: &PgPool,
    allow_unsafe_guards: bool,
    default_batch: i32,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('seckill.seed_demo'))")
        .execute(&mut *tx)
        .await?;
    let empty = sqlx::query_scalar!(r#"SELECT NOT EXISTS (SELECT 1 FROM products) AS "empty!""#)
        .fetch_one(&mut *tx)
        .await?;
    if empty {
        let demo = if allow_unsafe_guards {
            // The teaching set: one lock per order (the queue shows every buyer), the same
            // sale unguarded and under the naive herd lock, and one lock cycle per batch.
            vec![
                ("Mechanical keyboard (zk, a lock per order)", Guard::Zk, 1),
                ("Mechanical keyboard (no lock: oversells)", Guard::None, 1),
                (
                    "Mechanical keyboard (zk-herd: naive lock)",
                    Guard::ZkHerd,
                    1,
                ),
                (
                    "Mechanical keyboard (zk, batched lock)",
                    Guard::Zk,
                    default_batch,
                ),
            ]
        } else {
            vec![
                ("Mechanical keyboard (zk guard)", Guard::Zk, default_batch),
                (
                    "Mechanical keyboard (pg-atomic guard)",
                    Guard::PgAtomic,
                    default_batch,
                ),
            ]
        };
        for (name, guard, batch) in demo {
            sqlx::query!(
                "INSERT INTO products (name, price_cents, stock, stocked_total, guard, batch_max)
                 VALUES ($1, 4999, 100, 100, $2, $3)",
                name,
                guard.as_str(),
                batch
            )
            .execute(&mut *tx)
            .await?;
        }
        if allow_unsafe_guards {
            // The opening second and its line, a minute after the demo starts.
            sqlx::query!(
                "WITH p AS (INSERT INTO products (name, price_cents, stock, stocked_total, guard,
                                                  batch_max, opens_at, line)
                            VALUES ('Limited drop (line, opens a minute after start)', 1999, 100,
                                    100, 'zk', $1, now() + interval '60 seconds', true)
                            RETURNING id)
                 INSERT INTO lines (product_id) SELECT id FROM p",
                default_batch
            )
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await
}
