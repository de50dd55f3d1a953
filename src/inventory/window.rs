//! A sale's window: when it opens, when it closes, whether an admin paused it, and the state
//! a buyer sees. Decided on this instance's clock (the page counts down on it: every product
//! view carries `server_time`), at admission and again in each lock cycle from the row.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::error::Error;

/// How long a paused sale asks a buyer to wait before asking again: a pause has no end
/// anyone knows of, and a buyer polling faster learns nothing sooner.
const PAUSED_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// The window of a sale, as its row says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// `None`: on sale since it was created.
    pub opens_at: Option<DateTime<Utc>>,
    pub closes_at: Option<DateTime<Utc>>,
    pub paused: bool,
}

/// What a buyer is told of a sale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum SaleState {
    Upcoming,
    Open,
    Paused,
    SoldOut,
    Closed,
}

impl Window {
    /// The state at `now`; a closed sale is closed whatever else is true, a paused one says
    /// so before its opening too (the opening will not let anyone in while it lasts).
    pub fn state(&self, now: DateTime<Utc>, sold_out: bool) -> SaleState {
        if self.closes_at.is_some_and(|closes| now >= closes) {
            SaleState::Closed
        } else if self.paused {
            SaleState::Paused
        } else if self.opens_at.is_some_and(|opens| now < opens) {
            SaleState::Upcoming
        } else if sold_out {
            SaleState::SoldOut
        } else {
            SaleState::Open
        }
    }

    /// Why an order at `now` is refused by the window, if it is.
    pub fn refusal(&self, now: DateTime<Utc>) -> Option<Error> {
        match self.state(now, false) {
            SaleState::Open | SaleState::SoldOut => None,
            SaleState::Closed => Some(Error::Closed),
            SaleState::Paused => Some(Error::Paused {
                retry_after: PAUSED_RETRY,
            }),
            SaleState::Upcoming => {
                let opens_at = self.opens_at.expect("an upcoming sale has an opening");
                Some(Error::NotOpen { opens_at, now })
            }
        }
    }

    /// Whether the sale takes orders at `now`.
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        self.refusal(now).is_none()
    }

    /// Checks an opening and a closing given together: the closing comes after the opening.
    pub fn check(
        opens_at: Option<DateTime<Utc>>,
        closes_at: Option<DateTime<Utc>>,
    ) -> Result<(), Error> {
        match (opens_at, closes_at) {
            (Some(opens), Some(closes)) if closes <= opens => {
                // Well-formed, but a window that never opens: the request's parts disagree.
                Err(Error::Unprocessable(
                    "closes_at must be after opens_at".into(),
                ))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn an_order_a_second_before_the_opening_is_refused_and_a_second_after_taken() {
        let window = Window {
            opens_at: Some(at(0)),
            ..Window::default()
        };
        let before = window.refusal(at(-1)).expect("refused before the opening");
        assert_eq!(before.code(), "not_open");
        assert_eq!(
            before.retry_after(),
            Some(std::time::Duration::from_secs(1))
        );
        assert!(window.is_open(at(0)));
        assert!(window.is_open(at(1)));
        // A fraction of a second before: still refused, Retry-After rounds up to a second.
        let just = window.refusal(at(0) - Duration::milliseconds(200)).unwrap();
        assert_eq!(
            just.retry_after(),
            Some(std::time::Duration::from_millis(200))
        );
    }

    #[test]
    fn closed_wins_over_paused_wins_over_upcoming_wins_over_sold_out() {
        let mut window = Window {
            opens_at: Some(at(10)),
            closes_at: Some(at(20)),
            paused: true,
        };
        assert_eq!(window.state(at(25), true), SaleState::Closed);
        assert_eq!(window.state(at(5), true), SaleState::Paused);
        window.paused = false;
        assert_eq!(window.state(at(5), true), SaleState::Upcoming);
        assert_eq!(window.state(at(15), true), SaleState::SoldOut);
        assert_eq!(window.state(at(15), false), SaleState::Open);
        assert_eq!(window.state(at(20), false), SaleState::Closed);
        assert_eq!(window.refusal(at(20)).unwrap().code(), "closed");
        assert!(window.refusal(at(15)).is_none());
        assert_eq!(Window::default().state(at(0), false), SaleState::Open);
    }

    #[test]
    fn a_closing_comes_after_the_opening() {
        assert!(Window::check(Some(at(1)), Some(at(1))).is_err());
        assert!(Window::check(Some(at(1)), Some(at(2))).is_ok());
        assert!(Window::check(None, Some(at(2))).is_ok());
    }
}
