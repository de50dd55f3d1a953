//! The line's clock: at the opening, the draw; after it, letting places in at the pace the
//! sale is served. Every instance ticks; one at a time does the work (the draw waits on the
//! line's advisory lock, the pace skips a line's row another instance holds), so an instance
//! that dies takes no line with it.
//!
//! The pace is a window, as TCP's congestion window: the passes in buyers' hands (seen by
//! their buyer in the last [`HORIZON`], not yet spent) are kept under it. It starts at
//! [`FLOOR`] and doubles every [`DOUBLING`] while it is used and the shop turns nobody away;
//! an order of the line's refused for the shop's load (a full queue, a lock not granted in
//! time) halves it. It never falls below what the shop was measured to serve in the last
//! second times [`AHEAD`]. So the line follows what the sale sustains, measured, with no
//! configured rate. A place let in whose buyer has not looked yet counts for [`UNSEEN`] only:
//! a buyer who comes late (or never) does not hold back the ones behind them for long. And
//! never are more passes in hands than units left: at the end of a sale the line lets in
//! only whom the stock can serve, and tells the rest `sold_out` as soon as it is gone.

use std::time::Duration;

use sqlx::PgPool;

use crate::error::Error;

/// How often an instance looks at the lines.
const TICK: Duration = Duration::from_millis(100);
/// The window before anything is measured, and its least.
const FLOOR: i64 = 200;
/// The largest window: a bound, not a pace (a sale's crowd is let in far below it).
const MAX_WINDOW: i64 = 1_000_000;
/// How many seconds of the measured pace are let in ahead of it, at least.
const AHEAD: f64 = 2.0;
/// How fast an unused window grows while the shop turns nobody away.
const DOUBLING: Duration = Duration::from_millis(500);
/// A pass not spent this long after its buyer first saw it no longer counts as on its way.
const HORIZON: Duration = Duration::from_secs(10);
/// A place let in whose buyer has not looked this long after no longer counts as on its way.
const UNSEEN: Duration = Duration::from_secs(2);

/// Ticks until the task is dropped.
pub async fn run(db: PgPool) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = once(&db).await {
            tracing::warn!(error = %e, "the line could not keep its pace this tick");
        }
    }
}

/// One tick: draws the lines whose sale opened, paces the lines drawn.
pub async fn once(db: &PgPool) -> Result<(), Error> {
    let due = sqlx::query!(
        r#"SELECT l.product_id, l.drawn_at IS NOT NULL AS "drawn!"
           FROM lines l JOIN products p ON p.id = l.product_id
           WHERE NOT p.paused
             AND (p.opens_at IS NULL OR p.opens_at <= clock_timestamp())
             AND (p.closes_at IS NULL OR p.closes_at > clock_timestamp())
             AND (l.drawn_at IS NULL OR (l.admitted < l.last_place AND p.stock > 0))"#
    )
    .fetch_all(db)
    .await?;
    for line in due {
        if line.drawn {
            pace(db, line.product_id).await?;
        } else {
            draw(db, line.product_id).await?;
        }
    }
    Ok(())
}

/// The opening's draw (once: the function returns NULL for a line drawn already).
async fn draw(db: &PgPool, product_id: i64) -> Result<(), Error> {
    let drawn = sqlx::query_scalar!("SELECT line_draw($1)", product_id)
        .fetch_one(db)
        .await?;
    if let Some(drawn) = drawn {
        tracing::info!(
            product = product_id,
            drawn,
            "the line was drawn at the opening"
        );
    }
    Ok(())
}

