//! The connection layer under the routes. Accepts TCP connections up to a cap and serves
//! each over HTTP/1.1 with a header-read timeout (which also closes keep-alive connections
//! left idle), so no client — a slowloris, a pile of idle sockets — can take the sockets
//! every other client needs. A connection beyond the cap gets a 503 `too_busy` and is closed
//! rather than left hanging in the kernel's queue.

use std::future::Future;
use std::sync::Arc;
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

use super::error::ApiError;

/// What one instance grants its clients' connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
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
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request.map(Body::new))
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // An error here is the client's: it went away, or sent no headers in time.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
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
    let body = ApiError::Overloaded("connections").body();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}
