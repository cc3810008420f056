//! The gateway as a state machine without I/O (`clients/CONTRACT.md` section 9): given a
//! request and the time, [`Engine::begin`] answers a verdict or the store calls to make; given
//! their replies, [`Engine::resume`] answers the next step; after the response, the request's
//! [`Holdings`] answers the calls that settle and release, and on a tick the renewals due. A
//! driver (the tower layer, a Python or Node binding, `rl-gateway`) only moves bytes.
//!
//! One request, in order: the route and the caller's keys; the negative cache; the breaker;
//! then the store, phase by phase (grant rules from their local chunks, semaphores, `settle`
//! rules with `RESERVE`, one `RL.MULTI`, the shadow rules); then, for `durable` rules, `WAIT`.
//! Every step after the first carries the same deadline, `store.timeout` from the start.

mod answer;
mod capacities;
mod checks;
mod count;
mod ctx;
mod flow;
mod holdings;
mod verdict;

pub use crate::allocation::{AllocationReport, AllocationUse};
pub use capacities::Slot;
pub use checks::{Check, CheckOutcome, CheckSource};
pub use flow::Pending;
pub use holdings::Holdings;
pub use verdict::{LogLevel, LogRecord, Verdict, VerdictKind};

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use rl_core::rule::Rule;

use crate::allocation::Allocations;
use crate::breaker::Breaker;
use crate::cache::NegativeCache;
use crate::fallback::Fallback;
use crate::identity::Headers;
use crate::metrics::{Event, Metrics};
use crate::policy::{Policy, PolicyError, Routed, DEFAULT_NAME};
use crate::rng::Rng;
use crate::table::{Table, TableUse};
use crate::time::Instant;
use crate::wire::{Args, Reply};
use capacities::Capacities;
use rl_core::allocate::Allotment;

/// The units the backend reports it actually used, for `settle` rules.
pub const ACTUAL_COST: &str = "x-actual-cost";
/// A caller's key for a retried request, used as the reservation id of `settle` rules.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const RETRY_AFTER: &str = "Retry-After";

/// What the engine needs to know about a request.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path without its query.
    pub path: &'a str,
    /// `Sync`, so that a request can be held across an `await` of a driver that is `Send`.
    pub headers: &'a (dyn Headers + Sync),
    /// The address the connection came from.
    pub peer: Option<IpAddr>,
    /// Who the application says the caller is; `None`: the policy's identity headers say.
    pub caller: Option<&'a Caller>,
    /// The framework routes paths without case (express by default), so the route is matched
    /// without case too: `/CHECKOUT` reaches the handler of `/checkout`, and its rules.
    pub case_insensitive: bool,
}

/// The caller as the application resolved it (an API key looked up, a token verified), in
/// place of the policy's `identity` headers. A part left `None` is read from its header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub user: Option<String>,
    pub tenant: Option<String>,
}

/// One store call: the module's arguments, and the key that routes it in a cluster (a `WAIT`
/// carries a key of the slot whose primary must answer it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub args: Args,
    pub key: Vec<u8>,
}

/// How one call ended, as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The store's reply; a server error is `Reply::Error` with its text, code first.
    Reply(Reply),
    /// No reply by the step's deadline.
    Timeout,
    /// No reply at all: a refused or dropped connection, an I/O error.
    Failed(String),
    /// The driver could not wait for the reply because its own process is saturated (an
    /// event loop running later than the deadline), not because the store is slow: the
    /// request is shed with 503 and the breaker does not count it.
    Overloaded,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send these calls, in order, on one connection, and resume with one answer each
    /// (missing answers count as timeouts). Those not answered by `deadline` are timeouts.
    Calls { calls: Vec<Call>, deadline: Instant },
    /// Another request is refilling a chunk this one needs: resume with no answers at `until`.
    Wait { until: Instant },
    /// The verdict. Send its `background` calls after answering; their replies do not matter.
    Done(Verdict),
}

