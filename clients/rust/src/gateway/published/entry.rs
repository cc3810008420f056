//! The entry at a key as Redis holds it: its head (the small fields and the document's length,
//! read on every poll), the whole entry (read only when the head changed), the rules an entry
//! meets before any gateway enforces it, and the cache file holding the last good one.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, Value};
use rl_engine::{Instant, Policy};

use super::MAX_DOCUMENT_BYTES;

/// A connection to the store holding the entry: one server, or a cluster.
#[derive(Clone)]
pub enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects to `url` (a node of the cluster when `cluster`), within `timeout`.
    pub async fn open(url: &str, cluster: bool, timeout: Duration) -> Result<Conn, String> {
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
        within(timeout, url, open).await
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

pub(crate) async fn within<T>(
    timeout: Duration,
    what: &str,
    f: impl Future<Output = RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {timeout:?}")),
    }
}

/// An entry's small fields as stored (text, unparsed) and its document's length: what tells
/// one entry from another without reading the document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Head {
    pub version: Option<String>,
    pub published_by: String,
    pub published_at_ms: Option<String>,
    pub length: u64,
}

impl Head {
    pub fn absent(&self) -> bool {
        self.version.is_none() && self.published_at_ms.is_none() && self.length == 0
    }

    pub fn published_at_ms(&self) -> u64 {
        self.published_at_ms
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// What tells two refused entries apart when the document was not read (past the bound).
    pub fn identity(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }

    /// How a log line names the entry.
    pub fn describe(&self, key: &str) -> String {
        format!(
            "the snapshot at {key} (version {}, published by {})",
            self.version.as_deref().unwrap_or("none"),
            if self.published_by.is_empty() {
                "nobody"
            } else {
                &self.published_by
            }
        )
    }
}

fn text(v: Option<Vec<u8>>) -> Option<String> {
    v.map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The head's fields and the document's length, read at one instant: as two commands, a write
/// between them gave a head that never was (the old version with the new length), refused as
/// one document and then again as another.
const READ_HEAD: &str = r"
return {redis.call('HMGET', KEYS[1], 'version', 'published_by', 'published_at_ms'),
        redis.call('HSTRLEN', KEYS[1], 'document')}
";

/// The head: one small script, whatever the document's size.
pub(crate) async fn read_head(
    conn: &mut Conn,
    key: &str,
    timeout: Duration,
) -> Result<Head, String> {
    let script = redis::Script::new(READ_HEAD);
    let call = script.key(key);
    let (fields, length): (Vec<Option<Vec<u8>>>, u64) =
        within(timeout, "read the snapshot", call.invoke_async(conn)).await?;
    let mut fields = fields.into_iter();
    Ok(Head {
        version: text(fields.next().flatten()),
        published_by: text(fields.next().flatten()).unwrap_or_default(),
        published_at_ms: text(fields.next().flatten()),
        length,
    })
}

/// An entry read whole (one `HMGET`, so its fields are of one write) with the head it has.
pub(crate) struct Raw {
    pub head: Head,
    pub document: Vec<u8>,
}

impl Raw {
    /// What tells two refused documents apart: the head and, when it was read, the document.
    pub fn identity(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.head.hash(&mut hasher);
        self.document.hash(&mut hasher);
        hasher.finish()
    }
}

/// The whole entry; call it only when the head said the document is within the bound.
pub(crate) async fn read_whole(
    conn: &mut Conn,
    key: &str,
    timeout: Duration,
) -> Result<Raw, String> {
    let mut fields = redis::cmd("HMGET");
    fields
        .arg(key)
        .arg(&["version", "published_by", "published_at_ms", "document"]);
    let fields: Vec<Option<Vec<u8>>> =
        within(timeout, "read the snapshot", fields.query_async(conn)).await?;
    let mut fields = fields.into_iter();
    let version = text(fields.next().flatten());
    let published_by = text(fields.next().flatten()).unwrap_or_default();
    let published_at_ms = text(fields.next().flatten());
    let document = fields.next().flatten().unwrap_or_default();
    Ok(Raw {
        head: Head {
            version,
            published_by,
            published_at_ms,
            length: u64::try_from(document.len()).unwrap_or(u64::MAX),
        },
        document,
    })
}

/// Why no gateway may enforce an entry of this length, if it is past the bound.
pub(crate) fn oversized(length: u64) -> Option<String> {
    (length > MAX_DOCUMENT_BYTES as u64).then(|| {
        format!("its document is {length} bytes, past the bound of {MAX_DOCUMENT_BYTES} (8 MiB)")
    })
}

/// A snapshot as stored: what the cache file holds too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub version: u64,
    pub published_by: String,
    pub published_at_ms: u64,
    pub document: String,
}

impl Snapshot {
    pub fn published_at(&self) -> Instant {
        Instant::from_micros(self.published_at_ms.saturating_mul(1000))
    }
}

/// The rules an entry meets before any gateway enforces it: a document within the bound, a
/// valid policy, and a `version` field that says the document's own version. The policy, or
/// why the entry is refused.
pub(crate) fn examine(raw: &Raw) -> Result<(Snapshot, Policy), String> {
    if let Some(why) = oversized(raw.head.length) {
        return Err(why);
    }
    let document = std::str::from_utf8(&raw.document)
        .map_err(|_| "its document is not UTF-8 text".to_string())?;
    let policy = Policy::from_json(document).map_err(|e| e.to_string())?;
    agrees(raw.head.version.as_deref(), &policy)?;
    Ok((
        Snapshot {
            version: policy.version,
            published_by: raw.head.published_by.clone(),
            published_at_ms: raw.head.published_at_ms(),
            document: document.to_string(),
        },
        policy,
    ))
}

/// The document's own version governs: a `version` field that says anything else (a number
/// written by hand, or a mistaken script's) marks the entry as not what it claims.
fn agrees(field: Option<&str>, policy: &Policy) -> Result<(), String> {
    if field == Some(policy.version.to_string().as_str()) {
        return Ok(());
    }
    Err(format!(
        "its version field says {}, its document's version is {}",
        field.unwrap_or("nothing"),
        policy.version
    ))
}

/// The last good snapshot, written whole or not at all (a temporary file renamed over it), so a
/// crash mid-write never leaves a gateway a half file to start from.
pub(crate) fn write_cache(file: &Path, snapshot: &Snapshot) -> Result<(), String> {
    let json = serde_json::json!({
        "version": snapshot.version,
        "published_by": snapshot.published_by,
        "published_at_ms": snapshot.published_at_ms,
        "document": snapshot.document,
    });
    let text = serde_json::to_vec_pretty(&json).map_err(|e| e.to_string())?;
    let mut temporary = file.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, text)
        .and_then(|()| std::fs::rename(&temporary, file))
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// The cache file's snapshot, held to the rules of an entry in the store.
pub(crate) fn read_cache(file: &Path) -> Result<(Snapshot, Policy), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    // A document escaped into JSON grows; twice the bound is room enough for any real one.
    let limit = 2 * MAX_DOCUMENT_BYTES as u64;
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
        .map_err(|e| at(&e))?;
    if bytes.len() as u64 > limit {
        return Err(at(&format!("larger than {limit} bytes")));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| at(&format!("not a snapshot: {e}")))?;
    let field = |name: &str| json.get(name);
    let Some(document) = field("document").and_then(|d| d.as_str()) else {
        return Err(at(&"not a snapshot: no document"));
    };
    let version = field("version")
        .and_then(|v| v.as_u64())
        .map(|v| v.to_string());
    let raw = Raw {
        head: Head {
            version,
            published_by: field("published_by")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            published_at_ms: field("published_at_ms")
                .and_then(|v| v.as_u64())
                .map(|v| v.to_string()),
            length: u64::try_from(document.len()).unwrap_or(u64::MAX),
        },
        document: document.as_bytes().to_vec(),
    };
    examine(&raw).map_err(|e| at(&e))
}
