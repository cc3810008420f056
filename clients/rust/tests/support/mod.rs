//! What the client's HTTP tests share: serving an axum app on a free loopback port, and a
//! gateway on a policy file in front of a test server.

#![allow(dead_code)] // each test file uses a different part

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use redis::aio::MultiplexedConnection;
use redis_rl_client::policy::PolicyStore;
use redis_rl_client::{Gateway, Rl};

/// Serves `app` (with the peer address `${ip}` needs) on 127.0.0.1; returns its base URL.
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
pub async fn gateway(port: u16, file: &std::path::Path) -> Arc<Gateway<MultiplexedConnection>> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    Arc::new(Gateway::new(
        Rl::new(conn),
        PolicyStore::load_file(file).unwrap(),
        Arc::default(),
    ))
}