/// Lets in what the window has room for, unless another instance paced the line this tick.
async fn pace(db: &PgPool, product_id: i64) -> Result<(), Error> {
    let mut tx = db.begin().await?;
    // Holding the line's row, joins after the opening wait: no wait for a WAL flush on top
    // (a crash forgets at most the last tick's admissions: those places are let in again).
    sqlx::query!("SET LOCAL synchronous_commit = off")
        .execute(&mut *tx)
        .await?;
    let Some(line) = sqlx::query!(
        "SELECT l.admitted, l.last_place, l.window_size, l.paced_at, p.stock
         FROM lines l JOIN products p ON p.id = l.product_id
         WHERE l.product_id = $1 AND l.paced_at < clock_timestamp() - make_interval(secs => $2)
         FOR UPDATE OF l SKIP LOCKED",
        product_id,
        TICK.as_secs_f64() * 0.8
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(());
    };
    let seen = sqlx::query!(
        r#"SELECT
             (SELECT count(*) FROM line_places
              WHERE product_id = $1 AND spent_at > clock_timestamp() - interval '1 second') AS "spent!",
             (SELECT count(*) FROM line_places
              WHERE product_id = $1 AND spent_at IS NULL
                AND seen_at > clock_timestamp() - make_interval(secs => $2)
             ) AS "seen!",
             (SELECT count(*) FROM line_places
              WHERE product_id = $1 AND spent_at IS NULL AND seen_at IS NULL AND place <= $4
                AND place > COALESCE((SELECT max(through) FROM line_admissions
                                      WHERE product_id = $1
                                        AND at <= clock_timestamp() - make_interval(secs => $3)), 0)
             ) AS "unseen!",
             (SELECT count(*) FROM line_places
              WHERE product_id = $1 AND refused_at > $5) AS "refused!""#,
        product_id,
        HORIZON.as_secs_f64(),
        UNSEEN.as_secs_f64(),
        line.admitted,
        line.paced_at
    )
    .fetch_one(&mut *tx)
    .await?;
    let rate = seen.spent as f64;
    let on_their_way = seen.seen + seen.unseen;
    let window = next_window(line.window_size, on_their_way, seen.refused > 0, rate);
    let room = window.min(i64::from(line.stock)) - on_their_way;
    let let_in = room.clamp(0, line.last_place - line.admitted);
    sqlx::query!(
        "UPDATE lines SET admitted = admitted + $2, rate = $3, window_size = $4,
                          paced_at = clock_timestamp()
         WHERE product_id = $1",
        product_id,
        let_in,
        rate,
        window
    )
    .execute(&mut *tx)
    .await?;
    if let_in > 0 {
        sqlx::query!(
            "INSERT INTO line_admissions (product_id, through) VALUES ($1, $2)",
            product_id,
            line.admitted + let_in
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The window after a tick: halved when the shop turned a buyer of the line away for its
/// load since the last tick, grown while it is at least half used, never under what the shop was measured to
/// serve (`rate`, orders a second) for [`AHEAD`] seconds, nor under [`FLOOR`].
fn next_window(window: i64, on_their_way: i64, overloaded: bool, rate: f64) -> i64 {
    let growth = 2f64.powf(TICK.as_secs_f64() / DOUBLING.as_secs_f64());
    let next = if overloaded {
        window / 2
    } else if on_their_way * 2 >= window {
        (window as f64 * growth).ceil() as i64
    } else {
        window
    };
    next.max((rate * AHEAD).ceil() as i64)
        .clamp(FLOOR, MAX_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_grows_while_used_halves_when_the_shop_turns_buyers_away() {
        // Used and nobody turned away: doubles in a DOUBLING's worth of ticks.
        let mut window = FLOOR;
        for _ in 0..(DOUBLING.as_millis() / TICK.as_millis()) {
            window = next_window(window, window, false, 0.0);
        }
        assert!((2 * FLOOR..2 * FLOOR + 10).contains(&window), "{window}");
        // Unused: stays.
        assert_eq!(next_window(1000, 100, false, 0.0), 1000);
        // Turned away: halves, never below the floor nor below the measured pace.
        assert_eq!(next_window(1000, 1000, true, 0.0), 500);
        assert_eq!(next_window(300, 300, true, 0.0), FLOOR);
        assert_eq!(next_window(1000, 1000, true, 400.0), 800);
    }
}
