//! # seckill: a flash sale that never oversells
//!
//! Many buyers, tiny stock. Every purchase is create order → reduce stock → pay, and the
//! stock's read-check-write runs inside a fair ZooKeeper lock whose token Postgres checks.
//!
//! # Layout
//! - [`config`]: flags and environment, parsed once.
//! - [`startup`]: build (connect, migrate, wire each part to its handles, bind) and run
//!   (serve, schedule the background work, shut down) the application.
//! - [`http`]: the route table, its own state, extraction with our error shape, admin auth,
//!   and the mapping of domain errors to statuses. Uses the domain below; nothing below
//!   uses it.
//! - [`buyers`]: who buys: the buyer a verified bearer token names (an OIDC issuer's, or
//!   this deployment's own demo tokens), or in the teaching `open` mode the body's.
//! - [`idempotency`]: `Idempotency-Key` replay, wrapped around the order flow.
//! - [`orders`]: the order flow ([`orders::Shop`]: admission, the combining queue, lock
//!   cycles, batches, payment, the expiry sweep).
//! - [`teaching`]: the page's demos, step-through and lock lab, and the test seam: one
//!   hook the lock cycle calls, absent from a production server's sale path.
//! - [`events`]: live stock, lock-queue and demo events for the teaching page.
//! - [`inventory`]: products, their terms, the audit, and stock changes under each guard.
//! - [`flags`]: the sold-out (and demo) flags every instance shares through ZooKeeper.
//! - [`payment`]: the simulated payment provider.
//! - [`lock`]: the ZooKeeper session, the fair, fenced per-product lock, and Curator's other
//!   recipes (semaphore, read-write lock, reentrancy).
//! - [`error`]: the domain's one error type (no HTTP in it).
//! - [`database`]: the pool's sessions and the client's bound on every step of a sale's
//!   transactions (a silent or slow PostgreSQL).
//! - [`commit`]: a transaction's COMMIT whose answer was lost, decided by PostgreSQL itself.
//! - [`group`]: group writes (many small writes, one statement), for payment answers and
//!   the provider's ledger.
//! - [`integer`]: request integers as JSON Schema counts them (`3.0` is `3`).
//! - [`telemetry`]: log lines (text or JSON, with request ids) and the Prometheus metrics.
//! - [`config`]: flags and environment, parsed once.
//!
//! Imports point down this list (`http` → `idempotency` → `orders` → `teaching` → `events`
//! → `inventory` → `flags` → `lock` → ...), never back up.

pub mod admin;
pub mod buyers;
pub mod commit;
pub mod config;
pub mod database;
pub mod error;
pub mod events;
pub mod flags;
pub mod group;
pub mod http;
pub mod idempotency;
pub mod integer;
pub mod inventory;
pub mod line;
pub mod lock;
pub mod orders;
pub mod payment;
pub mod startup;
pub mod teaching;
pub mod telemetry;

pub use config::Config;
pub use startup::{shutdown_signal, Application};
