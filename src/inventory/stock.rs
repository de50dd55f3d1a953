//! The read-check-write of a product's stock under its guard, and the stock changes made
//! with it outside a sale (restock; returns go through it from `orders`).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use sqlx::{Executor, PgConnection, PgPool, Postgres, Transaction};

use super::fence::{claim, Claim};
use super::guard::{enter, Protection};
use super::product::{Product, MAX_STOCK, MAX_STOCKED_TOTAL};
use super::terms::Current;
use super::window::Window;
use crate::commit::Tracked;
use crate::error::Error;
use crate::flags::Flags;
use crate::lock::{LockError, Session, Zk};

/// Puts `quantity` more units on sale, through the product's guard like every stock change,
/// raising the audit's reference figure in the same transaction; then clears the sold-out
/// flag on every instance. `lock_timeout` bounds the wait for the product's lock; `think`
/// is the pause between the read and the write, as for every stock change.
pub async fn restock(
    db: &PgPool,
    zk: &Zk,
    sold_out: &Flags,
    product: &Product,
    quantity: i64,
    lock_timeout: Duration,
    think_for: Duration,
) -> Result<(), Error> {
    if !(1..=MAX_STOCK).contains(&quantity) {
        return Err(Error::invalid(format!(
            "quantity must be between 1 and {MAX_STOCK}"
        )));
    }
    if i64::from(product.stocked_total) + quantity > MAX_STOCKED_TOTAL {
        return Err(Error::Unprocessable(
            "restocking that much would pass the product's lifetime stock limit".into(),
        ));
    }
    let quantity = quantity as i32;
    let (lock, protection) =
        enter(zk, product.id, product.guard, Session::Shared, lock_timeout).await?;
    let outcome = change_stock(
        db,
        product.id,
        Change::Return(quantity),
        protection,
        think(think_for),
    )
    .await?;
    let mut tx = match outcome {
        // An admin's restock: a failed commit is answered 503 and simply retried.
        Outcome::Applied(written) => written.tx,
        Outcome::Insufficient { .. } => {
            return Err(Error::Unprocessable(
                "restocking that much would overflow the stock".into(),
            ))
        }
        Outcome::Fenced => return Err(LockError::Lost.into()),
    };
    sqlx::query!(
        "UPDATE products SET stocked_total = stocked_total + $2 WHERE id = $1",
        product.id,
        quantity
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    drop(lock);
    sold_out.lower(&product.id.to_string()).await;
    tracing::info!(product = product.id, quantity, "restocked");
    Ok(())
}

/// A change to a product's stock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A buyer takes this many units.
    Take(i32),
    /// Units go back on sale (a declined payment).
    Return(i32),
}

/// The "check" of read-check-write: the stock after the change, or `None` if there is not
/// enough. This is the line the source material protects with a lock.
pub fn next_stock(stock: i32, change: Change) -> Option<i32> {
    match change {
        Change::Take(q) if q <= stock => Some(stock - q),
        Change::Take(_) => None,
        Change::Return(q) => stock.checked_add(q),
    }
}

/// How a stock change ended. `Applied` and `Insufficient` hand back the open transaction so
/// the caller records the order's new status atomically with the stock, then commits.
pub enum Outcome {
    /// Written, not yet committed: commit it with [`Tracked::commit`] where its outcome is
    /// reported to a buyer.
    Applied(Tracked),
    /// Not enough stock; `stock` is what is left (0 means sold out).
    Insufficient {
        tx: Transaction<'static, Postgres>,
        stock: i32,
    },
    /// A newer lock holder claimed the row: our lock is no longer current. Nothing written.
    Fenced,
}

/// What a read-check-write decides with, as read under the guard.
#[derive(Debug)]
pub struct Figures {
    pub stock: i32,
    /// Every unit ever put on sale.
    pub stocked_total: i32,
    /// Units in reservations waiting for their payment (`reserved`).
    pub unpaid: i32,
    /// Units held per buyer asked about (buyers holding none are absent).
    pub held: HashMap<String, i32>,
    /// The product's terms as the row says now.
    pub terms: Current,
}

/// A product's figures as a lock cycle's read gets them from PostgreSQL (one product or
/// many: `many`), one row per product: what [`Figures`] is made from.
pub(super) struct FiguresRow {
    pub id: i64,
    pub stock: i32,
    pub stocked_total: i32,
    pub unpaid: i32,
    /// The buyers asked about who hold units, and how many each (parallel arrays).
    pub users: Option<Vec<String>>,
    pub units: Option<Vec<i32>>,
    pub price_cents: i64,
    pub max_per_order: i32,
    pub per_user_limit: i32,
    pub reservation_ttl_s: i32,
    pub terms_version: i32,
    pub opens_at: Option<chrono::DateTime<chrono::Utc>>,
    pub closes_at: Option<chrono::DateTime<chrono::Utc>>,
    pub paused: bool,
}

