//! The redis-rl gateway engine (`clients/engine`) as a Node addon. It does no I/O: the
//! JavaScript driver (`src/gateway/`) sends the calls the engine asks for with the
//! application's Redis client and hands the answers back. Replies and answers cross in the
//! JSON shapes of `clients/vectors/README.md` (`{"reply": v}`, `{"error": text}`,
//! `{"fail": "timeout" | "overloaded" | text}`), so the driver, the scenarios and the memory store speak one
//! format.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use rl_engine::memory::MemoryStore as CoreStore;
use rl_engine::metrics::{Event, MetricsHook};
use rl_engine::{Answer, Caller, Instant, Metrics, Mode, Options, Policy, Request, Step};
use serde_json::Value;

mod allocation;
mod convert;
mod events;
pub mod headers;

use convert::{
    answer_of, calls_out, checks_in, duration, instant, json_of, read_headers, reason, step_out,
    verdict_out, CallOut, CheckIn, StepOut, VerdictOut,
};
use events::{EventOut, Queue};

/// The policy document's version, or its refusal with the exact message of the contract.
#[napi]
pub fn load_policy(text: String) -> Result<f64> {
    Policy::from_json(&text)
        .map(|p| p.version as f64)
        .map_err(reason)
}

#[napi(object)]
pub struct EngineOptions {
    pub legacy_headers: Option<bool>,
    /// The share of admissions recorded (every other decision is); 0.001 by default.
    pub log_sample: Option<f64>,
    /// The most decision records a second (the rest are counted, not written); 100 by default.
    pub log_per_second: Option<f64>,
    /// Seeds the engine's randomness (jitter, sampling, holder ids); an integer below 2^53.
    pub seed: Option<f64>,
    /// Keeps every metrics event for `events()` (the application's hook).
    pub events: Option<bool>,
    /// Each local table's bound in bytes (the negative cache, the chunks, each route's
    /// fallback limiters); 32 MiB by default.
    pub table_bytes: Option<f64>,
    /// When the policy is loaded (Unix microseconds), by default the system clock's now: an
    /// override may expire at most 90 days after it.
    pub now_us: Option<f64>,
    /// This gateway's region, one of the policy's `regions`: without one a policy with a
    /// global rule is refused (and so is any reload that adds one).
    pub region: Option<String>,
}

/// A policy document loaded at `now_us`, or by the system clock.
fn load(policy: &str, now_us: Option<f64>) -> Result<Policy> {
    match now_us {
        Some(t) => Policy::from_json_at(policy, instant(t)),
        None => Policy::from_json(policy),
    }
    .map_err(reason)
}

/// As `load`, for a gateway in `region` (None: none given): a global rule needs a region, and
/// the region must be one of the policy's `regions`.
fn load_for(policy: &str, now_us: Option<f64>, region: Option<&str>) -> Result<Policy> {
    let policy = load(policy, now_us)?;
    policy.require_region(region).map_err(reason)?;
    Ok(policy)
}

#[napi(object)]
pub struct CallerIn {
    pub user: Option<String>,
    pub tenant: Option<String>,
}

/// A request; its headers are `begin`'s second argument.
#[napi(object)]
pub struct RequestIn {
    pub method: String,
    pub path: String,
    /// String header values are node:http's: one code unit per byte received (otherwise
    /// their UTF-8 bytes).
    pub latin1: Option<bool>,
    pub peer: Option<String>,
    pub caller: Option<CallerIn>,
    /// The framework routes paths without case (express by default): so does the engine.
    pub case_insensitive: Option<bool>,
}

#[napi(object)]
pub struct TableUse {
    pub entries: f64,
    pub bytes: f64,
}

#[napi(object)]
pub struct Tables {
    pub negative_cache: TableUse,
    pub chunks: TableUse,
    pub fallback: TableUse,
}

/// The engine: one per gateway, shared by its requests.
#[napi]
pub struct Engine {
    engine: rl_engine::Engine,
    events: Option<Arc<Queue>>,
    /// This gateway's region, which every policy loaded must allow.
    region: Option<String>,
}

