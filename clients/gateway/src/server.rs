//! One HTTP/1.1 server loop for every face: `TCP_NODELAY` on each accepted socket, a deadline
//! for the request head and a bound on its size (a slow or huge head is refused, not held),
//! the peer's address for the engine, and a graceful stop that lets requests in flight finish
//! within a bound.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// What a face's server allows a caller.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The request head must arrive within this (slowloris).
    pub header_timeout: Duration,
    /// The request head's bytes, at most (start line included): a larger one is a 431.
    pub max_head: usize,
    /// How long requests in flight may take to finish once the server stops.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            max_head: 64 << 10,
            drain: Duration::from_secs(10),
        }
    }
}

/// Serves `app` on `listener` until `stop` turns true, then lets the connections' requests in
/// flight finish for at most `limits.drain`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, or a connection reset before it was accepted: the
                // listener is fine, the next accept may succeed.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        // A caller's next request must not wait for the delayed ACK of our last answer.
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(Body::new)).await;
                Ok::<_, Infallible>(response.unwrap_or_else(|e| match e {}))
            }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_header_size(limits.max_head)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %peer, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain = ?limits.drain,
            "requests still in flight at the end of the drain were cut"
        );
    }
    Ok(())
}

/// Resolves once `stop` turns true (or its sender is gone). The guard `wait_for` returns is
/// dropped here, so it never lives across the accept loop's awaits.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// The peer address a face's handler receives.
pub type Peer = ConnectInfo<SocketAddr>;
