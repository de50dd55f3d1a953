//! The order flow of the source material — create the order, reduce the stock under the
//! product's guard, release, then pay — with the rules of a real flash sale: one sold-out
//! flag for every instance, a per-customer limit, and reservations that expire unpaid.
//! Each step leaves the order in a status that says how far it got, so none is ever lost:
//!
//! ```text
//! created ──reserve──> reserved ──pay──> paying ──> paid
//!    │                    │                 └──declined──> payment_failed (stock returned)
//!    │                    └──unpaid past expires_at──> expired (stock returned)
//!    ├──not enough stock──> sold_out
//!    └──lock timeout / lock lost / limit / client gone / outage──> failed (nothing sold)
//! ```
//!
//! An order has no row until its fate is decided: the lock cycle that serves it writes its
//! row in its final status in the same transaction as the stock (`created` is no longer
//! written). A hot product's orders are **combined**: they queue per instance ([`combiner`])
//! and one lock cycle serves up to `batch_max` of them ([`batch`]) — the ZooKeeper lock is
//! paid once per batch, not once per order — and the cycles of every product whose lock the
//! instance holds at one moment share one transaction (`shared`). A product with
//! `batch_max` 1, or guard `none`, serves each order in a lock cycle of its own.
//!
//! One order's way, top to bottom: [`request`] (parsed at the edge) → [`place`]
//! (`Shop::admit`, `Shop::place`) → [`combiner`] → `worker` (or a cycle of its own) → [`cycle`] →
//! `shared` (or a transaction of the cycle's own) → [`batch`] (with `inventory`'s fenced
//! read-check-write) → [`store`] → [`pay`].
//!
//! - [`model`]: the order's statuses and row.
//! - [`request`]: a buyer's request, parsed once.
//! - [`shop`]: the handles the order path uses; `rules`, what the configuration tells it.
//! - [`place`]: admission, and the way to a lock cycle.
//! - [`combiner`]: the per-product queue whose worker runs the lock cycles.
//! - `worker`: that worker: lock cycles while orders wait, the lock kept between them while
//!   they keep coming (given up within the fairness bound when another instance waits).
//! - [`cycle`]: one lock cycle, from the entered guard to every order's answer; `acted`, the
//!   one seam where a cycle acting something out for the teaching page leaves it; `alone`, a
//!   cycle's transaction of its own; `answer`, its orders answered.
//! - [`batch`]: one lock cycle's decisions and writes.
//! - `shared`: the lock cycles of every product whose lock the instance holds at one moment,
//!   in one transaction.
//! - [`pay`]: paying (per batch), and giving units back (declines, expiries).
//! - [`recorder`]: the providers' answers, recorded many to a statement.
//! - `lost_answer`: the page's money demo (a charge made, its answer lost, settled by the sweep).
//! - `returns`: lapsed reservations back on sale, many per lock cycle, fenced like a sale.
//! - [`sweep`]: the background loops: returns, settlement of stale payments, upkeep.
//! - [`store`]: the order's SQL; `intents`: the payment intents' SQL.

mod acted;
mod alone;
mod answer;
pub mod audit;
pub mod batch;
pub mod combiner;
pub mod cycle;
mod intents;
mod lost_answer;
mod model;
mod pay;
mod place;
mod recorder;
pub mod request;
mod returns;
mod rules;
mod shared;
pub mod shop;
pub mod store;
pub mod sweep;
mod worker;

pub use model::{Answer, Order, OrderStatus, Payment, Ticket};
pub use pay::intent_key;

pub use place::Admitted;
pub use request::{NewOrder, OrderRequest, ProductOrder};
pub use rules::{Rules, ANSWER_MARGIN};
pub use shop::Shop;
