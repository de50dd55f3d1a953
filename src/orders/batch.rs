//! One lock cycle's decisions: the orders it serves are decided in arrival order against the
//! stock and the buyers' holdings read once; what they write (the order rows and the buyers'
//! units in one statement, `store::insert`, then their keys' links), their answers, and the commit
//! that must succeed before any is told it sold. The transaction is one shared with other
//! products' cycles (`shared`), or one of its own (`alone::serve_alone`). A lone order is a
//! batch of one; so is every order of a per-request product.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::model::{Order, OrderStatus, Ticket};
use super::rules::Rules;
use super::store::{Row, Units};
use crate::commit::{CommitError, Tracked};
use crate::database::Bound;
use crate::error::Error;
use crate::idempotency::claim;
use crate::inventory::{Catalog, Figures, Terms};

/// What the check of read-check-write decided for one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Served: its units come out of the stock.
    Take,
    /// Not enough stock left for it.
    SoldOut,
    /// Its buyer would hold more than the product's per-user limit.
    Limit,
    /// A reservation without payment (`pay: false`) beyond the product's cap on unpaid
    /// reservations (`--max-unpaid-share` of its stock).
    Unpaid,
    /// More units than the product's `max_per_order`: possible only when the terms changed
    /// between the order's checks and its lock cycle.
    TooMany,
    /// Its Idempotency-Key was taken over by a later attempt (this one ran past its
    /// deadline): the later attempt decides the key's order, this one sells nothing.
    Superseded,
    /// The sale is not open as the row says (paused, closed or moved through any instance).
    OffSale,
}

impl Verdict {
    /// Rejections write no order row: nothing was sold, and a flood of them (a bot replaying
    /// a buyer's id, hoarding with fresh ids) must not write at its own rate.
    pub(super) fn writes_row(self) -> bool {
        matches!(self, Verdict::Take | Verdict::SoldOut)
    }
}

/// Decides every order of a batch in arrival order, exactly as each would be decided alone
/// one after the other: its key still its own, the quantity against the terms' cap, the buyer's limit (counting what earlier orders of the batch
/// gave them), then, for a reservation without payment, the room left for unpaid units
/// (`unpaid_room`), then the stock left by earlier orders. Returns the verdicts and the
/// stock after them.
pub fn decide(
    stock: i32,
    max_per_order: i32,
    per_user_limit: i32,
    mut unpaid_room: i32,
    held: &HashMap<String, i32>,
    superseded: &HashSet<Uuid>,
    tickets: &[Ticket],
) -> (Vec<Verdict>, i32) {
    let mut left = stock;
    let mut holding: HashMap<&str, i32> = HashMap::new();
    let verdicts = tickets
        .iter()
        .map(|t| {
            let has = holding
                .entry(&t.user_id)
                .or_insert_with(|| held.get(&t.user_id).copied().unwrap_or(0));
            if superseded.contains(&t.id) {
                Verdict::Superseded
            } else if t.quantity > max_per_order {
                Verdict::TooMany
            } else if *has + t.quantity > per_user_limit {
                Verdict::Limit
            } else if t.quantity > left {
                Verdict::SoldOut
            } else if !t.pay && t.quantity > unpaid_room {
                Verdict::Unpaid
            } else {
                left -= t.quantity;
                *has += t.quantity;
                if !t.pay {
                    unpaid_room -= t.quantity;
                }
                Verdict::Take
            }
        })
        .collect();
    (verdicts, left)
}

/// How a batch ended, when it ended in the database.
pub struct Ended {
    /// Every order's outcome, in the batch's order: its row, in its final status, or the
    /// rejection that wrote none.
    pub orders: Vec<Result<Order, Error>>,
    /// The stock after the batch.
    pub stock: i32,
}

