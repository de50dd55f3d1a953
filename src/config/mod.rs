//! Typed configuration, parsed once at start-up from flags with environment fallbacks.
//! Handlers never read the environment; they get what they need from `http::AppState`.
//!
//! Secrets (`--admin-token`, `--zk-auth`, `--payment-api-key`) are checked by [`Secret`]
//! (`secret`), whose refusal never shows the value; each may come from a file instead of its
//! variable (`files`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

mod files;
mod secret;
pub use files::{read_secret, with_secret_files, SecretVar, SECRETS};
use secret::{admin_token_rule, zk_auth_rule};
pub use secret::{api_key_rule, Secret};

#[derive(Clone, Parser)]
#[command(
    name = "seckill",
    version,
    about = "A flash-sale service that never oversells",
    // A later flag overrides an earlier one, so wrappers (and tests) can append to a base command.
    args_override_self = true,
    after_help = "Every secret's variable may instead name a file: DATABASE_URL_FILE, SECKILL_DB_PASSWORD_FILE, SECKILL_ADMIN_TOKEN_FILE, SECKILL_ZK_AUTH_FILE, SECKILL_PAYMENT_API_KEY_FILE.\nAdmin actions against a running instance: seckill admin --help"
)]
pub struct Config {
    /// Address to listen on. Port 0 picks a free port (tests use it).
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,

    /// PostgreSQL password, in place of the URL's (so the URL holds no secret). Never printed.
    #[arg(long, env = "SECKILL_DB_PASSWORD", hide_env_values = true)]
    pub database_password: Option<String>,

    /// Most connections this instance opens to PostgreSQL.
    #[arg(long, env = "SECKILL_DB_MAX_CONNECTIONS", default_value_t = 20)]
    pub db_max_connections: u32,

    /// Server-side bound on every SQL statement. Kept well under the ZooKeeper session
    /// timeout so a critical section cannot outlive its lock by waiting on the database.
    #[arg(long, env = "SECKILL_DB_STATEMENT_TIMEOUT_MS", default_value_t = 2000)]
    pub db_statement_timeout_ms: u64,

    /// ZooKeeper connect string (`host:port[,host:port...]`).
    #[arg(long = "zk", env = "SECKILL_ZK", default_value = "127.0.0.1:2181")]
    pub zk: String,

    /// ZooKeeper path under which the service keeps its nodes (created if missing).
    #[arg(long, env = "SECKILL_ZK_ROOT", default_value = "/seckill", value_parser = parse_zk_root)]
    pub zk_root: String,

    /// ZooKeeper session timeout asked of the server. A crashed instance's lock nodes vanish
    /// after this long; the server clamps it to [2, 20] ticks.
    #[arg(long, env = "SECKILL_ZK_SESSION_TIMEOUT_MS", default_value_t = 10_000)]
    pub zk_session_timeout_ms: u64,

    /// `user:password` for ZooKeeper's digest scheme. When set, every node the service
    /// creates is readable and writable only by sessions with these credentials (other
    /// instances of the service), so nobody else who can reach ZooKeeper can raise a sold-out
    /// flag, arm a demo, or meddle with a lock queue.
    #[arg(long, env = "SECKILL_ZK_AUTH", hide_env_values = true, value_parser = Secret(zk_auth_rule))]
    pub zk_auth: Option<String>,

    /// Bearer token for the admin endpoints, at least 16 visible characters. Without one
    /// they answer 403 `admin_disabled`; there is no default.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true, value_parser = Secret(admin_token_rule))]
    pub admin_token: Option<String>,

    #[command(flatten)]
    pub buyers: crate::buyers::Settings,

    /// How long an order waits for a product's lock before answering 503 `lock_timeout`.
    #[arg(long, env = "SECKILL_LOCK_TIMEOUT_MS", default_value_t = 3000)]
    pub lock_timeout_ms: u64,

    #[command(flatten)]
    pub keep: crate::lock::KeepSettings,

