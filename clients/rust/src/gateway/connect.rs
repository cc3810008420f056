//! A connection to the store that a gateway can start with while the store is down, and that
//! comes back quickly after the store restarts: the gateway listens and serves its postures
//! meanwhile, instead of waiting for Redis before it binds.
//!
//! Until the first connection is made, every call fails at once as a refused connection (the
//! engine's `unavailable`); a task keeps connecting in the background. Once connected, the
//! `redis` crate's `ConnectionManager` reconnects after a failure, retrying within half a
//! second rather than with its default backoff (which waited up to 113 s between attempts).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::client::RlConnection;

/// The longest wait between two connection attempts.
const RETRY_MAX: Duration = Duration::from_millis(500);
/// One connection attempt gives up after this long (a store that accepts nothing, say).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A store connection, possibly not made yet. Cloning shares it.
#[derive(Clone)]
pub struct Store {
    manager: Arc<OnceLock<ConnectionManager>>,
}

fn config() -> ConnectionManagerConfig {
    // Attempts 10 ms, 20 ms, ... apart, never more than RETRY_MAX.
    ConnectionManagerConfig::new()
        .set_factor(10)
        .set_exponent_base(2)
        .set_max_delay(u64::try_from(RETRY_MAX.as_millis()).unwrap_or(500))
        .set_connection_timeout(CONNECT_TIMEOUT)
}

impl Store {
    /// Starts connecting to `client`'s server in the background (on the current tokio
    /// runtime) and returns at once.
    pub fn connect(client: redis::Client) -> Store {
        let store = Store {
            manager: Arc::new(OnceLock::new()),
        };
        let cell = Arc::clone(&store.manager);
        tokio::spawn(async move {
            let mut said = false;
            loop {
                match ConnectionManager::new_with_config(client.clone(), config()).await {
                    Ok(manager) => {
                        let _ = cell.set(manager);
                        tracing::info!(target: super::DECISION_LOG, "connected to the store");
                        return;
                    }
                    Err(e) => {
                        if !said {
                            tracing::warn!(
                                target: super::DECISION_LOG,
                                error = %e,
                                "the store is not reachable yet; routes take their posture"
                            );
                            said = true;
                        }
                        tokio::time::sleep(RETRY_MAX).await;
                    }
                }
            }
        });
        store
    }

    /// Whether the first connection has been made.
    pub fn is_connected(&self) -> bool {
        self.manager.get().is_some()
    }
}

fn not_yet() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "not connected to the store yet",
    ))
}

impl ConnectionLike for Store {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self.manager.get() {
            Some(manager) => {
                let mut manager = manager.clone();
                Box::pin(async move { manager.req_packed_command(cmd).await })
            }
            None => Box::pin(async { Err(not_yet()) }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self.manager.get() {
            Some(manager) => {
                let mut manager = manager.clone();
                Box::pin(async move { manager.req_packed_commands(cmd, offset, count).await })
            }
            None => Box::pin(async { Err(not_yet()) }),
        }
    }

    fn get_db(&self) -> i64 {
        self.manager.get().map_or(0, ConnectionLike::get_db)
    }
}

impl RlConnection for Store {}