#[napi]
impl Engine {
    /// Throws the policy's refusal, with the contract's exact message.
    #[napi(constructor)]
    pub fn new(policy: String, options: Option<EngineOptions>) -> Result<Engine> {
        let region = options.as_ref().and_then(|o| o.region.clone());
        let policy = load_for(
            &policy,
            options.as_ref().and_then(|o| o.now_us),
            region.as_deref(),
        )?;
        let defaults = Options::default();
        let events = options
            .as_ref()
            .and_then(|o| o.events)
            .unwrap_or(false)
            .then(Arc::<Queue>::default);
        let hook = events.clone().map(|q| q as Arc<dyn MetricsHook>);
        let options = options.map_or(defaults, |o| Options {
            legacy_headers: o.legacy_headers.unwrap_or(defaults.legacy_headers),
            log_sample: o.log_sample.unwrap_or(defaults.log_sample),
            log_per_second: o
                .log_per_second
                .map_or(defaults.log_per_second, |n| n.max(0.0) as u64),
            seed: o.seed.map_or(defaults.seed, |s| s.max(0.0) as u64),
            // A float from JS: negative or NaN is no room at all, past usize the most there is.
            table_bytes: o
                .table_bytes
                .map_or(defaults.table_bytes, |b| b.max(0.0) as usize),
            ..defaults
        });
        Ok(Engine {
            engine: rl_engine::Engine::new(policy, Arc::new(Metrics::new(hook)), options),
            events,
            region,
        })
    }

    /// Puts a new snapshot in force, or throws (a refused document, a version not higher).
    /// `nowUs`: when it is loaded (Unix microseconds), by default the system clock's now.
    #[napi]
    pub fn reload(&self, policy: String, now_us: Option<f64>) -> Result<f64> {
        let policy = load_for(&policy, now_us, self.region.as_deref())?;
        self.engine
            .reload(policy)
            .map(|p| p.version as f64)
            .map_err(reason)
    }

    /// The global rules' reports due at `nowUs` (Unix microseconds), for the home store
    /// (`RL.ALLOCATE`); each goes back to `allocated` with its answer.
    #[napi]
    pub fn allocation_reports(&self, now_us: f64) -> Vec<allocation::ReportOut> {
        self.engine
            .allocation_reports(instant(now_us))
            .into_iter()
            .map(allocation::report_out)
            .collect()
    }

    /// The home store's answer to `report`, or null when it did not answer: the key keeps its
    /// allocation until the lease ends.
    #[napi]
    pub fn allocated(
        &self,
        report: allocation::ReportOut,
        answer: Option<allocation::AllotmentIn>,
    ) {
        self.engine.allocated(
            &allocation::report_in(report),
            answer.map(allocation::allotment_in),
        );
    }

    /// When the snapshot in force was published (Unix microseconds), for a gateway following
    /// a store: the metrics then show `rl_gateway_policy_age_seconds`.
    #[napi]
    pub fn policy_published(&self, at_us: f64) {
        self.engine
            .metrics()
            .policy_published(instant(at_us.max(0.0)));
    }

    /// A published snapshot the follower refused: counted in `rl_gateway_policy_rejected_total`.
    #[napi]
    pub fn policy_rejected(&self) {
        self.engine.metrics().policy_rejected();
    }

    #[napi(getter)]
    pub fn policy_version(&self) -> f64 {
        self.engine.policy().version as f64
    }

    /// Whether a route names the request (an application's caller lookup runs only then).
    #[napi]
    pub fn routed(&self, method: String, path: String, case_insensitive: Option<bool>) -> bool {
        let path = rl_engine::policy::decode_unreserved(&path);
        // Bound before `path` goes: the route borrows the path's segments until it is dropped.
        let routed = self
            .engine
            .policy()
            .route(&method, &path, case_insensitive.unwrap_or(false))
            .is_route();
        routed
    }

    #[napi]
    pub fn begin(&self, request: RequestIn, headers: Object, now_us: f64) -> Result<Pending> {
        let (pending, step) = with_request(request, &headers, |req| {
            self.engine.begin(req, instant(now_us))
        })?;
        Ok(Pending {
            engine: self.engine.clone(),
            pending,
            first: Some(step),
        })
    }

    /// Starts deciding keyed checks at `nowUs` under the route named `route` (its posture, its
    /// name in metrics and records; a route the policy lacks is answered 500): each check a
    /// rule of the policy in force by name, the key it counts on, and the units it takes (1
    /// when not given; 0 only asks whether one unit would pass). A rule the policy lacks
    /// throws, naming it, and nothing is decided. The verdict's `checks` give each check's
    /// outcome, in order.
    #[napi]
    pub fn check(&self, route: String, checks: Vec<CheckIn>, now_us: f64) -> Result<Pending> {
        let checks = checks_in(&self.engine.policy(), checks)?;
        let (pending, step) = self.engine.check(&route, checks, instant(now_us));
        Ok(Pending {
            engine: self.engine.clone(),
            pending,
            first: Some(step),
        })
    }

