//! The redis-rl gateway engine (`clients/engine`) as a Node addon. It does no I/O: the
//! JavaScript driver (`src/gateway/`) sends the calls the engine asks for with the
//! application's Redis client and hands the answers back. Replies and answers cross in the
//! JSON shapes of `clients/vectors/README.md` (`{"reply": v}`, `{"error": text}`,
//! `{"fail": "timeout" | text}`), so the driver, the scenarios and the memory store speak one
//! format.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use rl_engine::memory::MemoryStore as CoreStore;
use rl_engine::metrics::{Event, MetricsHook};
use rl_engine::{Answer, Call, Caller, Instant, Metrics, Mode, Options, Policy, Reply, Request, Step};
use serde_json::Value;

fn instant(us: f64) -> Instant {
    // The driver's clock is Unix microseconds, well within a double's exact integers.
    Instant::from_micros(us.max(0.0) as u64)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn reason(e: impl std::fmt::Display) -> Error {
    Error::from_reason(e.to_string())
}

/// The policy document's version, or its refusal with the exact message of the contract.
#[napi]
pub fn load_policy(text: String) -> Result<f64> {
    Policy::from_json(&text).map(|p| p.version as f64).map_err(reason)
}

/// One store call: the module's arguments (name first) and the key that routes it.
#[napi(object)]
pub struct CallOut {
    pub args: Vec<String>,
    pub key: String,
}

fn calls_out(calls: Vec<Call>) -> Vec<CallOut> {
    calls
        .into_iter()
        .map(|c| CallOut {
            args: c.args.iter().map(text).collect(),
            key: text(&c.key),
        })
        .collect()
}

#[napi(object)]
pub struct LogOut {
    pub level: String,
    pub message: String,
    pub route: String,
    pub rule: String,
    pub policy_version: f64,
    pub outcome: String,
}

#[napi(object)]
pub struct VerdictOut {
    /// `admit`, `refuse`, `unavailable` or `error`.
    pub kind: String,
    pub outcome: Option<String>,
    /// 429, 503 or 500 when the gateway answers itself; null when the request goes on.
    pub status: Option<u32>,
    pub headers: Vec<Vec<String>>,
    /// The problem body, JSON text.
    pub problem: Option<String>,
    pub route: Option<String>,
    pub policy_version: f64,
    pub background: Vec<CallOut>,
    pub log: Vec<LogOut>,
}

/// The next step: `calls` (with `deadline`, Unix µs), `wait` (until `until`) or `done`.
#[napi(object)]
pub struct StepOut {
    pub kind: String,
    pub calls: Option<Vec<CallOut>>,
    pub deadline: Option<f64>,
    pub until: Option<f64>,
    pub verdict: Option<VerdictOut>,
}

fn step_out(step: Step) -> StepOut {
    let empty = |kind: &str| StepOut {
        kind: kind.to_string(),
        calls: None,
        deadline: None,
        until: None,
        verdict: None,
    };
    match step {
        Step::Calls { calls, deadline } => StepOut {
            calls: Some(calls_out(calls)),
            deadline: Some(deadline.as_micros() as f64),
            ..empty("calls")
        },
        Step::Wait { until } => StepOut {
            until: Some(until.as_micros() as f64),
            ..empty("wait")
        },
        Step::Done(v) => StepOut {
            verdict: Some(VerdictOut {
                kind: format!("{:?}", v.kind).to_lowercase(),
                outcome: v.outcome.map(|o| o.name().to_string()),
                status: v.status.map(u32::from),
                headers: v
                    .headers
                    .into_iter()
                    .map(|(k, v)| vec![k.to_string(), v])
                    .collect(),
                problem: v.problem.map(|p| p.body),
                route: v.route,
                policy_version: v.policy_version as f64,
                background: calls_out(v.background),
                log: v
                    .log
                    .into_iter()
                    .map(|r| LogOut {
                        level: format!("{:?}", r.level).to_lowercase(),
                        message: r.message.to_string(),
                        route: r.route,
                        rule: r.rule,
                        policy_version: r.policy_version as f64,
                        outcome: r.outcome.to_string(),
                    })
                    .collect(),
            }),
            ..empty("done")
        },
    }
}

/// A reply in the JSON of the vectors: integers, null, strings (bulk), arrays,
/// `{"error"}`, `{"status"}`, `{"map": [[k, v], ...]}`.
fn reply_of(v: &Value) -> Reply {
    match v {
        Value::Null => Reply::Nil,
        Value::Bool(b) => Reply::Int(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Reply::Int(i),
            // JavaScript numbers may arrive as doubles; a whole one is an integer, any other
            // is a RESP3 double, which the engine reads as its text.
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Reply::Int(f as i64),
                _ => Reply::Bulk(n.to_string().into_bytes()),
            },
        },
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Array(a) => Reply::Array(a.iter().map(reply_of).collect()),
        Value::Object(o) => match (o.get("error"), o.get("status"), o.get("map")) {
            (Some(e), _, _) => Reply::Error(e.as_str().unwrap_or_default().to_string()),
            (_, Some(s), _) => Reply::Status(s.as_str().unwrap_or_default().to_string()),
            (_, _, Some(Value::Array(pairs))) => Reply::Map(
                pairs
                    .iter()
                    .map(|p| {
                        (
                            reply_of(p.get(0).unwrap_or(&Value::Null)),
                            reply_of(p.get(1).unwrap_or(&Value::Null)),
                        )
                    })
                    .collect(),
            ),
            _ => Reply::Nil,
        },
    }
}

