//! Every metric the service exports, in one place: the names (so a dashboard and this file
//! agree), their descriptions and histogram buckets, and one small function per event so the
//! domain records a fact in one line without knowing about Prometheus.
//!
//! The recorder is process-wide (the `metrics` facade has one global recorder): several
//! applications in one process, as in the in-process tests, share it. Tests that count
//! exact amounts scrape a server process of their own.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const ORDERS: &str = "seckill_orders_total";
pub const HTTP_DURATION: &str = "seckill_http_request_duration_seconds";
pub const LOCK_WAIT: &str = "seckill_lock_wait_seconds";
pub const LOCK_HOLD: &str = "seckill_lock_hold_seconds";
pub const LOCK_FAILURES: &str = "seckill_lock_failures_total";
pub const LOCK_KEPT: &str = "seckill_lock_kept_cycles_total";
pub const LOCK_HANDOVER: &str = "seckill_lock_handover_seconds";
pub const LOCK_CYCLE_ORDERS: &str = "seckill_lock_cycle_orders";
pub const ZK_OPERATIONS: &str = "seckill_zk_operations_total";
pub const ZK_SESSION_STATE: &str = "seckill_zk_session_state";
pub const ZK_SESSION_CHANGES: &str = "seckill_zk_session_changes_total";
pub const DB_POOL: &str = "seckill_db_pool_connections";
pub const SWEEP_ACTIONS: &str = "seckill_sweep_actions_total";
pub const LOCK_REENTRIES: &str = "seckill_lock_reentries_total";
pub const PAYMENTS_IN_FLIGHT: &str = "seckill_payment_charges_in_flight";
pub const PAYMENT_OUTCOMES: &str = "seckill_payment_outcomes_total";
pub const PAYMENT_LEASE_WAIT: &str = "seckill_payment_lease_wait_seconds";
pub const REFUSED: &str = "seckill_refused_total";
pub const VIEW_REFRESHES: &str = "seckill_view_refreshes_total";
pub const WORKER_RESTARTS: &str = "seckill_worker_restarts_total";
pub const ENSEMBLE_STANDING: &str = "seckill_zk_ensemble_standing";
pub const SHARED_CYCLES: &str = "seckill_shared_cycles";
pub const SHARED_CYCLE_PRODUCTS: &str = "seckill_shared_cycle_products";
pub const READY: &str = "seckill_ready";
pub const REQUEST_TIMEOUT: &str = "seckill_request_timeout_seconds";
pub const AUDIT_INCONSISTENT: &str = "seckill_audit_inconsistent_products";
pub const AUDIT_TIMESTAMP: &str = "seckill_audit_timestamp_seconds";
pub const PRODUCT_STOCK: &str = "seckill_product_stock";
pub const OVERDUE: &str = "seckill_overdue";

/// Every metric above: docs/operations.md's table lists exactly these (a contract test).
pub const ALL: [&str; 29] = [
    ORDERS,
    HTTP_DURATION,
    LOCK_WAIT,
    LOCK_HOLD,
    LOCK_FAILURES,
    LOCK_KEPT,
    LOCK_HANDOVER,
    LOCK_CYCLE_ORDERS,
    ZK_OPERATIONS,
    ZK_SESSION_STATE,
    ZK_SESSION_CHANGES,
    DB_POOL,
    SWEEP_ACTIONS,
    LOCK_REENTRIES,
    PAYMENTS_IN_FLIGHT,
    PAYMENT_OUTCOMES,
    PAYMENT_LEASE_WAIT,
    REFUSED,
    VIEW_REFRESHES,
    WORKER_RESTARTS,
    ENSEMBLE_STANDING,
    SHARED_CYCLES,
    SHARED_CYCLE_PRODUCTS,
    READY,
    REQUEST_TIMEOUT,
    AUDIT_INCONSISTENT,
    AUDIT_TIMESTAMP,
    PRODUCT_STOCK,
    OVERDUE,
];

