//! Many products' read-check-write in one transaction, each under its own fence: the lock
//! cycles of every product whose lock this instance holds at one moment share one claim,
//! one read, one write and one commit (a flash sale opens dozens of products at once, and
//! each cycle's statements and commit would otherwise be paid per product). The checks are
//! those of `stock::read_stock` and `StockRead::write` under a token, a product at a time:
//! a product fenced out, or whose stock or terms moved, is left out, the others go on.

use std::collections::HashMap;

use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::fence::Claim;
use super::terms::Current;
use crate::commit::Tracked;
use crate::lock::Token;

/// One product's stock as a shared transaction read it, under its claim.
#[derive(Debug)]
pub struct FencedRead {
    pub product_id: i64,
    pub stock: i32,
    /// Every unit ever put on sale.
    pub stocked_total: i32,
    /// Units in reservations waiting for their payment (`reserved`).
    pub unpaid: i32,
    /// Units held per buyer asked about (buyers holding none are absent).
    pub held: HashMap<String, i32>,
    /// The product's terms as the row says now.
    pub terms: Current,
    claim: Claim,
}

/// What one product's write needs: its read, and the stock decided on.
pub struct FencedWrite<'a> {
    pub read: &'a FencedRead,
    pub next: i32,
}

/// Claims each product's row for its token (one statement, its own commit, as
/// `fence::claim` does for one), then opens a transaction and reads every product still
/// claimed for its token, with the units each of its `buyers` holds. `ensemble` is the
/// tokens' ensemble (one instance's locks share it). Returns the transaction and the reads
/// of the products still ours; a product missing from them is fenced out (nothing read).
pub async fn read_fenced(
    db: &PgPool,
    ensemble: Uuid,
    wanted: &[(i64, Token, Vec<String>)],
) -> Result<(Transaction<'static, Postgres>, Vec<FencedRead>), sqlx::Error> {
    let ids: Vec<i64> = wanted.iter().map(|(id, _, _)| *id).collect();
    let zxids: Vec<i64> = wanted.iter().map(|(_, token, _)| token.zxid).collect();
    let claimed = sqlx::query!(
        r#"UPDATE products p SET fence_epoch = e.epoch, fence = t.zxid
           FROM unnest($1::BIGINT[], $2::BIGINT[]) AS t(id, zxid), zk_ensembles e
           WHERE p.id = t.id AND e.id = $3 AND (p.fence_epoch, p.fence) <= (e.epoch, t.zxid)
             AND e.epoch = (SELECT max(epoch) FROM zk_ensembles)
           RETURNING p.id, e.epoch"#,
        &ids,
        &zxids,
        ensemble
    )
    .fetch_all(db)
    .await?;
    let epochs: HashMap<i64, i64> = claimed.into_iter().map(|c| (c.id, c.epoch)).collect();
    let mut tx = db.begin().await?;
    let (mut ours, mut our_epochs, mut our_zxids) = (Vec::new(), Vec::new(), Vec::new());
    let (mut buyer_products, mut buyers) = (Vec::new(), Vec::new());
    for (id, token, wanted_buyers) in wanted {
        let Some(epoch) = epochs.get(id) else {
            continue;
        };
        ours.push(*id);
        our_epochs.push(*epoch);
        our_zxids.push(token.zxid);
        for buyer in wanted_buyers {
            buyer_products.push(*id);
            buyers.push(buyer.as_str());
        }
    }
    if ours.is_empty() {
        return Ok((tx, Vec::new()));
    }
    let reads = read(
        &mut tx,
        &ours,
        &our_epochs,
        &our_zxids,
        &buyer_products,
        &buyers,
    )
    .await?;
    Ok((tx, reads))
}

/// The read of `read_fenced`: one statement for every product, each only while its row is
/// still claimed for its token.
async fn read(
    tx: &mut PgConnection,
    ids: &[i64],
    epochs: &[i64],
    zxids: &[i64],
    buyer_products: &[i64],
    buyers: &[&str],
) -> Result<Vec<FencedRead>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT p.id, p.stock, p.stocked_total, p.fence_epoch AS "epoch!", p.fence AS "zxid!",
                (SELECT COALESCE(SUM(o.quantity), 0)::INT FROM orders o
                 WHERE o.product_id = p.id AND o.status = 'reserved') AS "unpaid!",
                h.users, h.units,
                p.price_cents, p.max_per_order, p.per_user_limit, p.reservation_ttl_s,
                p.terms_version
         FROM unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[]) AS t(id, epoch, zxid)
         JOIN products p ON p.id = t.id AND p.fence_epoch = t.epoch AND p.fence = t.zxid
         -- One index probe per (product, buyer), as in the one-product read.
         CROSS JOIN LATERAL (
            SELECT array_agg(h.user_id) AS users, array_agg(h.units) AS units
            FROM unnest($4::BIGINT[], $5::TEXT[]) AS b(product_id, user_id)
            JOIN purchases h ON h.product_id = b.product_id AND h.user_id = b.user_id
            WHERE b.product_id = p.id
         ) h"#,
        ids,
        epochs,
        zxids,
        buyer_products,
        buyers as _
    )
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| FencedRead {
            product_id: row.id,
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
            },
            claim: Claim {
                epoch: row.epoch,
                zxid: row.zxid,
            },
        })
        .collect())
}

/// Writes each product's decided stock, as a compare-and-set on what it read, while its row
/// is still claimed for its token and its terms are those read (see `StockRead::write`);
/// notifies every instance of each product written, on commit. Returns the transaction,
/// tracked for its commit, and the products written; `None` if none was (nothing to
/// commit: the transaction rolls back when dropped).
pub async fn write_fenced(
    mut tx: Transaction<'static, Postgres>,
    writes: &[FencedWrite<'_>],
) -> Result<Option<(Tracked, Vec<i64>)>, sqlx::Error> {
    let ids: Vec<i64> = writes.iter().map(|w| w.read.product_id).collect();
    let epochs: Vec<i64> = writes.iter().map(|w| w.read.claim.epoch).collect();
    let zxids: Vec<i64> = writes.iter().map(|w| w.read.claim.zxid).collect();
    let read: Vec<i32> = writes.iter().map(|w| w.read.stock).collect();
    let next: Vec<i32> = writes.iter().map(|w| w.next).collect();
    let versions: Vec<i32> = writes.iter().map(|w| w.read.terms.terms_version).collect();
    let written = sqlx::query!(
        r#"UPDATE products p SET stock = t.next, updated_at = now()
           FROM unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[], $4::INT[], $5::INT[], $6::INT[])
                AS t(id, epoch, zxid, read, next, terms_version)
           WHERE p.id = t.id AND p.fence_epoch = t.epoch AND p.fence = t.zxid
             AND p.terms_version = t.terms_version AND p.stock = t.read
           RETURNING p.id, pg_notify('seckill_events', json_build_object('product', p.id)::text),
                     pg_current_xact_id()::TEXT::BIGINT AS "xid!", pg_backend_pid() AS "pid!""#,
        &ids,
        &epochs,
        &zxids,
        &read,
        &next,
        &versions
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
