//! The gateway's store connection sets `TCP_NODELAY` (`clients/CONTRACT.md` section 12): a
//! request's second call must not wait for the delayed ACK of its first, which with a slow
//! network kept 96 of 100 exports past a 50 ms deadline. Checked on the socket itself: every
//! socket this process holds to the server has the option on.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use common::Server;
use redis::aio::ConnectionLike;
use redis_rl_client::gateway::connect::Store;
use socket2::SockRef;

/// `TCP_NODELAY` of each open socket of this process whose peer is `port` on loopback.
fn nodelay_to(port: u16) -> Vec<bool> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: the descriptor is open (listed just now) and only borrowed for two queries;
        // nothing else in this test closes sockets meanwhile.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&fd);
        let peer = socket.peer_addr().ok().and_then(|a| a.as_socket());
        if peer == Some(SocketAddr::from(([127, 0, 0, 1], port))) {
            found.push(socket.tcp_nodelay().unwrap());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_connection_sets_tcp_nodelay() {
    let server = Server::start();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", server.port)).unwrap();
    let mut store = Store::connect(client);
    for _ in 0..200 {
        if store.is_connected() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pong = store.req_packed_command(&redis::cmd("PING")).await.unwrap();
    assert_eq!(pong, redis::Value::SimpleString("PONG".into()));
    let sockets = nodelay_to(server.port);
    assert!(!sockets.is_empty(), "no socket to the server was found");
    assert!(
        sockets.iter().all(|on| *on),
        "TCP_NODELAY per socket: {sockets:?}"
    );
}
