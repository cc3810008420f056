//! The descriptor tree and how a request's descriptor finds its limit in it, as the reference
//! service matches: entry by entry, at each level `key` and `value` exactly, else a `value`
//! with a wildcard (`*`, in file order), else the `key` alone; the limit that applies is the
//! one of the descriptor reached by the request's last entry, so a request with more entries
//! than the file has levels, or fewer, matches nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use redis_rl_client::Algo;
use rl_engine::policy::{GrantSpec, RuleSpec};

/// How a descriptor of the file matches a request entry with the same key.
#[derive(Debug)]
pub(crate) enum Match {
    /// `value` given: that value only.
    Exact(String),
    /// `value` with `*`: any value the pattern matches; each value is counted apart unless
    /// `share_threshold`, which counts them all on one key.
    Glob { pattern: String, shared: bool },
    /// No `value`: any value, each counted apart.
    Any,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub key: String,
    pub matching: Match,
    pub limit: Option<Arc<Limit>>,
    pub children: Level,
}

/// One list of descriptors, indexed for the three ways an entry can match.
#[derive(Debug, Default)]
pub(crate) struct Level {
    nodes: Vec<Node>,
    exact: HashMap<String, HashMap<String, usize>>,
    any: HashMap<String, usize>,
    globs: Vec<usize>,
}

impl Level {
    /// Adds a descriptor (the caller has refused duplicates).
    pub fn push(&mut self, node: Node) {
        let i = self.nodes.len();
        match &node.matching {
            Match::Exact(value) => {
                self.exact
                    .entry(node.key.clone())
                    .or_default()
                    .insert(value.clone(), i);
            }
            Match::Glob { .. } => self.globs.push(i),
            Match::Any => {
                self.any.insert(node.key.clone(), i);
            }
        }
        self.nodes.push(node);
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let exact = self.exact.get(key).and_then(|values| values.get(value));
        let glob = || {
            self.globs.iter().copied().find(|i| {
                self.nodes.get(*i).is_some_and(|n| {
                    n.key == key
                        && matches!(&n.matching, Match::Glob { pattern, .. } if glob(pattern, value))
                })
            })
        };
        let i = exact
            .copied()
            .or_else(glob)
            .or_else(|| self.any.get(key).copied())?;
        self.nodes.get(i)
    }
}

/// What a `rate_limit` block says.
#[derive(Debug)]
pub(crate) struct Limit {
    /// The `name`, else the descriptor's path (`message_type_marketing.to_number`): the rule
    /// in metrics and headers, and the `name` of `current_limit`.
    pub label: String,
    /// The `name`, which `replaces` refers to.
    pub name: Option<String>,
    pub replaces: Vec<String>,
    /// `None` when `unlimited`.
    pub rate: Option<Rate>,
    pub shadow: bool,
    /// The engine's rule for `rate` (none when unlimited).
    pub rule: Option<Arc<RuleSpec>>,
}

/// A limit of `requests_per_unit` per `period` (`unit` x `unit_multiplier`), enforced by `algo`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub period: Duration,
    pub algo: Algo,
    pub burst: Option<u64>,
    /// The most one request may cost: `burst` for gcra and bucket, else `requests_per_unit`.
    pub capacity: u64,
    /// `grant`: spent from chunks leased from the store, as a hot key's rule.
    pub grant: Option<GrantSpec>,
}

impl Rate {
    /// The engine's rule for this rate, named `label`. A limit of 0, which no rule states, is
    /// a rule of 1 whose checks are blocked ([`Rate::blocked`]): the engine refuses them
    /// without a store call and never reads the limit.
    pub fn rule(&self, label: &str, shadow: bool) -> Result<RuleSpec, String> {
        RuleSpec::rate(
            label,
            self.algo,
            u64::from(self.requests_per_unit.max(1)),
            self.period,
            self.burst,
            self.grant,
            shadow,
        )
    }

    /// No request passes it: `requests_per_unit: 0`. (A cost above the capacity, which no
    /// request passes either, the engine finds itself.)
    pub fn blocked(&self) -> bool {
        self.requests_per_unit == 0
    }
}

