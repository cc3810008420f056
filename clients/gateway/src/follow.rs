//! `--policy store:KEY`: the snapshot published at KEY, loaded at start (or, when the store is
//! down, the last good one from `--policy-cache`) and followed: a publication's notice on the
//! key's channel, or a poll every `--policy-poll`, puts a higher version in force at once. A
//! gateway that cannot refresh keeps enforcing the snapshot it has, never nothing, and
//! `rl_gateway_policy_age_seconds` shows how old that is.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis_rl_client::engine::policy::Policy;
use redis_rl_client::engine::Instant;
use redis_rl_client::{Gateway, RlConnection};

use crate::published::{self, read_cache, write_cache, Conn, Snapshot};

/// Refuses a snapshot a face cannot enforce (forward auth and semaphores, say).
pub type Check = Arc<dyn Fn(&Policy) -> Result<(), String> + Send + Sync>;

/// Where the snapshot lives and how to follow it.
#[derive(Debug, Clone)]
pub struct Source {
    pub url: String,
    pub cluster: bool,
    pub key: String,
    pub cache: Option<PathBuf>,
    pub poll: Duration,
}

/// A snapshot parsed, with what `/metrics` shows of it.
pub struct Loaded {
    pub policy: Policy,
    pub published_at: Instant,
}

fn parse(snapshot: &Snapshot, origin: &str) -> Result<Loaded, String> {
    let policy = Policy::from_json(&snapshot.document).map_err(|e| {
        format!(
            "the snapshot {origin} (version {}) is invalid: {e}",
            snapshot.version
        )
    })?;
    Ok(Loaded {
        policy,
        published_at: Instant::from_micros(snapshot.published_at_ms.saturating_mul(1000)),
    })
}

/// The snapshot to start with: the store's, else the cache file's; with neither, why not.
pub async fn initial(source: &Source) -> Result<Loaded, String> {
    let stored = match Conn::open(&source.url, source.cluster).await {
        Ok(mut conn) => published::fetch(&mut conn, &source.key).await,
        Err(e) => Err(e),
    };
    let unreachable = match stored {
        Ok(Some(snapshot)) => {
            let loaded = parse(&snapshot, &format!("published at {}", source.key))?;
            if let Some(cache) = &source.cache {
                if let Err(e) = write_cache(cache, &snapshot) {
                    tracing::warn!("cannot write the policy cache: {e}");
                }
            }
            return Ok(loaded);
        }
        Ok(None) => {
            return Err(format!(
                "no policy is published at {} (rl-gateway policy publish FILE --store {} --key {})",
                source.key, source.url, source.key
            ))
        }
        Err(e) => e,
    };
    let Some(cache) = &source.cache else {
        return Err(format!(
            "the store is unreachable ({unreachable}) and no --policy-cache holds a snapshot to start from"
        ));
    };
    let snapshot = read_cache(cache).map_err(|e| {
        format!("the store is unreachable ({unreachable}) and the policy cache cannot be read: {e}")
    })?;
    let loaded = parse(&snapshot, &format!("cached in {}", cache.display()))?;
    tracing::warn!(
        version = snapshot.version,
        published_by = %snapshot.published_by,
        "the store is unreachable ({unreachable}); starting from the snapshot cached in {}",
        cache.display()
    );
    Ok(loaded)
}

/// Puts the store's snapshot in force if it is higher than the one in force: its version, or
/// why not. `check` refuses what a face cannot enforce.
pub async fn refresh<C: RlConnection + 'static>(
    gateway: &Gateway<C>,
    source: &Source,
    check: &(dyn Fn(&Policy) -> Result<(), String> + Send + Sync),
) -> Result<Option<u64>, String> {
    let mut conn = Conn::open(&source.url, source.cluster).await?;
    let in_force = gateway.policy().version;
    match published::stored_version(&mut conn, &source.key).await? {
        Some(v) if v > in_force => {}
        _ => return Ok(None),
    }
    let Some(snapshot) = published::fetch(&mut conn, &source.key).await? else {
        return Ok(None);
    };
    let loaded = parse(&snapshot, &format!("published at {}", source.key))?;
    check(&loaded.policy)?;
    let policy = gateway
        .engine()
        .reload(loaded.policy)
        .map_err(|e| e.to_string())?;
    gateway.metrics().policy_published(loaded.published_at);
    if let Some(cache) = &source.cache {
        write_cache(cache, &snapshot)?;
    }
    tracing::info!(
        version = policy.version,
        published_by = %snapshot.published_by,
        "following {}: a new snapshot is in force",
        source.key
    );
    Ok(Some(policy.version))
}

/// Follows the key for as long as the process runs: each notice on its channel, and each poll,
/// refreshes. Failures are logged once per streak; the snapshot in force stays.
pub async fn follow<C: RlConnection + 'static>(
    gateway: Arc<Gateway<C>>,
    source: Source,
    check: Check,
) {
    let mut failing = false;
    let mut report = |result: Result<Option<u64>, String>| match result {
        Ok(_) => failing = false,
        Err(e) => {
            if !failing {
                tracing::warn!(
                    "cannot refresh the policy from {} ({e}); the snapshot in force stays",
                    source.key
                );
            }
            failing = true;
        }
    };
    loop {
        // Notices come from the node --store names (PUBLISH reaches every node of a cluster).
        let subscribed = async {
            let client = redis::Client::open(source.url.as_str())?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&source.key).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = tokio::time::timeout(Duration::from_secs(2), subscribed).await;
        // What was published while no subscription listened is read now.
        report(refresh(&gateway, &source, check.as_ref()).await);
        match pubsub {
            Ok(Ok(mut pubsub)) => {
                let mut notices = pubsub.on_message();
                loop {
                    tokio::select! {
                        notice = notices.next() => match notice {
                            Some(_) => report(refresh(&gateway, &source, check.as_ref()).await),
                            // The subscription's connection is gone: subscribe again.
                            None => break,
                        },
                        _ = tokio::time::sleep(source.poll) => {
                            report(refresh(&gateway, &source, check.as_ref()).await);
                        }
                    }
                }
            }
            _ => tokio::time::sleep(source.poll).await,
        }
    }
}