impl From<FiguresRow> for Figures {
    fn from(row: FiguresRow) -> Figures {
        Figures {
            stock: row.stock,
            stocked_total: row.stocked_total,
            unpaid: row.unpaid,
            held: row
                .users
                .unwrap_or_default()
                .into_iter()
                .zip(row.units.unwrap_or_default())
                .collect(),
            terms: Current {
                price_cents: row.price_cents,
                max_per_order: row.max_per_order,
                per_user_limit: row.per_user_limit,
                reservation_ttl_s: row.reservation_ttl_s,
                terms_version: row.terms_version,
                window: Window {
                    opens_at: row.opens_at,
                    closes_at: row.closes_at,
                    paused: row.paused,
                },
            },
        }
    }
}

/// The stock, read under its guard in an open transaction, with the units the order's
/// buyers already hold (the per-customer limit is decided with the stock), ready to be
/// written once.
pub struct StockRead {
    pub tx: Transaction<'static, Postgres>,
    pub figures: Figures,
    product_id: i64,
    /// The write is fenced by this claim, if we hold a lock.
    claim: Option<Claim>,
}

pub enum Read {
    Ready(StockRead),
    /// A newer lock holder claimed the row: our lock is no longer current. Nothing written.
    Fenced,
}

/// Lets this transaction stay idle between two statements for `idle` (zero: as long as it
/// likes), where its holder pauses on purpose between its read and its write longer than the
/// server's bound on an idle transaction (`database`) allows: `--stock-think-ms`, or a pause
/// acted out for the teaching page, which must end at the fence, as it teaches.
pub async fn allow_idle(tx: &mut PgConnection, idle: Duration) -> Result<(), sqlx::Error> {
    let set = format!(
        "SET LOCAL idle_in_transaction_session_timeout = {}",
        idle.as_millis()
    );
    tx.execute(set.as_str()).await?;
    Ok(())
}

/// Opens the read-check-write of a product's stock under the given protection:
///
/// - `Fenced(token)`: claims the row for our token in its own commit, before the read: a
///   newer holder's claim must be visible to an older holder's write, which then matches no
///   row. Reads only if the row is still ours.
/// - `Atomic`: reads with a row lock (`FOR UPDATE`), held to the commit.
/// - `Unguarded`: a plain read. Nothing stops a concurrent writer: the race of the demo.
pub async fn read_stock(
    db: &PgPool,
    product_id: i64,
    protection: Protection,
    buyers: &[String],
) -> Result<Read, sqlx::Error> {
    let claim = match protection {
        Protection::Fenced(token) => match claim(db, product_id, token).await? {
            Some(claim) => Some(claim),
            None => return Ok(Read::Fenced),
        },
        Protection::Atomic | Protection::Unguarded => None,
    };
    let mut tx = db.begin().await?;
    if matches!(protection, Protection::Atomic) {
        // Lock the row first, in a statement of its own: the read below then takes its
        // snapshot after the previous holder's commit, buyers' holdings included. (Locking
        // in the reading statement would re-read the row but not the holdings.)
        sqlx::query_scalar!(
            "SELECT id FROM products WHERE id = $1 FOR UPDATE",
            product_id
        )
        .fetch_optional(&mut *tx)
        .await?;
    }
    // Fenced when we hold a token (the row is still claimed for it), not at all otherwise.
    // The row is still claimed for our token ($2 epoch, $3 zxid), or we hold none (NULLs).
    let row = sqlx::query_as!(
        FiguresRow,
        r#"SELECT p.id, p.stock, p.stocked_total,
                (SELECT COALESCE(SUM(o.quantity), 0)::INT FROM orders o
                 WHERE o.product_id = p.id AND o.status = 'reserved') AS "unpaid!",
                h.users, h.units,
                p.price_cents, p.max_per_order, p.per_user_limit, p.reservation_ttl_s,
                p.terms_version, p.opens_at, p.closes_at, p.paused
         FROM products p
         -- One index probe per buyer (product, user): never a scan of every buyer of the
         -- product, which grows with the sale (a plan that filtered the product's holdings
         -- by `user_id = ANY(...)` made each lock cycle slower than the last).
         CROSS JOIN LATERAL (
            SELECT array_agg(h.user_id) AS users, array_agg(h.units) AS units
            FROM unnest($4::TEXT[]) AS b(user_id)
            JOIN purchases h ON h.product_id = p.id AND h.user_id = b.user_id
         ) h
         WHERE p.id = $1
           AND (($2::BIGINT IS NULL AND $3::BIGINT IS NULL) OR (p.fence_epoch = $2 AND p.fence = $3))"#,
        product_id,
        claim.map(|c| c.epoch),
        claim.map(|c| c.zxid),
        buyers
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(Read::Fenced);
    };
    Ok(Read::Ready(StockRead {
        tx,
        figures: row.into(),
        product_id,
        claim,
    }))
}

