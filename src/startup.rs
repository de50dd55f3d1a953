//! Build, then run: `build` connects everything, wires each part to the handles it uses,
//! and binds the listener (so a caller knows the real port before serving); `run` serves,
//! with the background work scheduled beside it, until the given shutdown future resolves.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::buyers::Buyers;
use crate::config::Config;
use crate::database;
use crate::events::Events;
use crate::flags::{Flags, Seal};
use crate::http::{self, AppState, Handles};
use crate::idempotency;
use crate::inventory::{self, Catalog};
use crate::line::{self, Line};
use crate::lock::Zk;
use crate::orders::{self, Rules, Shop};
use crate::payment::Provider;
use crate::teaching::Teaching;
use crate::telemetry::metrics;

pub struct Application {
    listener: TcpListener,
    state: AppState,
    /// Keeps this instance's ZooKeeper ensemble alive in Postgres (`inventory::ensembles`).
    standing: tokio::task::JoinHandle<()>,
}

impl Application {
    /// Connects to PostgreSQL (and migrates it) and ZooKeeper, and binds the listener.
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        anyhow::ensure!(
            config.db_statement_timeout_ms < config.zk_session_timeout_ms,
            "--db-statement-timeout-ms must be below --zk-session-timeout-ms: a stock write must not outlive its lock"
        );
        anyhow::ensure!(
            config.payment_concurrency == 0
                || config.payment_timeout() + orders::ANSWER_MARGIN < config.request_timeout(),
            "with --payment-concurrency, --payment-timeout-ms plus 1 s must be below --request-timeout-ms: a charge must fit in its request after its wait for a lease"
        );
        // An order in flight at SIGTERM finishes within its request's time and the margin
        // it keeps for recording; a shorter grace would cut it off half way (its intent then
        // waits for the sweep of another instance, or of this one's next start).
        anyhow::ensure!(
            Duration::from_millis(config.shutdown_grace_ms)
                >= config.request_timeout() + orders::ANSWER_MARGIN * 2,
            "--shutdown-grace-ms must be at least --request-timeout-ms plus 2 s: an order in flight at shutdown must be able to finish"
        );
        // First: a server without a mode stops before it connects to anything.
        config.buyers.mode()?;
        // Installed before anything is counted.
        crate::telemetry::metrics::handle();
        let db = database::connect(
            &config.database_url,
            config.database_password.as_deref(),
            config.db_max_connections,
            config.db_timeouts(),
        )
        .await?;
        // Several instances may start at once: sqlx serialises migrations with an advisory lock.
        sqlx::migrate!()
            .run(&db)
            .await
            .context("running database migrations")?;
        let buyers = Buyers::start(&config.buyers, &db).await?;
        let line = Line::start(&db)
            .await
            .context("reading the line's pass key")?;
        if config.seed_demo {
            inventory::seed_demo(&db, config.allow_unsafe_guards, config.batch_max)
                .await
                .context("creating the demo products")?;
        }

        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let instance = config
            .instance
            .clone()
            .unwrap_or_else(|| format!("{addr}/{}", std::process::id()));
        let zk = Zk::connect(
            &config.zk,
            &config.zk_root,
            Duration::from_millis(config.zk_session_timeout_ms),
            instance,
            config.max_waiters_per_product,
            config.zk_auth.clone(),
        )
        .await?;
        // Before serving: whether our ensemble may guard the stock (or another, alive, does).
        let (standing, standing_task) = inventory::keep_standing(db.clone(), zk.clone()).await;
        // The deployment's secret keys the flags' seal: the admin token, else ZooKeeper's.
        let secret = config.admin_token.as_deref().or(config.zk_auth.as_deref());
        let seal = Seal::new(secret);
        let sold_out = Flags::start(zk.clone(), &config.zk_root, "soldout", seal.clone()).await?;
        let demo = Flags::start(zk.clone(), &config.zk_root, "demo", seal).await?;
        let events = Events::start(db.clone(), zk.clone(), sold_out.clone())
            .await
            .context("listening for stock events")?;
        let payment = Provider::new(
            &config.payment_url,
            config.payment_timeout(),
            config.payment_api_key.as_deref(),
            config.payment_protocol,
        )?;
        // Not fatal (in a compose file the provider may start after us), but said now, and
        // `/readyz` stays 503 naming the provider until it answers and takes our key.
        if let Err(why) = payment.check(config.payment_timeout()).await {
            tracing::error!(%why, "the payment provider cannot be used: no charge can be made until it can");
        }
        let tasks = TaskTracker::new();
        let catalog = Catalog::default();
        let teaching = Teaching::new(
            db.clone(),
            zk.clone(),
            demo,
            config.allow_unsafe_guards,
            config.payment_concurrency,
            config.request_timeout(),
        );
        let shop = Shop::new(
            db.clone(),
            zk.clone(),
            catalog.clone(),
            sold_out.clone(),
            events.clone(),
            payment,
            tasks.clone(),
            &teaching,
            Rules::of(&config),
            standing.clone(),
            line.clone(),
        );
        let state = AppState::new(Handles {
            shop,
            db,
            zk,
            catalog,
            sold_out,
            events,
            teaching,
            tasks,
            standing,
            buyers,
            line,
            views: Arc::new(http::snapshot::Views::new(Duration::from_millis(
                config.view_refresh_ms,
            ))),
            config: Arc::new(config),
        });
        Ok(Application {
            listener,
            state,
            standing: standing_task,
        })
    }

    /// The address actually bound (port 0 becomes a real port).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The ZooKeeper session (tests look at its locks, or take it over).
    pub fn zk(&self) -> &Zk {
        &self.state.zk
    }

    /// The order path (tests look at its per-product queues).
    pub fn shop(&self) -> &Shop {
        &self.state.shop
    }

    /// The teaching hooks (tests pause lock holders through them).
    pub fn teaching(&self) -> &Teaching {
        &self.state.teaching
    }

    /// Serves until `shutdown` resolves, then stops accepting and gives in-flight requests,
    /// and the order tasks behind them, `--shutdown-grace-ms` to finish; then closes the
    /// ZooKeeper session so our lock nodes go now, not a session timeout later, and waiters
    /// on other instances proceed at once.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Application {
            listener,
            state,
            standing,
        } = self;
        let tasks = state.tasks.clone();
        let zk = state.zk.clone();
        let db = state.db.clone();
        let grace = Duration::from_millis(state.config.shutdown_grace_ms);
        let sweeper = tokio::spawn(orders::sweep::run(
            state.shop.clone(),
            Duration::from_millis(state.config.expiry_interval_ms),
        ));
        let auditor = tokio::spawn(orders::audit::run(
            state.shop.clone(),
            Duration::from_millis(state.config.audit_interval_ms),
        ));
        metrics::request_timeout(state.config.request_timeout());
        let pacer = tokio::spawn(line::keep_pace(db.clone()));
        let purger = tokio::spawn(purge_keys(
            db.clone(),
            Duration::from_secs(state.config.idempotency_ttl_s),
        ));
        let events = state.events.clone();

        let (stopping, stopped) = oneshot::channel::<tokio::time::Instant>();
        let signal = async move {
            shutdown.await;
            // Event streams never end on their own; end them so the server can drain.
            events.stop();
            let _ = stopping.send(tokio::time::Instant::now() + grace);
        };
        let limits = http::server::Limits {
            max_connections: http::server::within_open_files(
                state.config.max_connections,
                state.config.db_max_connections as usize,
            ),
            max_connections_per_client: state.config.max_connections_per_client,
            header_read_timeout: Duration::from_millis(state.config.header_read_timeout_ms),
            max_header_bytes: state.config.max_header_bytes as usize,
            trusted: http::client::TrustedProxies::new(state.config.trusted_proxy.clone()),
        };
        let server = http::server::serve(listener, http::router(state), limits, signal);
        let wait_for_server = async {
            server.await;
            // A client that hung up leaves its order running in its task, and a lock cycle
            // may serve orders of connections that are gone: they must finish before the
            // pool closes, or they fail half way (a sale charged but not recorded as paid).
            tasks.close();
            tasks.wait().await;
            anyhow::Ok(())
        };
        let deadline = async {
            match stopped.await {
                Ok(deadline) => tokio::time::sleep_until(deadline).await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            drained = wait_for_server => drained?,
            _ = deadline => tracing::warn!(
                ?grace,
                tasks = tasks.len(),
                "requests or orders still in flight after the grace period; closing anyway"
            ),
        }
        for background in [sweeper, auditor, purger, pacer, standing] {
            background.abort();
            let _ = background.await;
        }
        zk.close().await;
        if tokio::time::timeout(Duration::from_secs(5), db.close())
            .await
            .is_err()
        {
            tracing::warn!("PostgreSQL connections still busy after 5s; exiting anyway");
        }
        Ok(())
    }
}

/// Forgets Idempotency-Keys older than `ttl`, once a minute, until aborted (shutdown).
async fn purge_keys(db: sqlx::PgPool, ttl: Duration) {
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        every.tick().await;
        if let Err(e) = idempotency::purge(&db, ttl).await {
            tracing::warn!(error = %e, "purging old idempotency keys failed");
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM (what Docker and systemd send): both binaries drain on it.
/// The SIGTERM handler is installed by this call, not when the future is first polled: a
/// process that says it is listening must already drain on SIGTERM, not die of it.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(not(unix))]
    let terminate: Option<()> = None;
    async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let terminate = async move {
            match terminate {
                #[cfg(unix)]
                Some(mut s) => {
                    s.recv().await;
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! { _ = ctrl_c => {}, _ = terminate => {} }
        tracing::info!("shutting down: finishing in-flight requests");
    }
}