fn json_of(r: Reply) -> Value {
    match r {
        Reply::Nil => Value::Null,
        Reply::Int(i) => Value::from(i),
        Reply::Bulk(b) => Value::from(text(&b)),
        Reply::Status(s) => serde_json::json!({ "status": s }),
        Reply::Error(e) => serde_json::json!({ "error": e }),
        Reply::Array(a) => Value::Array(a.into_iter().map(json_of).collect()),
        Reply::Map(m) => serde_json::json!({
            "map": m.into_iter().map(|(k, v)| Value::Array(vec![json_of(k), json_of(v)])).collect::<Vec<_>>()
        }),
    }
}

/// `{"reply": v}`, `{"error": text}` (a server error), `{"fail": "timeout"}` or
/// `{"fail": text}` (no answer: a refused or dropped connection).
fn answer_of(v: &Value) -> Answer {
    if let Some(r) = v.get("reply") {
        return Answer::Reply(reply_of(r));
    }
    if let Some(e) = v.get("error") {
        return Answer::Reply(Reply::Error(e.as_str().unwrap_or_default().to_string()));
    }
    match v.get("fail").and_then(Value::as_str) {
        Some("timeout") | None => Answer::Timeout,
        Some(other) => Answer::Failed(other.to_string()),
    }
}

#[napi(object)]
pub struct EngineOptions {
    pub legacy_headers: Option<bool>,
    pub log_sample: Option<f64>,
    /// Seeds the engine's randomness (jitter, sampling, holder ids); an integer below 2^53.
    pub seed: Option<f64>,
    /// Keeps every metrics event for `events()` (the application's hook).
    pub events: Option<bool>,
}

/// A metrics event, as the application's hook receives it.
#[napi(object)]
pub struct EventOut {
    /// `decision`, `store_call`, `grant_refill`, `breaker_state`, `policy_version`,
    /// `route_mode` or `store_mode`.
    pub r#type: String,
    pub route: Option<String>,
    pub rule: Option<String>,
    pub outcome: Option<String>,
    pub result: Option<String>,
    pub seconds: Option<f64>,
    pub state: Option<String>,
    pub version: Option<f64>,
    pub mode: Option<String>,
}

/// Events kept until the driver hands them to the hook: the engine records them inside
/// `begin` and `resume`, where JavaScript cannot be called back.
#[derive(Default)]
struct Queue(Mutex<Vec<EventOut>>);

impl MetricsHook for Queue {
    fn event(&self, event: &Event<'_>) {
        let mut e = EventOut {
            r#type: String::new(),
            route: None,
            rule: None,
            outcome: None,
            result: None,
            seconds: None,
            state: None,
            version: None,
            mode: None,
        };
        let kind = match *event {
            Event::Decision { route, rule, outcome } => {
                e.route = Some(route.to_string());
                e.rule = Some(rule.to_string());
                e.outcome = Some(outcome.name().to_string());
                "decision"
            }
            Event::StoreCall { result, latency } => {
                e.result = Some(result.name().to_string());
                e.seconds = Some(latency.as_secs_f64());
                "store_call"
            }
            Event::GrantRefill { rule } => {
                e.rule = Some(rule.to_string());
                "grant_refill"
            }
            Event::Breaker(state) => {
                e.state = Some(state.name().to_string());
                "breaker_state"
            }
            Event::PolicyVersion(v) => {
                e.version = Some(v as f64);
                "policy_version"
            }
            Event::RouteMode { route, mode } => {
                e.route = Some(route.to_string());
                e.mode = Some(mode.to_string());
                "route_mode"
            }
            Event::StoreMode(mode) => {
                e.mode = Some(mode.name().to_string());
                "store_mode"
            }
        };
        e.r#type = kind.to_string();
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    }
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
}

