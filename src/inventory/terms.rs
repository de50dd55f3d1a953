//! A product's terms of sale (price, limits, reservation time): kept by each instance, read
//! again by each lock cycle, and changed under the product's terms write lock.
//!
//! Who sees which terms, across instances:
//! - a **change** ([`change_terms`]) takes the product's terms lock for writing (ZooKeeper,
//!   Curator's read-write lock layout), updates the row and bumps `terms_version`;
//! - each **lock cycle** of a ZooKeeper-guarded product holds the read side from before it
//!   queues for the stock lock until its commit (`Zk::lock_for_sale`; an instance's cycles
//!   share one read node, kept across them until a writer queues), and reads the terms
//!   from the row in its own stock transaction ([`Current`]), not from the cache.
//!
//! So a change waits for the cycles already deciding under the old terms, on every instance,
//! and every cycle after it decides under the new ones; its answer means no order anywhere
//! is still being decided on the old terms. Postgres alone would not give that for the fenced
//! path, which holds no row lock from its read to its write. Readers share: a change waits
//! for the cycles in flight, not for the sale to stop.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::PgPool;

use super::guard::Guard;
use super::product::{self, within, Product};
use super::window::Window;
use crate::error::Error;
use crate::lock::{Access, Zk};

/// A product's terms of sale: what the order path needs, all but the stock. Each instance
/// keeps them (see [`Catalog`]) for the checks made before an order queues; a lock cycle
/// decides with the row's (see [`Current`]).
#[derive(Clone, Debug)]
pub struct Terms {
    pub id: i64,
    pub price_cents: i64,
    pub max_per_order: i32,
    pub per_user_limit: i32,
    pub reservation_ttl_s: i32,
    pub guard: Guard,
    pub batch_max: i32,
    pub terms_version: i32,
    pub window: Window,
    /// Whether buyers come in through the product's line, each order with its pass.
    pub line: bool,
}

impl Terms {
    /// Whether orders are combined, many per lock cycle; else each takes the guard alone.
    pub fn batched(&self) -> bool {
        self.batch_max > 1 && self.guard != Guard::None
    }

    /// These terms, as the row now says they are.
    pub fn now(&self, current: &Current) -> Terms {
        Terms {
            price_cents: current.price_cents,
            max_per_order: current.max_per_order,
            per_user_limit: current.per_user_limit,
            reservation_ttl_s: current.reservation_ttl_s,
            terms_version: current.terms_version,
            window: current.window,
            ..self.clone()
        }
    }
}

/// The terms as the product's row says in a lock cycle's stock transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    pub price_cents: i64,
    pub max_per_order: i32,
    pub per_user_limit: i32,
    pub reservation_ttl_s: i32,
    pub terms_version: i32,
    pub window: Window,
}

/// This instance's copy of every product's [`Terms`], filled on first use and replaced when
/// a lock cycle meets a newer version.
#[derive(Clone, Default)]
pub struct Catalog {
    terms: Arc<RwLock<HashMap<i64, Arc<Terms>>>>,
}

impl Catalog {
    /// The product's terms if this instance has read them already (no query).
    pub fn cached(&self, id: i64) -> Option<Arc<Terms>> {
        self.terms
            .read()
            .expect("catalog poisoned")
            .get(&id)
            .cloned()
    }

    pub async fn terms(&self, db: &PgPool, id: i64) -> Result<Option<Arc<Terms>>, sqlx::Error> {
        if let Some(terms) = self.cached(id) {
            return Ok(Some(terms));
        }
        self.reload(db, id).await
    }

