//! `publish`: a snapshot stored only above the version of the entry in force, atomically, with
//! or without the module (one Lua script of plain commands).
//!
//! What it compares with is the stored *document's* version, not the `version` field beside it:
//! a field written by hand can claim anything, and trusting it let one hand-written entry block
//! every later publication. An entry the followers refuse (invalid, past the bound, or with a
//! field that disagrees with its document) is in force nowhere, so it counts as no version.
//! Redis's Lua numbers lose integers above 2^53 and the script cannot parse a policy, so the
//! publisher reads and judges the stored entry itself, and the script stores the new one only
//! if the stored document is still the one judged (its length and SHA-1): a compare-and-set,
//! retried when another writer came between.

use rl_engine::Policy;

use super::entry::{examine, oversized, read_head, read_whole, within, Conn};

/// How long one command may take before the store counts as unreachable.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Writers racing for the key: after this many entries changed under it, `publish` gives up.
const ATTEMPTS: usize = 8;

/// KEYS[1]: the entry. ARGV: version, document, publisher, the stored document's length as the
/// publisher read it, its SHA-1 ('' when it was past the bound and not read: any document past
/// the bound counts alike). `{1}`: stored, the channel named by the key notified; `{0}`: the
/// stored document changed since it was read.
const PUBLISH: &str = r#"
local length = redis.call('HSTRLEN', KEYS[1], 'document')
if tostring(length) ~= ARGV[4] then return {0} end
if ARGV[5] ~= '' and redis.sha1hex(redis.call('HGET', KEYS[1], 'document') or '') ~= ARGV[5] then
  return {0}
end
local t = redis.call('TIME')
local at = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'document', ARGV[2],
           'published_by', ARGV[3], 'published_at_ms', at)
redis.call('PUBLISH', KEYS[1], ARGV[1])
return {1}
"#;

/// What `publish` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Stored {
        version: u64,
        /// The stored entry it replaced was one the followers refuse: why.
        replaced: Option<String>,
    },
    /// An entry of this version or a higher one is in force.
    Refused {
        current: u64,
        by: String,
        at_ms: u64,
    },
}

/// Stores `document` at `key` for every follower if its version is higher than the version of
/// the stored entry (that of its document, when followers would enforce it; none otherwise).
/// Of two publishers racing with one version, exactly one wins. A document followers would
/// refuse (invalid, past [`MAX_DOCUMENT_BYTES`](super::MAX_DOCUMENT_BYTES)) is never stored.
pub async fn publish(
    conn: &mut Conn,
    key: &str,
    document: &str,
    by: &str,
) -> Result<Published, String> {
    if let Some(why) = oversized(u64::try_from(document.len()).unwrap_or(u64::MAX)) {
        return Err(format!("not published: {why}"));
    }
    let version = Policy::from_json(document)
        .map_err(|e| e.to_string())?
        .version;
    let script = redis::Script::new(PUBLISH);
    for _ in 0..ATTEMPTS {
        let head = read_head(conn, key, TIMEOUT).await?;
        // What the script checks is still there: the stored document's length and SHA-1.
        let (head, sha1, current, refused) = match oversized(head.length) {
            Some(why) => (head, String::new(), 0, Some(why)),
            None => {
                let raw = read_whole(conn, key, TIMEOUT).await?;
                let sha1 = sha1_smol::Sha1::from(&raw.document).digest().to_string();
                let (current, refused) = match examine(&raw) {
                    _ if raw.head.absent() => (0, None),
                    Ok((snapshot, _)) => (snapshot.version, None),
                    Err(why) => (0, Some(why)),
                };
                (raw.head, sha1, current, refused)
            }
        };
        if version <= current {
            return Ok(Published::Refused {
                current,
                at_ms: head.published_at_ms(),
                by: head.published_by,
            });
        }
        let mut invocation = script.prepare_invoke();
        invocation
            .key(key)
            .arg(version.to_string())
            .arg(document)
            .arg(by)
            .arg(head.length.to_string())
            .arg(sha1);
        let stored: Vec<i64> = within(TIMEOUT, "publish", invocation.invoke_async(conn)).await?;
        if stored.first() == Some(&1) {
            return Ok(Published::Stored {
                version,
                replaced: refused,
            });
        }
    }
    Err(format!(
        "the entry at {key} changed {ATTEMPTS} times while it was being published; try again"
    ))
}