    /// The verdict for a request the driver sheds before deciding it, its own process being
    /// saturated: 503 with the gateway's own reason, counted `shed`, no store call and no
    /// breaker failure. A request no route matches passes when the default has no rules.
    #[napi]
    pub fn shed(&self, request: RequestIn, headers: Object, now_us: f64) -> Result<VerdictOut> {
        with_request(request, &headers, |req| {
            verdict_out(self.engine.shed(req, instant(now_us)))
        })
    }

    /// How a store call that missed its deadline ended: `{"fail": "overloaded"}` when the
    /// driver's event loop ran late, since the call was sent, by `lateMs` against the
    /// `windowMs` the call had (the gateway's own overload: shed, and not the breaker's
    /// failure), else `{"fail": "timeout"}`. The share and the floor are the engine's, the
    /// same for every driver.
    #[napi(ts_return_type = "{ fail: 'timeout' | 'overloaded' }")]
    pub fn missed(&self, window_ms: f64, late_ms: f64) -> Value {
        let fail = match self.engine.missed(duration(window_ms), duration(late_ms)) {
            Answer::Overloaded => "overloaded",
            _ => "timeout",
        };
        serde_json::json!({ "fail": fail })
    }

    /// Whether a new request is shed before it is decided (`shed`): the event loop is stalled
    /// now, the tick now due overdue by `stalledMs`, by two store timeouts or more.
    #[napi]
    pub fn saturated(&self, stalled_ms: f64) -> bool {
        self.engine.saturated(duration(stalled_ms))
    }

    /// Reports the store's mode (`module` or `script`) as `rl_gateway_store_mode`.
    #[napi]
    pub fn store_mode(&self, mode: String) {
        let mode = if mode == "script" {
            Mode::Script
        } else {
            Mode::Module
        };
        self.engine.metrics().record(Event::StoreMode(mode));
    }

