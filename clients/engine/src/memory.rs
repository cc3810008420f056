//! A store in memory that answers the engine's calls with the core's own arithmetic (the
//! [`Limiter`] the module runs), so a decision here is the decision the module would take at
//! the same instant: for tests, offline replay, and one process's own limits without Redis.
//!
//! It speaks the module's commands as argument vectors and replies RESP2 shapes, errors
//! included. What it cannot be is shared: each process has its own, and nothing persists.
//!
//! It is bounded in bytes, as Redis is by `maxmemory`: past its budget it first drops the keys
//! whose state is full again (forgetting them changes no decision), then, as Redis's
//! `allkeys-lru` does, the least recently used ones, whose debits are then forgotten. Callers
//! choose a budget that holds their active keys; [`MemoryStore::evicted`] counts what went.

use std::mem::size_of;

use lru::LruCache;

use rl_core::deadline;
use rl_core::error::Error as CoreError;
use rl_core::limiter::Limiter;
use rl_core::multi::decide;
use rl_core::protocol::command;
use rl_core::rate::Decision;
use rl_core::request::admit::parse_admit;
use rl_core::request::grant::parse_grant;
use rl_core::request::lease::{parse_acquire, parse_release, parse_renew};
use rl_core::request::multi::parse_multi;
use rl_core::request::settle::parse_settle;
use rl_core::rule::{Algo, Rule};

use crate::wire::Reply;

/// The budget of [`MemoryStore::new`].
pub const DEFAULT_MEMORY_BYTES: usize = 256 << 20;

/// What a key costs besides its bytes and its limiter's heap: the limiter's struct, the key's
/// `Vec`, the list node's links and the hash table's slot, rounded up.
const OVERHEAD: usize = size_of::<Limiter>() + 64;

/// The least time between two sweeps for expired keys forced by the budget, so a flood of
/// live keys costs one scan of the table a second, not one per call.
const SWEEP_EVERY_US: u64 = 1_000_000;

/// Keys and their limiters, each expiring when its state is full again, as in the module.
pub struct MemoryStore {
    keys: LruCache<Vec<u8>, Limiter>,
    bytes: usize,
    max_bytes: usize,
    evicted: u64,
    swept_at_us: Option<u64>,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::with_budget(DEFAULT_MEMORY_BYTES)
    }
}

fn cost(key: &[u8], limiter: &Limiter) -> usize {
    key.len()
        .saturating_add(limiter.heap_bytes())
        .saturating_add(OVERHEAD)
}

