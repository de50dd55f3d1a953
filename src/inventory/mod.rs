//! Products and their stock: creating and reading products, the audit, and every stock
//! change under its product's guard ([`enter`], then [`change_stock`]).
//!
//! The rules (what a valid product is, what a read-check-write decides, what the audit
//! concludes) are plain functions; the SQL around them is at the bottom of each section.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, Transaction};

use crate::error::AppError;
use crate::lock::{LockError, Owner, Recipe, Session, StockLock, Token};
use crate::state::AppState;

mod terms;

pub use terms::{change_terms, Catalog, Current, Terms, TermsChange};

/// How a product's stock is protected against concurrent buyers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Guard {
    /// Read-check-write inside the product's fair ZooKeeper lock, fenced by the lock's token.
    Zk,
    /// The same, under the naive lock everyone watches (the herd effect), also fenced.
    ZkHerd,
    /// No lock: one conditional `UPDATE ... WHERE stock >= q`. The database-only baseline.
    PgAtomic,
    /// Read-check-write with no lock and no fence. Oversells under concurrency: the demo.
    None,
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Zk => "zk",
            Guard::ZkHerd => "zk-herd",
            Guard::PgAtomic => "pg-atomic",
            Guard::None => "none",
        }
    }

    /// The ZooKeeper lock recipe that guards the stock, for the guards that take one.
    pub fn recipe(self) -> Option<Recipe> {
        match self {
            Guard::Zk => Some(Recipe::Fair),
            Guard::ZkHerd => Some(Recipe::Herd),
            Guard::PgAtomic | Guard::None => None,
        }
    }
}

impl TryFrom<String> for Guard {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.as_str() {
            "zk" => Ok(Guard::Zk),
            "zk-herd" => Ok(Guard::ZkHerd),
            "pg-atomic" => Ok(Guard::PgAtomic),
            "none" => Ok(Guard::None),
            _ => Err(format!("unknown guard {s:?}")),
        }
    }
}

#[derive(Clone, Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Product {
    pub id: i64,
    pub name: String,
    pub price_cents: i64,
    pub stock: i32,
    /// Σ quantity of `reserved` + `paid` orders: the audit's figure, not `stocked_total - stock`
    /// (they differ exactly when something oversold).
    pub sold: i64,
    pub stocked_total: i32,
    pub max_per_order: i32,
    /// Most units one user may hold (reserved + paid).
    pub per_user_limit: i32,
    /// How long a reservation waits for payment.
    pub reservation_ttl_s: i32,
    #[sqlx(try_from = "String")]
    pub guard: Guard,
    /// Most orders one lock cycle serves (1: each order takes the lock for itself).
    pub batch_max: i32,
    /// 1 at creation, one more with each change of the terms (`PUT .../terms`).
    pub terms_version: i32,
    /// Whether the answering instance has the product flagged sold out (see `soldout`).
    #[sqlx(skip)]
    pub sold_out: bool,
}

/// The admin's request to put a product on sale.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProduct {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1F\x7F-\x9F]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F]*$"
    )]
    pub name: String,
    #[schema(minimum = 0, maximum = 10_000_000_000_i64)]
    #[serde(deserialize_with = "crate::integer::whole")]
    pub price_cents: i64,
    #[schema(minimum = 0, maximum = 100_000_000)]
    #[serde(deserialize_with = "crate::integer::whole")]
    pub stock: i64,
    /// `none` only on a server started with `--allow-unsafe-guards`.
    #[serde(default = "default_guard")]
    pub guard: Guard,
    /// Default 10.
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub max_per_order: Option<i64>,
    /// Default 1.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub per_user_limit: Option<i64>,
    /// Default 600.
    #[schema(minimum = 1, maximum = 604_800)]
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub reservation_ttl_s: Option<i64>,
    /// Defaults to `--batch-max`; always 1 for `none`, which exists to show the race.
    #[schema(minimum = 1, maximum = 4096)]
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub batch_max: Option<i64>,
}

fn default_guard() -> Guard {
    Guard::Zk
}

pub const MAX_STOCK: i64 = 100_000_000;
pub const MAX_PRICE_CENTS: i64 = 10_000_000_000;
pub const MAX_PER_ORDER: i64 = 1_000;
pub const MAX_PER_USER: i64 = 1_000_000;
pub const MAX_RESERVATION_TTL_S: i64 = 7 * 24 * 3600;
pub const MAX_BATCH: i64 = 4096;

