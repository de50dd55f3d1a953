//! How the service talks to PostgreSQL when PostgreSQL is slow or silent.
//!
//! `statement_timeout` is enforced by the server, which never sees a statement lost on the
//! way, nor one whose answer is: on a silent path (packets dropped, nothing reset) a
//! statement or a COMMIT would wait until TCP gives up, ~15 minutes, while the lock
//! cycle that sent it keeps its product's lock. So every step of the sale's transactions is
//! also bounded here, on the client's side ([`Bound`]); a step that does not answer in time
//! is abandoned, and its connection is closed rather than returned to the pool (the pool
//! tests a connection on its way back with a bounded ping).
//!
//! The server ends a transaction nobody speaks to (`idle_in_transaction_session_timeout`):
//! an abandoned transaction keeps its product's row locked inside PostgreSQL until then,
//! and that, not the lock's release, is what lets the next holder write. Keepalives and
//! `tcp_user_timeout` on the server's side notice a peer that went away in seconds.

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};

/// The margin a step gets over `statement_timeout`: the server's own bound answers first
/// whenever the server hears the statement.
const STEP_MARGIN: Duration = Duration::from_secs(1);

/// How long a connection coming back to the pool may take to show it still answers.
const PING: Duration = Duration::from_secs(2);

/// What the pool's sessions are told, from `--db-statement-timeout-ms`.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// `statement_timeout`: the server's bound on one statement.
    pub statement: Duration,
}

impl Timeouts {
    /// The client's bound on one step (a statement, a COMMIT).
    pub fn step(&self) -> Duration {
        self.statement + STEP_MARGIN
    }

    /// `idle_in_transaction_session_timeout`: twice the statement's bound, so a transaction
    /// of ours between two statements is never ended for a pause the client's own bound
    /// allows, and an abandoned one is ended within seconds.
    pub fn idle_in_transaction(&self) -> Duration {
        self.statement * 2
    }
}

/// The pool: every session bounded as the module's comment says.
/// `password`, when given, replaces the URL's.
pub async fn connect(
    url: &str,
    password: Option<&str>,
    max_connections: u32,
    timeouts: Timeouts,
) -> anyhow::Result<PgPool> {
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    let mut options = PgConnectOptions::from_str(url).context("parsing --database-url")?;
    if let Some(password) = password {
        options = options.password(password);
    }
    let options = options.options([
        ("statement_timeout", ms(timeouts.statement)),
        (
            "idle_in_transaction_session_timeout",
            ms(timeouts.idle_in_transaction()),
        ),
        // The server's side of the connection: a client host that went away is noticed
        // within seconds rather than the kernel's two hours.
        ("tcp_keepalives_idle", "5".into()),
        ("tcp_keepalives_interval", "2".into()),
        ("tcp_keepalives_count", "3".into()),
        ("tcp_user_timeout", ms(timeouts.step() * 3)),
    ]);
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(3))
        // A connection whose statement was abandoned mid-way (its future dropped at a
        // bound) has its answer, or a queued ROLLBACK, still outstanding: sqlx pings it on
        // its way back, and on a silent path that ping would wait as long as the statement
        // did, holding a place in the pool. Bounded here: an error closes it at once.
        .after_release(|conn, _| {
            Box::pin(async move {
                match tokio::time::timeout(PING, conn.ping()).await {
                    Ok(answered) => answered.map(|()| true),
                    Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "a connection coming back to the pool did not answer",
                    ))),
                }
            })
        })
        .connect_with(options)
        .await
        .context("connecting to PostgreSQL")
}

/// A client-side bound on each step of one unit of work: each step gets at most `step`,
/// and none runs past `by` (the answer's deadline of the orders it serves).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub step: Duration,
    pub by: Instant,
}

impl Bound {
    /// Steps of `step` each, with no deadline of their own beyond that.
    pub fn steps(step: Duration) -> Bound {
        Bound {
            step,
            // Far enough never to be the nearer one.
            by: Instant::now() + Duration::from_secs(86_400),
        }
    }

    /// Whether `by` has come.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.by
    }

    /// Runs one step, abandoning it at its bound: then an I/O error ("timed out"), which
    /// every caller already treats as a database that did not answer. The connection the
    /// step used goes back through the pool's bounded ping (see [`connect`]), and is closed.
    pub async fn run<T>(
        &self,
        step: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        let until = (Instant::now() + self.step).min(self.by);
        match tokio::time::timeout_at(until.into(), step).await {
            Ok(done) => done,
            Err(_) => Err(timed_out()),
        }
    }
}

/// The error a step abandoned at its bound ends with.
pub fn timed_out() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "PostgreSQL did not answer within the step's bound",
    ))
}

/// Whether `e` is a step abandoned at its bound.
pub fn is_timed_out(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_step_that_does_not_answer_is_abandoned_at_the_nearer_of_its_bounds() {
        let never = std::future::pending::<Result<(), sqlx::Error>>;
        let bound = Bound::steps(Duration::from_millis(50));
        let started = Instant::now();
        let e = bound.run(never()).await.unwrap_err();
        assert!(is_timed_out(&e), "{e}");
        assert!(started.elapsed() >= Duration::from_millis(50));
        // A deadline nearer than the step wins.
        let bound = Bound {
            step: Duration::from_secs(3600),
            by: Instant::now() + Duration::from_millis(20),
        };
        assert!(is_timed_out(&bound.run(never()).await.unwrap_err()));
        assert!(bound.passed());
        // A step that answers in time is its own answer.
        assert_eq!(bound_ok().await, 7);
    }

    async fn bound_ok() -> i32 {
        Bound::steps(Duration::from_secs(1))
            .run(async { Ok::<_, sqlx::Error>(7) })
            .await
            .unwrap()
    }

    #[test]
    fn the_server_ends_an_idle_transaction_after_the_clients_bound_on_a_step() {
        let t = Timeouts {
            statement: Duration::from_secs(2),
        };
        assert!(t.idle_in_transaction() > t.step());
    }
}