/// Seconds, from a fast lock handoff on loopback to a request timeout.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Orders per lock cycle: powers of two up to the largest `batch_max`.
const BATCH: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// The process's recorder, installed on first use; its handle renders `GET /metrics`.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(LOCK_CYCLE_ORDERS.into()), BATCH))
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(SHARED_CYCLE_PRODUCTS.into()), BATCH))
            .expect("bucket lists are not empty")
            .install_recorder()
            // Someone else's recorder (a test harness, an embedding program): render nothing
            // rather than refuse to start.
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "metrics recorder already installed; /metrics will be empty");
                PrometheusBuilder::new().build_recorder().handle()
            });
        describe();
        keep_up(handle.clone());
        handle
    })
}

/// Histograms keep their samples until upkeep folds them into buckets: without it a process
/// nobody scrapes would grow. A thread, not a task: it outlives any runtime. (The payment
/// provider's recorder uses it too.)
pub fn keep_up(handle: PrometheusHandle) {
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            handle.run_upkeep();
        })
        .expect("spawning the metrics upkeep thread");
}

fn describe() {
    describe_counter!(
        ORDERS,
        "Orders answered, by product guard and outcome (paid, reserved, or the error code)"
    );
    describe_histogram!(
        HTTP_DURATION,
        metrics::Unit::Seconds,
        "HTTP request latency, by method, route template and status"
    );
    describe_histogram!(
        LOCK_WAIT,
        metrics::Unit::Seconds,
        "Time from asking for a product's ZooKeeper lock to holding it, by recipe"
    );
    describe_histogram!(
        LOCK_HOLD,
        metrics::Unit::Seconds,
        "Time a product's ZooKeeper lock was held, by recipe"
    );
    describe_counter!(
        LOCK_KEPT,
        "Lock cycles served on a kept lock node (no node made for them), by recipe"
    );
    describe_histogram!(
        LOCK_HANDOVER,
        metrics::Unit::Seconds,
        "How long a lock node waited behind a kept lock before its holder gave it up"
    );
    describe_counter!(LOCK_FAILURES, "Lock acquisitions that failed, by recipe and reason (timeout, lost, too_busy, unavailable)");
    describe_histogram!(
        LOCK_CYCLE_ORDERS,
        "Orders served by one lock cycle (one guarded transaction), by guard"
    );
    describe_counter!(PAYMENT_OUTCOMES, "Charges by the outcome their order's own task learned (succeeded, declined, unknown: left pending for the sweep)");
    describe_counter!(ZK_OPERATIONS, "ZooKeeper requests sent, by operation (create, delete, get_data, get_children, exists, get_acl, add_watch)");
    describe_gauge!(
        ZK_SESSION_STATE,
        "1 for the ZooKeeper session's current state, 0 for the others"
    );
    describe_counter!(
        ZK_SESSION_CHANGES,
        "ZooKeeper session state changes, by the state entered"
    );
    describe_gauge!(
        DB_POOL,
        "PostgreSQL pool connections, by state (in_use, idle, max)"
    );
    describe_counter!(SWEEP_ACTIONS, "What the background sweep did, by action");
    describe_gauge!(
        ENSEMBLE_STANDING,
        "1 for this instance's ZooKeeper ensemble's standing (guarding, outranked, unknown), 0 for the others; an outranked instance sells nothing under a ZooKeeper guard and does no background work"
    );
    describe_gauge!(
        SHARED_CYCLES,
        "Lock cycles (one product's batch each) waiting for, or in, a transaction shared with other products' cycles on this instance"
    );
    describe_histogram!(
        SHARED_CYCLE_PRODUCTS,
        "Products (lock cycles) one shared transaction served: `_sum / _count` is cycles per transaction"
    );
    describe_counter!(
        LOCK_REENTRIES,
        "Lock acquisitions an owner already holding the lock made by counting (no node), by recipe"
    );
    describe_gauge!(
        PAYMENTS_IN_FLIGHT,
        "Charges this instance has at the payment provider now"
    );
    describe_histogram!(
        PAYMENT_LEASE_WAIT,
        metrics::Unit::Seconds,
        "Time a charge waited for a payment semaphore lease (--payment-concurrency)"
    );
    describe_counter!(REFUSED, "Connections and event streams refused for want of room, by which cap (connections, connections_per_client, event_streams, event_streams_per_client)");
    describe_counter!(VIEW_REFRESHES, "ZooKeeper reads made to refresh a public view's snapshot, by view (lock, terms_lock, semaphore): however many clients ask, one read per refresh");
    describe_counter!(
        WORKER_RESTARTS,
        "Background workers restarted after a panic, by worker"
    );
    describe_gauge!(READY, "1 when this instance's last readiness check (GET /readyz) found PostgreSQL, ZooKeeper, the payment provider, the buyers' keys and the ensemble's standing fine, 0 otherwise; absent until something probes /readyz");
    describe_gauge!(
        REQUEST_TIMEOUT,
        metrics::Unit::Seconds,
        "This instance's --request-timeout-ms: alert rules compare latencies to a share of it"
    );
    describe_gauge!(AUDIT_INCONSISTENT, "Products (under a guard: `none` oversells on purpose) whose books did not balance at the background audit's last pass (0: every unit is in stock or in an order that holds it)");
    describe_gauge!(
        AUDIT_TIMESTAMP,
        metrics::Unit::Seconds,
        "Unix time of the background audit's last completed pass"
    );
    describe_gauge!(
        PRODUCT_STOCK,
        "Units left in stock, by product, at the background audit's last pass"
    );
    describe_gauge!(OVERDUE, "Work the background has not done in time, database-wide, by work: returns (reservations past their deadline by 30 s), settlement (orders still paying past the settlement window), intents (payment intents without an outcome past it)");
}

