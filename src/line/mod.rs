//! A product's line (waiting room): the crowd that comes before a sale's opening waits in it,
//! is shuffled at the opening, and is let in at the pace the sale is served; each buyer let
//! in gets a [`Pass`] that `POST /orders` asks for.
//!
//! Where things live, and why:
//! - The line is PostgreSQL's (`lines`, `line_places`, `line_admissions`, migrations/0016):
//!   every instance reads and lets in from the same line, and a restart loses no place.
//! - A waiter holds nothing here: no task, no connection. They look again when told
//!   (`next_look_ms`), later the farther they are from the head, and a look is answered from
//!   this instance's copy of the line (refreshed every [`SNAPSHOT_AGE`]) and of the places it
//!   has seen (a place never changes once drawn): a crowd of looks costs PostgreSQL little.
//! - The draw and the pace are `pace`'s: one instance at a time, every tick.

mod pace;
mod pass;
mod place;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

pub use pace::run as keep_pace;
pub use pass::{Key, Pass};
pub use place::{Place, PlaceState};

use crate::error::Error;
use crate::inventory::Window;

/// How long a pass lets its buyer in, from the moment their place was let in.
pub const PASS_VALIDITY: Duration = Duration::from_secs(120);
/// How old this instance's copy of a line may be when it answers a look.
const SNAPSHOT_AGE: Duration = Duration::from_millis(100);
/// The places this instance remembers (~100 bytes each); past it, a quarter is forgotten
/// (a forgotten place is read again: one query).
const MAX_PLACES: usize = 200_000;

/// The line: its handles and this instance's copies.
#[derive(Clone)]
pub struct Line {
    db: PgPool,
    key: pass::Key,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    lines: HashMap<i64, (Instant, Arc<Snapshot>)>,
    places: HashMap<(i64, String), Placed>,
}

/// A buyer's place, once drawn or given: it never changes.
#[derive(Clone, Copy, Debug)]
struct Placed {
    place: i64,
    joined_at: DateTime<Utc>,
}

/// A line as one read of it says.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    /// When the draw numbered the line (the pace's clock starts there).
    pub drawn_at: Option<DateTime<Utc>>,
    pub admitted: i64,
    pub rate: f64,
    pub window: Window,
    pub stock: i32,
    /// Places up to here were let in longer ago than a pass lasts.
    pub expired_through: i64,
    /// The later admissions: (through, at), ascending.
    pub admissions: Vec<(i64, DateTime<Utc>)>,
}

impl Snapshot {
    /// When `place` was let in, if it was and its pass may still be valid.
    fn admitted_at(&self, place: i64) -> Option<DateTime<Utc>> {
        if place > self.admitted || place <= self.expired_through {
            return None;
        }
        self.admissions
            .iter()
            .find(|(through, _)| *through >= place)
            .map(|(_, at)| *at)
    }
}

/// A line at a glance (`GET /api/products/{id}/line`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Summary {
    pub product_id: i64,
    /// Whether the opening's draw has numbered the buyers who came before it.
    pub drawn: bool,
    /// Everyone who joined.
    pub joined: i64,
    /// The places the draw gave out (who joined before the opening).
    pub drawn_places: i64,
    /// Places 1..`admitted` are let in.
    pub admitted: i64,
    /// The buyers let in are served at this many orders a second (measured).
    pub rate: f64,
    pub server_time: DateTime<Utc>,
}

