//! Test harness: a fresh database and ZooKeeper root per test, the app in-process or as
//! separate `seckill` processes, typed request helpers, and bounded waits for conditions.
//!
//! Backing services come from `TEST_DATABASE_URL` (a URL whose role may CREATE DATABASE) and
//! `SECKILL_ZK`, which `scripts/test` sets after starting them.

use std::collections::HashMap;
use std::future::Future;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use reqwest::StatusCode;
use seckill::{Application, Config};
use serde_json::{json, Value};
use sqlx::Connection;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};
use zookeeper_client as zk;

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The test providers' API key (`seckill-provider --api-key`, the apps' `--payment-api-key`).
pub const PROVIDER_KEY: &str = "test-provider-api-key";

mod database;
mod env;
mod observe;
mod provider;
mod proxies;
mod requests;

pub use database::*;
pub use env::*;
pub use observe::*;
pub use provider::*;
pub use proxies::*;
pub use requests::*;
