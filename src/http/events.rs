//! `GET /api/events`: the teaching page's live feed (server-sent events).
//!
//! Each stream holds a connection for as long as it lasts, so streams are capped per client
//! (`--max-event-streams-per-client`) and per instance (`--max-event-streams`); beyond
//! either, 503 `overloaded` with Retry-After, and the connection is closed. Each stream ends
//! after `--event-stream-max-s` (the browser's EventSource reconnects on its own): idle
//! streams cannot pile up and take the sockets every other request needs, and one client
//! cannot take every stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::Router;
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::client::ClientIp;
use super::error::{ApiError, ErrorBody};
use super::server::{ClientSlot, PerClient};
use super::AppState;
use crate::config::Config;

pub fn router(config: &Config) -> Router<AppState> {
    let streams = Arc::new(Semaphore::new(config.max_event_streams));
    // However the flags are set, one client gets at most half the instance's streams.
    let per_client = PerClient::new(
        config
            .max_event_streams_per_client
            .min(config.max_event_streams / 2)
            .max(1),
    );
    let lifetime = Duration::from_secs(config.event_stream_max_s);
    Router::new().route(
        "/api/events",
        get(move |state: State<AppState>, client: ClientIp| {
            let slots = (streams.clone(), per_client.clone());
            events(state, client, slots, lifetime)
        }),
    )
}

/// One event of the stream as the API description states it: `event:` names the kind and
/// `data:` holds its JSON (see `crate::events`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // describes what `Event` writes; never built
pub(super) struct ServerEvent {
    event: EventKind,
    /// JSON: a product (`product`), a lock view (`queue`), a demo's outcome (`demo`).
    #[schema(content_media_type = "application/json")]
    data: String,
}

#[derive(utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum EventKind {
    Product,
    Queue,
    Demo,
}

/// Events `product`, `queue` and `demo`, each with JSON data, until the client leaves, the
/// stream's lifetime ends, or the server shuts down. A client too slow to keep up skips to
/// newer snapshots.
#[utoipa::path(get, path = "/api/events", operation_id = "events", tag = "teaching",
    responses(
        (status = 200, description = "Server-sent events: `product` (a product, on every stock change), `queue` (a lock view, when lock nodes change), `demo` (crash/zombie outcomes), from every instance; the stream ends after `--event-stream-max-s`", content_type = "text/event-stream", body = ServerEvent),
        (status = 503, description = "`overloaded`: this client has `--max-event-streams-per-client` streams open, or the instance `--max-event-streams`; the connection is closed", body = ErrorBody<'static>),
    ))]
pub(super) async fn events(
    State(state): State<AppState>,
    ClientIp(client): ClientIp,
    (streams, per_client): (Arc<Semaphore>, PerClient),
    lifetime: Duration,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Some(client_slot) = per_client.take(client) else {
        crate::telemetry::metrics::refused("event_streams_per_client");
        return Err(ApiError::Overloaded("event streams for this client"));
    };
    let Ok(slot) = streams.try_acquire_owned() else {
        crate::telemetry::metrics::refused("event_streams");
        return Err(ApiError::Overloaded("event streams"));
    };
    let slot: (OwnedSemaphorePermit, ClientSlot) = (slot, client_slot);
    let (rx, stopping) = state.events.subscribe();
    let ends = tokio::time::Instant::now() + lifetime;
    let stream = futures_util::stream::unfold(
        (rx, stopping, slot),
        move |(mut rx, mut stopping, slot)| async move {
            loop {
                let received = tokio::select! {
                    received = rx.recv() => received,
                    _ = stopping.wait_for(|s| *s) => return None,
                    _ = tokio::time::sleep_until(ends) => return None,
                };
                match received {
                    Ok(message) => {
                        let event = Event::default().event(message.kind).data(message.data);
                        return Some((Ok(event), (rx, stopping, slot)));
                    }
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
