//! Integration tests against a real PostgreSQL and a real ZooKeeper (see `scripts/test`).
//! Each test gets a fresh database and ZooKeeper root, so they run in parallel.

mod abuse;
mod access;
mod background;
mod bad_input;
mod batching;
mod chaos;
mod concurrency;
mod contract;
mod deployment;
mod failures;
mod faults;
mod fencing;
mod flags;
mod fuzz;
mod helpers;
mod identity;
mod intents;
mod interop;
mod issuer;
mod kept;
mod line;
mod migrations;
mod money;
mod observability;
mod products;
mod recipes;
mod recovery;
mod routing;
mod rules;
mod servers;
mod silence;
mod stepping;
mod teaching;
mod tokens;
mod windows;