impl StockRead {
    /// Writes the stock read-check-write decided on. `None` if a newer holder claimed the row
    /// since our claim, the terms changed since our read, or (under a token) the stock is no
    /// longer what we read: nothing is written (the transaction rolls back when dropped).
    ///
    /// Under a token the write is a compare-and-set on the stock read: two transactions
    /// under one token (an owner's re-entries) can both read, and without it the second
    /// write would overwrite the first with a value computed from a stale read. Without a
    /// token it is not: `pg-atomic` holds the row lock from its read, and `none` exists to
    /// show that lost update.
    pub async fn write(mut self, next: i32) -> Result<Option<Tracked>, sqlx::Error> {
        // The terms read with the stock must still be the row's: a holder that lost its
        // locks mid-cycle (session expired) would otherwise decide under terms a change has
        // replaced since, which the terms lock alone cannot stop once it is gone.
        // It also tells every instance (LISTEN, see `events`) that the product changed, in
        // the same statement: delivered on commit, never for a rolled-back write.
        let written = sqlx::query!(
            "UPDATE products p SET stock = $4, updated_at = now()
             WHERE id = $1
               AND (($2::BIGINT IS NULL AND $3::BIGINT IS NULL) OR (p.fence_epoch = $2 AND p.fence = $3))
               AND p.terms_version = $5
               AND ($2::BIGINT IS NULL OR p.stock = $6)
             RETURNING pg_notify('seckill_events', json_build_object('product', id)::text),
                       pg_current_xact_id()::TEXT::BIGINT AS \"xid!\", pg_backend_pid() AS \"pid!\"",
            self.product_id,
            self.claim.map(|c| c.epoch),
            self.claim.map(|c| c.zxid),
            next,
            self.figures.terms.terms_version,
            self.figures.stock
        )
        .fetch_optional(&mut *self.tx)
        .await?;
        Ok(written.map(|w| Tracked {
            tx: self.tx,
            xid: w.xid,
            pid: w.pid,
        }))
    }
}

/// Changes a product's stock under the given protection. `pause` runs between the read and
/// the write: the source material's `sleep`, which widens the race window on purpose (and
/// where the teaching page's zombie holder stalls).
pub async fn change_stock(
    db: &PgPool,
    product_id: i64,
    change: Change,
    protection: Protection,
    pause: impl Future<Output = ()> + Send,
) -> Result<Outcome, sqlx::Error> {
    let mut pause = Some(pause);
    // A write refused while the row is still ours means the stock moved under our token
    // (another transaction of the same owner): read again and redo the change on what is
    // there now. A lost fence shows at the next read.
    for _ in 0..8 {
        let read = match read_stock(db, product_id, protection, &[]).await? {
            Read::Ready(read) => read,
            Read::Fenced => return Ok(Outcome::Fenced),
        };
        if let Some(pause) = pause.take() {
            pause.await;
        }
        let Some(next) = next_stock(read.figures.stock, change) else {
            let stock = read.figures.stock;
            return Ok(Outcome::Insufficient { tx: read.tx, stock });
        };
        if let Some(written) = read.write(next).await? {
            return Ok(Outcome::Applied(written));
        }
    }
    Ok(Outcome::Fenced)
}

/// The ordinary pause: sleep `think` (nothing when it is zero).
pub async fn think(think: Duration) {
    if !think.is_zero() {
        tokio::time::sleep(think).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_refuses_to_take_more_than_is_left() {
        assert_eq!(next_stock(1, Change::Take(1)), Some(0));
        assert_eq!(next_stock(0, Change::Take(1)), None);
        assert_eq!(next_stock(2, Change::Take(3)), None);
        assert_eq!(next_stock(0, Change::Return(2)), Some(2));
        assert_eq!(next_stock(i32::MAX, Change::Return(1)), None);
    }
}
