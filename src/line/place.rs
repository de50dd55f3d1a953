//! A buyer's place in a line, as they are told it: where they stand, how long it may take,
//! when to look again, and their pass once let in.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Snapshot;
use crate::inventory::SaleState;

/// The soonest a buyer is asked to look again, and the latest (in line, and before the
/// opening).
const SOONEST: Duration = Duration::from_millis(250);
const LATEST_IN_LINE: Duration = Duration::from_secs(10);
const LATEST: Duration = Duration::from_secs(30);
/// Who waits for the opening come back within this much after it, spread at random: the
/// crowd's first looks are not one burst at its second.
const OPENING_SPREAD_MS: u64 = 1000;
/// What a buyer who needs not look again is told anyway (a final state may still change
/// for them: a pass expires, a paused sale resumes).
const SETTLED: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlaceState {
    /// Joined before the opening: the place is drawn at it.
    Waiting,
    /// Has a place, not let in yet.
    InLine,
    /// Let in: `pass` buys.
    Admitted,
    /// Let in, but the pass was not used while it was valid.
    Expired,
    /// The pass bought.
    Bought,
    /// The stock ran out before this place was let in.
    SoldOut,
    Closed,
    /// The sale is paused: nobody is let in meanwhile.
    Paused,
}

/// `GET /api/products/{id}/line/me`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Place {
    pub product_id: i64,
    pub buyer: String,
    pub state: PlaceState,
    pub joined_at: DateTime<Utc>,
    pub opens_at: Option<DateTime<Utc>>,
    /// `null` while `waiting`: who joined before the opening are shuffled at it.
    pub place: Option<i64>,
    /// Places before this one not let in yet.
    pub ahead: Option<i64>,
    /// Places 1..`admitted` are let in.
    pub admitted: i64,
    /// The buyers let in are served at this many orders a second (measured; 0 before any).
    pub rate: f64,
    pub estimated_wait_s: Option<f64>,
    /// When to look again (also the answer's `Retry-After`, in whole seconds).
    pub next_look_ms: u64,
    /// While `admitted`: what `POST /orders` takes as `pass`.
    pub pass: Option<String>,
    pub pass_expires_at: Option<DateTime<Utc>>,
    pub server_time: DateTime<Utc>,
}

/// How fast the line lets people in, places a second: what it measured the shop serving,
/// or, while that still grows (the first seconds of a sale), how fast it has let in since its
/// draw, if faster. The optimistic of the two: a buyer who looks too early looks once more; one
/// who looks too late is late.
fn pace(line: &Snapshot, now: DateTime<Utc>) -> f64 {
    let since_draw = line
        .drawn_at
        .and_then(|drawn| (now - drawn).to_std().ok())
        .map_or(0.0, |since| since.as_secs_f64().max(0.1));
    let let_in = if since_draw > 0.0 {
        line.admitted as f64 / since_draw
    } else {
        0.0
    };
    line.rate.max(let_in)
}