/// A header's value: a string (its bytes as `latin1` says) or a Buffer.
fn header_bytes(value: &Unknown, latin1: bool) -> Result<Option<Vec<u8>>> {
    if value.get_type()? == ValueType::String {
        let s = String::from_unknown(*value)?;
        return Ok(Some(if latin1 {
            // Every code unit node:http makes of a byte is below 256.
            s.chars()
                .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                .collect()
        } else {
            s.into_bytes()
        }));
    }
    if value.is_buffer()? {
        return Ok(Some(BufferSlice::from_unknown(*value)?.to_vec()));
    }
    Ok(None)
}

/// Headers by lower-case name, a list of values for a repeated header; read property by
/// property, since a conversion of the whole map costs more than the decision.
fn read_headers(headers: &Object, latin1: bool) -> Result<Vec<(String, Vec<u8>)>> {
    let names = headers.get_property_names()?;
    let mut out = Vec::new();
    for i in 0..names.get_array_length()? {
        let name: String = names.get_element(i)?;
        let value: Unknown = headers.get_named_property_unchecked(&name)?;
        if let Some(bytes) = header_bytes(&value, latin1)? {
            out.push((name, bytes));
        } else if value.is_array()? {
            let values = Object::from_unknown(value)?;
            for j in 0..values.get_array_length()? {
                let v: Unknown = values.get_element(j)?;
                if let Some(bytes) = header_bytes(&v, latin1)? {
                    out.push((name.clone(), bytes));
                }
            }
        }
    }
    Ok(out)
}

#[napi(object)]
pub struct TableSizes {
    pub negative_cache: u32,
    pub chunks: u32,
    pub fallback: u32,
}

/// The engine: one per gateway, shared by its requests.
#[napi]
pub struct Engine {
    engine: rl_engine::Engine,
    events: Option<Arc<Queue>>,
}

#[napi]
impl Engine {
    /// Throws the policy's refusal, with the contract's exact message.
    #[napi(constructor)]
    pub fn new(policy: String, options: Option<EngineOptions>) -> Result<Engine> {
        let policy = Policy::from_json(&policy).map_err(reason)?;
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
            seed: o.seed.map_or(defaults.seed, |s| s.max(0.0) as u64),
        });
        Ok(Engine {
            engine: rl_engine::Engine::new(policy, Arc::new(Metrics::new(hook)), options),
            events,
        })
    }

    /// Puts a new snapshot in force, or throws (a refused document, a version not higher).
    #[napi]
    pub fn reload(&self, policy: String) -> Result<f64> {
        let policy = Policy::from_json(&policy).map_err(reason)?;
        self.engine
            .reload(policy)
            .map(|p| p.version as f64)
            .map_err(reason)
    }

    #[napi(getter)]
    pub fn policy_version(&self) -> f64 {
        self.engine.policy().version as f64
    }

    /// Whether a route names the request (an application's caller lookup runs only then).
    #[napi]
    pub fn routed(&self, method: String, path: String) -> bool {
        self.engine.policy().route(&method, &path).is_some()
    }

    #[napi]
    pub fn begin(&self, request: RequestIn, headers: Object, now_us: f64) -> Result<Pending> {
        let headers = read_headers(&headers, request.latin1.unwrap_or(false))?;
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
        let req = Request {
            method: &request.method,
            path: &request.path,
            headers: &headers,
            peer,
            caller: caller.as_ref(),
        };
        let (pending, step) = self.engine.begin(&req, instant(now_us));
        Ok(Pending {
            engine: self.engine.clone(),
            pending,
            first: Some(step),
        })
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

    /// The Prometheus text of the gateway's metrics.
    #[napi]
    pub fn metrics(&self) -> String {
        self.engine.metrics().render()
    }

    /// Entries held in the engine's tables (memory bounds).
    #[napi]
    pub fn table_sizes(&self) -> TableSizes {
        let (cache, chunks, fallback) = self.engine.table_sizes();
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        TableSizes {
            negative_cache: n(cache),
            chunks: n(chunks),
            fallback: n(fallback),
        }
    }
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
    /// The step `begin` answered; then each `resume`'s.
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

    /// The settlements, with the backend's `X-Actual-Cost` (absent or invalid: none).
    #[napi]
    pub fn settle(&mut self, actual_cost: Option<String>) -> Vec<CallOut> {
        calls_out(self.holdings.settle(actual_cost.as_deref().map(str::as_bytes)))
    }

    /// The releases of every slot.
    #[napi]
    pub fn release(&mut self) -> Vec<CallOut> {
        calls_out(self.holdings.release())
    }

    /// Settlements then releases: the response ended.
    #[napi]
    pub fn finish(&mut self, actual_cost: Option<String>) -> Vec<CallOut> {
        calls_out(self.holdings.finish(actual_cost.as_deref().map(str::as_bytes)))
    }
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
