//! Which ZooKeeper ensemble guards the stock. Fencing tokens of different ensembles are
//! ordered by the epoch Postgres gave each ensemble (`zk_ensembles`), and a row claimed by a
//! newer epoch fences every older one out. That lets a wiped or replaced ZooKeeper take over
//! without anyone editing the database; it must not let a **stranger** (one instance pointed
//! at a staging ZooKeeper over the production database) fence a live fleet out.
//!
//! So the newest epoch is handed out by liveness, not by whoever claims first: every
//! instance extends its ensemble's `alive_until` ([`SILENCE`] ahead) while it runs, and an
//! ensemble new to Postgres, or ranked below another, takes the newest epoch only once every
//! ensemble ranked above it has been silent past its `alive_until`. A wiped ZooKeeper's old
//! identity falls silent (every instance now reads the new one), so that recovery still
//! happens on its own, a few session timeouts later; a live fleet keeps beating, so the
//! stranger reports itself not ready ([`Standing`]) and sells nothing.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use uuid::Uuid;

use crate::lock::Zk;
use crate::telemetry::metrics;

/// How many session timeouts an ensemble must be silent before another takes over: longer
/// than any pause of a live fleet (a PostgreSQL restart, an instance paused past its session).
pub const SILENCE: u32 = 3;

/// How often each instance tells Postgres that its ensemble is alive.
const BEAT: Duration = Duration::from_secs(1);

/// This instance's ensemble, as Postgres ranks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Not known yet (Postgres did not answer).
    Unknown,
    /// Ours has the newest epoch: our tokens can claim rows.
    Guarding,
    /// Another ensemble, alive, guards the database: ours is new to it (a stranger) or
    /// ranked below it. Our claims fail; we report not ready until it falls silent.
    Outranked { guarding: Uuid },
}

/// Ranks this instance's ensemble once (taking over from a silent one if it may), then keeps
/// it alive every second in the background, until aborted. The receiver tells readiness.
pub async fn keep_standing(
    db: PgPool,
    zk: Zk,
) -> (watch::Receiver<Standing>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Standing::Unknown);
    let silence = zk.session_timeout() * SILENCE;
    beat(&db, &zk, silence, &tx).await;
    let task = tokio::spawn(async move {
        let mut every = tokio::time::interval(BEAT);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            beat(&db, &zk, silence, &tx).await;
        }
    });
    (rx, task)
}

async fn beat(db: &PgPool, zk: &Zk, silence: Duration, standing: &watch::Sender<Standing>) {
    // Bounded: cut from ZooKeeper, the instance still tells PostgreSQL it is alive (its
    // session may yet come back), or a stranger could take over from a fleet that is not
    // silent, only unlucky.
    let _ = tokio::time::timeout(BEAT, zk.check_identity()).await;
    let ours = zk.ensemble();
    let now = match rank(db, ours, silence).await {
        Ok(now) => now,
        Err(e) => {
            tracing::warn!(error = %e, "could not rank this instance's ZooKeeper ensemble");
            Standing::Unknown
        }
    };
    metrics::ensemble_standing(match now {
        Standing::Guarding => "guarding",
        Standing::Outranked { .. } => "outranked",
        Standing::Unknown => "unknown",
    });
    let was = standing.send_replace(now);
    if was == now {
        return;
    }
    match now {
        Standing::Guarding => {
            tracing::info!(ensemble = %ours, "this instance's ZooKeeper ensemble guards the stock")
        }
        Standing::Outranked { guarding } => tracing::error!(
            ensemble = %ours,
            %guarding,
            silence_s = silence.as_secs(),
            "another ZooKeeper ensemble, still alive, guards this database: this instance sells \
             nothing and reports not ready. Check --zk (is this instance pointed at the right \
             ZooKeeper?). Ours takes over only once the other has been silent this long, as a \
             wiped ZooKeeper's old identity is"
        ),
        Standing::Unknown => {}
    }
}

/// Extends our ensemble's life and ranks it; takes the newest epoch when every ensemble
/// ranked above ours is silent.
async fn rank(db: &PgPool, ours: Uuid, silence: Duration) -> Result<Standing, sqlx::Error> {
    let secs = silence.as_secs_f64();
    if let Some(standing) = alive(db, ours, secs).await? {
        return Ok(standing);
    }
    // Every ensemble above ours is silent: take over, under a lock so two instances (or two
    // strangers) do not both, and looking again under it.
    let mut tx = db.begin().await?;
    sqlx::query!("LOCK TABLE zk_ensembles IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let above = above_alive(&mut tx, ours).await?;
    if let Some(guarding) = above {
        tx.commit().await?;
        return Ok(Standing::Outranked { guarding });
    }
    let (epoch, newest) = ranks(&mut tx, ours).await?;
    if epoch.is_some() && epoch == newest {
        // Another instance of our fleet took over first.
        tx.commit().await?;
        return Ok(Standing::Guarding);
    }
    // A new epoch for ours (a row if it has none), above every other.
    let epoch: i64 = sqlx::query_scalar!(
        "INSERT INTO zk_ensembles (id, alive_until)
         VALUES ($1, now() + make_interval(secs => $2))
         ON CONFLICT (id) DO UPDATE SET epoch = DEFAULT, alive_until = EXCLUDED.alive_until
         RETURNING epoch",
        ours,
        secs
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    match newest {
        Some(newest) => tracing::warn!(
            ensemble = %ours,
            epoch,
            was = newest,
            "every ZooKeeper ensemble ranked above this instance's has been silent: ours takes \
             over the stock (a wiped or replaced ZooKeeper); the old one's tokens are fenced out"
        ),
        None => {
            tracing::info!(ensemble = %ours, epoch, "the first ZooKeeper ensemble to guard this database")
        }
    }
    Ok(Standing::Guarding)
}

/// Extends our ensemble's life. `Some`: its standing is settled (guarding, or outranked by
/// a live one); `None`: it may take over.
async fn alive(db: &PgPool, ours: Uuid, secs: f64) -> Result<Option<Standing>, sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query!(
        "UPDATE zk_ensembles SET alive_until = now() + make_interval(secs => $2) WHERE id = $1",
        ours,
        secs
    )
    .execute(&mut *tx)
    .await?;
    let (epoch, newest) = ranks(&mut tx, ours).await?;
    let standing = if epoch.is_some() && epoch == newest {
        Some(Standing::Guarding)
    } else {
        above_alive(&mut tx, ours)
            .await?
            .map(|guarding| Standing::Outranked { guarding })
    };
    tx.commit().await?;
    Ok(standing)
}

/// Our ensemble's epoch (none if Postgres has not met it) and the newest epoch.
async fn ranks(
    tx: &mut sqlx::PgConnection,
    ours: Uuid,
) -> Result<(Option<i64>, Option<i64>), sqlx::Error> {
    let row = sqlx::query!(
        "SELECT (SELECT epoch FROM zk_ensembles WHERE id = $1) AS ours,
                (SELECT max(epoch) FROM zk_ensembles) AS newest",
        ours
    )
    .fetch_one(tx)
    .await?;
    Ok((row.ours, row.newest))
}

/// The newest live ensemble ranked above ours (any, when ours is new to Postgres).
async fn above_alive(tx: &mut sqlx::PgConnection, ours: Uuid) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT e.id FROM zk_ensembles e
         WHERE e.id <> $1 AND e.alive_until > now()
           AND e.epoch > COALESCE((SELECT epoch FROM zk_ensembles WHERE id = $1), 0)
         ORDER BY e.epoch DESC LIMIT 1",
        ours
    )
    .fetch_optional(tx)
    .await
}