impl Line {
    /// The line of this deployment: its pass key is read from PostgreSQL, made by the first
    /// instance that needs it (32 random bytes, as the demo issuer's).
    pub async fn start(db: &PgPool) -> anyhow::Result<Line> {
        let mut fresh = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh)
            .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
        sqlx::query!(
            "INSERT INTO line_key (secret) VALUES ($1) ON CONFLICT (only_one) DO NOTHING",
            &fresh[..]
        )
        .execute(db)
        .await?;
        let secret = sqlx::query_scalar!("SELECT secret FROM line_key")
            .fetch_one(db)
            .await?;
        Ok(Line {
            db: db.clone(),
            key: pass::Key::new(&secret),
            seen: Arc::default(),
        })
    }

    /// Joins `buyer` to the product's line (once: again, the same place). Returns their place
    /// and whether they joined just now.
    pub async fn join(
        &self,
        product_id: i64,
        buyer: &str,
        now: DateTime<Utc>,
    ) -> Result<(Place, bool), Error> {
        let line = self.snapshot(product_id, true).await?;
        if let Some(refusal @ Error::Closed) = line.window.refusal(now) {
            return Err(refusal);
        }
        if line.stock == 0 {
            return Err(Error::SoldOut { order_id: None });
        }
        let row = sqlx::query!(
            r#"SELECT joined_at AS "joined_at!", place, spent_at, created AS "created!"
               FROM line_join($1, $2, $3)"#,
            product_id,
            buyer,
            fastrand::i64(..)
        )
        .fetch_optional(&self.db)
        .await?
        .ok_or(Error::NoLine(product_id))?;
        let placed = row.place.map(|place| Placed {
            place,
            joined_at: row.joined_at,
        });
        if let Some(placed) = placed {
            self.remember(product_id, buyer, placed);
        }
        let place = place::at(
            &line,
            product_id,
            buyer,
            row.joined_at,
            row.place,
            row.spent_at.is_some(),
            self.pass_for(product_id, buyer, &line, row.place),
            now,
        );
        Ok((place, row.created))
    }

    /// The buyer's place now.
    pub async fn look(
        &self,
        product_id: i64,
        buyer: &str,
        now: DateTime<Utc>,
    ) -> Result<Place, Error> {
        let line = self.snapshot(product_id, false).await?;
        let known = self.recall(product_id, buyer);
        // A place let in is read again: whether its pass bought is the database's to know.
        let (joined_at, place, spent) = match known {
            Some(placed) if placed.place > line.admitted => {
                (placed.joined_at, Some(placed.place), false)
            }
            _ => {
                let row = sqlx::query!(
                    "SELECT joined_at, place, seen_at, spent_at FROM line_places
                     WHERE product_id = $1 AND buyer = $2",
                    product_id,
                    buyer
                )
                .fetch_optional(&self.db)
                .await?
                .ok_or(Error::NotInLine)?;
                if let Some(place) = row.place {
                    let joined_at = row.joined_at;
                    self.remember(product_id, buyer, Placed { place, joined_at });
                    if place <= line.admitted && row.seen_at.is_none() {
                        self.seen(product_id, buyer).await?;
                    }
                }
                (row.joined_at, row.place, row.spent_at.is_some())
            }
        };
        let pass = self.pass_for(product_id, buyer, &line, place);
        Ok(place::at(
            &line, product_id, buyer, joined_at, place, spent, pass, now,
        ))
    }

    /// The buyer has seen that their place was let in: from now their pass is on its way
    /// (the pace counts it), once.
    async fn seen(&self, product_id: i64, buyer: &str) -> Result<(), Error> {
        sqlx::query!(
            "UPDATE line_places SET seen_at = clock_timestamp()
             WHERE product_id = $1 AND buyer = $2 AND seen_at IS NULL",
            product_id,
            buyer
        )
        .execute(&self.db)
        .await?;
        Ok(())
    }

    /// The line at a glance.
    pub async fn summary(&self, product_id: i64, now: DateTime<Utc>) -> Result<Summary, Error> {
        let row = sqlx::query!(
            r#"SELECT l.drawn_at IS NOT NULL AS "is_drawn!", l.drawn, l.admitted, l.rate,
                      (SELECT count(*) FROM line_places lp WHERE lp.product_id = l.product_id) AS "joined!"
               FROM lines l WHERE l.product_id = $1"#,
            product_id
        )
        .fetch_optional(&self.db)
        .await?;
        let Some(row) = row else {
            return Err(self.no_line(product_id).await);
        };
        Ok(Summary {
            product_id,
            drawn: row.is_drawn,
            joined: row.joined,
            drawn_places: row.drawn,
            admitted: row.admitted,
            rate: row.rate,
            server_time: now,
        })
    }

    /// The pass `raw` is, if it lets `buyer` buy the product at `now` (checked without a query).
    pub fn verify(
        &self,
        raw: &str,
        product_id: i64,
        buyer: &str,
        now: DateTime<Utc>,
    ) -> Result<Pass, Error> {
        self.key.verify(raw, product_id, buyer, now)
    }

    /// Spends the pass: from here it buys nothing else (`pass_used`), unless given back.
    pub async fn spend(&self, pass: &Pass) -> Result<(), Error> {
        let spent = sqlx::query_scalar!(
            r#"WITH spent AS (
                   UPDATE line_places SET spent_at = clock_timestamp()
                   WHERE product_id = $1 AND buyer = $2 AND place = $3 AND spent_at IS NULL
                   RETURNING 1)
               SELECT EXISTS (SELECT 1 FROM spent) AS "spent!""#,
            pass.product_id,
            pass.buyer,
            pass.place
        )
        .fetch_one(&self.db)
        .await?;
        if spent {
            Ok(())
        } else {
            Err(Error::PassUsed)
        }
    }

    /// Gives a spent pass back: its order bought nothing, and the buyer may try again while
    /// it is valid. `overloaded`: it was refused for the shop's load (the pace lets in fewer).
    pub async fn give_back(&self, pass: &Pass, overloaded: bool) {
        let given = sqlx::query!(
            "UPDATE line_places SET spent_at = NULL,
                    refused_at = CASE WHEN $4 THEN clock_timestamp() ELSE refused_at END
             WHERE product_id = $1 AND buyer = $2 AND place = $3",
            pass.product_id,
            pass.buyer,
            pass.place,
            overloaded
        )
        .execute(&self.db)
        .await;
        if let Err(e) = given {
            tracing::warn!(product = pass.product_id, buyer = %pass.buyer, error = %e,
                "a pass could not be given back: its buyer cannot try again with it");
        }
    }

    /// The signed pass of a place let in, while it is valid.
    fn pass_for(
        &self,
        product_id: i64,
        buyer: &str,
        line: &Snapshot,
        place: Option<i64>,
    ) -> Option<(String, DateTime<Utc>)> {
        let place = place?;
        let at = line.admitted_at(place)?;
        let expires = at + PASS_VALIDITY;
        let pass = Pass {
            product_id,
            buyer: buyer.to_string(),
            place,
            expires: expires.timestamp(),
        };
        Some((self.key.sign(&pass), expires))
    }

    /// This instance's copy of the line, read again when older than [`SNAPSHOT_AGE`] (or
    /// always, with `fresh`).
    async fn snapshot(&self, product_id: i64, fresh: bool) -> Result<Arc<Snapshot>, Error> {
        if !fresh {
            let seen = self.seen.lock().expect("line copies poisoned");
            if let Some((at, line)) = seen.lines.get(&product_id) {
                if at.elapsed() < SNAPSHOT_AGE {
                    return Ok(line.clone());
                }
            }
        }
        let row = sqlx::query!(
            r#"SELECT l.drawn_at, l.admitted, l.rate,
                      p.opens_at, p.closes_at, p.paused, p.stock,
                      COALESCE((SELECT max(a.through) FROM line_admissions a
                                WHERE a.product_id = l.product_id
                                  AND a.at <= clock_timestamp() - make_interval(secs => $2)), 0) AS "expired_through!",
                      COALESCE((SELECT array_agg(a.through ORDER BY a.through) FROM line_admissions a
                                WHERE a.product_id = l.product_id
                                  AND a.at > clock_timestamp() - make_interval(secs => $2)), '{}') AS "throughs!",
                      COALESCE((SELECT array_agg(a.at ORDER BY a.through) FROM line_admissions a
                                WHERE a.product_id = l.product_id
                                  AND a.at > clock_timestamp() - make_interval(secs => $2)), '{}') AS "ats!"
               FROM lines l JOIN products p ON p.id = l.product_id
               WHERE l.product_id = $1"#,
            product_id,
            PASS_VALIDITY.as_secs_f64()
        )
        .fetch_optional(&self.db)
        .await?;
        let Some(row) = row else {
            return Err(self.no_line(product_id).await);
        };
        let line = Arc::new(Snapshot {
            drawn_at: row.drawn_at,
            admitted: row.admitted,
            rate: row.rate,
            window: Window {
                opens_at: row.opens_at,
                closes_at: row.closes_at,
                paused: row.paused,
            },
            stock: row.stock,
            expired_through: row.expired_through,
            admissions: row.throughs.into_iter().zip(row.ats).collect(),
        });
        let mut seen = self.seen.lock().expect("line copies poisoned");
        seen.lines
            .insert(product_id, (Instant::now(), line.clone()));
        Ok(line)
    }

    /// Why a product has no line: it has none, or there is no such product.
    async fn no_line(&self, product_id: i64) -> Error {
        match crate::inventory::stock(&self.db, product_id).await {
            Ok(Some(_)) => Error::NoLine(product_id),
            Ok(None) => Error::UnknownProduct(product_id),
            Err(e) => e.into(),
        }
    }

    fn recall(&self, product_id: i64, buyer: &str) -> Option<Placed> {
        let seen = self.seen.lock().expect("line copies poisoned");
        seen.places.get(&(product_id, buyer.to_string())).copied()
    }

    fn remember(&self, product_id: i64, buyer: &str, placed: Placed) {
        let mut seen = self.seen.lock().expect("line copies poisoned");
        if seen.places.len() >= MAX_PLACES {
            let drop: Vec<_> = seen.places.keys().take(MAX_PLACES / 4).cloned().collect();
            for key in drop {
                seen.places.remove(&key);
            }
        }
        seen.places.insert((product_id, buyer.to_string()), placed);
    }
}
