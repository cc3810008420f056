//! Policies published through Redis (`clients/CONTRACT.md` section 11): `policy publish`
//! stores a snapshot only if its version is higher than the stored one, in one script (so it
//! works with and without the module), records who published it and when, and notifies the
//! fleet; gateways started with `--policy store:KEY` load it, follow publications (pub/sub, and
//! a poll as a safety net), keep the last good snapshot in `--policy-cache`, and start from that
//! file when Redis is down.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, RedisResult, Value};
use serde::{Deserialize, Serialize};

/// Where `policy publish` writes and `--policy store:KEY` reads by default.
pub const DEFAULT_KEY: &str = "rl:policy";

/// How long one read or write of the snapshot may take before the store counts as down.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// KEYS[1]: the snapshot's hash. ARGV: version, document, publisher. Versions are compared as
/// decimal strings (by length, then by text), since a Lua number loses integers above 2^53.
/// The hash's field `version` is written last in the reply order callers rely on: `{1, v}` for
/// a snapshot stored, `{0, version, published_by, published_at_ms}` for one refused. The channel
/// notified is the key itself.
const PUBLISH: &str = r#"
local current = redis.call('HGET', KEYS[1], 'version')
local offered = ARGV[1]
if current and (#current > #offered or (#current == #offered and current >= offered)) then
  local by = redis.call('HGET', KEYS[1], 'published_by') or ''
  local at = redis.call('HGET', KEYS[1], 'published_at_ms') or '0'
  return {0, current, by, at}
end
local t = redis.call('TIME')
local at = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], 'version', offered, 'document', ARGV[2],
           'published_by', ARGV[3], 'published_at_ms', at)
redis.call('PUBLISH', KEYS[1], offered)
return {1, offered}
"#;

/// A snapshot as stored: what the cache file holds too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u64,
    pub published_by: String,
    pub published_at_ms: u64,
    pub document: String,
}

/// What `publish` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Stored {
        version: u64,
    },
    /// A snapshot of this version or a higher one is in force.
    Refused {
        current: u64,
        by: String,
        at_ms: u64,
    },
}

/// A connection to the store holding the snapshot: one server, or a cluster.
#[derive(Clone)]
pub enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    pub async fn open(url: &str, cluster: bool) -> Result<Conn, String> {
        let open = async {
            if cluster {
                let client = redis::cluster::ClusterClient::new(vec![url])?;
                Ok::<_, redis::RedisError>(Conn::Cluster(client.get_async_connection().await?))
            } else {
                let client = redis::Client::open(url)?;
                Ok(Conn::Single(
                    client.get_multiplexed_async_connection().await?,
                ))
            }
        };
        match tokio::time::timeout(STORE_TIMEOUT, open).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(format!("{url}: {e}")),
            Err(_) => Err(format!("{url}: no answer within {STORE_TIMEOUT:?}")),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

async fn within<T>(
    what: &str,
    f: impl std::future::Future<Output = RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(STORE_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {STORE_TIMEOUT:?}")),
    }
}

fn int(v: &Value) -> u64 {
    match v {
        Value::Int(n) => u64::try_from(*n).unwrap_or(0),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    }
}

/// Stores `document` (already validated, of `version`) at `key` if `version` is higher than the
/// stored one, atomically: of two publishers racing with one version, exactly one wins.
pub async fn publish(
    conn: &mut Conn,
    key: &str,
    version: u64,
    document: &str,
    by: &str,
) -> Result<Published, String> {
    let script = redis::Script::new(PUBLISH);
    let mut invocation = script.prepare_invoke();
    invocation
        .key(key)
        .arg(version.to_string())
        .arg(document)
        .arg(by);
    let reply: Vec<Value> = within("publish", invocation.invoke_async(conn)).await?;
    match reply.as_slice() {
        [Value::Int(1), v] => Ok(Published::Stored { version: int(v) }),
        [Value::Int(0), current, by, at] => Ok(Published::Refused {
            current: int(current),
            by: text(by),
            at_ms: int(at),
        }),
        other => Err(format!("publish: unexpected reply {other:?}")),
    }
}

/// The stored version alone (what the poll compares), if any.
pub async fn stored_version(conn: &mut Conn, key: &str) -> Result<Option<u64>, String> {
    let v: Option<String> = within("read the version", conn.hget(key, "version")).await?;
    Ok(v.and_then(|v| v.parse().ok()))
}

/// The stored snapshot, if any.
pub async fn fetch(conn: &mut Conn, key: &str) -> Result<Option<Snapshot>, String> {
    let fields: std::collections::HashMap<String, String> =
        within("read the snapshot", conn.hgetall(key)).await?;
    let Some(document) = fields.get("document") else {
        return Ok(None);
    };
    let number = |name: &str| fields.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(Some(Snapshot {
        version: number("version"),
        published_by: fields.get("published_by").cloned().unwrap_or_default(),
        published_at_ms: number("published_at_ms"),
        document: document.clone(),
    }))
}

/// The last good snapshot, written whole or not at all (a temporary file renamed over it), so a
/// crash mid-write never leaves a gateway a half file to start from.
pub fn write_cache(file: &Path, snapshot: &Snapshot) -> Result<(), String> {
    let text = serde_json::to_vec_pretty(snapshot).map_err(|e| e.to_string())?;
    let mut temporary = file.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, text)
        .and_then(|()| std::fs::rename(&temporary, file))
        .map_err(|e| format!("{}: {e}", file.display()))
}

pub fn read_cache(file: &Path) -> Result<Snapshot, String> {
    let text = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{}: not a snapshot: {e}", file.display()))
}