    /// Pause between reading and writing the stock in the read-check-write guards (`zk`,
    /// `none`): the source material's `sleep`, which widens the race window for demos and tests.
    #[arg(long, env = "SECKILL_STOCK_THINK_MS", default_value_t = 0)]
    pub stock_think_ms: u64,

    /// Most orders of one product a lock cycle serves, for products created without their own
    /// `batch_max`. 1 makes every order take the lock for itself (per-request locking).
    #[arg(long, env = "SECKILL_BATCH_MAX", default_value_t = 256,
          value_parser = clap::value_parser!(i32).range(1..=4096))]
    pub batch_max: i32,

    /// Most buyers one instance lets wait for (or be served under) one product's guard;
    /// beyond it, 429 `too_busy`. A combined product's queue also turns away, at once, an
    /// order it could not serve within --lock-timeout-ms at its recent pace (Retry-After:
    /// the queue's time to be served); this cap bounds its memory.
    #[arg(long, env = "SECKILL_MAX_WAITERS_PER_PRODUCT", default_value_t = 4096)]
    pub max_waiters_per_product: usize,

    /// Shared lock-cycle transactions at once. 2: once one has only its COMMIT left, the next
    /// is built beside it (worth it where a COMMIT waits long: a slow disk, synchronous
    /// replication); 1: the next waits, and gathers more products' cycles.
    #[arg(long, env = "SECKILL_SHARED_TRANSACTIONS", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=2))]
    pub shared_transactions: u8,

    /// Most of a product's stock (a share of every unit it ever had) that reservations
    /// without payment (`"pay": false`) may hold at once; beyond it they answer 409
    /// `too_many_unpaid`. A buyer is cheap to make (any name in `open` mode, any account an
    /// issuer signs up): this is what stops a script reserving a sale empty with buyers
    /// that never pay. 1.0 turns it off.
    #[arg(long, env = "SECKILL_MAX_UNPAID_SHARE", default_value_t = 0.5, value_parser = parse_share)]
    pub max_unpaid_share: f64,

    /// Most open connections per instance; beyond it a new connection is answered 503
    /// `overloaded` (Retry-After) and closed. Also kept below the process's open-file limit.
    #[arg(long, env = "SECKILL_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,

    /// Most open connections one client address may hold on this instance (and never more
    /// than half of --max-connections); beyond it, 503 `overloaded` and closed. A trusted
    /// proxy is not held to it: it carries many clients.
    #[arg(
        long,
        env = "SECKILL_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 1024
    )]
    pub max_connections_per_client: usize,

    /// Proxies (addresses or CIDR blocks, comma-separated or repeated) whose
    /// `X-Forwarded-For` / `X-Real-IP` name the client. Only for these peers: from anyone
    /// else the headers are ignored, or a client could pose as many.
    #[arg(long = "trusted-proxy", env = "SECKILL_TRUSTED_PROXY", value_delimiter = ',',
          value_parser = parse_trusted)]
    pub trusted_proxy: Vec<ipnet::IpNet>,

    /// A client must send a request's headers within this long, which also closes a
    /// keep-alive connection idle for longer: no slowloris client holds a socket forever.
    #[arg(long, env = "SECKILL_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,

    /// The most bytes a request's line and headers may take (hyper's read buffer per
    /// connection): a larger head is answered 431 and the connection closed, so slow or huge
    /// headers cannot hold much memory per connection. At least 8192.
    #[arg(long, env = "SECKILL_MAX_HEADER_BYTES", default_value_t = 16_384,
          value_parser = clap::value_parser!(u32).range(8192..=1_048_576))]
    pub max_header_bytes: u32,

    /// Most `GET /api/events` streams open at once per instance; beyond it 503 `overloaded`.
    #[arg(long, env = "SECKILL_MAX_EVENT_STREAMS", default_value_t = 256)]
    pub max_event_streams: usize,

    /// Most `GET /api/events` streams one client may hold (and never more than half of
    /// --max-event-streams); beyond it 503 `overloaded`.
    #[arg(
        long,
        env = "SECKILL_MAX_EVENT_STREAMS_PER_CLIENT",
        default_value_t = 16
    )]
    pub max_event_streams_per_client: usize,

    /// An event stream ends after this long; the page's EventSource reconnects.
    #[arg(long, env = "SECKILL_EVENT_STREAM_MAX_S", default_value_t = 300)]
    pub event_stream_max_s: u64,

    /// How old a public view of ZooKeeper (a lock queue, the terms lock, the payment
    /// semaphore) and /readyz's PostgreSQL check may be: each is read at most once per this
    /// long per instance, however many clients ask.
    #[arg(long, env = "SECKILL_VIEW_REFRESH_MS", default_value_t = 250)]
    pub view_refresh_ms: u64,

    /// Orders one client (address, or the client a trusted proxy names) may place per second
    /// on this instance, on average, before
    /// answers turn 429 `rate_limited` (Retry-After). 0, the default, turns the limit off
    /// (the load test sends from one address).
    #[arg(long, env = "SECKILL_ORDERS_PER_CLIENT_PER_S", default_value_t = 0)]
    pub orders_per_client_per_s: u32,

    /// How many orders a client may send at once before the per-second rate applies.
    #[arg(long, env = "SECKILL_ORDERS_BURST_PER_CLIENT", default_value_t = 20)]
    pub orders_burst_per_client: u32,

    /// Bound on a whole request; slower ones answer 503 `unavailable` (an order still runs to
    /// its end: retry with the same Idempotency-Key to get its outcome).
    #[arg(long, env = "SECKILL_REQUEST_TIMEOUT_MS", default_value_t = 15_000)]
    pub request_timeout_ms: u64,

    /// On SIGTERM/Ctrl-C, how long in-flight requests may take to finish before we exit: at
    /// least --request-timeout-ms plus 2 s, so an order in flight finishes.
    #[arg(long, env = "SECKILL_SHUTDOWN_GRACE_MS", default_value_t = 20_000)]
    pub shutdown_grace_ms: u64,

    /// How often this instance looks for unpaid reservations past their deadline.
    #[arg(long, env = "SECKILL_EXPIRY_INTERVAL_MS", default_value_t = 1000)]
    pub expiry_interval_ms: u64,

    /// How often this instance audits every product's books and the background's overdue
    /// work, for the metrics alerts read (`seckill_audit_*`, `seckill_overdue`).
    #[arg(long, env = "SECKILL_AUDIT_INTERVAL_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub audit_interval_ms: u64,

    /// How long an Idempotency-Key and its response are kept (at least 24 h by default).
    #[arg(long, env = "SECKILL_IDEMPOTENCY_TTL_S", default_value_t = 86_400)]
    pub idempotency_ttl_s: u64,

    /// Accept products with the unsafe `none` guard (it oversells: that is the demo).
    #[arg(long, env = "SECKILL_ALLOW_UNSAFE_GUARDS", default_value_t = false)]
    pub allow_unsafe_guards: bool,

    /// The payment provider's base URL (`seckill-provider` in the demo and tests; a real
    /// gateway's client would plug in here).
    #[arg(
        long,
        env = "SECKILL_PAYMENT_URL",
        default_value = "http://127.0.0.1:8090"
    )]
    pub payment_url: String,

    /// The payment provider's API key, sent as `Authorization: Bearer` with every request to
    /// it (`seckill-provider --api-key`; a real gateway's secret key). Never printed.
    #[arg(long, env = "SECKILL_PAYMENT_API_KEY", hide_env_values = true, value_parser = Secret(api_key_rule))]
    pub payment_api_key: Option<String>,

    /// How this instance speaks to the payment provider. `auto`: HTTP/2 over https when the
    /// provider offers it (ALPN), HTTP/1.1 over http. `http2`: HTTP/2 always (over http,
    /// with prior knowledge: `seckill-provider` speaks it): every charge in flight shares one
    /// connection. `http1`: HTTP/1.1, one connection per charge in flight.
    #[arg(long, env = "SECKILL_PAYMENT_PROTOCOL", value_enum, default_value_t = PaymentProtocol::Auto)]
    pub payment_protocol: PaymentProtocol,

    /// How long one request to the payment provider may take before it is sent again, under
    /// the same Idempotency-Key (until the order's request deadline).
    #[arg(long, env = "SECKILL_PAYMENT_TIMEOUT_MS", default_value_t = 2_000)]
    pub payment_timeout_ms: u64,

    /// Charges in flight at the payment provider, at most, across every instance: a
    /// ZooKeeper semaphore (Curator's InterProcessSemaphoreV2 layout) every instance must
    /// start with the same N. 0, the default, turns it off. A charge that gets no lease
    /// before its request's deadline is not made: 503 `payment_busy`, units stay reserved.
    #[arg(long, env = "SECKILL_PAYMENT_CONCURRENCY", default_value_t = 0)]
    pub payment_concurrency: usize,

    /// Put demo products on sale if there are none yet: a keyboard guarded by the ZooKeeper
    /// lock, and (with --allow-unsafe-guards) the same unguarded and under the naive herd
    /// lock, to compare; without it, under pg-atomic.
    #[arg(long, env = "SECKILL_SEED_DEMO", default_value_t = false)]
    pub seed_demo: bool,

    /// Directory served at `/` (the teaching page).
    #[arg(long, env = "SECKILL_STATIC_DIR", default_value = "static")]
    pub static_dir: PathBuf,

    /// Log lines as text (for a terminal) or one JSON object per line (for a log pipeline);
    /// either way each line carries its request's `request_id`. `RUST_LOG` filters them.
    #[arg(long, env = "SECKILL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Name written into this instance's lock nodes, so a person reading ZooKeeper sees who
    /// waits. Defaults to `<listen address>/<pid>`.
    #[arg(long, env = "SECKILL_INSTANCE")]
    pub instance: Option<String>,
}

