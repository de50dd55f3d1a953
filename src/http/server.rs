//! The connection layer under the routes. Accepts TCP connections up to a cap per client
//! address and a cap for the instance, and serves each over HTTP/1.1 with a header-read
//! timeout (which also closes keep-alive connections left idle), so no client — a
//! slowloris, a pile of idle sockets, a flood of event streams — can take the sockets every
//! other client needs. A connection beyond a cap gets a 503 `overloaded` and is closed rather
//! than left hanging in the kernel's queue.
//!
//! The per-client cap keys on the peer address (an IPv6 peer: its /64). A trusted proxy (`--trusted-proxy`) carries
//! many clients on its connections, so only the instance's cap bounds it; each request then
//! carries the client the proxy names ([`ClientIp`]), which the rate limit and the event
//! streams' per-client cap key on.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use super::client::{client_key, TrustedProxies};
use super::error::{ApiError, PROBLEM_JSON};
use crate::telemetry::metrics;

/// What one instance grants its clients' connections.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    /// Connections one client address may hold (trusted proxies excepted).
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    /// hyper's read buffer per connection: the most a request head may take (431 beyond).
    pub max_header_bytes: usize,
    pub trusted: TrustedProxies,
}

impl Limits {
    /// One client may hold at most half the instance's connections, whatever the flags say:
    /// the other half is always there for everyone else.
    pub fn per_client(&self) -> usize {
        self.max_connections_per_client
            .min(self.max_connections / 2)
            .max(1)
    }
}

/// Serves `app` until `shutdown` resolves; then stops accepting, closes idle connections,
/// and returns once the others have answered their request in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_client = PerClient::new(limits.per_client());
    let trusted = Arc::new(limits.trusted.clone());
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // hyper's default (~400 KB) would let one client's allowed connections hold hundreds
        // of MB with heads that never end.
        .max_buf_size(limits.max_header_bytes);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, most likely: back off, keep serving the others.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A proxy we trust speaks for many clients: only the instance's cap bounds it.
        let client_slot = if trusted.contains(peer.ip()) {
            None
        } else {
            match per_client.take(client_key(peer.ip())) {
                Some(slot) => Some(slot),
                None => {
                    metrics::refused("connections_per_client");
                    tokio::spawn(refuse(stream));
                    continue;
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics::refused("connections");
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let trusted = trusted.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let client = trusted.client(peer.ip(), request.headers());
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(client);
            app.clone().oneshot(request.map(Body::new))
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // An error here is the client's: it went away, or sent no headers in time.
            let _ = connection.await;
            drop((slot, client_slot));
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Open connections per client address.
#[derive(Clone)]
pub struct PerClient {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One of a client's connection slots; dropping it gives it back.
pub struct ClientSlot {
    client: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerClient {
    pub fn new(max: usize) -> PerClient {
        PerClient {
            max,
            open: Arc::default(),
        }
    }

    /// A slot for `client`, unless it holds `max` already.
    pub fn take(&self, client: IpAddr) -> Option<ClientSlot> {
        let mut open = self.open.lock().expect("client table poisoned");
        let count = open.entry(client).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            client,
            open: self.open.clone(),
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("client table poisoned");
        // A client with nothing open is forgotten: the table holds live clients only.
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// File descriptors kept for everything but client connections: the database pool's
/// (`reserved`), ZooKeeper's, the static files being served, the listener.
const OTHER_FILES: usize = 64;

/// `wanted` connections, or fewer if the process's open-file limit would run out first
/// (after raising the soft limit as far as the hard one allows): a connection refused with a
/// 503 is better than an `accept` that fails for everyone, `/healthz` included.
pub fn within_open_files(wanted: usize, reserved: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return wanted;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    let available = usize::try_from(limit.rlim_cur)
        .unwrap_or(usize::MAX)
        .saturating_sub(reserved + OTHER_FILES);
    if available < wanted {
        tracing::warn!(
            wanted,
            available,
            "--max-connections lowered to fit the open-file limit (ulimit -n)"
        );
    }
    wanted.min(available).max(1)
}

/// Answers a connection over the cap without reading it, and closes it.
async fn refuse(mut stream: TcpStream) {
    // Written by hand (no hyper on this socket), from the same table as every answer.
    let error = ApiError::Overloaded("connections");
    let status = error.status();
    let retry = error
        .retry_after()
        .map(|s| format!("retry-after: {s}\r\n"))
        .unwrap_or_default();
    let body = error.body();
    let response = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {PROBLEM_JSON}\r\n\
         {retry}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_its_slots_back_and_others_are_counted_apart() {
        let table = PerClient::new(2);
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let first = table.take(a).unwrap();
        let _second = table.take(a).unwrap();
        assert!(table.take(a).is_none(), "a third for the same client");
        assert!(table.take(b).is_some(), "another client is not held up");
        drop(first);
        assert!(table.take(a).is_some(), "a slot given back is free again");
    }

    #[test]
    fn one_client_never_gets_more_than_half_the_instance() {
        let limits = |max, per| Limits {
            max_connections: max,
            max_connections_per_client: per,
            header_read_timeout: Duration::from_secs(1),
            max_header_bytes: 16_384,
            trusted: TrustedProxies::default(),
        };
        assert_eq!(limits(4096, 1024).per_client(), 1024);
        assert_eq!(limits(940, 1024).per_client(), 470);
        assert_eq!(limits(1, 1024).per_client(), 1);
    }
}
