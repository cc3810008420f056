//! What the client's tests share: serving an axum app on a free loopback port, a gateway on a
//! policy file in front of a test server, and capturing what `tracing` logs.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![allow(dead_code)] // each test file uses a different part

use std::io::Write;
#[cfg(feature = "gateway")]
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

#[cfg(feature = "gateway")]
use axum::Router;
#[cfg(feature = "gateway")]
use redis::aio::MultiplexedConnection;
#[cfg(feature = "gateway")]
use redis_rl_client::gateway::PolicyStore;
#[cfg(feature = "gateway")]
use redis_rl_client::{Gateway, Rl};

/// Serves `app` (with the peer address `${ip}` needs) on 127.0.0.1; returns its base URL.
#[cfg(feature = "gateway")]
pub async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

/// A gateway deciding by the policy in `file`, on a multiplexed connection to `port`.
#[cfg(feature = "gateway")]
pub async fn gateway(port: u16, file: &std::path::Path) -> Arc<Gateway<MultiplexedConnection>> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    Arc::new(Gateway::new(
        Rl::new(conn),
        PolicyStore::load_file(file).unwrap(),
        Arc::default(),
    ))
}

/// What a `tracing_subscriber::fmt` subscriber writes, kept for the test to read.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// A subscriber writing here; set it with `tracing::subscriber::set_default`.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
    }

    /// The lines logged to `target`.
    pub fn lines_of(&self, target: &str) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter(|l| l.contains(target))
            .map(str::to_string)
            .collect()
    }
}
