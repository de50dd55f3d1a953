//! A product: what the admin puts on sale (checked against the sale's bounds), what the API
//! shows of it, whether its books balance (the audit), and its SQL.

use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use chrono::{DateTime, Utc};

use super::guard::Guard;
use super::window::{SaleState, Window};
use crate::error::Error;

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
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
    pub guard: Guard,
    /// Most orders one lock cycle serves (1: each order takes the lock for itself).
    pub batch_max: i32,
    /// 1 at creation, one more with each change of the terms (`PUT .../terms`).
    pub terms_version: i32,
    /// Whether the answering instance has the product flagged sold out (see `soldout`).
    pub sold_out: bool,
    /// When the sale opens (RFC 3339); `null`: on sale since it was created.
    pub opens_at: Option<DateTime<Utc>>,
    /// When the sale closes; `null`: it does not.
    pub closes_at: Option<DateTime<Utc>>,
    /// An admin paused the sale (`POST .../pause`).
    pub paused: bool,
    /// Buyers come in through the product's line (`POST .../line`), each order with its pass.
    pub line: bool,
    /// The sale's state at `server_time`.
    pub state: SaleState,
    /// The answering instance's clock: count down to `opens_at` on it, not the client's.
    pub server_time: DateTime<Utc>,
}

impl Product {
    /// The product as a buyer sees it at `now`, with this instance's sold-out flag.
    pub fn seen_at(mut self, now: DateTime<Utc>, sold_out_flag: bool) -> Product {
        self.sold_out = sold_out_flag;
        self.server_time = now;
        self.state = self.window().state(now, sold_out_flag || self.stock == 0);
        self
    }

    pub fn window(&self) -> Window {
        Window {
            opens_at: self.opens_at,
            closes_at: self.closes_at,
            paused: self.paused,
        }
    }
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
    #[serde(deserialize_with = "crate::integer::whole")]
    pub price_cents: i64,
    #[serde(deserialize_with = "crate::integer::whole")]
    pub stock: i64,
    /// `none` only on a server started with `--allow-unsafe-guards`.
    #[serde(default = "default_guard")]
    pub guard: Guard,
    /// Default 10.
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub max_per_order: Option<i64>,
    /// Default 1.
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub per_user_limit: Option<i64>,
    /// Default 600.
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub reservation_ttl_s: Option<i64>,
    /// Defaults to `--batch-max`; always 1 for `none`, which exists to show the race.
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub batch_max: Option<i64>,
    /// When the sale opens (RFC 3339); left out: at once.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub opens_at: Option<DateTime<Utc>>,
    /// When the sale closes (RFC 3339), after `opens_at`; left out: never.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub closes_at: Option<DateTime<Utc>>,
    /// Whether buyers come in through a line, each order with the pass it gives. Default:
    /// on for a sale with an `opens_at`, off otherwise.
    pub line: Option<bool>,
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

/// Every bounded field of a product and its terms, with its range: the one source for the
/// checks below and for the API description (`http::openapi` writes them into the schemas).
pub const BOUNDS: [(&str, i64, i64); 6] = [
    ("price_cents", 0, MAX_PRICE_CENTS),
    ("stock", 0, MAX_STOCK),
    ("max_per_order", 1, MAX_PER_ORDER),
    ("per_user_limit", 1, MAX_PER_USER),
    ("reservation_ttl_s", 1, MAX_RESERVATION_TTL_S),
    ("batch_max", 1, MAX_BATCH),
];

impl NewProduct {
    /// Checks the product against the sale's rules; the message names the broken one. A
    /// field out of its range is a malformed request (400); the unsafe guard is the server's
    /// to allow (403), and serving it in batches contradicts what it is for (422).
    pub fn validate(&self, allow_unsafe_guards: bool) -> Result<(), Error> {
        if self.guard == Guard::None && !allow_unsafe_guards {
            return Err(Error::DemoDisabled);
        }
        self.check_fields().map_err(Error::InvalidRequest)?;
        Window::check(self.opens_at, self.closes_at)?;
        if self.guard == Guard::None && self.batch_max.is_some_and(|batch| batch > 1) {
            return Err(Error::Unprocessable(
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
        within("price_cents", Some(self.price_cents))?;
        within("stock", Some(self.stock))?;
        within("max_per_order", self.max_per_order)?;
        within("per_user_limit", self.per_user_limit)?;
        within("reservation_ttl_s", self.reservation_ttl_s)?;
        within("batch_max", self.batch_max)?;
        Ok(())
    }
}

/// A field's value, if given, within its [`BOUNDS`]; else a message naming the field. (A new
/// product's fields and a change of its terms share these bounds.)
pub(super) fn within(field: &str, value: Option<i64>) -> Result<(), String> {
    let (_, min, max) = BOUNDS
        .iter()
        .find(|(name, _, _)| *name == field)
        .copied()
        .expect("a bounded field");
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
    /// The units of the product's reserved, paying and paid orders, summed now.
    pub sold: i64,
    /// The same count as PostgreSQL keeps it for the product views (equal, or the books are
    /// not consistent).
    pub kept_sold: i64,
    pub oversold: i64,
    pub consistent: bool,
}

impl Audit {
    pub fn new(stocked_total: i64, stock: i64, sold: i64, kept_sold: i64) -> Audit {
        Audit {
            stocked_total,
            stock,
            sold,
            kept_sold,
            oversold: (sold - stocked_total).max(0),
            consistent: stock + sold == stocked_total && kept_sold == sold,
        }
    }
}

/// The product's books, its orders summed (the one read that scans them: it is the check).
pub async fn audit(db: &PgPool, id: i64) -> Result<Option<Audit>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT p.stocked_total AS "stocked_total!", p.stock AS "stock!", p.sold AS "kept_sold!",
                  COALESCE((SELECT SUM(o.quantity) FROM orders o
                            WHERE o.product_id = p.id AND o.status IN ('reserved', 'paying', 'paid')), 0)::BIGINT AS "sold!"
           FROM products p WHERE p.id = $1"#,
        id
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| Audit::new(r.stocked_total.into(), r.stock.into(), r.sold, r.kept_sold)))
}

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
    let id = sqlx::query_scalar!(
        r#"WITH p AS (INSERT INTO products (name, price_cents, stock, stocked_total, max_per_order, guard,
                                          per_user_limit, reservation_ttl_s, batch_max,
                                          opens_at, closes_at, line)
                    VALUES ($1, $2, $3, $3, COALESCE($4, 10), $5, COALESCE($6, 1), COALESCE($7, 600), $8,
                            $9, $10, $11)
                    RETURNING id, line),
              l AS (INSERT INTO lines (product_id) SELECT id FROM p WHERE p.line)
         SELECT id AS "id!" FROM p"#,
        new.name.trim(),
        new.price_cents,
        new.stock as i32,
        new.max_per_order.map(|m| m as i32),
        new.guard.as_str(),
        new.per_user_limit.map(|m| m as i32),
        new.reservation_ttl_s.map(|t| t as i32),
        batch,
        new.opens_at,
        new.closes_at,
        new.line.unwrap_or(new.opens_at.is_some())
    )
    .fetch_one(db)
    .await?;
    get(db, id).await?.ok_or(sqlx::Error::RowNotFound)
}

