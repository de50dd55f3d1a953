//! # seckill: a flash sale that never oversells
//!
//! Many buyers, tiny stock. Every purchase is create order → reduce stock → pay, and the
//! stock's read-check-write runs inside a fair ZooKeeper lock whose token Postgres checks.
//!
//! # Layout
//! - [`config`]: flags and environment, parsed once.
//! - [`startup`]: build (connect, migrate, bind) and run (serve, shut down) the application.
//! - [`state`]: the handles the domain shares (pool, ZooKeeper session, flags, config).
//! - [`http`]: the route table, extraction with our error shape, admin auth. Uses the
//!   domain below; nothing below uses it.
//! - [`orders`]: the order flow and its statuses, payment, the expiry sweep, the demos.
//! - [`inventory`]: products, the audit, and stock changes under each guard.
//! - [`lock`]: the ZooKeeper session, the fair, fenced per-product lock, and Curator's other
//!   recipes (semaphore, read-write lock, reentrancy).
//! - [`lab`]: the teaching page's lock lab (holders of real leases and terms locks).
//! - [`flags`]: the sold-out (and demo) flags every instance shares through ZooKeeper.
//! - [`idempotency`]: `Idempotency-Key` replay for orders.
//! - [`integer`]: request integers as JSON Schema counts them (`3.0` is `3`).
//! - [`events`]: live stock, lock-queue and demo events for the teaching page.
//! - [`payment`]: the simulated payment provider.
//! - [`error`]: the one error type, and how it becomes an HTTP answer.
//! - [`telemetry`]: log lines (text or JSON, with request ids) and the Prometheus metrics.

pub mod config;
pub mod error;
pub mod events;
pub mod flags;
pub mod http;
pub mod idempotency;
pub mod integer;
pub mod inventory;
pub mod lab;
pub mod lock;
pub mod orders;
pub mod payment;
pub mod startup;
pub mod state;
pub mod telemetry;

pub use config::Config;
pub use startup::Application;