impl NewProduct {
    /// Checks the product against the sale's rules; the message names the broken one. A
    /// field out of its range is a malformed request (400); the unsafe guard is the server's
    /// to allow (403), and serving it in batches contradicts what it is for (422).
    pub fn validate(&self, allow_unsafe_guards: bool) -> Result<(), AppError> {
        if self.guard == Guard::None && !allow_unsafe_guards {
            return Err(AppError::DemoDisabled);
        }
        self.check_fields().map_err(AppError::InvalidRequest)?;
        if self.guard == Guard::None && self.batch_max.is_some_and(|batch| batch > 1) {
            return Err(AppError::Unprocessable(
                "guard \"none\" serves one order at a time: batch_max must be 1".into(),
            ));
        }
        Ok(())
    }

    fn check_fields(&self) -> Result<(), String> {
        let name_len = self.name.trim().chars().count();
        if name_len == 0 || self.name.chars().count() > 200 {
            return Err("name must be 1 to 200 characters".into());
        }
        if self.name.chars().any(char::is_control) {
            return Err("name must not contain control characters".into());
        }
        within("price_cents", Some(self.price_cents), 0, MAX_PRICE_CENTS)?;
        within("stock", Some(self.stock), 0, MAX_STOCK)?;
        within("max_per_order", self.max_per_order, 1, MAX_PER_ORDER)?;
        within("per_user_limit", self.per_user_limit, 1, MAX_PER_USER)?;
        within(
            "reservation_ttl_s",
            self.reservation_ttl_s,
            1,
            MAX_RESERVATION_TTL_S,
        )?;
        within("batch_max", self.batch_max, 1, MAX_BATCH)?;
        Ok(())
    }
}

/// A field's value, if given, within `min..=max`; else a message naming the field. (A new
/// product's fields and a change of its terms share these bounds.)
fn within(field: &str, value: Option<i64>, min: i64, max: i64) -> Result<(), String> {
    match value {
        Some(v) if !(min..=max).contains(&v) => {
            Err(format!("{field} must be between {min} and {max}"))
        }
        _ => Ok(()),
    }
}

/// Whether a product's books balance: every unit stocked is either still in stock or in an
/// order that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Audit {
    pub stocked_total: i64,
    pub stock: i64,
    pub sold: i64,
    pub oversold: i64,
    pub consistent: bool,
}

impl Audit {
    pub fn new(stocked_total: i64, stock: i64, sold: i64) -> Audit {
        Audit {
            stocked_total,
            stock,
            sold,
            oversold: (sold - stocked_total).max(0),
            consistent: stock + sold == stocked_total,
        }
    }
}

impl From<&Product> for Audit {
    fn from(p: &Product) -> Audit {
        Audit::new(p.stocked_total.into(), p.stock.into(), p.sold)
    }
}

// `sold` counts the statuses whose units are out of stock and spoken for: reserved, paying
// (a payment claimed it) and paid.
const PRODUCT_COLUMNS: &str = "p.id, p.name, p.price_cents, p.stock, p.stocked_total, p.max_per_order,
    p.per_user_limit, p.reservation_ttl_s, p.guard, p.batch_max, p.terms_version,
    COALESCE((SELECT SUM(o.quantity) FROM orders o
              WHERE o.product_id = p.id AND o.status IN ('reserved', 'paying', 'paid')), 0)::BIGINT AS sold";

/// Puts a product on sale; `default_batch` is the server's `--batch-max`.
pub async fn create(
    db: &PgPool,
    new: &NewProduct,
    default_batch: i32,
) -> Result<Product, sqlx::Error> {
    let batch = match new.guard {
        Guard::None => 1,
        _ => new.batch_max.map_or(default_batch, |b| b as i32),
    };
    let sql = format!(
        "WITH p AS (INSERT INTO products (name, price_cents, stock, stocked_total, max_per_order, guard,
                                      per_user_limit, reservation_ttl_s, batch_max)
                    VALUES ($1, $2, $3, $3, COALESCE($4, 10), $5, COALESCE($6, 1), COALESCE($7, 600), $8)
                    RETURNING *)
         SELECT {PRODUCT_COLUMNS} FROM p"
    );
    sqlx::query_as(&sql)
        .bind(new.name.trim())
        .bind(new.price_cents)
        .bind(new.stock as i32)
        .bind(new.max_per_order.map(|m| m as i32))
        .bind(new.guard.as_str())
        .bind(new.per_user_limit.map(|m| m as i32))
        .bind(new.reservation_ttl_s.map(|t| t as i32))
        .bind(batch)
        .fetch_one(db)
        .await
}

