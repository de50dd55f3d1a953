//! The bare lock, for `loadtest/bench` and `loadtest/recipes`: `<contenders>` tasks on one
//! ZooKeeper session take and release one product's lock in a loop — the same shape as the
//! Curator harness (`tests/interop/CuratorMutex.java bench`), so the two are compared like
//! for like.
//!
//!   cargo run --release --example lock_bench -- <connect> <root> <contenders> <seconds> [mode]
//!
//! `mode`: `fair` (default: the stock lock), `sale` (a sale's lock cycle: the terms read lock,
//! then the stock lock), `reenter` (the stock lock, then 9 re-entries by its owner), `lease`
//! (a lease of a 2-lease semaphore), `write` (the terms write lock).
//! Prints `handoffs <n> seconds <s>`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use seckill::lock::{Access, Owner, Recipe, Session, Zk};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (connect, root, contenders, seconds, mode) = match &args[..] {
        [_, connect, root, contenders, seconds] => (connect, root, contenders, seconds, "fair"),
        [_, connect, root, contenders, seconds, mode] => {
            (connect, root, contenders, seconds, mode.as_str())
        }
        _ => anyhow::bail!("usage: lock_bench <connect> <root> <contenders> <seconds> [mode]"),
    };
    let mode = mode.to_string();
    let contenders: usize = contenders.parse().context("contenders")?;
    let run = Duration::from_secs_f64(seconds.parse().context("seconds")?);
    let zk = Zk::connect(
        connect,
        root,
        Duration::from_secs(10),
        "lock-bench".into(),
        contenders.max(1),
        None,
    )
    .await?;
    let handoffs = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + run;
    let tasks: Vec<_> = (0..contenders)
        .map(|_| {
            let (zk, handoffs, mode) = (zk.clone(), handoffs.clone(), mode.clone());
            tokio::spawn(async move {
                let wait = Duration::from_secs(60);
                while Instant::now() < deadline {
                    // Each arm holds what it took until the end of the iteration: dropping it
                    // is the release (the node is deleted).
                    match mode.as_str() {
                        "fair" => drop(
                            zk.lock_stock(1, Recipe::Fair, Session::Shared, wait)
                                .await?,
                        ),
                        "sale" => drop(
                            zk.lock_for_sale(1, Recipe::Fair, Session::Shared, wait)
                                .await?,
                        ),
                        "reenter" => {
                            let owner = Owner::new();
                            let outer = zk
                                .lock_stock_as(Some(&owner), 1, Recipe::Fair, Session::Shared, wait)
                                .await?;
                            for _ in 0..9 {
                                let again = zk.lock_stock_as(
                                    Some(&owner),
                                    1,
                                    Recipe::Fair,
                                    Session::Shared,
                                    wait,
                                );
                                drop(again.await?);
                            }
                            drop(outer);
                        }
                        "lease" => drop(zk.acquire_lease("bench", 2, "bench", wait).await?),
                        "write" => drop(zk.lock_terms(1, Access::Write, "bench", wait).await?),
                        other => anyhow::bail!("unknown mode {other}"),
                    }
                    handoffs.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "handoffs {} seconds {elapsed}",
        handoffs.load(Ordering::Relaxed)
    );
    Ok(())
}
