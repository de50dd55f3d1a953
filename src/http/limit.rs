//! A per-client rate limit on placing orders (`--orders-per-client-per-s`, off by default),
//! keyed by the client's address as the connection layer resolved it (the peer, or the
//! client a trusted proxy names: see `http::client`). Answers 429
//! `rate_limited` with the seconds until the client may order again in Retry-After, before
//! the order touches anything.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};

use super::client::ClientIp;
use super::error::ApiError;
use crate::config::Config;

type Limiter = RateLimiter<IpAddr, HashMapStateStore<IpAddr>, DefaultClock>;

/// The limiter, if the configuration asks for one.
pub fn per_client(config: &Config) -> Option<Arc<Limiter>> {
    let rate = NonZeroU32::new(config.orders_per_client_per_s)?;
    let burst = NonZeroU32::new(config.orders_burst_per_client).unwrap_or(rate);
    let limiter = Arc::new(RateLimiter::hashmap(
        Quota::per_second(rate).allow_burst(burst),
    ));
    tokio::spawn(forget_quiet_clients(Arc::downgrade(&limiter)));
    Some(limiter)
}

/// The middleware: lets the request through, or answers 429.
pub async fn check(limiter: Arc<Limiter>, request: Request, next: Next) -> Response {
    let client = request.extensions().get::<ClientIp>().map(|c| c.0);
    if let Some(client) = client {
        if let Err(not_until) = limiter.check_key(&client) {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let mut response = ApiError::RateLimited.into_response();
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(seconds.max(1)));
            return response;
        }
    }
    next.run(request).await
}

/// A client's state is kept only while it matters: once a minute, forget clients whose
/// budget has refilled, so a crowd of addresses does not grow the map for ever.
async fn forget_quiet_clients(limiter: Weak<Limiter>) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let Some(limiter) = limiter.upgrade() else {
            return;
        };
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }
}
