//! Many products' read-check-write in one transaction, each under its own token: the lock
//! cycles of every product whose lock this instance holds at one moment share one read, one
//! write and one commit (a flash sale opens dozens of products at once, and each cycle's
//! statements and commits would otherwise be paid per product).
//!
//! The claim rides the write: one statement sets each product's stock *and* its token, only
//! where the token is the newest the row has seen (`fence::claim`'s rule: a later zxid of the
//! newest ensemble), the terms are those read, and the stock is still what was read (a
//! compare-and-set). A stale holder's write, before or after ours, cannot land over it: an
//! older token fails the first test once ours is in, and a write of its that landed between
//! our read and our write fails our compare-and-set (the product sells nothing this cycle,
//! its orders told the lock was lost). One product refused leaves the others written.
//! (The one-product path, `stock::read_stock`, claims in a commit of its own before it reads:
//! the teaching page's zombie is refused at its write, visibly, while it pauses.)

use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::stock::{Figures, FiguresRow};
use crate::commit::Tracked;
use crate::lock::Token;

/// One product's stock as a shared transaction read it.
#[derive(Debug)]
pub struct FencedRead {
    pub product_id: i64,
    pub figures: Figures,
}

/// What one product's write needs: its read, the stock decided on, and the lock's token.
pub struct FencedWrite<'a> {
    pub read: &'a FencedRead,
    pub next: i32,
    pub token: Token,
}

/// Opens a transaction and reads every product of `wanted`, with the units each of its
/// buyers holds (one statement).
pub async fn read_fenced(
    db: &PgPool,
    wanted: &[(i64, Vec<String>)],
) -> Result<(Transaction<'static, Postgres>, Vec<FencedRead>), sqlx::Error> {
    let ids: Vec<i64> = wanted.iter().map(|(id, _)| *id).collect();
    let (mut buyer_products, mut buyers) = (Vec::new(), Vec::new());
    for (id, wanted_buyers) in wanted {
        for buyer in wanted_buyers {
            buyer_products.push(*id);
            buyers.push(buyer.as_str());
        }
    }
    // A row lock held by another transaction while we hold the product's lock is a stale
    // holder's (one abandoned mid-transaction, its backend not yet ended): waiting for it
    // would stall every product of this transaction, so the wait is short and the
    // statement fails (55P03), and the group's parts are then tried each alone (`group`).
    let mut tx = db
        .begin_with("BEGIN; SET LOCAL lock_timeout = '1s'")
        .await?;
    let reads = read(&mut tx, &ids, &buyer_products, &buyers).await?;
    Ok((tx, reads))
}

/// The read of `read_fenced`: one statement for every product.
async fn read(
    tx: &mut PgConnection,
    ids: &[i64],
    buyer_products: &[i64],
    buyers: &[&str],
) -> Result<Vec<FencedRead>, sqlx::Error> {
    let rows = sqlx::query_as!(
        FiguresRow,
        r#"SELECT p.id, p.stock, p.stocked_total,
                (SELECT COALESCE(SUM(o.quantity), 0)::INT FROM orders o
                 WHERE o.product_id = p.id AND o.status = 'reserved') AS "unpaid!",
                h.users, h.units,
                p.price_cents, p.max_per_order, p.per_user_limit, p.reservation_ttl_s,
                p.terms_version, p.opens_at, p.closes_at, p.paused
         FROM products p
         -- One index probe per (product, buyer), as in the one-product read.
         CROSS JOIN LATERAL (
            SELECT array_agg(h.user_id) AS users, array_agg(h.units) AS units
            FROM unnest($2::BIGINT[], $3::TEXT[]) AS b(product_id, user_id)
            JOIN purchases h ON h.product_id = b.product_id AND h.user_id = b.user_id
            WHERE b.product_id = p.id
         ) h
         WHERE p.id = ANY($1)"#,
        ids,
        buyer_products,
        buyers as _
    )
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| FencedRead {
            product_id: row.id,
            figures: row.into(),
        })
        .collect())
}

/// Writes each product's decided stock and claims its row for the write's token, in one
/// statement (see the module's comment): only where the token is the newest the row has
/// seen under the newest ensemble (`ensemble` is every token's), its terms are those read
/// and its stock is still what was read. Notifies every instance of each product written, on
/// commit. Returns the transaction, tracked for its commit, and the products written; `None`
/// if none was (nothing to commit: the transaction rolls back when dropped).
pub async fn write_fenced(
    mut tx: Transaction<'static, Postgres>,
    ensemble: Uuid,
    writes: &[FencedWrite<'_>],
) -> Result<Option<(Tracked, Vec<i64>)>, sqlx::Error> {
    let ids: Vec<i64> = writes.iter().map(|w| w.read.product_id).collect();
    let zxids: Vec<i64> = writes.iter().map(|w| w.token.zxid).collect();
    let read: Vec<i32> = writes.iter().map(|w| w.read.figures.stock).collect();
    let next: Vec<i32> = writes.iter().map(|w| w.next).collect();
    let versions: Vec<i32> = writes
        .iter()
        .map(|w| w.read.figures.terms.terms_version)
        .collect();
    let written = sqlx::query!(
        r#"UPDATE products p
           SET stock = t.next, fence_epoch = e.epoch, fence = t.zxid, updated_at = now()
           FROM unnest($1::BIGINT[], $2::BIGINT[], $3::INT[], $4::INT[], $5::INT[])
                AS t(id, zxid, read, next, terms_version), zk_ensembles e
           WHERE p.id = t.id AND e.id = $6
             AND (p.fence_epoch, p.fence) <= (e.epoch, t.zxid)
             AND e.epoch = (SELECT max(epoch) FROM zk_ensembles)
             AND p.terms_version = t.terms_version AND p.stock = t.read
           RETURNING p.id, pg_notify('seckill_events', json_build_object('product', p.id)::text),
                     pg_current_xact_id()::TEXT::BIGINT AS "xid!", pg_backend_pid() AS "pid!""#,
        &ids,
        &zxids,
        &read,
        &next,
        &versions,
        ensemble
    )
    .fetch_all(&mut *tx)
    .await?;
    let Some(first) = written.first() else {
        return Ok(None);
    };
    let (xid, pid) = (first.xid, first.pid);
    let ids = written.into_iter().map(|w| w.id).collect();
    Ok(Some((Tracked { tx, xid, pid }, ids)))
}