/// Creates the demo products unless some product exists. Several instances may start at
/// once, so the check and the inserts run under a transaction-scoped advisory lock.
pub async fn seed_demo(
    db: &PgPool,
    allow_unsafe_guards: bool,
    default_batch: i32,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('seckill.seed_demo'))")
        .execute(&mut *tx)
        .await?;
    let empty: bool = sqlx::query_scalar("SELECT NOT EXISTS (SELECT 1 FROM products)")
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
            sqlx::query(
                "INSERT INTO products (name, price_cents, stock, stocked_total, guard, batch_max)
                 VALUES ($1, 4999, 100, 100, $2, $3)",
            )
            .bind(name)
            .bind(guard.as_str())
            .bind(batch)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await
}

/// The product's stock now.
pub async fn stock(db: &PgPool, id: i64) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar("SELECT stock FROM products WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn get(db: &PgPool, id: i64) -> Result<Option<Product>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {PRODUCT_COLUMNS} FROM products p WHERE p.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

pub async fn list(db: &PgPool) -> Result<Vec<Product>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {PRODUCT_COLUMNS} FROM products p ORDER BY p.id"
    ))
    .fetch_all(db)
    .await
}

/// The zxid of the newest fencing token that claimed the product's row.
pub async fn fence(db: &PgPool, product_id: i64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT fence FROM products WHERE id = $1")
        .bind(product_id)
        .fetch_optional(db)
        .await
}

/// Restocking must not pass this lifetime total, so neither stock column can overflow.
pub const MAX_STOCKED_TOTAL: i64 = MAX_STOCK * 10;

/// Puts `quantity` more units on sale, through the product's guard like every stock change,
/// raising the audit's reference figure in the same transaction; then clears the sold-out
/// flag on every instance.
pub async fn restock(state: &AppState, product: &Product, quantity: i64) -> Result<(), AppError> {
    if !(1..=MAX_STOCK).contains(&quantity) {
        return Err(AppError::invalid(format!(
            "quantity must be between 1 and {MAX_STOCK}"
        )));
    }
    if i64::from(product.stocked_total) + quantity > MAX_STOCKED_TOTAL {
        return Err(AppError::Unprocessable(
            "restocking that much would pass the product's lifetime stock limit".into(),
        ));
    }
    let quantity = quantity as i32;
    let (lock, protection) = enter(
        state,
        product.id,
        product.guard,
        Session::Shared,
        state.config.lock_timeout(),
    )
    .await?;
    let pause = think(state.config.stock_think());
    let outcome = change_stock(
        &state.db,
        product.id,
        Change::Return(quantity),
        protection,
        pause,
    )
    .await?;
    let mut tx = match outcome {
        Outcome::Applied(tx) => tx,
        Outcome::Insufficient { .. } => {
            return Err(AppError::Unprocessable(
                "restocking that much would overflow the stock".into(),
            ))
        }
        Outcome::Fenced => return Err(LockError::Lost.into()),
    };
    sqlx::query("UPDATE products SET stocked_total = stocked_total + $2 WHERE id = $1")
        .bind(product.id)
        .bind(quantity)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    drop(lock);
    state.sold_out.lower(&product.id.to_string()).await;
    tracing::info!(product = product.id, quantity, "restocked");
    Ok(())
}

/// What the product's guard needs before a stock change: for `zk` and `zk-herd`, the
/// product's lock (kept until the change commits), whose token fences the write. `timeout`
/// bounds the wait for the lock.
pub async fn enter(
    state: &AppState,
    product_id: i64,
    guard: Guard,
    session: Session,
    timeout: Duration,
) -> Result<(Option<StockLock>, Protection), LockError> {
    enter_as(state, None, product_id, guard, session, timeout).await
}

