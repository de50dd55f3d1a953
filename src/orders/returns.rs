//! Lapsed reservations go back on sale the way units leave it: in lock cycles under the
//! product's guard, many to a transaction, fenced like a sale. In a flash sale most
//! reservations lapse together (every unpaid one of a sale that opened at 10:00 lapses at
//! 10:15); one transaction per return would leave the units unsellable for minutes.
//!
//! A cycle expires up to [`PER_CYCLE`] of the product's due reservations (`reserved` →
//! `expired`, conditional on both, `SKIP LOCKED` past a payment claiming one at that
//! moment), adds their units to the stock read under the guard, and takes them off their
//! buyers' holdings, in one transaction. Several instances may run cycles for one product:
//! they take turns at its lock, and each takes only rows still due when it holds it.

use anyhow::{anyhow, Context};

use super::shop::Shop;
use super::store;
use crate::database::Bound;
use crate::inventory::{self, Read};
use crate::lock::Session;

/// Reservations one cycle gives back: enough that 20,000 lapsing at once are back in a few
/// dozen cycles, few enough that the product's buyers wait one short transaction for the lock.
pub(super) const PER_CYCLE: i64 = 500;

/// One lock cycle of returns for `product`: how many reservations it gave back (fewer than
/// [`PER_CYCLE`]: none are left due).
pub(super) async fn return_due(shop: &Shop, product: i64) -> anyhow::Result<usize> {
    let terms = shop
        .terms(product)
        .await?
        .ok_or_else(|| anyhow!("product {product} vanished"))?;
    let (lock, protection) = inventory::enter(
        &shop.zk,
        product,
        terms.guard,
        Session::Shared,
        shop.rules.lock_timeout,
    )
    .await
    .context("entering the product's guard")?;
    // Each step bounded on our side: a return holds the product's lock, which a database
    // gone silent must not keep from the instances that can still sell.
    let bound = Bound::steps(shop.rules.db_step);
    let read = inventory::read_stock(&shop.db, product, protection, &[]);
    let mut read = match bound.run(read).await? {
        Read::Ready(read) => read,
        Read::Fenced => return Err(anyhow!("lock lost before returning stock")),
    };
    let lapsed = bound
        .run(store::expire_due(&mut read.tx, product, PER_CYCLE))
        .await?;
    if lapsed.is_empty() {
        return Ok(0); // nothing written: the transaction rolls back as it drops
    }
    let units: i32 = lapsed.iter().map(|(_, quantity)| quantity).sum();
    let next = read
        .figures
        .stock
        .checked_add(units)
        .ok_or_else(|| anyhow!("stock would overflow"))?;
    let Some(mut written) = bound.run(read.write(next)).await? else {
        return Err(anyhow!("lock lost while returning stock"));
    };
    bound
        .run(store::release_holdings(&mut written.tx, product, &lapsed))
        .await?;
    written.commit(&shop.db, bound).await?;
    drop(lock);
    shop.sold_out.lower(&product.to_string()).await;
    shop.events.touch(product);
    Ok(lapsed.len())
}
