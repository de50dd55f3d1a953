//! `GET /api/events`: the teaching page's live feed (server-sent events).

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::Router;
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/events", get(events))
}

/// Events `product`, `queue` and `demo`, each with JSON data, until the client leaves or
/// the server shuts down. A client too slow to keep up skips to newer snapshots.
async fn events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (rx, stopping) = state.events.subscribe();
    let stream =
        futures_util::stream::unfold((rx, stopping), |(mut rx, mut stopping)| async move {
            loop {
                let received = tokio::select! {
                    received = rx.recv() => received,
                    _ = stopping.wait_for(|s| *s) => return None,
                };
                match received {
                    Ok(message) => {
                        let event = Event::default().event(message.kind).data(message.data);
                        return Some((Ok(event), (rx, stopping)));
                    }
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