/// One product's batch, decided: the terms it was decided under (the row's, not the cached
/// ones: a change of terms since the orders' checks is decided on here — their price, their
/// cap, the buyer's limit, the reservation time), its orders at those terms' prices, each
/// one's verdict, and the stock after them.
pub(super) struct Decided<'a> {
    pub terms: Arc<Terms>,
    pub at: DateTime<Utc>, // when it was decided: the window's clock
    pub tickets: Cow<'a, [Ticket]>,
    pub verdicts: Vec<Verdict>,
    pub left: i32,
}

/// Decides `tickets` of the product whose cached terms are `cached` against `stock`.
pub(super) fn decide_batch<'a>(
    catalog: &Catalog,
    rules: &Rules,
    cached: &Arc<Terms>,
    stock: &Figures,
    superseded: &HashSet<Uuid>,
    tickets: &'a [Ticket],
) -> Decided<'a> {
    let terms = catalog.current(cached, &stock.terms);
    let tickets: Cow<[Ticket]> = if tickets.iter().any(|t| t.amount_cents != price(t, &terms)) {
        Cow::Owned(
            tickets
                .iter()
                .map(|t| Ticket {
                    amount_cents: price(t, &terms),
                    ..t.clone()
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(tickets)
    };
    let unpaid_room =
        (stock.stocked_total as f64 * rules.max_unpaid_share).ceil() as i32 - stock.unpaid;
    let at = Utc::now();
    let (verdicts, left) = if terms.window.is_open(at) {
        decide(
            stock.stock,
            terms.max_per_order,
            terms.per_user_limit,
            unpaid_room,
            &stock.held,
            superseded,
            &tickets,
        )
    } else {
        (vec![Verdict::OffSale; tickets.len()], stock.stock)
    };
    Decided {
        terms,
        at,
        tickets,
        verdicts,
        left,
    }
}

impl Decided<'_> {
    /// The rows its verdicts write, and the units each buyer takes. `fence` is the token the
    /// stock write carried; `acquired`, when the guard was entered (each order's time in the
    /// queue: only a lock has one).
    pub(super) fn rows(
        &self,
        fence: Option<i64>,
        acquired: Instant,
    ) -> (Vec<Row<'_>>, Vec<Units<'_>>) {
        let written = self.verdicts.iter().filter(|v| v.writes_row()).count();
        let rows = self
            .tickets
            .iter()
            .zip(&self.verdicts)
            .filter(|(_, verdict)| verdict.writes_row())
            .map(|(ticket, verdict)| Row {
                ticket,
                terms: &self.terms,
                status: match verdict {
                    Verdict::Take if ticket.pay => OrderStatus::Paying,
                    Verdict::Take => OrderStatus::Reserved,
                    _ => OrderStatus::SoldOut,
                },
                failure: None,
                waited: fence.map(|_| acquired.saturating_duration_since(ticket.placed)),
                fence,
                batch_size: Some(written as i32),
            })
            .collect();
        let mut taken: HashMap<&str, i32> = HashMap::new();
        for (ticket, verdict) in self.tickets.iter().zip(&self.verdicts) {
            if *verdict == Verdict::Take {
                *taken.entry(&ticket.user_id).or_default() += ticket.quantity;
            }
        }
        let units = taken
            .into_iter()
            .map(|(user_id, units)| Units {
                product_id: self.terms.id,
                user_id,
                units,
                max_units: self.terms.per_user_limit,
            })
            .collect();
        (rows, units)
    }

    /// Every order's outcome once its rows (`written`, in the order of `rows`) committed.
    pub(super) fn answers(&self, written: impl IntoIterator<Item = Order>) -> Ended {
        let mut written = written.into_iter();
        let orders = self
            .verdicts
            .iter()
            .map(|verdict| match verdict {
                Verdict::Limit => Err(Error::PurchaseLimit { order_id: None }),
                Verdict::Unpaid => Err(Error::TooManyUnpaid),
                Verdict::TooMany => Err(Error::Unprocessable(format!(
                    "quantity must be at most {} for this product (its terms changed)",
                    self.terms.max_per_order
                ))),
                Verdict::Superseded => Err(Error::IdempotencyInProgress),
                Verdict::OffSale => {
                    Err(self.terms.window.refusal(self.at).unwrap_or(Error::Closed))
                }
                _ => Ok(written.next().expect("a row per written verdict")),
            })
            .collect();
        Ended {
            orders,
            stock: self.left,
        }
    }
}

/// Whether PostgreSQL refused a write for a buyer over the product's limit.
pub(super) fn over_limit(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(e) if e.constraint() == Some("purchases_within_limit"))
}

