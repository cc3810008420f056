//! One HTTP/1.1 server loop for every face: `TCP_NODELAY` on each accepted socket, a deadline
//! for the request head and a bound on its size (a slow or huge head is refused, not held),
//! the peer's address for the engine, and a graceful stop that lets requests in flight finish
//! until the drain is cut, then closes what is left.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::{Service, ServiceExt};

/// Once the drain is cut, how long the gateway's answers to the requests still running (503)
/// have to be written before their connections are closed.
const CUT_GRACE: Duration = Duration::from_secs(1);

/// What a face's server allows a caller.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The request head must arrive within this (slowloris).
    pub header_timeout: Duration,
    /// The request head's bytes, at most (start line included): a larger one is a 431.
    pub max_head: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            max_head: 64 << 10,
        }
    }
}

/// When a server stops: `stop` turns true first (no new connection; the requests in flight
/// finish), `cut` once the drain's bound has passed (the gateway has answered the requests
/// still waiting for their upstream; the connections left are closed).
#[derive(Clone)]
pub struct Shutdown {
    pub stop: watch::Receiver<bool>,
    pub cut: watch::Receiver<bool>,
}

/// Binds a face's listener and says so on stdout (`listening on ADDR (face)`).
pub async fn bind(addr: SocketAddr, face: &str) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({face}): {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {local} ({face})");
    let _ = std::io::stdout().flush();
    Ok(listener)
}

/// Serves `app` on `listener` until `shutdown.stop` turns true, then lets the connections'
/// requests in flight finish until `shutdown.cut` does; then the answers being written get
/// [`CUT_GRACE`] and every connection still open is closed (which ends what its request holds)
/// before this returns.
pub async fn serve<S>(
    listener: TcpListener,
    app: S,
    limits: Limits,
    mut shutdown: Shutdown,
) -> std::io::Result<()>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
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
            () = raised(&mut shutdown.stop) => break,
        };
        // Those that ended since the last accept.
        while connections.try_join_next().is_some() {}
        // A caller's next request must not wait for the delayed ACK of our last answer.
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move { app.oneshot(request.map(Body::new)).await }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_header_size(limits.max_head)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %peer, "connection ended");
            }
        });
    }
    drop(listener);
    let ended = graceful.shutdown();
    tokio::pin!(ended);
    tokio::select! {
        () = &mut ended => return Ok(()),
        () = raised(&mut shutdown.cut) => {}
    }
    if tokio::time::timeout(CUT_GRACE, &mut ended).await.is_err() {
        tracing::warn!("responses still being sent at the end of the drain were cut");
        connections.abort_all();
    }
    // Every connection's task is gone once this returns: what their requests held has been
    // handed to the gateway's background calls.
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Resolves once `signal` turns true (or its sender is gone). The guard `wait_for` returns is
/// dropped here, so it never lives across the accept loop's awaits.
async fn raised(signal: &mut watch::Receiver<bool>) {
    let _ = signal.wait_for(|s| *s).await.map(|_| ());
}

/// The peer address a face's handler receives.
pub type Peer = ConnectInfo<SocketAddr>;