/// How the payment provider is spoken to (`--payment-protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PaymentProtocol {
    Auto,
    Http1,
    Http2,
}

/// How log lines are written (see `telemetry::logs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Config {
    pub fn lock_timeout(&self) -> Duration {
        Duration::from_millis(self.lock_timeout_ms)
    }

    pub fn fairness(&self) -> crate::lock::Fairness {
        self.keep.fairness()
    }

    /// What every PostgreSQL session is told, and the client's bound on each step.
    pub fn db_timeouts(&self) -> crate::database::Timeouts {
        crate::database::Timeouts {
            statement: Duration::from_millis(self.db_statement_timeout_ms),
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn payment_timeout(&self) -> Duration {
        Duration::from_millis(self.payment_timeout_ms)
    }

    pub fn stock_think(&self) -> Duration {
        Duration::from_millis(self.stock_think_ms)
    }
}

// A root like `/a/b/` would produce `//` in child paths, which ZooKeeper rejects.
fn parse_zk_root(s: &str) -> Result<String, String> {
    let root = s.trim_end_matches('/');
    if !s.starts_with('/') || root.is_empty() || root.contains("//") {
        return Err(format!(
            "{s:?} is not an absolute ZooKeeper path like /seckill"
        ));
    }
    Ok(root.to_string())
}

/// Shortest admin token accepted: 16 characters of 95 are ~105 bits.
pub const MIN_ADMIN_TOKEN: usize = 16;

/// `--trusted-proxy`: an address or a CIDR block.
pub fn parse_trusted(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{s:?} is not an address or a CIDR block like 10.0.0.0/8"))
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!("{s:?} is not a share above 0.0 and at most 1.0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zk_root_is_normalised_and_must_be_absolute() {
        assert_eq!(parse_zk_root("/seckill/").unwrap(), "/seckill");
        assert_eq!(parse_zk_root("/a/b").unwrap(), "/a/b");
        assert!(parse_zk_root("seckill").is_err());
        assert!(parse_zk_root("/").is_err());
        assert!(parse_zk_root("/a//b").is_err());
    }
}