/// Commits a lock cycle's transaction within `bound`. An error means no order of it may be
/// told it sold: `unavailable` if it certainly did not commit, `outcome_pending` if that is
/// not known (its orders may be written — a `paying` one's intent is then the sweep's —, so
/// each is named in its 503 and nothing is written over them).
pub(super) async fn commit(db: &PgPool, written: Tracked, bound: Bound) -> Result<(), Error> {
    match written.commit(db, bound).await {
        Ok(()) => Ok(()),
        Err(CommitError::NotCommitted(e)) => Err(Error::Unavailable(
            anyhow::Error::new(e).context("the lock cycle's commit failed"),
        )),
        Err(CommitError::Unknown(_)) => Err(Error::OutcomePending { order_id: None }),
    }
}

/// The orders whose Idempotency-Key a later attempt has taken over; the others' keys are
/// locked until this transaction ends, so none can be taken over before their orders are
/// written (or not).
pub(super) async fn superseded(
    conn: &mut PgConnection,
    tickets: &[&Ticket],
) -> Result<HashSet<Uuid>, sqlx::Error> {
    let taken = claim::taken_over(conn, tickets.iter().filter_map(|t| t.claim.as_ref())).await?;
    Ok(tickets
        .iter()
        .filter(|t| t.claim.as_ref().is_some_and(|c| taken.contains(&c.key)))
        .map(|t| t.id)
        .collect())
}

