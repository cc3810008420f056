//! The follower: the snapshot to start with (the store's, or the cache file's), then each
//! publication's notice on the key's channel, and a poll as a safety net, put a higher version
//! in force. A gateway that cannot refresh keeps enforcing the snapshot it has;
//! `rl_gateway_policy_age_seconds` shows how old that is.
//!
//! What cannot steer it: an entry is read whole only when its head (small fields and length)
//! changed, never when its document is past the bound; an entry that breaks the rules of
//! `entry::examine` is refused, logged and counted once per distinct document, and whatever the
//! store holds, a good cache file is enough to start.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt as _;
use rl_engine::metrics::Metrics;
use rl_engine::Policy;

use super::entry::{
    examine, oversized, read_cache, read_head, read_whole, write_cache, Conn, Head,
};
use super::DEFAULT_KEY;
use crate::client::RlConnection;
use crate::gateway::Gateway;

/// Refuses a snapshot a face cannot enforce (`rl-gateway`'s forward auth and semaphores, say):
/// such a snapshot is refused as an invalid one is.
pub type Check = Arc<dyn Fn(&Policy) -> Result<(), String> + Send + Sync>;

/// Why a refresh put nothing in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The store did not answer: the snapshot in force stays, and the next poll tries again.
    Store(String),
    /// The stored entry is one no gateway may enforce (logged and counted already).
    Refused(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Store(e) | Error::Refused(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Error {}

/// Refused documents remembered so each is logged and counted once (a store flipping between
/// two bad entries is two, not one per flip); the oldest is forgotten past this many.
const REMEMBERED: usize = 16;

#[derive(Default)]
struct State {
    /// The head of the entry last examined, whatever came of it: unchanged, it is not read again.
    seen: Option<Head>,
    /// The identities of the documents refused lately.
    refused: VecDeque<u64>,
    /// Refusals made before a gateway was given (by `load`), counted when `follow` starts.
    uncounted: u64,
    published_at_ms: u64,
}

/// A policy published at a key, followed (the shape of Python's and Node's `PublishedPolicy`).
pub struct PublishedPolicy {
    url: String,
    cluster: bool,
    key: String,
    cache: Option<PathBuf>,
    poll: Duration,
    timeout: Duration,
    check: Option<Check>,
    // Held through a load or a refresh, so the notice's, the poll's and a reload's never
    // interleave (two would read one new entry, and the second be refused as stale).
    conn: tokio::sync::Mutex<Option<Conn>>,
    state: Mutex<State>,
}

/// What the store holds, judged.
enum Stored {
    Absent,
    Good(Box<(super::Snapshot, Policy, Head)>),
    Refused(String),
}

impl PublishedPolicy {
    /// Follows [`DEFAULT_KEY`] in the store at `url` (`redis://HOST:PORT`), polled every 5 s,
    /// each command given 2 s.
    pub fn new(url: impl Into<String>) -> PublishedPolicy {
        PublishedPolicy {
            url: url.into(),
            cluster: false,
            key: DEFAULT_KEY.into(),
            cache: None,
            poll: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            check: None,
            conn: tokio::sync::Mutex::new(None),
            state: Mutex::default(),
        }
    }

    /// The store is a Redis Cluster (`url` names one of its nodes).
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// The last good snapshot is written there on each change, and a start reads it when the
    /// store is down or holds nothing enforceable.
    pub fn cache(mut self, file: impl Into<PathBuf>) -> Self {
        self.cache = Some(file.into());
        self
    }

    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What else a snapshot must pass to be put in force.
    pub fn check(mut self, check: Check) -> Self {
        self.check = Some(check);
        self
    }

    pub fn key_name(&self) -> &str {
        &self.key
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn judge(&self, raw: &super::entry::Raw) -> Result<(super::Snapshot, Policy), String> {
        let (snapshot, policy) = examine(raw)?;
        if let Some(check) = &self.check {
            check(&policy)?;
        }
        Ok((snapshot, policy))
    }

    /// Logs and counts a refused entry once per distinct document: `identity` tells them apart.
    fn refuse(&self, head: &Head, identity: u64, why: &str, metrics: Option<&Metrics>) -> String {
        let message = format!("{} is refused: {why}", head.describe(&self.key));
        let mut state = self.state();
        state.seen = Some(head.clone());
        if state.refused.contains(&identity) {
            return message;
        }
        if state.refused.len() >= REMEMBERED {
            state.refused.pop_front();
        }
        state.refused.push_back(identity);
        match metrics {
            Some(metrics) => metrics.policy_rejected(),
            None => state.uncounted = state.uncounted.saturating_add(1),
        }
        drop(state);
        tracing::warn!("{message}; the snapshot in force stays");
        message
    }

    /// Reads the entry if its head changed since the last look: `None` when it did not.
    async fn examine_store(
        &self,
        conn: &mut Conn,
        metrics: Option<&Metrics>,
    ) -> Result<Option<Stored>, String> {
        let head = read_head(conn, &self.key, self.timeout).await?;
        if head.absent() {
            return Ok(Some(Stored::Absent));
        }
        if self.state().seen.as_ref() == Some(&head) {
            return Ok(None);
        }
        if let Some(why) = oversized(head.length) {
            let refused = self.refuse(&head, head.identity(), &why, metrics);
            return Ok(Some(Stored::Refused(refused)));
        }
        let raw = read_whole(conn, &self.key, self.timeout).await?;
        if raw.head.absent() {
            return Ok(Some(Stored::Absent));
        }
        Ok(Some(match self.judge(&raw) {
            Ok((snapshot, policy)) => Stored::Good(Box::new((snapshot, policy, raw.head))),
            Err(why) => Stored::Refused(self.refuse(&raw.head, raw.identity(), &why, metrics)),
        }))
    }

    async fn connected<'a>(&self, slot: &'a mut Option<Conn>) -> Result<&'a mut Conn, String> {
        if slot.is_none() {
            *slot = Some(Conn::open(&self.url, self.cluster, self.timeout).await?);
        }
        slot.as_mut()
            .ok_or_else(|| format!("{}: no connection", self.url))
    }

    /// The store's entry judged, on the connection in `slot`; dropped when the store failed
    /// (the next call opens another).
    async fn look(
        &self,
        slot: &mut Option<Conn>,
        metrics: Option<&Metrics>,
    ) -> Result<Option<Stored>, String> {
        let result = match self.connected(slot).await {
            Ok(conn) => self.examine_store(conn, metrics).await,
            Err(e) => Err(e),
        };
        if result.is_err() {
            *slot = None;
        }
        result
    }

    /// The snapshot to start with: the store's when it is good (and not below the cache's),
    /// else the cache file's when that is good, whatever the store holds; with neither, why.
    /// A refused entry is logged here and counted once `follow` is given the gateway.
    pub async fn load(&self) -> Result<Policy, String> {
        let cached = self.cache.as_deref().map(|file| {
            let (snapshot, policy) = read_cache(file)?;
            if let Some(check) = &self.check {
                check(&policy).map_err(|e| format!("{}: {e}", file.display()))?;
            }
            Ok::<_, String>((snapshot, policy))
        });
        let mut slot = self.conn.lock().await;
        let stored = self.look(&mut slot, None).await;
        let cached = match cached {
            Some(Ok(good)) => Ok(good),
            Some(Err(e)) => Err(format!("the policy cache cannot be used: {e}")),
            None => Err("no policy cache holds a snapshot to start from".into()),
        };
        // Why not the store's snapshot (a refusal was logged on its own already).
        let (why, refused) = match stored {
            Ok(Some(Stored::Good(good))) => {
                let (snapshot, policy, head) = *good;
                let above_cache = cached
                    .as_ref()
                    .map_or(true, |(c, _)| snapshot.version >= c.version);
                let mut state = self.state();
                state.seen = Some(head);
                if above_cache {
                    state.published_at_ms = snapshot.published_at_ms;
                    drop(state);
                    if let Some(file) = &self.cache {
                        if let Err(e) = write_cache(file, &snapshot) {
                            tracing::warn!("cannot write the policy cache: {e}");
                        }
                    }
                    return Ok(policy);
                }
                let why = format!(
                    "the snapshot at {} is version {}, below the cached one",
                    self.key, snapshot.version
                );
                (why, false)
            }
            Ok(Some(Stored::Refused(why))) => (why, true),
            Ok(Some(Stored::Absent) | None) => (
                format!(
                    "no policy is published at {} (publish one with rl-gateway policy publish FILE --key {})",
                    self.key, self.key
                ),
                false,
            ),
            Err(e) => (format!("the store is unreachable ({e})"), false),
        };
        let (snapshot, policy) = cached.map_err(|e| format!("{why}, and {e}"))?;
        tracing::warn!(
            version = snapshot.version,
            published_by = %snapshot.published_by,
            "{}; starting from the snapshot cached in {}",
            if refused {
                format!("the store holds nothing to enforce at {}", self.key)
            } else {
                why
            },
            self.cache.as_deref().unwrap_or(std::path::Path::new("")).display()
        );
        self.state().published_at_ms = snapshot.published_at_ms;
        Ok(policy)
    }

    /// Puts the stored snapshot in force if it changed and is higher than the gateway's: its
    /// version, or `None` when there is nothing new to enforce.
    pub async fn refresh<C: RlConnection + 'static>(
        &self,
        gateway: &Gateway<C>,
    ) -> Result<Option<u64>, Error> {
        let mut slot = self.conn.lock().await;
        let stored = self.look(&mut slot, Some(gateway.metrics())).await;
        let (snapshot, policy, head) = match stored.map_err(Error::Store)? {
            Some(Stored::Good(good)) => *good,
            Some(Stored::Refused(why)) => return Err(Error::Refused(why)),
            Some(Stored::Absent) | None => return Ok(None),
        };
        // Not above the version in force (a store reset, an entry written by hand): not
        // followed.
        let version = match gateway.engine().reload(policy) {
            Ok(policy) => {
                for warning in &policy.warnings {
                    tracing::warn!(version = policy.version, "{warning}");
                }
                policy.version
            }
            Err(e) => {
                tracing::warn!("{} is not followed: {e}", head.describe(&self.key));
                self.state().seen = Some(head);
                return Ok(None);
            }
        };
        gateway.metrics().policy_published(snapshot.published_at());
        {
            let mut state = self.state();
            state.seen = Some(head);
            state.published_at_ms = snapshot.published_at_ms;
        }
        if let Some(file) = &self.cache {
            if let Err(e) = write_cache(file, &snapshot) {
                tracing::warn!("cannot write the policy cache: {e}");
            }
        }
        tracing::info!(
            version,
            published_by = %snapshot.published_by,
            "following {}: a new snapshot is in force",
            self.key
        );
        Ok(Some(version))
    }

    /// Follows the key on a task of its own (abort it to stop): each notice on the key's
    /// channel, and each poll, refreshes. A store failure is logged once per streak; the
    /// snapshot in force stays.
    pub fn follow<C: RlConnection + 'static>(
        self: &Arc<Self>,
        gateway: Arc<Gateway<C>>,
    ) -> tokio::task::JoinHandle<()> {
        let (published_at_ms, uncounted) = {
            let mut state = self.state();
            (state.published_at_ms, std::mem::take(&mut state.uncounted))
        };
        if published_at_ms > 0 {
            gateway
                .metrics()
                .policy_published(rl_engine::Instant::from_micros(
                    published_at_ms.saturating_mul(1000),
                ));
        }
        for _ in 0..uncounted {
            gateway.metrics().policy_rejected();
        }
        let this = Arc::clone(self);
        tokio::spawn(async move { this.run(&gateway).await })
    }

    async fn run<C: RlConnection + 'static>(&self, gateway: &Gateway<C>) {
        let mut failing = false;
        let mut report = |result: Result<Option<u64>, Error>| match result {
            Err(Error::Store(e)) => {
                if !failing {
                    tracing::warn!(
                        "cannot refresh the policy from {} ({e}); the snapshot in force stays",
                        self.key
                    );
                }
                failing = true;
            }
            // A refusal was logged when it was made.
            Ok(_) | Err(Error::Refused(_)) => failing = false,
        };
        loop {
            // Notices come from the node the URL names (PUBLISH reaches every node of a cluster).
            let subscribed = async {
                let client = redis::Client::open(self.url.as_str())?;
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&self.key).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let pubsub = tokio::time::timeout(self.timeout, subscribed).await;
            // What was published while no subscription listened is read now.
            report(self.refresh(gateway).await);
            let Ok(Ok(mut pubsub)) = pubsub else {
                tokio::time::sleep(self.poll).await;
                continue;
            };
            let mut notices = pubsub.on_message();
            loop {
                tokio::select! {
                    notice = notices.next() => match notice {
                        Some(_) => report(self.refresh(gateway).await),
                        // The subscription's connection is gone: subscribe again.
                        None => break,
                    },
                    _ = tokio::time::sleep(self.poll) => report(self.refresh(gateway).await),
                }
            }
        }
    }
}