/// [`enter`] for an `owner` that may hold the product's lock already: then the lock is
/// re-entered by counting (see `lock::Owner`), with the same token.
pub async fn enter_as(
    state: &AppState,
    owner: Option<&Owner>,
    product_id: i64,
    guard: Guard,
    session: Session,
    timeout: Duration,
) -> Result<(Option<StockLock>, Protection), LockError> {
    let Some(recipe) = guard.recipe() else {
        let protection = match guard {
            Guard::None => Protection::Unguarded,
            _ => Protection::Atomic,
        };
        return Ok((None, protection));
    };
    let lock = state
        .zk
        .lock_stock_as(owner, product_id, recipe, session, timeout)
        .await?;
    let protection = Protection::Fenced(lock.token);
    Ok((Some(lock), protection))
}

/// [`enter`] for a sale's lock cycle: with a ZooKeeper guard, the product's terms are
/// read-locked too (see [`terms`]), until the lock is released.
pub async fn enter_for_sale(
    state: &AppState,
    product_id: i64,
    guard: Guard,
    session: Session,
    timeout: Duration,
) -> Result<(Option<StockLock>, Protection), LockError> {
    let Some(recipe) = guard.recipe() else {
        return enter(state, product_id, guard, session, timeout).await;
    };
    let lock = state
        .zk
        .lock_for_sale(product_id, recipe, session, timeout)
        .await?;
    let protection = Protection::Fenced(lock.token);
    Ok((Some(lock), protection))
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

/// Who may write the stock, and how that is checked.
#[derive(Clone, Copy, Debug)]
pub enum Protection {
    /// We hold the ZooKeeper lock whose token this is. The row must be claimed for it.
    Fenced(Token),
    /// No lock: PostgreSQL's row lock, taken at the read and held to the commit.
    Atomic,
    /// Nothing: the unsafe demo guard.
    Unguarded,
}

/// How a stock change ended. `Applied` and `Insufficient` hand back the open transaction so
/// the caller records the order's new status atomically with the stock, then commits.
pub enum Outcome {
    Applied(Transaction<'static, Postgres>),
    /// Not enough stock; `stock` is what is left (0 means sold out).
    Insufficient {
        tx: Transaction<'static, Postgres>,
        stock: i32,
    },
    /// A newer lock holder claimed the row: our lock is no longer current. Nothing written.
    Fenced,
}

// Every stock write also tells every instance (LISTEN, see `events`) that the product
// changed, in the same statement: delivered on commit, never for a rolled-back write.
const NOTIFY: &str =
    "RETURNING pg_notify('seckill_events', json_build_object('product', id)::text)";

/// The row is still claimed for our token ($2 epoch, $3 zxid), or we hold none (NULLs).
const STILL_OURS: &str =
    "(($2::BIGINT IS NULL AND $3::BIGINT IS NULL) OR (p.fence_epoch = $2 AND p.fence = $3))";

/// Claims the product's row for `token`, in a commit of its own, if the token is the row's
/// (an owner's re-entry: one grant, one node, so one holder) or newer than the row's: a later zxid of the same ensemble, or any zxid of an ensemble Postgres first
/// saw later. The second case is how a wiped or replaced ZooKeeper, whose zxids start again
/// from zero, takes over without anyone editing the database; and why no window opens for
/// two writers: the order of tokens stays total, and the old ensemble's holders are fenced
/// out for good even if it comes back. `None`: a newer token has claimed the row.
async fn claim(db: &PgPool, product_id: i64, token: Token) -> Result<Option<Claim>, sqlx::Error> {
    let mut met = false;
    loop {
        let epoch: Option<i64> = sqlx::query_scalar(
            "UPDATE products p SET fence_epoch = e.epoch, fence = $3
             FROM zk_ensembles e
             WHERE p.id = $1 AND e.id = $2 AND (p.fence_epoch, p.fence) <= (e.epoch, $3)
             RETURNING e.epoch",
        )
        .bind(product_id)
        .bind(token.ensemble)
        .bind(token.zxid)
        .fetch_optional(db)
        .await?;
        if let Some(epoch) = epoch {
            return Ok(Some(Claim {
                epoch,
                zxid: token.zxid,
            }));
        }
        if met {
            return Ok(None);
        }
        // Not claimed: a newer token holds the row, or Postgres had not met this ensemble
        // (its first tokens after a replacement). Number it (once per ensemble; another
        // instance may do it at the same moment), then try once more.
        let new = sqlx::query("INSERT INTO zk_ensembles (id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(token.ensemble)
            .execute(db)
            .await?;
        if new.rows_affected() == 1 {
            tracing::warn!(ensemble = %token.ensemble, "a ZooKeeper ensemble new to Postgres granted a lock: its tokens now fence the old ones");
        }
        met = true;
    }
}

/// The stock, read under its guard in an open transaction, with the units the order's
/// buyers already hold (the per-customer limit is decided with the stock), ready to be
/// written once.
pub struct StockRead {
    pub tx: Transaction<'static, Postgres>,
    pub stock: i32,
    /// Every unit ever put on sale.
    pub stocked_total: i32,
    /// Units in reservations waiting for their payment (`reserved`).
    pub unpaid: i32,
    /// Units held per buyer asked about (buyers holding none are absent).
    pub held: HashMap<String, i32>,
    /// The product's terms as the row says now: what this read-check-write decides with.
    pub terms: Current,
    product_id: i64,
    /// The write is fenced by this claim, if we hold a lock.
    claim: Option<Claim>,
}

/// A token as the product's row records it: Postgres's number for the token's ensemble
/// (`zk_ensembles.epoch`, in the order Postgres first saw them) and the zxid.
#[derive(Clone, Copy, Debug)]
struct Claim {
    epoch: i64,
    zxid: i64,
}

/// The stock, its lifetime total, the unpaid reserved units, the buyers' holdings as two
/// parallel arrays (NULL when none hold any), and the terms.
type StockRow = (
    i32,
    i32,
    i32,
    Option<Vec<String>>,
    Option<Vec<i32>>,
    i64,
    i32,
    i32,
    i32,
    i32,
);

pub enum Read {
    Ready(StockRead),
    /// A newer lock holder claimed the row: our lock is no longer current. Nothing written.
    Fenced,
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
        sqlx::query("SELECT 1 FROM products WHERE id = $1 FOR UPDATE")
            .bind(product_id)
            .execute(&mut *tx)
            .await?;
    }
    // Fenced when we hold a token (the row is still claimed for it), not at all otherwise.
    let row: Option<StockRow> = sqlx::query_as(&format!(
        "SELECT p.stock, p.stocked_total,
                (SELECT COALESCE(SUM(o.quantity), 0)::INT FROM orders o
                 WHERE o.product_id = p.id AND o.status = 'reserved'),
                (SELECT array_agg(h.user_id ORDER BY h.user_id) FROM purchases h
                 WHERE h.product_id = p.id AND h.user_id = ANY($4)),
                (SELECT array_agg(h.units ORDER BY h.user_id) FROM purchases h
                 WHERE h.product_id = p.id AND h.user_id = ANY($4)),
                p.price_cents, p.max_per_order, p.per_user_limit, p.reservation_ttl_s,
                p.terms_version
         FROM products p WHERE p.id = $1 AND {STILL_OURS}"
    ))
    .bind(product_id)
    .bind(claim.map(|c| c.epoch))
    .bind(claim.map(|c| c.zxid))
    .bind(buyers)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((stock, stocked_total, unpaid, users, units, price, max, limit, ttl, version)) = row
    else {
        return Ok(Read::Fenced);
    };
    let terms = Current {
        price_cents: price,
        max_per_order: max,
        per_user_limit: limit,
        reservation_ttl_s: ttl,
        terms_version: version,
    };
    let held = users
        .unwrap_or_default()
        .into_iter()
        .zip(units.unwrap_or_default())
        .collect();
    Ok(Read::Ready(StockRead {
        tx,
        stock,
        stocked_total,
        unpaid,
        held,
        terms,
        product_id,
        claim,
    }))
}

impl StockRead {
    /// Writes the stock read-check-write decided on. `None` if a newer holder claimed the row
    /// since our claim, or the terms changed since our read: nothing is written (the
    /// transaction rolls back when dropped).
    pub async fn write(
        mut self,
        next: i32,
    ) -> Result<Option<Transaction<'static, Postgres>>, sqlx::Error> {
        // The terms read with the stock must still be the row's: a holder that lost its
        // locks mid-cycle (session expired) would otherwise decide under terms a change has
        // replaced since, which the terms lock alone cannot stop once it is gone.
        let written = sqlx::query(&format!(
            "UPDATE products p SET stock = $4, updated_at = now()
             WHERE id = $1 AND {STILL_OURS} AND p.terms_version = $5 {NOTIFY}"
        ))
        .bind(self.product_id)
        .bind(self.claim.map(|c| c.epoch))
        .bind(self.claim.map(|c| c.zxid))
        .bind(next)
        .bind(self.terms.terms_version)
        .fetch_optional(&mut *self.tx)
        .await?;
        Ok(written.map(|_| self.tx))
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
    let read = match read_stock(db, product_id, protection, &[]).await? {
        Read::Ready(read) => read,
        Read::Fenced => return Ok(Outcome::Fenced),
    };
    pause.await;
    let Some(next) = next_stock(read.stock, change) else {
        let stock = read.stock;
        return Ok(Outcome::Insufficient { tx: read.tx, stock });
    };
    Ok(match read.write(next).await? {
        Some(tx) => Outcome::Applied(tx),
        None => Outcome::Fenced,
    })
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

    fn product(guard: Guard) -> NewProduct {
        NewProduct {
            name: "Keyboard".into(),
            price_cents: 999,
            stock: 10,
            guard,
            max_per_order: None,
            per_user_limit: None,
            reservation_ttl_s: None,
            batch_max: None,
        }
    }

    #[test]
    fn the_check_refuses_to_take_more_than_is_left() {
        assert_eq!(next_stock(1, Change::Take(1)), Some(0));
        assert_eq!(next_stock(0, Change::Take(1)), None);
        assert_eq!(next_stock(2, Change::Take(3)), None);
        assert_eq!(next_stock(0, Change::Return(2)), Some(2));
        assert_eq!(next_stock(i32::MAX, Change::Return(1)), None);
    }

    #[test]
    fn audit_flags_oversell_and_imbalance() {
        let ok = Audit::new(50, 0, 50);
        assert_eq!((ok.oversold, ok.consistent), (0, true));
        // Lost update: both buyers wrote stock 0 after reading 1.
        let oversold = Audit::new(1, 0, 2);
        assert_eq!((oversold.oversold, oversold.consistent), (1, false));
        let leaked = Audit::new(10, 5, 4);
        assert_eq!((leaked.oversold, leaked.consistent), (0, false));
    }

    #[test]
    fn unsafe_guard_needs_the_servers_consent_and_serves_one_order_at_a_time() {
        let mut batched_none = product(Guard::None);
        batched_none.batch_max = Some(8);
        let code = |p: &NewProduct, allow: bool| p.validate(allow).map_err(|e| e.code());
        assert_eq!(code(&batched_none, true), Err("unprocessable"));
        assert_eq!(code(&batched_none, false), Err("demo_disabled"));
        batched_none.batch_max = Some(1);
        assert!(batched_none.validate(true).is_ok());
        assert_eq!(code(&product(Guard::None), false), Err("demo_disabled"));
        assert!(product(Guard::None).validate(true).is_ok());
        assert!(product(Guard::Zk).validate(false).is_ok());
    }

    #[test]
    fn product_fields_are_bounded() {
        type Breaker = fn(&mut NewProduct);
        let cases: [(Breaker, &str); 11] = [
            (|p| p.batch_max = Some(0), "batch_max"),
            (|p| p.batch_max = Some(MAX_BATCH + 1), "batch_max"),
            (|p| p.name = "a\0b".into(), "name"),
            (|p| p.name = "  ".into(), "name"),
            (|p| p.name = "x".repeat(201), "name"),
            (|p| p.price_cents = -1, "price_cents"),
            (|p| p.stock = -1, "stock"),
            (|p| p.stock = MAX_STOCK + 1, "stock"),
            (|p| p.max_per_order = Some(0), "max_per_order"),
            (|p| p.per_user_limit = Some(0), "per_user_limit"),
            (|p| p.reservation_ttl_s = Some(0), "reservation_ttl_s"),
        ];
        for (break_it, field) in cases {
            let mut p = product(Guard::Zk);
            break_it(&mut p);
            let err = p.validate(true).unwrap_err();
            assert_eq!(err.code(), "invalid_request");
            assert!(err.to_string().contains(field), "{err} should name {field}");
        }
    }

    #[test]
    fn guards_round_trip_through_their_names() {
        for g in [Guard::Zk, Guard::ZkHerd, Guard::PgAtomic, Guard::None] {
            assert_eq!(Guard::try_from(g.as_str().to_string()), Ok(g));
            assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
        }
        assert!(Guard::try_from("redis".to_string()).is_err());
    }
}
