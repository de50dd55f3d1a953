//! Databases on the test PostgreSQL server: a migrated template cloned per test, and
//! empty ones for ledgers.

use super::*;

/// A fresh database for a provider's ledger, named after the test's, on the test server.
pub async fn ledger_database(test: &str) -> String {
    empty_database(&format!("{test}_ledger_{}", fastrand::u32(..))).await
}

/// A fresh, empty database `name` on the test server: its URL.
pub async fn empty_database(name: &str) -> String {
    let base = std::env::var("TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://seckill:seckill@127.0.0.1:5433/seckill".into());
    let admin = PgPool::connect(&base)
        .await
        .expect("connect to the test PostgreSQL (run scripts/test)");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("create the database");
    admin.close().await;
    let (prefix, _) = base.rsplit_once('/').expect("database URL ends in /<name>");
    format!("{prefix}/{name}")
}

/// The migrated database every test database is cloned from (`CREATE DATABASE … TEMPLATE`),
/// one per PostgreSQL server and set of migrations: made once (by whichever test asks first)
/// instead of migrating once per test. Named after the migrations, so a changed migration
/// makes a new one; made under another name and renamed when complete, so an interrupted run
/// never leaves a half-migrated template behind.
pub(super) async fn template(base: &str) -> String {
    static MADE: tokio::sync::Mutex<Vec<String>> = tokio::sync::Mutex::const_new(Vec::new());
    let migrator = sqlx::migrate!();
    let mut fingerprint = 0u64;
    for migration in migrator.iter() {
        for byte in migration.checksum.iter() {
            fingerprint = fingerprint.wrapping_mul(31).wrapping_add(u64::from(*byte));
        }
    }
    let name = format!("seckill_template_{fingerprint:016x}");
    let mut made = MADE.lock().await;
    if made.contains(&format!("{base} {name}")) {
        return name;
    }
    let admin = PgPool::connect(base)
        .await
        .expect("connect to the test PostgreSQL (run scripts/test)");
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&admin)
            .await
            .expect("look for the template database");
    if !exists {
        // Within PostgreSQL's 63 bytes: a longer name is cut short, and the checks on
        // pg_stat_activity below would look for a name no database has.
        let building = format!(
            "{name}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        sqlx::query(&format!("CREATE DATABASE {building}"))
            .execute(&admin)
            .await
            .expect("create the template database");
        let (prefix, _) = base.rsplit_once('/').expect("database URL ends in /<name>");
        // One connection of our own, not a pool: the rename below needs every session on it
        // gone, and sqlx's `Pool::close` can leave one open for good — a connection still on
        // its way back to the pool (the migration's, pinged after its advisory unlock) when
        // `close` waits for its last permit is pushed to the idle queue after `close` has
        // emptied it, and nothing closes it (seen under load: 9 of 40 rounds left a session
        // idle after `SELECT pg_advisory_unlock`, 0 of 40 with a lone connection). This was
        // the flake "timed out after 30s waiting for the template's connections to end".
        let mut db = sqlx::PgConnection::connect(&format!("{prefix}/{building}?sslmode=disable"))
            .await
            .expect("connect to the template database");
        migrator
            .run(&mut db)
            .await
            .expect("migrate the template database");
        db.close().await.expect("close the template's connection");
        // A closed connection's server process may still be leaving: wait until none is
        // left on the database, or the rename (and every clone) is refused.
        wait_until(
            Duration::from_secs(30),
            "the template's connections to end",
            || async {
                let left: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1")
                        .bind(&building)
                        .fetch_one(&admin)
                        .await
                        .ok()?;
                (left == 0).then_some(())
            },
        )
        .await;
        // And a backend seen gone can still hold on (the rename then says "being accessed by
        // other users", as a fresh clone's fault run met): try again until it has left.
        wait_until(Duration::from_secs(30), "the template's name", || async {
            let renamed = sqlx::query(&format!("ALTER DATABASE {building} RENAME TO {name}"))
                .execute(&admin)
                .await;
            match renamed {
                Ok(_) => Some(()),
                Err(e) if e.to_string().contains("being accessed by other users") => {
                    // Whatever still sits on our own scratch database goes.
                    let _ = sqlx::query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = $1 AND pid <> pg_backend_pid()",
                    )
                    .bind(&building)
                    .execute(&admin)
                    .await;
                    None
                }
                Err(e) => panic!("name the template database: {e}"),
            }
        })
        .await;
    }
    admin.close().await;
    made.push(format!("{base} {name}"));
    name
}