/// The place of `buyer` in `line` at `now`. `pass`: the signed pass, if their place was let in
/// and it is still valid.
#[allow(clippy::too_many_arguments)] // the parts of one answer
pub(super) fn at(
    line: &Snapshot,
    product_id: i64,
    buyer: &str,
    joined_at: DateTime<Utc>,
    place: Option<i64>,
    spent: bool,
    pass: Option<(String, DateTime<Utc>)>,
    now: DateTime<Utc>,
) -> Place {
    let sale = line.window.state(now, line.stock == 0);
    let let_in = place.is_some_and(|p| p <= line.admitted);
    let state = match (sale, place) {
        (SaleState::Closed, _) => PlaceState::Closed,
        _ if spent => PlaceState::Bought,
        _ if let_in && pass.is_some() => PlaceState::Admitted,
        _ if let_in => PlaceState::Expired,
        (SaleState::Paused, _) => PlaceState::Paused,
        (_, None) => PlaceState::Waiting,
        (SaleState::SoldOut, Some(_)) => PlaceState::SoldOut,
        (_, Some(_)) => PlaceState::InLine,
    };
    let ahead = place.map(|p| (p - line.admitted - 1).max(0));
    let pace = pace(line, now);
    let estimated = match (state, ahead) {
        (PlaceState::InLine, Some(0)) => Some(0.0),
        (PlaceState::InLine, Some(ahead)) if pace > 0.0 => Some(ahead as f64 / pace),
        _ => None,
    };
    let next_look = match state {
        // Come back at the opening (the draw numbers everyone then), within a second of it.
        PlaceState::Waiting => line
            .window
            .opens_at
            .and_then(|opens| (opens - now).to_std().ok())
            .map_or(SOONEST, |wait| {
                (wait + Duration::from_millis(fastrand::u64(..OPENING_SPREAD_MS))).min(LATEST)
            }),
        // Half the estimated wait: the estimate firms up as the head comes near, and the
        // number of looks a buyer makes grows with the log of their distance, not with it.
        PlaceState::InLine => match estimated {
            Some(wait) => Duration::from_secs_f64(wait / 2.0).min(LATEST_IN_LINE),
            // Nobody let in yet (the draw's first tick): very soon.
            None => SOONEST,
        },
        _ => SETTLED,
    };
    let (pass, pass_expires_at) = match (state, pass) {
        (PlaceState::Admitted, Some((pass, expires))) => (Some(pass), Some(expires)),
        _ => (None, None),
    };
    Place {
        product_id,
        buyer: buyer.to_string(),
        state,
        joined_at,
        opens_at: line.window.opens_at,
        place,
        ahead: ahead.filter(|_| state == PlaceState::InLine),
        admitted: line.admitted,
        rate: line.rate,
        estimated_wait_s: estimated,
        next_look_ms: next_look.max(SOONEST).as_millis() as u64,
        pass,
        pass_expires_at,
        server_time: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Window;

    fn line(admitted: i64, rate: f64) -> Snapshot {
        Snapshot {
            drawn_at: None,
            admitted,
            rate,
            window: Window::default(),
            stock: 10,
            expired_through: 0,
            admissions: vec![],
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn look(line: &Snapshot, place: Option<i64>) -> Place {
        at(line, 1, "alice", now(), place, false, None, now())
    }

    #[test]
    fn the_farther_from_the_head_the_later_the_next_look() {
        let line = line(100, 50.0);
        let near = look(&line, Some(110));
        let far = look(&line, Some(900));
        assert_eq!((near.state, near.ahead), (PlaceState::InLine, Some(9)));
        assert_eq!(far.ahead, Some(799));
        assert!(near.next_look_ms < far.next_look_ms);
        assert_eq!(far.estimated_wait_s, Some(799.0 / 50.0));
        assert_eq!(far.next_look_ms, 7990);
        // While the measured pace lags the line's (its first seconds), the line's counts.
        let mut early = line.clone();
        early.rate = 10.0;
        early.drawn_at = Some(now() - chrono::Duration::seconds(1));
        assert_eq!(
            look(&early, Some(900)).estimated_wait_s,
            Some(799.0 / 100.0)
        );
        // Never sooner than the floor, never later than the ceiling.
        assert_eq!(look(&line, Some(101)).next_look_ms, 250);
        assert_eq!(look(&line, Some(100_000)).next_look_ms, 10_000);
    }

    #[test]
    fn before_the_opening_a_buyer_waits_for_the_draw_and_looks_again_at_it() {
        let mut line = line(0, 0.0);
        line.window.opens_at = Some(now() + chrono::Duration::seconds(8));
        let waiting = look(&line, None);
        assert_eq!(
            (waiting.state, waiting.place, waiting.ahead),
            (PlaceState::Waiting, None, None)
        );
        assert!(
            (8000..9000).contains(&waiting.next_look_ms),
            "{}",
            waiting.next_look_ms
        );
    }

    #[test]
    fn a_place_let_in_has_a_pass_until_it_expires_and_sold_out_ends_the_wait() {
        let line = line(100, 50.0);
        let pass = Some(("p".to_string(), now()));
        let admitted = at(&line, 1, "alice", now(), Some(50), false, pass, now());
        assert_eq!(
            (admitted.state, admitted.pass.as_deref()),
            (PlaceState::Admitted, Some("p"))
        );
        assert_eq!(look(&line, Some(50)).state, PlaceState::Expired);
        let bought = at(&line, 1, "alice", now(), Some(50), true, None, now());
        assert_eq!(bought.state, PlaceState::Bought);
        let mut gone = line.clone();
        gone.stock = 0;
        assert_eq!(look(&gone, Some(500)).state, PlaceState::SoldOut);
        let mut paused = line;
        paused.window.paused = true;
        assert_eq!(look(&paused, Some(500)).state, PlaceState::Paused);
    }
}