    /// The product's terms as the row says now (kept if newer than this instance's copy):
    /// before refusing an order on this instance's copy, which may predate a change made
    /// through another instance.
    pub async fn reload(&self, db: &PgPool, id: i64) -> Result<Option<Arc<Terms>>, sqlx::Error> {
        let terms = sqlx::query!(
            r#"SELECT id, price_cents, max_per_order, per_user_limit, reservation_ttl_s,
                      guard AS "guard: Guard", batch_max, terms_version,
                      opens_at, closes_at, paused, line
               FROM products WHERE id = $1"#,
            id
        )
        .fetch_optional(db)
        .await?;
        let terms = terms.map(|row| Terms {
            id: row.id,
            price_cents: row.price_cents,
            max_per_order: row.max_per_order,
            per_user_limit: row.per_user_limit,
            reservation_ttl_s: row.reservation_ttl_s,
            guard: row.guard,
            batch_max: row.batch_max,
            terms_version: row.terms_version,
            window: Window {
                opens_at: row.opens_at,
                closes_at: row.closes_at,
                paused: row.paused,
            },
            line: row.line,
        });
        let Some(terms) = terms.map(Arc::new) else {
            return Ok(None); // not cached: the product may be created later
        };
        Ok(Some(self.keep(terms)))
    }

    /// The terms a lock cycle decides with: `cached`, unless the row it read says otherwise
    /// (then the newer ones are kept for the next orders' checks too).
    pub fn current(&self, cached: &Arc<Terms>, current: &Current) -> Arc<Terms> {
        if cached.terms_version == current.terms_version {
            return cached.clone();
        }
        self.keep(Arc::new(cached.now(current)))
    }

    /// Keeps `terms` unless a newer version is kept already; returns the newest.
    fn keep(&self, terms: Arc<Terms>) -> Arc<Terms> {
        let mut all = self.terms.write().expect("catalog poisoned");
        let kept = all.entry(terms.id).or_insert_with(|| terms.clone());
        if kept.terms_version < terms.terms_version {
            *kept = terms;
        }
        kept.clone()
    }

    /// Forgets the product's terms: the next order reads them again.
    fn forget(&self, id: i64) {
        self.terms.write().expect("catalog poisoned").remove(&id);
    }
}

/// The admin's change to a product's terms; fields left out (or null) stay as they are, and
/// a change of nothing changes nothing (no lock, no new version).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TermsChange {
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub price_cents: Option<i64>,
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub max_per_order: Option<i64>,
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub per_user_limit: Option<i64>,
    #[serde(default, deserialize_with = "crate::integer::optional")]
    pub reservation_ttl_s: Option<i64>,
    /// When the sale opens (RFC 3339); an order before it is refused `not_open`.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub opens_at: Option<DateTime<Utc>>,
    /// When the sale closes (RFC 3339), after `opens_at`.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub closes_at: Option<DateTime<Utc>>,
    /// Set by `POST .../pause` and `.../resume`, not by this body.
    #[serde(skip)]
    pub paused: Option<bool>,
}

impl TermsChange {
    /// The change that pauses (`true`) or resumes (`false`) a sale.
    pub fn pause(paused: bool) -> TermsChange {
        TermsChange {
            price_cents: None,
            max_per_order: None,
            per_user_limit: None,
            reservation_ttl_s: None,
            opens_at: None,
            closes_at: None,
            paused: Some(paused),
        }
    }

    /// Whether it names no field.
    pub fn is_empty(&self) -> bool {
        self.price_cents.is_none()
            && self.max_per_order.is_none()
            && self.per_user_limit.is_none()
            && self.reservation_ttl_s.is_none()
            && self.opens_at.is_none()
            && self.closes_at.is_none()
            && self.paused.is_none()
    }

    /// Each field given within the bounds a new product's has.
    pub fn validate(&self) -> Result<(), Error> {
        let field = |name, value| within(name, value).map_err(Error::InvalidRequest);
        field("price_cents", self.price_cents)?;
        field("max_per_order", self.max_per_order)?;
        field("per_user_limit", self.per_user_limit)?;
        field("reservation_ttl_s", self.reservation_ttl_s)?;
        Ok(())
    }
}

