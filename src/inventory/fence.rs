//! The fence: a lock holder claims the product's row for its token before it reads, and its
//! write lands only while the row is still claimed for that token. A holder whose session
//! expired (so ZooKeeper let the next one in) writes nothing. (The check itself is in the
//! stock's read and write statements, `stock::read_stock` and `StockRead::write`.)

use sqlx::PgPool;

use crate::lock::Token;

/// Claims the product's row for `token`, in a commit of its own, if the token is the row's
/// (an owner's re-entry: one grant, one node, so one holder) or newer than the row's: a
/// later zxid of the same ensemble, or any zxid of an ensemble with a newer epoch. The
/// second case is how a wiped or replaced ZooKeeper, whose zxids start again from zero,
/// takes over without anyone editing the database ([`super::ensembles`] decides when it may);
/// and why no window opens for two writers: the order of tokens stays total, and the old
/// ensemble's holders are fenced out even if it comes back. `None`: a newer token has
/// claimed the row, or Postgres does not rank our ensemble (yet), or ranks another above it:
/// only the newest epoch claims, so an outranked ensemble's holders write nothing even on a
/// row no newer token has claimed yet.
pub(super) async fn claim(
    db: &PgPool,
    product_id: i64,
    token: Token,
) -> Result<Option<Claim>, sqlx::Error> {
    let epoch: Option<i64> = sqlx::query_scalar!(
        "UPDATE products p SET fence_epoch = e.epoch, fence = $3
         FROM zk_ensembles e
         WHERE p.id = $1 AND e.id = $2 AND (p.fence_epoch, p.fence) <= (e.epoch, $3)
           AND e.epoch = (SELECT max(epoch) FROM zk_ensembles)
         RETURNING e.epoch",
        product_id,
        token.ensemble,
        token.zxid
    )
    .fetch_optional(db)
    .await?;
    Ok(epoch.map(|epoch| Claim {
        epoch,
        zxid: token.zxid,
    }))
}

/// A token as the product's row records it: Postgres's number for the token's ensemble
/// (`zk_ensembles.epoch`, in the order Postgres first saw them) and the zxid.
#[derive(Clone, Copy, Debug)]
pub(super) struct Claim {
    pub epoch: i64,
    pub zxid: i64,
}
