//! The bare lock, for `loadtest/bench`: `<contenders>` tasks on one ZooKeeper session take
//! and release one product's fair lock in a loop — the same shape as the Curator harness
//! (`tests/interop/CuratorMutex.java bench`), so the two are compared like for like.
//!
//!   cargo run --release --example lock_bench -- <connect> <root> <contenders> <seconds>
//!
//! Prints `handoffs <n> seconds <s>`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use seckill::lock::{Recipe, Session, Zk};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, connect, root, contenders, seconds] = &args[..] else {
        anyhow::bail!("usage: lock_bench <connect> <root> <contenders> <seconds>");
    };
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
            let (zk, handoffs) = (zk.clone(), handoffs.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let lock = zk
                        .lock_stock(1, Recipe::Fair, Session::Shared, Duration::from_secs(60))
                        .await?;
                    handoffs.fetch_add(1, Ordering::Relaxed);
                    // The release: dropping the lock deletes its node.
                    drop(lock);
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