fn int(n: u64) -> Reply {
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn decision(d: &Decision) -> Reply {
    Reply::Array(vec![
        Reply::Int(i64::from(d.allowed)),
        int(d.remaining),
        int(d.retry_after_ms()),
        int(d.reset_after_ms()),
        int(d.capacity),
    ])
}

fn error(e: CoreError) -> Reply {
    Reply::Error(e.to_string())
}

/// The request, unless its `DEADLINE` has passed at `now_us`: then the module's refusal.
fn on_time<R>(request: R, deadline_ms: Option<u64>, now_us: u64) -> Result<R, CoreError> {
    deadline::check(deadline_ms, now_us).map(|()| request)
}

impl MemoryStore {
    /// A store of [`DEFAULT_MEMORY_BYTES`].
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store that holds at most `max_bytes` of keys and state (each key counted as its
    /// bytes, its limiter's and a fixed overhead). A single key larger than the budget is
    /// still kept, alone, so a call is never refused for its size.
    pub fn with_budget(max_bytes: usize) -> MemoryStore {
        MemoryStore {
            keys: LruCache::unbounded(),
            bytes: 0,
            max_bytes,
            evicted: 0,
            swept_at_us: None,
        }
    }

    /// Keys held now (expired ones are dropped as they are touched or by [`MemoryStore::sweep`]).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The bytes held now, as the budget counts them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Live keys dropped to stay within the budget since the store was made.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Drops every key expired at `now_us`: a long-running process calls it now and then, so
    /// memory follows the active keys.
    pub fn sweep(&mut self, now_us: u64) {
        let now_ms = now_us / 1000;
        let expired: Vec<Vec<u8>> = self
            .keys
            .iter()
            .filter(|(_, l)| l.expire_at_ms() <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
        self.swept_at_us = Some(now_us);
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.keys.pop(key) {
            self.bytes = self.bytes.saturating_sub(cost(key, &old));
        }
    }

    /// Brings the store back within its budget: expired keys first (at most one scan a
    /// second), then the least recently used, never the key just written.
    fn fit(&mut self, now_us: u64) {
        if self.bytes <= self.max_bytes {
            return;
        }
        let due = self
            .swept_at_us
            .is_none_or(|at| now_us.saturating_sub(at) >= SWEEP_EVERY_US);
        if due {
            self.sweep(now_us);
        }
        while self.bytes > self.max_bytes && self.keys.len() > 1 {
            let Some((key, old)) = self.keys.pop_lru() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(cost(&key, &old));
            if old.expire_at_ms() > now_us / 1000 {
                self.evicted = self.evicted.saturating_add(1);
            }
        }
    }

    /// Answers one command at `now_us` (the module's clock: Unix microseconds).
    pub fn call(&mut self, args: &[Vec<u8>], now_us: u64) -> Reply {
        let Some((name, rest)) = args.split_first() else {
            return Reply::Error("ERR empty command".into());
        };
        let name = String::from_utf8_lossy(name).to_ascii_uppercase();
        let key = rest.first().cloned().unwrap_or_default();
        let tail = rest.get(1..).unwrap_or_default();
        let arity = |cmd: &'static str| Reply::Error(CoreError::Arity(cmd).to_string());
        match name.as_str() {
            command::ADMIT if rest.is_empty() => arity(command::ADMIT),
            command::ADMIT => self.admit(key, tail, now_us),
            command::MULTI => self.multi(args, now_us),
            command::GRANT if rest.is_empty() => arity(command::GRANT),
            command::GRANT => self.grant(key, tail, now_us),
            command::ACQUIRE if rest.is_empty() => arity(command::ACQUIRE),
            command::ACQUIRE => self.acquire(key, tail, now_us),
            command::RELEASE | command::RENEW if rest.is_empty() => arity(command::RELEASE),
            command::RELEASE => self.change(key, tail, None, now_us),
            command::RENEW => match parse_renew(tail) {
                Ok((holder, lease)) => {
                    let holder = holder.to_vec();
                    self.change(key, &[holder], Some(lease), now_us)
                }
                Err(e) => error(e),
            },
            command::SETTLE if rest.is_empty() => arity(command::SETTLE),
            command::SETTLE => self.settle(key, tail, now_us),
            // No replica ever acknowledges a write made here.
            "WAIT" => Reply::Int(0),
            _ => Reply::Error(format!(
                "ERR unknown command '{name}' for the in-memory store"
            )),
        }
    }

    /// The key's limiter, or a fresh one of `fresh` when the key is empty or expired.
    fn load(&mut self, key: &[u8], fresh: Option<(Algo, Rule)>, now_us: u64) -> Option<Limiter> {
        let live = self
            .keys
            .get(key)
            .filter(|l| l.expire_at_ms() > now_us / 1000)
            .cloned();
        if live.is_none() {
            self.remove(key);
        }
        live.or_else(|| fresh.map(|(algo, rule)| Limiter::new(algo, rule)))
    }

    /// Commits a changed limiter: it goes when it equals an absent key.
    fn keep(&mut self, key: Vec<u8>, limiter: Limiter, now_us: u64) {
        self.remove(&key);
        if !limiter.is_void() {
            self.bytes = self.bytes.saturating_add(cost(&key, &limiter));
            self.keys.put(key, limiter);
            self.fit(now_us);
        }
    }

    fn admit(&mut self, key: Vec<u8>, args: &[Vec<u8>], now_us: u64) -> Reply {
        let req = match parse_admit(args).and_then(|r| on_time(r, r.deadline_ms, now_us)) {
            Ok(r) => r,
            Err(e) => return error(e),
        };
        let ask = req.ask;
        let Some(mut l) = self.load(&key, Some((ask.algo, ask.rule)), now_us) else {
            return decision(&Decision::refused(&ask.rule));
        };
        let decided = match req.reserve {
            None => l
                .admit_ask(ask, now_us)
                .map(|d| (d, d.allowed && !ask.dry_run)),
            Some(r) => l.reserve_ask(ask, r.id, r.keep_us, now_us),
        };
        match decided {
            Ok((d, changed)) => {
                if changed {
                    self.keep(key, l, now_us);
                }
                decision(&d)
            }
            Err(e) => error(e),
        }
    }

    /// `args` from the command's name on, as the module's parser reads them.
    fn multi(&mut self, args: &[Vec<u8>], now_us: u64) -> Reply {
        let req = match parse_multi(args) {
            Ok(r) => r,
            Err(e) => return error(e),
        };
        if let Err(e) = deadline::check(req.deadline_ms, now_us) {
            return error(e);
        }
        let keys: Vec<Vec<u8>> = req
            .key_positions
            .clone()
            .filter_map(|i| args.get(i).cloned())
            .collect();
        let mut limiters = Vec::with_capacity(keys.len());
        for (key, r) in keys.iter().zip(&req.rules) {
            match self.load(key, Some((r.algo, r.rule)), now_us) {
                Some(l) => limiters.push(l),
                None => return error(CoreError::Arity(command::MULTI)),
            }
        }
        let mut refs: Vec<&mut Limiter> = limiters.iter_mut().collect();
        let (allowed, decisions) = match decide(&mut refs, &req.rules, now_us, req.dry_run) {
            Ok(d) => d,
            Err(e) => return error(e),
        };
        if allowed && !req.dry_run {
            for (key, l) in keys.into_iter().zip(limiters) {
                self.keep(key, l, now_us);
            }
        }
        let denied_by = decisions
            .iter()
            .position(|d| !d.allowed)
            .and_then(|i| req.rules.get(i))
            .map_or(Reply::Nil, |r| Reply::Bulk(r.name.to_vec()));
        let retry = decisions
            .iter()
            .filter(|d| !d.allowed)
            .map(Decision::retry_after_ms)
            .max()
            .unwrap_or(0);
        let rules = decisions
            .iter()
            .zip(&req.rules)
            .map(|(d, r)| {
                Reply::Array(vec![
                    Reply::Bulk(r.name.to_vec()),
                    int(d.remaining),
                    int(d.reset_after_ms()),
                ])
            })
            .collect();
        Reply::Array(vec![
            Reply::Int(i64::from(allowed)),
            denied_by,
            int(retry),
            Reply::Array(rules),
        ])
    }

    fn grant(&mut self, key: Vec<u8>, args: &[Vec<u8>], now_us: u64) -> Reply {
        let req = match parse_grant(args).and_then(|r| on_time(r, r.deadline_ms, now_us)) {
            Ok(r) => r,
            Err(e) => return error(e),
        };
        let Some(mut l) = self.load(&key, Some((req.algo, req.rule)), now_us) else {
            return error(CoreError::Arity(command::GRANT));
        };
        match l.grant(req.algo, req.rule, req.want, req.ttl_us, now_us) {
            Ok(g) => {
                if g.granted > 0 {
                    self.keep(key, l, now_us);
                }
                Reply::Array(vec![
                    int(g.granted),
                    int(g.remaining),
                    int(g.valid_us / 1000),
                    int(g.retry_after_us.div_ceil(1000)),
                ])
            }
            Err(e) => error(e),
        }
    }

    fn acquire(&mut self, key: Vec<u8>, args: &[Vec<u8>], now_us: u64) -> Reply {
        let (rule, holder) =
            match parse_acquire(args).and_then(|r| on_time(r, r.deadline_ms, now_us)) {
                Ok(r) => (r.rule, r.holder),
                Err(e) => return error(e),
            };
        let Some(mut l) = self.load(&key, Some((Algo::Semaphore, rule)), now_us) else {
            return error(CoreError::Arity(command::ACQUIRE));
        };
        match l.acquire(rule, holder, now_us, false) {
            Ok(a) => {
                if a.acquired {
                    self.keep(key, l, now_us);
                }
                Reply::Array(vec![
                    Reply::Int(i64::from(a.acquired)),
                    if a.holder.is_empty() {
                        Reply::Nil
                    } else {
                        Reply::Bulk(a.holder)
                    },
                    int(a.in_flight),
                    int(a.retry_after_us.div_ceil(1000)),
                ])
            }
            Err(e) => error(e),
        }
    }

    /// `RL.RELEASE` (no lease) or `RL.RENEW` (the new lease): 1 done, 0 not held.
    fn change(&mut self, key: Vec<u8>, args: &[Vec<u8>], lease: Option<u64>, now_us: u64) -> Reply {
        let holder = match lease {
            Some(_) => args.first().map(Vec::as_slice).unwrap_or_default(),
            None => match parse_release(args) {
                Ok(h) => h,
                Err(e) => return error(e),
            },
        };
        let Some(mut l) = self.load(&key, None, now_us) else {
            return Reply::Int(0);
        };
        let done = match lease {
            None => l.release(holder, now_us),
            Some(lease) => l.renew(holder, lease, now_us),
        };
        match done {
            Ok(done) => {
                if done {
                    self.keep(key, l, now_us);
                }
                Reply::Int(i64::from(done))
            }
            Err(e) => error(e),
        }
    }

    fn settle(&mut self, key: Vec<u8>, args: &[Vec<u8>], now_us: u64) -> Reply {
        let settle = match parse_settle(args) {
            Ok(r) => r,
            Err(e) => return error(e),
        };
        let Some(mut l) = self.load(&key, None, now_us) else {
            return Reply::Nil;
        };
        match l.settle_then(settle.id, settle.actual, now_us, settle.forget) {
            Some((s, changed)) => {
                if changed {
                    self.keep(key, l, now_us);
                }
                Reply::Array(vec![Reply::Int(s.delta), int(s.remaining)])
            }
            None => Reply::Nil,
        }
    }
}