    /// The events recorded since the last call (with `events: true`), oldest first.
    #[napi]
    pub fn events(&self) -> Vec<EventOut> {
        self.events.as_ref().map_or_else(Vec::new, |q| {
            std::mem::take(&mut *q.0.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// What the policy in force holds that is legal but worth a log line (an override that
    /// had already expired when it was loaded).
    #[napi(getter)]
    pub fn warnings(&self) -> Vec<String> {
        self.engine.policy().warnings.clone()
    }

    /// The Prometheus text of the gateway's metrics; overrides are counted active or expired
    /// at `nowUs` (Unix microseconds; by default the system clock's).
    #[napi]
    pub fn metrics(&self, now_us: Option<f64>) -> String {
        let metrics = self.engine.metrics();
        now_us.map_or_else(|| metrics.render(), |t| metrics.render_at(instant(t)))
    }

    /// What the engine's tables hold now, entries and bytes (the fallback limiters summed
    /// over routes).
    #[napi]
    pub fn tables(&self) -> Tables {
        let t = self.engine.tables();
        let use_of = |u: rl_engine::TableUse| TableUse {
            entries: u.entries as f64,
            bytes: u.bytes as f64,
        };
        Tables {
            negative_cache: use_of(t.negative_cache),
            chunks: use_of(t.chunks),
            fallback: use_of(t.fallback),
        }
    }
}

/// Runs `f` on the engine's view of a request and its headers.
fn with_request<T>(
    request: RequestIn,
    headers: &Object,
    f: impl FnOnce(&Request<'_>) -> T,
) -> Result<T> {
    let headers = read_headers(headers, request.latin1.unwrap_or(false))?;
    // A peer that is no address (a Unix socket) leaves the caller's IP unknown.
    let peer = request.peer.as_deref().and_then(|p| {
        p.strip_prefix("::ffff:")
            .filter(|v4| v4.contains('.'))
            .unwrap_or(p)
            .parse()
            .ok()
    });
    let caller = request.caller.map(|c| Caller {
        user: c.user,
        tenant: c.tenant,
    });
    Ok(f(&Request {
        method: &request.method,
        path: &request.path,
        headers: &headers,
        peer,
        caller: caller.as_ref(),
        case_insensitive: request.case_insensitive.unwrap_or(false),
    }))
}

/// One request being decided.
#[napi]
pub struct Pending {
    engine: rl_engine::Engine,
    pending: rl_engine::Pending,
    first: Option<Step>,
}

#[napi]
impl Pending {
    /// The step `begin` or `check` answered; then each `resume`'s.
    #[napi]
    pub fn first(&mut self) -> Option<StepOut> {
        self.first.take().map(step_out)
    }

    /// Feeds one answer per call of the last step (none after a wait; missing ones are
    /// timeouts) and answers the next step.
    #[napi]
    pub fn resume(&mut self, answers: Vec<Value>, now_us: f64) -> StepOut {
        let answers = answers.iter().map(answer_of).collect();
        step_out(
            self.engine
                .resume(&mut self.pending, answers, instant(now_us)),
        )
    }

    /// Whether the route has a `durable` rule (its calls go on a connection of their own).
    #[napi]
    pub fn is_durable(&self) -> bool {
        self.pending.is_durable()
    }

    /// After an admission: what the request holds until its response ends; null when it holds
    /// nothing (most requests: no object to make and collect).
    #[napi]
    pub fn holdings(&mut self) -> Option<Holdings> {
        let holdings = self.pending.holdings();
        (!holdings.is_empty()).then_some(Holdings { holdings })
    }

    /// The caller went away mid-request: the calls that give back what it took.
    #[napi]
    pub fn abandon(&mut self) -> Vec<CallOut> {
        calls_out(self.pending.abandon())
    }
}

/// Semaphore slots and reservations of an admitted request.
#[napi]
pub struct Holdings {
    holdings: rl_engine::Holdings,
}

#[napi]
impl Holdings {
    /// A third of the shortest lease held, in ms: how often renewals are due; null without a
    /// slot.
    #[napi]
    pub fn renew_every_ms(&self) -> Option<f64> {
        self.holdings
            .renew_every()
            .map(|d| d.as_micros() as f64 / 1000.0)
    }

    /// The renewals due at `now_us` for a request admitted at `started_us`.
    #[napi]
    pub fn tick(&mut self, started_us: f64, now_us: f64) -> Vec<CallOut> {
        calls_out(self.holdings.tick(instant(started_us), instant(now_us)))
    }

    /// The settlements, with the backend's `X-Actual-Cost` (absent or invalid: the estimate)
    /// and the response's status (absent: unknown). After a 2xx each reservation is settled
    /// and forgotten, so its Idempotency-Key is charged anew; otherwise only reported units.
    /// The request's capacity slot, if it holds one, is given back as answered at `nowUs`
    /// (Unix microseconds; by default the system clock's), teaching an adaptive limit.
    #[napi]
    pub fn settle(
        &mut self,
        actual_cost: Option<String>,
        status: Option<u32>,
        now_us: Option<f64>,
    ) -> Vec<CallOut> {
        self.holdings.answered(
            status_of(status),
            now_us.map_or_else(Instant::wall, instant),
        );
        calls_out(
            self.holdings
                .settle(status_of(status), actual_cost.as_deref().map(str::as_bytes)),
        )
    }

    /// The releases of every slot.
    #[napi]
    pub fn release(&mut self) -> Vec<CallOut> {
        calls_out(self.holdings.release())
    }

    /// Settlements then releases: the response ended (the capacity slot given back as by
    /// `settle`).
    #[napi]
    pub fn finish(
        &mut self,
        actual_cost: Option<String>,
        status: Option<u32>,
        now_us: Option<f64>,
    ) -> Vec<CallOut> {
        self.holdings.answered(
            status_of(status),
            now_us.map_or_else(Instant::wall, instant),
        );
        calls_out(
            self.holdings
                .finish(status_of(status), actual_cost.as_deref().map(str::as_bytes)),
        )
    }
}

/// An HTTP status from JavaScript; one no response can have is unknown.
fn status_of(status: Option<u32>) -> Option<u16> {
    status.and_then(|s| u16::try_from(s).ok())
}

/// The engine's in-memory store: the module's arithmetic without a server (tests, replay).
#[napi]
pub struct MemoryStore {
    store: CoreStore,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

#[napi]
impl MemoryStore {
    #[napi(constructor)]
    pub fn new() -> MemoryStore {
        MemoryStore {
            store: CoreStore::new(),
        }
    }

    /// Answers one call at `now_us`, in the vectors' reply JSON.
    #[napi]
    pub fn call(&mut self, args: Vec<String>, now_us: f64) -> Value {
        let args: Vec<Vec<u8>> = args.into_iter().map(String::into_bytes).collect();
        json_of(self.store.call(&args, now_us.max(0.0) as u64))
    }
}