/// Changes the product's terms under its terms write lock (see the module's notes), waiting
/// at most `lock_timeout` for the lock cycles in flight. Returns the product as changed.
pub async fn change_terms(
    db: &PgPool,
    zk: &Zk,
    catalog: &Catalog,
    id: i64,
    change: &TermsChange,
    lock_timeout: Duration,
) -> Result<Product, Error> {
    change.validate()?;
    let Some(product) = product::get(db, id).await? else {
        return Err(Error::UnknownProduct(id));
    };
    if change.is_empty() {
        return Ok(product);
    }
    Window::check(
        change.opens_at.or(product.opens_at),
        change.closes_at.or(product.closes_at),
    )?;
    let write = zk
        .lock_terms(id, Access::Write, "terms-change", lock_timeout)
        .await?;
    let changed = sqlx::query!(
        "UPDATE products SET price_cents = COALESCE($2, price_cents),
                max_per_order = COALESCE($3, max_per_order),
                per_user_limit = COALESCE($4, per_user_limit),
                reservation_ttl_s = COALESCE($5, reservation_ttl_s),
                opens_at = COALESCE($6, opens_at), closes_at = COALESCE($7, closes_at),
                paused = COALESCE($8, paused),
                terms_version = terms_version + 1, updated_at = now()
         WHERE id = $1
         RETURNING pg_notify('seckill_events', json_build_object('product', id)::text)",
        id,
        change.price_cents,
        change.max_per_order.map(|v| v as i32),
        change.per_user_limit.map(|v| v as i32),
        change.reservation_ttl_s.map(|v| v as i32),
        change.opens_at,
        change.closes_at,
        change.paused
    )
    .fetch_optional(db)
    .await?;
    catalog.forget(id);
    drop(write);
    if changed.is_none() {
        return Err(Error::UnknownProduct(id));
    }
    let product = product::get(db, id)
        .await?
        .ok_or(Error::UnknownProduct(id))?;
    tracing::info!(
        product = id,
        terms_version = product.terms_version,
        price_cents = product.price_cents,
        max_per_order = product.max_per_order,
        per_user_limit = product.per_user_limit,
        reservation_ttl_s = product.reservation_ttl_s,
        opens_at = ?product.opens_at,
        closes_at = ?product.closes_at,
        paused = product.paused,
        "terms changed"
    );
    Ok(product)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(version: i32, price: i64) -> Arc<Terms> {
        Arc::new(Terms {
            id: 1,
            price_cents: price,
            max_per_order: 2,
            per_user_limit: 1,
            reservation_ttl_s: 600,
            guard: Guard::Zk,
            batch_max: 8,
            terms_version: version,
            window: Window::default(),
            line: false,
        })
    }

    fn current(version: i32, price: i64) -> Current {
        Current {
            price_cents: price,
            max_per_order: 3,
            per_user_limit: 2,
            reservation_ttl_s: 60,
            terms_version: version,
            window: Window::default(),
        }
    }

    #[test]
    fn a_cycle_decides_with_the_rows_terms_and_the_newest_are_kept() {
        let catalog = Catalog::default();
        let old = catalog.keep(terms(1, 100));
        assert_eq!(catalog.current(&old, &current(1, 100)).price_cents, 100);
        let new = catalog.current(&old, &current(2, 250));
        assert_eq!(
            (new.price_cents, new.max_per_order, new.terms_version),
            (250, 3, 2)
        );
        assert_eq!(new.guard, Guard::Zk, "what a change cannot touch stays");
        assert_eq!(catalog.cached(1).unwrap().terms_version, 2);
        // A slower cycle that read the older row does not put the old terms back.
        catalog.current(&old, &current(1, 100));
        assert_eq!(catalog.cached(1).unwrap().terms_version, 2);
    }

    #[test]
    fn a_change_keeps_each_field_within_bounds() {
        let none = TermsChange {
            price_cents: None,
            max_per_order: None,
            per_user_limit: None,
            reservation_ttl_s: None,
            opens_at: None,
            closes_at: None,
            paused: None,
        };
        assert!(none.is_empty() && none.validate().is_ok());
        let price = TermsChange {
            price_cents: Some(0),
            ..none
        };
        assert!(!price.is_empty() && price.validate().is_ok());
        let zero_limit = TermsChange {
            per_user_limit: Some(0),
            ..price
        };
        let err = zero_limit.validate().unwrap_err();
        assert!(err.to_string().contains("per_user_limit"), "{err}");
    }
}