/// This instance's last readiness check: ready or not.
pub fn ready(ready: bool) {
    gauge!(READY).set(if ready { 1.0 } else { 0.0 });
}

/// The request timeout this instance answers within.
pub fn request_timeout(timeout: Duration) {
    gauge!(REQUEST_TIMEOUT).set(timeout.as_secs_f64());
}

/// What one pass of the background audit found: how many products' books do not balance,
/// and each product's stock (by id).
pub fn audited(inconsistent: usize, stock: &[(i64, i64)]) {
    gauge!(AUDIT_INCONSISTENT).set(inconsistent as f64);
    for (product, left) in stock {
        gauge!(PRODUCT_STOCK, "product" => product.to_string()).set(*left as f64);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    gauge!(AUDIT_TIMESTAMP).set(now.as_secs_f64());
}

/// Background `work` (`returns`, `settlement`, `intents`) not done in time, database-wide.
pub fn overdue(work: &'static str, count: i64) {
    gauge!(OVERDUE, "work" => work).set(count as f64);
}

/// Lock cycles in (or waiting for) a shared transaction: +1 as one joins, -1 as it leaves.
pub fn shared_cycles(delta: f64) {
    gauge!(SHARED_CYCLES).increment(delta);
}

/// A shared transaction served `products` lock cycles.
pub fn shared_transaction(products: usize) {
    histogram!(SHARED_CYCLE_PRODUCTS).record(products as f64);
}

/// An order's answer: `outcome` is `paid`, `reserved` or the error code.
pub fn order(guard: &'static str, outcome: &'static str) {
    counter!(ORDERS, "guard" => guard, "outcome" => outcome).increment(1);
}

pub fn http_request(method: &str, route: &str, status: u16, took: Duration) {
    histogram!(
        HTTP_DURATION,
        "method" => method.to_string(),
        "route" => route.to_string(),
        "status" => status.to_string()
    )
    .record(took.as_secs_f64());
}

pub fn lock_granted(recipe: &'static str, waited: Duration) {
    histogram!(LOCK_WAIT, "recipe" => recipe).record(waited.as_secs_f64());
}

pub fn lock_released(recipe: &'static str, held: Duration) {
    histogram!(LOCK_HOLD, "recipe" => recipe).record(held.as_secs_f64());
}

pub fn lock_kept(recipe: &'static str) {
    counter!(LOCK_KEPT, "recipe" => recipe).increment(1);
}

pub fn lock_handover(waited: Duration) {
    histogram!(LOCK_HANDOVER).record(waited.as_secs_f64());
}

pub fn lock_failed(recipe: &'static str, reason: &'static str) {
    counter!(LOCK_FAILURES, "recipe" => recipe, "reason" => reason).increment(1);
}

pub fn lock_reentered(recipe: &'static str) {
    counter!(LOCK_REENTRIES, "recipe" => recipe).increment(1);
}

pub fn payment_lease(waited: Duration) {
    histogram!(PAYMENT_LEASE_WAIT).record(waited.as_secs_f64());
}

/// A charge's outcome as the order's own task learned it: `succeeded`, `declined`, or
/// `unknown` (no answer before its deadline: the intent stays pending for the sweep).
pub fn payment_outcome(outcome: &'static str) {
    counter!(PAYMENT_OUTCOMES, "outcome" => outcome).increment(1);
}

/// Charges at the provider now: `+1.0` as one starts, `-1.0` as it ends.
pub fn payments_in_flight(delta: f64) {
    gauge!(PAYMENTS_IN_FLIGHT).increment(delta);
}

pub fn lock_cycle(guard: &'static str, orders: usize) {
    histogram!(LOCK_CYCLE_ORDERS, "guard" => guard).record(orders as f64);
}

/// One request sent to ZooKeeper. Writes (`create`, `delete`) are what a ZooKeeper quorum
/// pays for: `loadtest/run` divides them by paid orders.
pub fn zk(op: &'static str) {
    counter!(ZK_OPERATIONS, "op" => op).increment(1);
}

/// A connection or event stream refused by the cap `which`.
pub fn refused(which: &'static str) {
    counter!(REFUSED, "cap" => which).increment(1);
}

/// A public view's snapshot was read from ZooKeeper again.
pub fn view_refreshed(view: &'static str) {
    counter!(VIEW_REFRESHES, "view" => view).increment(1);
}

/// A background worker panicked and was started again.
pub fn worker_restarted(worker: &'static str) {
    counter!(WORKER_RESTARTS, "worker" => worker).increment(1);
}

/// Our ensemble's standing is now `standing` (`guarding`, `outranked` or `unknown`).
pub fn ensemble_standing(standing: &'static str) {
    for known in ["guarding", "outranked", "unknown"] {
        gauge!(ENSEMBLE_STANDING, "standing" => known).set(if known == standing {
            1.0
        } else {
            0.0
        });
    }
}

/// The session entered `state` (`SyncConnected`, `Disconnected`, `Expired`, ...).
pub fn zk_session(state: &str) {
    for known in ZK_STATES {
        gauge!(ZK_SESSION_STATE, "state" => *known).set(if *known == state { 1.0 } else { 0.0 });
    }
    counter!(ZK_SESSION_CHANGES, "state" => state.to_string()).increment(1);
}

const ZK_STATES: &[&str] = &[
    "Disconnected",
    "SyncConnected",
    "AuthFailed",
    "ConnectedReadOnly",
    "Expired",
    "Closed",
];

pub fn db_pool(size: u32, idle: usize, max: u32) {
    let idle = idle as f64;
    gauge!(DB_POOL, "state" => "in_use").set(f64::from(size) - idle);
    gauge!(DB_POOL, "state" => "idle").set(idle);
    gauge!(DB_POOL, "state" => "max").set(f64::from(max));
}

pub fn sweep(action: &'static str, count: u64) {
    if count > 0 {
        counter!(SWEEP_ACTIONS, "action" => action).increment(count);
    }
}

/// [`zk`], for a request written as one expression.
pub fn zk_then<F: std::future::Future>(op: &'static str, request: F) -> F {
    zk(op);
    request
}
