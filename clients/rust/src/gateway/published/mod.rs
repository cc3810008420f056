//! A policy published through Redis (`clients/CONTRACT.md` section 11), as Python's and Node's
//! `PublishedPolicy`: [`publish`] stores a snapshot only above the version in force, and a
//! [`PublishedPolicy`] loads it at start (or the last good one from its cache file), then
//! follows each publication's notice, with a poll as a safety net.
//!
//! An entry is a hash at the key: `version`, `document`, `published_by`, `published_at_ms`. The
//! document's own `version` governs: an entry whose `version` field disagrees with it, whose
//! document is invalid, or whose document is larger than [`MAX_DOCUMENT_BYTES`] is refused by
//! every follower (logged and counted once per distinct document, never put in force) and is no
//! obstacle to the next publication.
//!
//! ```no_run
//! # async fn run(conn: redis_rl_client::Rl<redis::aio::MultiplexedConnection>) -> Result<(), String> {
//! use std::sync::Arc;
//! use redis_rl_client::gateway::published::PublishedPolicy;
//! use redis_rl_client::gateway::{Gateway, PolicyStore};
//!
//! let published = Arc::new(
//!     PublishedPolicy::new("redis://127.0.0.1:6379").cache("/var/lib/app/policy.json"),
//! );
//! let policy = published.load().await?;
//! let gateway = Arc::new(Gateway::new(conn, PolicyStore::snapshot(policy), Default::default()));
//! let following = published.follow(Arc::clone(&gateway)); // abort() it at shutdown
//! # Ok(()) }
//! ```

mod entry;
mod follow;
mod publish;

pub use entry::{Conn, Snapshot};
pub use follow::{Check, Error, PublishedPolicy};
pub use publish::{publish, Published};

/// Where `rl-gateway policy publish` writes and followers read by default.
pub const DEFAULT_KEY: &str = "rl:policy";

/// The largest policy document a follower reads (8 MiB): one past it is refused by its length
/// alone (`HSTRLEN`), never fetched nor parsed, and `publish` refuses to store one. Real
/// policies are a few kilobytes; the bound keeps a mistaken or hostile entry from costing every
/// gateway a large read and parse.
pub const MAX_DOCUMENT_BYTES: usize = 8 << 20;