pub(crate) fn unit_seconds(unit: Unit) -> u64 {
    match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3600,
        Unit::Day => 86_400,
        // Never built: the file and the request overrides are read into the four above.
        _ => 0,
    }
}

/// The limit a request descriptor meets, and the store key it counts on.
pub(crate) struct Found<'a> {
    pub limit: &'a Arc<Limit>,
    /// `k=v` for each entry, `k~pattern` for a shared wildcard, escaped.
    pub path: String,
}

/// Walks `entries` down from `root` (see the module's documentation).
pub(crate) fn lookup<'a>(root: &'a Level, entries: &[Entry]) -> Option<Found<'a>> {
    let mut level = root;
    let mut path = String::new();
    let last = entries.len().checked_sub(1)?;
    for (i, entry) in entries.iter().enumerate() {
        let node = level.find(&entry.key, &entry.value)?;
        push_segment(&mut path, &entry.key, &node.matching, &entry.value);
        if i == last {
            return node.limit.as_ref().map(|limit| Found { limit, path });
        }
        if node.children.is_empty() {
            return None;
        }
        level = &node.children;
    }
    None
}

/// The path of a descriptor given its own limit (`limit` in the request): every entry as sent.
pub(crate) fn entries_path(entries: &[Entry]) -> String {
    let mut path = String::new();
    for e in entries {
        push_segment(&mut path, &e.key, &Match::Any, &e.value);
    }
    path
}

fn push_segment(path: &mut String, key: &str, matching: &Match, value: &str) {
    if !path.is_empty() {
        path.push(':');
    }
    escape_into(path, key);
    match matching {
        Match::Glob {
            pattern,
            shared: true,
        } => {
            path.push('~');
            escape_into(path, pattern);
        }
        _ => {
            path.push('=');
            escape_into(path, value);
        }
    }
}

/// The store key: `rls:<domain>:<path>#<algorithm>`. The algorithm is part of it because the
/// module keeps one algorithm's state per key: a reload that changes it starts a new count
/// instead of failing on the old key.
pub(crate) fn store_key(domain: &str, path: &str, tag: &str) -> Vec<u8> {
    let mut key = String::with_capacity(domain.len().saturating_add(path.len()).saturating_add(16));
    key.push_str("rls:");
    escape_into(&mut key, domain);
    key.push(':');
    key.push_str(path);
    key.push('#');
    key.push_str(tag);
    key.into_bytes()
}

/// Escapes the key's separators, so no two descriptors can write the same key.
fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '=' => out.push_str("%3D"),
            '~' => out.push_str("%7E"),
            '#' => out.push_str("%23"),
            _ => out.push(c),
        }
    }
}

/// `*` matches any run of characters (none included); everything else matches itself.
fn glob(pattern: &str, value: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    let (mut pi, mut vi) = (0usize, 0usize);
    // The last star seen and the value position it was tried at: on a mismatch, that star
    // takes one more character. Linear in practice, O(len(p) * len(v)) at worst.
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        match (p.get(pi), v.get(vi)) {
            (Some('*'), _) => {
                star = Some((pi, vi));
                pi = pi.saturating_add(1);
            }
            (Some(a), Some(b)) if a == b => {
                pi = pi.saturating_add(1);
                vi = vi.saturating_add(1);
            }
            _ => match star {
                Some((sp, sv)) => {
                    pi = sp.saturating_add(1);
                    vi = sv.saturating_add(1);
                    star = Some((sp, vi));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|c| *c == '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(glob("value*", "value1"));
        assert!(glob("value*", "value"));
        assert!(!glob("value*", "valu"));
        assert!(glob("/api*v1", "/api/users/v1"));
        assert!(!glob("/api*v1", "/api/users/v2"));
        assert!(glob("svc*ep*rpc", "svc-a-ep-b-rpc"));
        assert!(glob("*", ""));
        assert!(!glob("a", "ab"));
        assert!(glob("a**b", "ab"));
    }

    #[test]
    fn keys_escape_their_separators() {
        let one = store_key("d", &entries_path(&[entry("a:b", "c")]), "window");
        let two = store_key("d", &entries_path(&[entry("a", "b:c")]), "window");
        assert_ne!(one, two);
        assert_eq!(one, b"rls:d:a%3Ab=c#window".to_vec());
    }

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }
}
