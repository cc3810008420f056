//! A connection to the store that a gateway can start with while the store is down, and that
//! comes back quickly after the store restarts: the gateway listens and serves its postures
//! meanwhile, instead of waiting for Redis before it binds.
//!
//! Until the first connection is made, a task keeps trying, one attempt at a time. A call made
//! meanwhile asks for an attempt now (rather than after the pause between two) and waits for
//! it to end, within the caller's own deadline: so a gateway's first requests, arriving while
//! its connection is still being made (or just after the store came up), are decided by the
//! store rather than by the posture, and a store that refuses the connection fails them at
//! once. Once connected, the `redis` crate's `ConnectionManager` reconnects after a failure,
//! retrying within half a second rather than with its default backoff (which waited up to
//! 113 s between attempts).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::{watch, Notify};

use crate::client::RlConnection;

/// The longest wait between two connection attempts nobody asked for.
const RETRY_MAX: Duration = Duration::from_millis(500);
/// The shortest: calls asking for attempts while the store refuses them make at most this many
/// a second between them.
const RETRY_MIN: Duration = Duration::from_millis(10);
/// One connection attempt gives up after this long (a store that accepts nothing, say).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A store connection, possibly not made yet. Cloning shares it.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    manager: OnceLock<ConnectionManager>,
    /// How many first-connection attempts have ended (the last one set `manager`, if any did).
    attempts: watch::Sender<u64>,
    /// A call waits for an attempt: the pause before the next one ends now.
    wanted: Notify,
}

fn config() -> ConnectionManagerConfig {
    // Attempts 10 ms, 20 ms, ... apart, never more than RETRY_MAX.
    ConnectionManagerConfig::new()
        .set_factor(10)
        .set_exponent_base(2)
        .set_max_delay(u64::try_from(RETRY_MAX.as_millis()).unwrap_or(500))
        .set_connection_timeout(CONNECT_TIMEOUT)
}

/// One attempt at the first connection. The manager retries on its own (for seconds, against a
/// store that refuses), so a single connection made beside it says whether the store is there:
/// a caller waiting for the attempt learns at once that it is not.
async fn attempt(client: &redis::Client) -> Result<ConnectionManager, RedisError> {
    let once = AsyncConnectionConfig::new().set_connection_timeout(CONNECT_TIMEOUT);
    let manager = ConnectionManager::new_with_config(client.clone(), config());
    let probe = client.get_multiplexed_async_connection_with_config(&once);
    tokio::pin!(manager);
    tokio::select! {
        made = &mut manager => made,
        probed = probe => match probed {
            Ok(_) => manager.await,
            Err(e) => Err(e),
        },
    }
}

impl Store {
    /// Starts connecting to `client`'s server in the background (on the current tokio
    /// runtime) and returns at once.
    pub fn connect(client: redis::Client) -> Store {
        let store = Store {
            shared: Arc::new(Shared {
                manager: OnceLock::new(),
                attempts: watch::Sender::new(0),
                wanted: Notify::new(),
            }),
        };
        let shared = Arc::clone(&store.shared);
        tokio::spawn(async move {
            let mut said = false;
            loop {
                let outcome = attempt(&client).await;
                if let Ok(manager) = &outcome {
                    let _ = shared.manager.set(manager.clone());
                }
                // After `manager` is set: a call that sees the count move finds it.
                shared.attempts.send_modify(|n| *n = n.wrapping_add(1));
                match outcome {
                    Ok(_) => {
                        tracing::info!(target: super::DECISION_LOG, "connected to the store");
                        return;
                    }
                    Err(e) if !said => {
                        tracing::warn!(
                            target: super::DECISION_LOG,
                            error = %e,
                            "the store is not reachable yet; routes take their posture"
                        );
                        said = true;
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(RETRY_MIN).await;
                let _ = tokio::time::timeout(RETRY_MAX, shared.wanted.notified()).await;
            }
        });
        store
    }

    /// Whether the first connection has been made.
    pub fn is_connected(&self) -> bool {
        self.shared.manager.get().is_some()
    }
}

impl Shared {
    /// The connection, once made; before, the end of the next attempt (asked for now), and the
    /// connection if it made one. The caller's deadline bounds the wait.
    async fn manager(&self) -> Result<ConnectionManager, RedisError> {
        if let Some(manager) = self.manager.get() {
            return Ok(manager.clone());
        }
        // Subscribed before looking again, so an attempt that ends in between is not missed.
        let mut ended = self.attempts.subscribe();
        if let Some(manager) = self.manager.get() {
            return Ok(manager.clone());
        }
        self.wanted.notify_one();
        // The sender lives as long as `self`: `changed` ends with the attempt.
        let _ = ended.changed().await;
        self.manager.get().cloned().ok_or_else(not_yet)
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
        Box::pin(async move { self.shared.manager().await?.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.shared
                .manager()
                .await?
                .req_packed_commands(cmd, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.manager.get().map_or(0, ConnectionLike::get_db)
    }
}

impl RlConnection for Store {}