/// Choices a driver makes once, beside the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Also send `X-RateLimit-Limit/Remaining/Reset` for the most constraining rule.
    pub legacy_headers: bool,
    /// The share of admissions whose decision is logged (0 to 1); every other decision is.
    pub log_sample: f64,
    /// The most decision records written a second (the rest are counted, not written): a
    /// flood of refusals must not become a flood of log lines.
    pub log_per_second: u64,
    /// Seeds the engine's randomness (jitter, ramp, sampling, ids).
    pub seed: u64,
    /// The bytes each table may hold (the negative cache, the chunks, each route's fallback
    /// limiters), besides the policy's `negative_cache.entries`: whatever the callers' number
    /// or the size of their identities, the process does not grow past them.
    pub table_bytes: usize,
    /// The store is a Redis Cluster: keyed checks whose keys live in several hash slots are
    /// decided by one `RL.MULTI` per slot, each all or nothing (an HTTP route's rules share a
    /// hash tag, which the policy checks).
    pub cluster: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            legacy_headers: false,
            log_sample: 0.001,
            log_per_second: 100,
            seed: 0,
            table_bytes: DEFAULT_TABLE_BYTES,
            cluster: false,
        }
    }
}

/// Each table's byte budget unless the driver says otherwise: 100,000 negative-cache entries
/// of 200-byte keys fit in it.
pub const DEFAULT_TABLE_BYTES: usize = 32 << 20;

/// A missed call is the driver's overload when its loop ran late by this fraction of the
/// call's time (a quarter)...
const OVERLOAD_SHARE: u32 = 4;
/// ...and by at least this much.
const MIN_LATENESS: Duration = Duration::from_millis(5);

/// Separates the decision ids' sequence from the decisions' own for one seed.
const IDS_SEED: u64 = 0x5EED_0F1D_5EED_0F1D;
/// Separates the tenants' hash from both.
const TENANT_SEED: u64 = 0x7E4A_0175_7E4A_0175;

/// The engine: one per process and store, shared by every request.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    policy: ArcSwap<Policy>,
    // Serializes reloads, so two racing reloads cannot both pass the version check.
    reload: Mutex<()>,
    cache: NegativeCache,
    breaker: Breaker,
    metrics: Arc<Metrics>,
    // One local limiter per route, rebuilt when a reload changes the route's fallback rule.
    fallbacks: Mutex<HashMap<String, (Rule, Arc<Fallback>)>>,
    // The chunk leased for each (grant rule, key).
    chunks: Mutex<Table<Chunk>>,
    // Sizes the tables; from the policy the engine was built with.
    entries: NonZeroUsize,
    options: Options,
    rng: Rng,
    // The policy's capacities, swapped whole at a reload; and the keyed hash a tenant's
    // identity enters their fair share as.
    capacities: ArcSwap<Capacities>,
    // What this gateway enforces of each global key, and the demand it reports.
    allocations: Arc<Allocations>,
    tenant_hash: foldhash::fast::FixedState,
    // Decision ids, apart from `rng` so that logging draws nothing from the sequence the
    // decisions use: a SplitMix64 sequence never repeats within 2^64 draws.
    ids: Rng,
    // The records written in the current second: (second, count).
    records: Mutex<(u64, u64)>,
}