/// What an order costs under `terms` (bounded: price and quantity are both capped).
fn price(ticket: &Ticket, terms: &Terms) -> i64 {
    terms.price_cents.saturating_mul(i64::from(ticket.quantity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(user: &str, quantity: i32) -> Ticket {
        Ticket {
            id: Uuid::new_v4(),
            user_id: user.into(),
            quantity,
            amount_cents: 100,
            pay: true,
            claim: None,
            placed: Instant::now(),
        }
    }

    /// [`decide`] for a batch whose keys are all still their own.
    fn plain(
        stock: i32,
        max_per_order: i32,
        per_user_limit: i32,
        unpaid_room: i32,
        held: &HashMap<String, i32>,
        tickets: &[Ticket],
    ) -> (Vec<Verdict>, i32) {
        let none = HashSet::new();
        decide(
            stock,
            max_per_order,
            per_user_limit,
            unpaid_room,
            held,
            &none,
            tickets,
        )
    }

    #[test]
    fn an_order_whose_key_was_taken_over_sells_nothing_and_the_next_gets_its_unit() {
        let tickets = [ticket("a", 1), ticket("b", 1)];
        let superseded = HashSet::from([tickets[0].id]);
        let held = HashMap::new();
        let (verdicts, left) = decide(1, i32::MAX, 5, i32::MAX, &held, &superseded, &tickets);
        assert_eq!(verdicts, [Verdict::Superseded, Verdict::Take]);
        assert_eq!(left, 0);
    }

    #[test]
    fn the_last_units_go_to_the_first_orders_they_cover() {
        // 3 left: the order for 2 fits, the next for 2 does not, a later one for 1 still does.
        let tickets = [
            ticket("a", 2),
            ticket("b", 2),
            ticket("c", 1),
            ticket("d", 1),
        ];
        let (verdicts, left) = plain(3, i32::MAX, 5, i32::MAX, &HashMap::new(), &tickets);
        use Verdict::*;
        assert_eq!(verdicts, [Take, SoldOut, Take, SoldOut]);
        assert_eq!(left, 0);
    }

    #[test]
    fn one_buyer_twice_in_a_batch_gets_no_more_than_the_limit() {
        let tickets = [ticket("a", 1), ticket("a", 1), ticket("b", 1)];
        let (verdicts, left) = plain(10, i32::MAX, 1, i32::MAX, &HashMap::new(), &tickets);
        assert_eq!(verdicts, [Verdict::Take, Verdict::Limit, Verdict::Take]);
        assert_eq!(left, 8);
    }

    #[test]
    fn what_a_buyer_already_holds_counts_against_the_limit() {
        let held = HashMap::from([("a".to_string(), 2)]);
        let tickets = [ticket("a", 1), ticket("b", 3)];
        let (verdicts, left) = plain(10, i32::MAX, 3, i32::MAX, &held, &tickets);
        assert_eq!(verdicts, [Verdict::Take, Verdict::Take]);
        let (verdicts, _) = plain(10, i32::MAX, 2, i32::MAX, &held, &tickets[..1]);
        assert_eq!(verdicts, [Verdict::Limit], "2 held, limit 2");
        assert_eq!(left, 6);
    }

    #[test]
    fn the_limit_is_checked_before_the_stock_as_alone() {
        // A buyer at the limit is told so even when the stock is gone too.
        let held = HashMap::from([("a".to_string(), 1)]);
        let (verdicts, left) = plain(
            0,
            i32::MAX,
            1,
            i32::MAX,
            &held,
            &[ticket("a", 1), ticket("b", 1)],
        );
        assert_eq!(verdicts, [Verdict::Limit, Verdict::SoldOut]);
        assert_eq!(left, 0);
    }

    #[test]
    fn reservations_without_payment_stop_at_their_room_and_paid_orders_do_not() {
        let unpaid = |user: &str| Ticket {
            pay: false,
            ..ticket(user, 1)
        };
        let tickets = [unpaid("a"), unpaid("b"), ticket("c", 1), unpaid("d")];
        let (verdicts, left) = plain(10, i32::MAX, 1, 2, &HashMap::new(), &tickets);
        use Verdict::*;
        assert_eq!(verdicts, [Take, Take, Take, Unpaid]);
        assert_eq!(left, 7);
    }

    #[test]
    fn an_order_over_the_changed_cap_is_refused_and_takes_nothing() {
        let tickets = [ticket("a", 3), ticket("b", 2)];
        let (verdicts, left) = plain(10, 2, 5, i32::MAX, &HashMap::new(), &tickets);
        assert_eq!(verdicts, [Verdict::TooMany, Verdict::Take]);
        assert_eq!(left, 8);
    }

    #[test]
    fn a_batch_never_takes_more_than_the_stock() {
        // Arbitrary batches: the units taken never pass the stock, and match the verdicts.
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..500 {
            let stock = rng.i32(0..20);
            let tickets: Vec<Ticket> = (0..rng.usize(0..30))
                .map(|_| Ticket {
                    pay: rng.bool(),
                    ..ticket(&format!("u{}", rng.u8(0..6)), rng.i32(1..4))
                })
                .collect();
            let room = rng.i32(0..10);
            let (verdicts, left) = plain(
                stock,
                i32::MAX,
                rng.i32(1..5),
                room,
                &HashMap::new(),
                &tickets,
            );
            let unpaid: i32 = tickets
                .iter()
                .zip(&verdicts)
                .filter(|(t, v)| **v == Verdict::Take && !t.pay)
                .map(|(t, _)| t.quantity)
                .sum();
            assert!(unpaid <= room, "unpaid reservations stay within their room");
            let taken: i32 = tickets
                .iter()
                .zip(&verdicts)
                .filter(|(_, v)| **v == Verdict::Take)
                .map(|(t, _)| t.quantity)
                .sum();
            assert!((0..=stock).contains(&left));
            assert_eq!(stock - left, taken);
        }
    }
}
