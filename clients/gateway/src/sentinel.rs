//! `--home-sentinel`: the home store as the primary that Sentinel names, found again after a
//! failover.
//!
//! The primary is asked of the Sentinels (`redis`'s `SentinelClient`, which checks the address
//! it is given with `ROLE`) when the first report is sent, and again after a call fails in a way
//! that says this connection no longer reaches a primary: the connection dropped or refused,
//! no answer in time, or `READONLY` (the old primary came back as a replica). A report that
//! failed so is not resent; the next one, an `every` later at most, goes to the new primary.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisError, RedisFuture,
    RedisResult, Value,
};
use redis_rl_client::RlConnection;

/// A lookup of the primary (the Sentinels asked, the address checked, a connection made) gives
/// up after this long: a Sentinel that accepts and never answers must not stall the reports.
const LOOKUP: Duration = Duration::from_secs(2);
/// A call to the primary with no answer this long counts as a lost primary.
const RESPONSE: Duration = Duration::from_secs(1);

/// The primary's connection, shared by clones.
#[derive(Clone)]
pub struct SentinelPrimary {
    shared: Arc<Shared>,
}

struct Shared {
    /// One lookup at a time: reports failing together ask the Sentinels once.
    sentinel: tokio::sync::Mutex<SentinelClient>,
    primary: Mutex<Primary>,
}

/// The connection to the primary last named, numbered so that a failure forgets only the
/// connection it happened on, not one made since.
#[derive(Default)]
struct Primary {
    made: u64,
    conn: Option<MultiplexedConnection>,
}

impl SentinelPrimary {
    /// The primary known as `name` to the Sentinels at `sentinels`. Its connection uses the
    /// first Sentinel URL's TLS, user, password and database. Makes no connection yet.
    pub fn new(sentinels: &[String], name: &str) -> RedisResult<SentinelPrimary> {
        let first = sentinels
            .first()
            .ok_or_else(|| RedisError::from((ErrorKind::InvalidClientConfig, "no Sentinel")))?;
        let info = first.as_str().into_connection_info()?;
        let tls_mode = match info.addr {
            redis::ConnectionAddr::TcpTls { insecure, .. } => Some(if insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            }),
            _ => None,
        };
        let node = SentinelNodeConnectionInfo {
            tls_mode,
            redis_connection_info: Some(info.redis),
        };
        let client = SentinelClient::build(
            sentinels.iter().map(String::as_str).collect(),
            name.to_string(),
            Some(node),
            SentinelServerType::Master,
        )?;
        Ok(SentinelPrimary {
            shared: Arc::new(Shared {
                sentinel: tokio::sync::Mutex::new(client),
                primary: Mutex::new(Primary::default()),
            }),
        })
    }
}

impl Shared {
    fn primary(&self) -> std::sync::MutexGuard<'_, Primary> {
        self.primary.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        let primary = self.primary();
        primary.conn.clone().map(|c| (primary.made, c))
    }

    /// The primary's connection: the one made last, or a new one to the primary the
    /// Sentinels name now.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let mut sentinel = self.sentinel.lock().await;
        // Another call may have looked it up while this one waited.
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(LOOKUP)
            .set_response_timeout(RESPONSE);
        let conn = tokio::time::timeout(LOOKUP, sentinel.get_async_connection_with_config(&config))
            .await
            .map_err(|_| {
                RedisError::from((ErrorKind::IoError, "no primary from the Sentinels in time"))
            })??;
        let mut primary = self.primary();
        primary.made = primary.made.wrapping_add(1);
        primary.conn = Some(conn.clone());
        Ok((primary.made, conn))
    }

    /// After `result` on connection `made`: forgets it when the error says it no longer
    /// reaches a primary.
    fn after<T>(&self, made: u64, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result {
            let lost = e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || matches!(e.kind(), ErrorKind::ReadOnly | ErrorKind::MasterDown);
            let mut primary = self.primary();
            if lost && primary.made == made {
                primary.conn = None;
            }
        }
        result
    }
}

impl ConnectionLike for SentinelPrimary {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (made, mut conn) = self.shared.connection().await?;
            let result = conn.req_packed_command(cmd).await;
            self.shared.after(made, result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (made, mut conn) = self.shared.connection().await?;
            let result = conn.req_packed_commands(cmd, offset, count).await;
            self.shared.after(made, result)
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.current().map_or(0, |(_, c)| c.get_db())
    }
}

impl RlConnection for SentinelPrimary {}