/// Tokens leased with `RL.GRANT`, spent locally until `until`.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    tokens: u64,
    until: Option<Instant>,
    /// Bumped by each refill, so a token is given back only to the chunk it came from.
    generation: u64,
    /// When a request began refilling it; others wait for that refill rather than send their
    /// own (one refill in flight per key).
    refilling: Option<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a lock leaves a consistent table: keep serving.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Engine {
    /// The negative cache, the chunk and fallback tables and the breaker are sized from this
    /// policy; a reload changes rules and routes, not those.
    pub fn new(policy: Policy, metrics: Arc<Metrics>, options: Options) -> Engine {
        if !policy.for_checks {
            metrics.policy_loaded(&policy);
        }
        let entries = NonZeroUsize::new(policy.negative_cache.entries).unwrap_or(NonZeroUsize::MIN);
        let capacities = Capacities::of(&policy, &Capacities::default(), options.seed);
        metrics.capacities(capacities.listed());
        let allocations = Arc::new(Allocations::new(entries, options.table_bytes));
        metrics.allocations(Arc::clone(&allocations));
        Engine {
            shared: Arc::new(Shared {
                cache: NegativeCache::from_spec(&policy.negative_cache, options.table_bytes),
                breaker: Breaker::from_spec(&policy.store),
                policy: ArcSwap::from_pointee(policy),
                reload: Mutex::new(()),
                metrics,
                fallbacks: Mutex::new(HashMap::new()),
                chunks: Mutex::new(Table::new(entries, options.table_bytes)),
                entries,
                options: Options {
                    log_sample: if options.log_sample.is_nan() {
                        0.0
                    } else {
                        options.log_sample.clamp(0.0, 1.0)
                    },
                    ..options
                },
                rng: Rng::new(options.seed),
                capacities: ArcSwap::from_pointee(capacities),
                allocations,
                tenant_hash: foldhash::fast::FixedState::with_seed(options.seed ^ TENANT_SEED),
                ids: Rng::new(options.seed ^ IDS_SEED),
                records: Mutex::new((0, 0)),
            }),
        }
    }

    /// The reports due to the home store at `now` (section 15): send each as `RL.ALLOCATE`,
    /// then give its answer to [`Engine::allocated`].
    pub fn allocation_reports(&self, now: Instant) -> Vec<AllocationReport> {
        self.shared.allocations.due(now)
    }

    /// The home store's answer to `report` (`RL.ALLOCATE`'s reply), or `None` when it could
    /// not answer (the key keeps its allocation until the lease ends).
    pub fn allocated(&self, report: &AllocationReport, answer: Option<Allotment>) {
        self.shared.allocations.answered(report, answer);
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.shared.policy.load_full()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Puts a new snapshot in force, unless its version is not higher than the one in force;
    /// on any error the snapshot in force stays.
    pub fn reload(&self, next: Policy) -> Result<Arc<Policy>, PolicyError> {
        let _serial = lock(&self.shared.reload);
        let current = self.shared.policy.load();
        if next.version <= current.version {
            return Err(PolicyError::Stale {
                current: current.version,
                offered: next.version,
            });
        }
        let next = Arc::new(next);
        let capacities = Capacities::of(
            &next,
            &self.shared.capacities.load(),
            self.shared.options.seed,
        );
        self.shared.metrics.capacities(capacities.listed());
        self.shared.capacities.store(Arc::new(capacities));
        self.shared.policy.store(Arc::clone(&next));
        if !next.for_checks {
            self.shared.metrics.policy_loaded(&next);
        }
        Ok(next)
    }

    /// Starts deciding a request at `now`: its state, and the first step.
    pub fn begin(&self, request: &Request<'_>, now: Instant) -> (Pending, Step) {
        let (mut pending, step) = Pending::begin(Arc::clone(&self.shared), request, now);
        let step = pending.draw(step, now);
        (pending, self.shared.seal(step, now))
    }

    /// Starts deciding keyed checks at `now` under the route named `route` (its posture, its
    /// name in metrics and records): a route of the policy, or its default when that is the
    /// name (a policy made by [`Policy::for_checks`] names its default). See [`Check`].
    pub fn check(&self, route: &str, checks: Vec<Check>, now: Instant) -> (Pending, Step) {
        let (pending, step) = Pending::begin_checks(Arc::clone(&self.shared), route, checks, now);
        (pending, self.shared.seal(step, now))
    }

    /// Feeds the answers to the last step's calls (none after a `Wait`) and answers the next
    /// step.
    pub fn resume(&self, pending: &mut Pending, answers: Vec<Answer>, now: Instant) -> Step {
        let step = match pending.parked() {
            Some(verdict) => Step::Done(verdict),
            None => pending.resume(answers, now),
        };
        let step = pending.draw(step, now);
        self.shared.seal(step, now)
    }

    /// How a store call that missed its deadline ended, from how late the driver's own loop
    /// ran *while the request ran* (`late`) and the time the call had (`window`): the
    /// gateway's own overload ([`Answer::Overloaded`]: shed, and not the breaker's failure)
    /// when the loop ran late by a quarter of that time, and by at least 5 ms (timers have a
    /// millisecond's granularity and a busy loop runs them a few late); otherwise a timeout.
    /// Lateness from before the request arrived is not the request's: it is not counted here.
    pub fn missed(&self, window: Duration, late: Duration) -> Answer {
        if late >= (window / OVERLOAD_SHARE).max(MIN_LATENESS) {
            Answer::Overloaded
        } else {
            Answer::Timeout
        }
    }

    /// Whether a driver sheds a new request before deciding it ([`Engine::shed`]): its loop
    /// is stalled now (the tick now due is overdue by `stalled`) by two store timeouts or more,
    /// so the request would miss its deadline before its first call was sent. A stall the
    /// loop has already recovered from sheds nothing.
    pub fn saturated(&self, stalled: Duration) -> bool {
        stalled >= self.shared.policy.load().store.timeout.saturating_mul(2)
    }

    /// The verdict for a request the driver sheds before deciding it, because its own process
    /// is saturated: 503 with the gateway's own reason, counted `shed`, no store call and no
    /// breaker failure. A request no route matches, when the default has no rules, passes as it
    /// would anyway.
    pub fn shed(&self, request: &Request<'_>, now: Instant) -> Verdict {
        let policy = self.shared.policy.load_full();
        let path = crate::policy::decode_unreserved(request.path);
        let verdict = match policy.route(request.method, &path, request.case_insensitive) {
            Routed::Route { route, .. } => {
                if route.is_default() {
                    self.shared.metrics.record(Event::Unmatched);
                }
                if route.exempt() {
                    self.shared.exempt(&policy, route)
                } else {
                    self.shared.shed(&policy, route)
                }
            }
            Routed::Unmatched => {
                self.shared.metrics.record(Event::Unmatched);
                Verdict::unmatched(policy.version)
            }
            Routed::BadPath(error) => Verdict::bad_path(policy.version, error),
        };
        match self.shared.seal(Step::Done(verdict), now) {
            Step::Done(verdict) => verdict,
            // `seal` changes only the records of a verdict.
            _ => Verdict::pass(policy.version),
        }
    }

    /// The verdict for a request admitted earlier (`admitted`) and still running when the
    /// driver stops serving, at the end of its drain: 503 with the gateway's own reason,
    /// `Retry-After`, the admission's `RateLimit` fields, and a decision record with reason
    /// `drain`. The driver ends what the request holds as for any request that ends without a
    /// response ([`Holdings::finish`]).
    pub fn drained(&self, admitted: &Verdict, now: Instant) -> Verdict {
        let policy = self.shared.policy.load_full();
        let mut verdict = self.shared.drained(&policy, admitted);
        self.shared.stamp(&mut verdict, now);
        verdict
    }

    /// What the engine's tables hold now (each at most `Options::table_bytes`; the fallback
    /// limiters summed over routes, each route's within the budget).
    pub fn tables(&self) -> Tables {
        let fallback = lock(&self.shared.fallbacks)
            .values()
            .fold(TableUse::default(), |sum, (_, f)| sum + f.usage());
        Tables {
            negative_cache: self.shared.cache.usage(),
            chunks: lock(&self.shared.chunks).usage(),
            fallback,
        }
    }
}

/// The engine's local tables, as [`Engine::tables`] measures them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tables {
    pub negative_cache: TableUse,
    pub chunks: TableUse,
    pub fallback: TableUse,
}