/// The product's stock now.
pub async fn stock(db: &PgPool, id: i64) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar!("SELECT stock FROM products WHERE id = $1", id)
        .fetch_optional(db)
        .await
}

pub async fn get(db: &PgPool, id: i64) -> Result<Option<Product>, sqlx::Error> {
    Ok(select(db, id..=id).await?.pop())
}

pub async fn list(db: &PgPool) -> Result<Vec<Product>, sqlx::Error> {
    select(db, i64::MIN..=i64::MAX).await
}

/// Products as their views show them, those with an id in `ids`, by id. A range, not an
/// optional id: `id BETWEEN $1 AND $2` can use the primary key in the statement's generic
/// plan (PostgreSQL's plan for a prepared statement after a few runs), for one product as
/// for all; `$1 IS NULL OR id = $1` cannot, and the one-product view is read often (the
/// event stream's, each tick a product changed). `sold` is the units of
/// reserved, paying and paid orders as PostgreSQL keeps them (migrations/0013): no scan of a
/// product's orders per view. The sale's state and the sold-out flag are the caller's to set
/// (`Product::seen_at`).
async fn select(
    db: &PgPool,
    ids: std::ops::RangeInclusive<i64>,
) -> Result<Vec<Product>, sqlx::Error> {
    sqlx::query_as!(
        Product,
        "SELECT p.id AS \"id!\", p.name AS \"name!\", p.price_cents AS \"price_cents!\", p.stock AS \"stock!\",
                 p.stocked_total AS \"stocked_total!\", p.max_per_order AS \"max_per_order!\",
                 p.per_user_limit AS \"per_user_limit!\", p.reservation_ttl_s AS \"reservation_ttl_s!\",
                 p.guard AS \"guard!: Guard\", p.batch_max AS \"batch_max!\", p.terms_version AS \"terms_version!\",
                 p.sold AS \"sold!\",
                 false AS \"sold_out!\",
                 p.opens_at, p.closes_at, p.paused AS \"paused!\", p.line AS \"line!\",
                 'open' AS \"state!: SaleState\", now() AS \"server_time!\"
         FROM products p WHERE p.id BETWEEN $1 AND $2 ORDER BY p.id",
        ids.start(),
        ids.end()
    )
    .fetch_all(db)
    .await
}

/// The zxid of the newest fencing token that claimed the product's row.
pub async fn fence(db: &PgPool, product_id: i64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar!("SELECT fence FROM products WHERE id = $1", product_id)
        .fetch_optional(db)
        .await
}

/// Restocking must not pass this lifetime total, so neither stock column can overflow.
pub const MAX_STOCKED_TOTAL: i64 = MAX_STOCK * 10;

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
            opens_at: None,
            closes_at: None,
            line: None,
        }
    }

    #[test]
    fn audit_flags_oversell_and_imbalance() {
        let ok = Audit::new(50, 0, 50, 50);
        assert_eq!((ok.oversold, ok.consistent), (0, true));
        // Lost update: both buyers wrote stock 0 after reading 1.
        let oversold = Audit::new(1, 0, 2, 2);
        assert_eq!((oversold.oversold, oversold.consistent), (1, false));
        let leaked = Audit::new(10, 5, 4, 4);
        assert_eq!((leaked.oversold, leaked.consistent), (0, false));
        let drifted = Audit::new(10, 5, 5, 6);
        assert_eq!((drifted.oversold, drifted.consistent), (0, false));
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
}