impl Shared {
    fn fallback(&self, route: &str, rule: Rule) -> Arc<Fallback> {
        let mut map = lock(&self.fallbacks);
        match map.get(route) {
            Some((r, f)) if *r == rule => Arc::clone(f),
            _ => {
                let f = Arc::new(Fallback::new(rule, self.entries, self.options.table_bytes));
                map.insert(route.to_string(), (rule, Arc::clone(&f)));
                f
            }
        }
    }

    /// Completes a verdict's decision records: the `unmatched` record of a request the default
    /// decided, then [`Shared::stamp`].
    fn seal(&self, step: Step, now: Instant) -> Step {
        let Step::Done(mut verdict) = step else {
            return step;
        };
        if verdict.route.as_deref() == Some(DEFAULT_NAME) && verdict.checks.is_empty() {
            verdict
                .log
                .insert(0, LogRecord::unmatched(verdict.policy_version));
        }
        self.stamp(&mut verdict, now);
        Step::Done(verdict)
    }

    /// The bound of records a second, past which a verdict's records are dropped whole and
    /// counted; then the plan and a decision id on each record kept.
    fn stamp(&self, verdict: &mut Verdict, now: Instant) {
        let bounded = verdict.log.iter().filter(|r| r.bounded()).count() as u64;
        if bounded > 0 && !self.may_write(bounded, now) {
            verdict.log.retain(|r| !r.bounded());
            self.metrics.record(Event::RecordsDropped(bounded));
        }
        if verdict.log.is_empty() {
            return;
        }
        let decision = format!("{:016x}", self.ids.u64());
        let plan = verdict.plan.as_deref().unwrap_or_default();
        for record in &mut verdict.log {
            record.decision.clone_from(&decision);
            plan.clone_into(&mut record.plan);
        }
    }

    /// Whether `n` more records fit in this second's bound, counting them if they do.
    fn may_write(&self, n: u64, now: Instant) -> bool {
        let second = now.as_micros() / 1_000_000;
        let mut records = lock(&self.records);
        if records.0 != second {
            *records = (second, 0);
        }
        let total = records.1.saturating_add(n);
        if total > self.options.log_per_second {
            return false;
        }
        records.1 = total;
        true
    }

    fn timeout(&self, policy: &Policy) -> Duration {
        policy.store.timeout
    }
}
