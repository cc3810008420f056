//! The gateway engine of redis-rl (`clients/engine`) as a Python extension module. It only
//! carries values across: the Python driver (`redis_rl.gateway`) does the I/O with redis-py and
//! the HTTP framework, and everything a gateway decides is the engine's, the same code the Rust
//! and Node gateways run.

mod allocation;
mod checks;
mod convert;
mod headers;
mod verdict;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{IntoPyDict, PyList};
use rl_engine::metrics::{Event, Metrics, MetricsHook};
use rl_engine::{Caller, Headers, Instant, Mode, Options, Policy, PolicyError, Request};

use convert::{answer, calls, Answer, Call};
use verdict::{step_to_py, verdict, CheckOutcome, Verdict};

create_exception!(
    redis_rl_engine,
    InvalidPolicy,
    PyException,
    "A policy document the engine refused; the message names the bad field's JSON path."
);

create_exception!(
    redis_rl_engine,
    StalePolicy,
    InvalidPolicy,
    "A valid policy whose version is not higher than the one in force (a reload refused)."
);

/// A policy document loaded at `now` (Unix microseconds), or by the system clock.
fn load(policy: &str, now: Option<u64>) -> PyResult<Policy> {
    match now {
        Some(t) => Policy::from_json_at(policy, Instant::from_micros(t)),
        None => Policy::from_json(policy),
    }
    .map_err(policy_error)
}

/// As `load`, for a gateway in `region` (None: none given): a global rule needs a region, and
/// the region must be one of the policy's `regions`.
fn load_for(policy: &str, now: Option<u64>, region: Option<&str>) -> PyResult<Policy> {
    let policy = load(policy, now)?;
    policy.require_region(region).map_err(policy_error)?;
    Ok(policy)
}

/// Validates a policy document as a gateway would load it: its version, or `InvalidPolicy`.
#[pyfunction]
fn load_policy(policy: &str) -> PyResult<u64> {
    load(policy, None).map(|p| p.version)
}

fn policy_error(e: PolicyError) -> PyErr {
    match e {
        PolicyError::Stale { .. } => StalePolicy::new_err(e.to_string()),
        e => InvalidPolicy::new_err(e.to_string()),
    }
}

/// ASGI headers as they come: (name, value) pairs of bytes, names in any case.
struct Pairs(Vec<(PyBackedBytes, PyBackedBytes)>);

impl Pairs {
    /// Each pair a tuple or a two-item list (ASGI servers give either).
    fn of(headers: &Bound<'_, PyAny>) -> PyResult<Pairs> {
        headers
            .try_iter()?
            .map(|pair| {
                let pair = pair?;
                Ok((pair.get_item(0)?.extract()?, pair.get_item(1)?.extract()?))
            })
            .collect::<PyResult<_>>()
            .map(Pairs)
    }
}

impl Headers for Pairs {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_ref())
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        for (n, v) in &self.0 {
            if n.eq_ignore_ascii_case(name.as_bytes()) {
                f(v);
            }
        }
    }
}

/// The engine: one per process and store, shared by every request.
#[pyclass(frozen, module = "redis_rl_engine")]
struct Engine {
    inner: rl_engine::Engine,
    /// This gateway's region, which every policy loaded must allow.
    region: Option<String>,
}

#[pymethods]
impl Engine {
    /// `policy`: the JSON document. `log_sample` is the share of admissions recorded (every
    /// other decision is), `log_per_second` the most records a second (the rest are counted,
    /// not written). `seed` fixes the engine's randomness (jitter, sampling, ids); by default
    /// it is drawn from the OS. `metrics_hook(name, labels, value)` is called
    /// for every metrics event, for the application's own metrics library. `table_bytes`
    /// bounds each local table in bytes (the negative cache, the chunks, each route's fallback
    /// limiters; 32 MiB by default). `now` (Unix microseconds) is when the policy is loaded,
    /// by default the system clock's now: an override may expire at most 90 days after it.
    /// `region`: this gateway's region, one of the policy's `regions`; without one a policy
    /// with a global rule is refused (and so is any reload that adds one).
    #[new]
    #[pyo3(signature = (
        policy, *, legacy_headers = false, log_sample = 0.001, log_per_second = 100, seed = None,
        metrics_hook = None, table_bytes = None, now = None, region = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        policy: &str,
        legacy_headers: bool,
        log_sample: f64,
        log_per_second: u64,
        seed: Option<u64>,
        metrics_hook: Option<Py<PyAny>>,
        table_bytes: Option<usize>,
        now: Option<u64>,
        region: Option<String>,
    ) -> PyResult<Self> {
        let policy = load_for(policy, now, region.as_deref())?;
        let defaults = Options::default();
        let options = Options {
            legacy_headers,
            log_sample,
            log_per_second,
            seed: seed.unwrap_or_else(random_seed),
            table_bytes: table_bytes.unwrap_or(defaults.table_bytes),
            ..defaults
        };
        let hook = metrics_hook.map(|f| Arc::new(PyHook(f)) as Arc<dyn MetricsHook>);
        Ok(Engine {
            inner: rl_engine::Engine::new(policy, Arc::new(Metrics::new(hook)), options),
            region,
        })
    }

    /// Starts deciding a request at `now` (Unix microseconds): its state and first step.
    /// `headers` are (name, value) pairs of bytes; `peer` is the connection's address; `user`
    /// and `tenant`, when given, override the policy's identity headers.
    #[pyo3(signature = (method, path, headers, peer, now, user = None, tenant = None, case_insensitive = false))]
    #[allow(clippy::too_many_arguments)]
    fn begin(
        &self,
        py: Python<'_>,
        method: &str,
        path: &str,
        headers: &Bound<'_, PyAny>,
        peer: Option<&str>,
        now: u64,
        user: Option<String>,
        tenant: Option<String>,
        case_insensitive: bool,
    ) -> PyResult<(Pending, Py<PyAny>)> {
        let headers = Pairs::of(headers)?;
        // An address the server could not give (a Unix socket) is no address.
        let peer: Option<IpAddr> = peer.and_then(|p| p.parse().ok());
        let caller = (user.is_some() || tenant.is_some()).then_some(Caller { user, tenant });
        let request = Request {
            method,
            path,
            headers: &headers,
            peer,
            caller: caller.as_ref(),
            case_insensitive,
        };
        let (pending, step) = self.inner.begin(&request, Instant::from_micros(now));
        Ok((Pending { inner: pending }, step_to_py(py, step)?))
    }

    /// Starts deciding keyed checks at `now` (Unix microseconds) under the route named
    /// `route` (its posture, its name in metrics and records; a route the policy lacks is
    /// answered 500): each check a `(rule, key, cost)` tuple or a `{"rule", "key", "cost"}`
    /// dict, the rule named in the policy in force, the key str or UTF-8 bytes, the cost the
    /// units it takes (1 when not given; 0 only asks whether one unit would pass). A rule the
    /// policy lacks raises `ValueError` naming it, and nothing is decided. The verdict's
    /// `checks` give each check's outcome, in order.
    fn check(
        &self,
        py: Python<'_>,
        route: &str,
        checks: &Bound<'_, PyAny>,
        now: u64,
    ) -> PyResult<(Pending, Py<PyAny>)> {
        let checks = checks::checks_of(&self.inner.policy(), checks)?;
        let (pending, step) = self.inner.check(route, checks, Instant::from_micros(now));
        Ok((Pending { inner: pending }, step_to_py(py, step)?))
    }

    /// The verdict for a request the driver sheds before deciding it, its own process being
    /// saturated: 503 with the gateway's own reason, counted `shed`, no store call, no breaker
    /// failure. A request no route matches passes when the default has no rules.
    #[pyo3(signature = (method, path, headers, peer, now, user = None, tenant = None, case_insensitive = false))]
    #[allow(clippy::too_many_arguments)]
    fn shed(
        &self,
        py: Python<'_>,
        method: &str,
        path: &str,
        headers: &Bound<'_, PyAny>,
        peer: Option<&str>,
        now: u64,
        user: Option<String>,
        tenant: Option<String>,
        case_insensitive: bool,
    ) -> PyResult<Verdict> {
        let headers = Pairs::of(headers)?;
        let peer: Option<IpAddr> = peer.and_then(|p| p.parse().ok());
        let caller = (user.is_some() || tenant.is_some()).then_some(Caller { user, tenant });
        let request = Request {
            method,
            path,
            headers: &headers,
            peer,
            caller: caller.as_ref(),
            case_insensitive,
        };
        verdict(py, self.inner.shed(&request, Instant::from_micros(now)))
    }

    /// How a store call that missed its deadline ended: `overloaded()` when the driver's loop
    /// ran late, since the call was sent, by `late_us` against the `window_us` the call had
    /// (the gateway's own overload: shed, and not the breaker's failure), else `timeout()`. The
    /// share and the floor are the engine's, the same for every driver.
    fn missed(&self, window_us: u64, late_us: u64) -> Answer {
        Answer {
            inner: self.inner.missed(
                Duration::from_micros(window_us),
                Duration::from_micros(late_us),
            ),
        }
    }

    /// Whether a new request is shed before it is decided (`shed`): the driver's loop is
    /// stalled now, the tick now due overdue by `stalled_us`, by two store timeouts or more.
    fn saturated(&self, stalled_us: u64) -> bool {
        self.inner.saturated(Duration::from_micros(stalled_us))
    }

    /// Feeds the answers to the last step's calls (a reply as redis-py returned it, or an
    /// `Answer`; none after a `Wait`) and gives the next step.
    fn resume(
        &self,
        py: Python<'_>,
        mut pending: PyRefMut<'_, Pending>,
        answers: &Bound<'_, PyList>,
        now: u64,
    ) -> PyResult<Py<PyAny>> {
        let answers = answers
            .iter()
            .map(|a| answer(&a))
            .collect::<PyResult<Vec<_>>>()?;
        let step = self
            .inner
            .resume(&mut pending.inner, answers, Instant::from_micros(now));
        step_to_py(py, step)
    }

    /// Puts a new policy document in force, unless its version is not higher than the one in
    /// force (`StalePolicy`) or it is invalid (`InvalidPolicy`); the policy in force stays.
    /// Returns the new version. `now`: as for the constructor.
    #[pyo3(signature = (policy, now = None))]
    fn reload(&self, policy: &str, now: Option<u64>) -> PyResult<u64> {
        let policy = load_for(policy, now, self.region.as_deref())?;
        let policy = self.inner.reload(policy).map_err(policy_error)?;
        Ok(policy.version)
    }

    /// The global rules' reports due at `now` (Unix microseconds), for the home store
    /// (`RL.ALLOCATE`); each goes back to `allocated` with its answer.
    fn allocation_reports(&self, now: u64) -> Vec<allocation::Report> {
        allocation::reports(&self.inner, now)
    }

    /// The home store's answer to `report` (an `Allotment`: `allocation`, `lease_ms`,
    /// `region_demand`, `total_demand`), or None when it did not answer: the key keeps its
    /// allocation until the lease ends.
    #[pyo3(signature = (report, answer = None))]
    fn allocated(
        &self,
        report: &allocation::Report,
        answer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.inner
            .allocated(&report.inner, allocation::allotment(answer)?);
        Ok(())
    }

    /// When the snapshot in force was published (Unix microseconds), for a gateway that follows
    /// a store: `render_metrics` then shows `rl_gateway_policy_age_seconds`.
    fn policy_published(&self, at: u64) {
        self.inner
            .metrics()
            .policy_published(Instant::from_micros(at));
    }

    /// A published snapshot the follower refused: counted in `rl_gateway_policy_rejected_total`.
    fn policy_rejected(&self) {
        self.inner.metrics().policy_rejected();
    }

    /// The version of the policy in force.
    #[getter]
    fn policy_version(&self) -> u64 {
        self.inner.policy().version
    }

    /// The policy's `store.timeout`, in microseconds.
    #[getter]
    fn store_timeout_us(&self) -> u64 {
        u64::try_from(self.inner.policy().store.timeout.as_micros()).unwrap_or(u64::MAX)
    }

    /// What the policy in force holds that is legal but worth a log line (an override that
    /// had already expired when it was loaded).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.policy().warnings.clone()
    }

    /// The Prometheus text (format 0.0.4) of everything the engine counted; overrides are
    /// counted active or expired at `now` (Unix microseconds; by default the system clock's).
    #[pyo3(signature = (now = None))]
    fn render_metrics(&self, now: Option<u64>) -> String {
        let metrics = self.inner.metrics();
        now.map_or_else(
            || metrics.render(),
            |t| metrics.render_at(Instant::from_micros(t)),
        )
    }

    /// Records the store's mode (`module` or `script`) for `rl_gateway_store_mode`.
    fn store_mode(&self, mode: &str) -> PyResult<()> {
        let mode = match mode {
            "module" => Mode::Module,
            "script" => Mode::Script,
            other => return Err(PyValueError::new_err(format!("no mode {other:?}"))),
        };
        self.inner.metrics().record(Event::StoreMode(mode));
        Ok(())
    }

    /// What the local tables hold now: `{"negative_cache" | "chunks" | "fallback":
    /// (entries, bytes)}` (the fallback limiters summed over routes).
    fn tables(&self) -> HashMap<&'static str, (usize, usize)> {
        let t = self.inner.tables();
        let pair = |u: rl_engine::TableUse| (u.entries, u.bytes);
        HashMap::from([
            ("negative_cache", pair(t.negative_cache)),
            ("chunks", pair(t.chunks)),
            ("fallback", pair(t.fallback)),
        ])
    }
}

/// The application's metrics hook: `hook(name, labels, value)`.
struct PyHook(Py<PyAny>);

impl MetricsHook for PyHook {
    fn event(&self, event: &Event<'_>) {
        let (name, labels, value): (&str, Vec<(&str, &str)>, f64) = match *event {
            Event::Decision {
                route,
                rule,
                outcome,
            } => (
                "decision",
                vec![
                    ("route", route),
                    ("rule", rule),
                    ("outcome", outcome.name()),
                ],
                1.0,
            ),
            Event::StoreCall { result, latency } => (
                "store_call",
                vec![("result", result.name())],
                latency.as_secs_f64(),
            ),
            Event::GrantRefill { rule } => ("grant_refill", vec![("rule", rule)], 1.0),
            Event::Breaker(state) => ("breaker_state", vec![("state", state.name())], 1.0),
            Event::PolicyVersion(v) => ("policy_version", Vec::new(), v as f64),
            Event::RouteMode { route, mode } => {
                ("route_mode", vec![("route", route), ("mode", mode)], 1.0)
            }
            Event::StoreMode(mode) => (
                "store_mode",
                vec![(
                    "mode",
                    match mode {
                        Mode::Module => "module",
                        Mode::Script => "script",
                    },
                )],
                1.0,
            ),
            Event::UnknownPlan => ("unknown_plan", Vec::new(), 1.0),
            Event::Unmatched => ("unmatched", Vec::new(), 1.0),
            Event::RecordsDropped(n) => ("decision_records_dropped", Vec::new(), n as f64),
            Event::PolicyRejected => ("policy_rejected", Vec::new(), 1.0),
            Event::CapacityShed {
                route,
                capacity,
                class,
            } => (
                "capacity_shed",
                vec![("route", route), ("capacity", capacity), ("class", class)],
                1.0,
            ),
        };
        // Events come from calls made by Python (begin, resume, store_mode), so the
        // interpreter is attached already; a hook that raises is reported, never propagated
        // into a decision.
        Python::attach(|py| {
            let labels = labels.into_py_dict(py);
            let result = labels.and_then(|l| self.0.call1(py, (name, l, value)));
            if let Err(e) = result {
                e.write_unraisable(py, None);
            }
        });
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    // The standard library's hasher keys are drawn from the OS once per process.
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// A request being decided.
#[pyclass(module = "redis_rl_engine")]
struct Pending {
    inner: rl_engine::Pending,
}

#[pymethods]
impl Pending {
    /// After the verdict: what the admitted request holds until its response ends.
    fn holdings(&mut self) -> Holdings {
        Holdings {
            inner: self.inner.holdings(),
        }
    }

    /// The caller went away before the verdict: the calls that give back what it took.
    fn abandon(&mut self, py: Python<'_>) -> PyResult<Py<PyList>> {
        calls(py, self.inner.abandon())
    }

    /// Whether the route has a `durable` rule (its calls may go on a connection of its own).
    #[getter]
    fn durable(&self) -> bool {
        self.inner.is_durable()
    }
}

/// What an admitted request holds: semaphore slots to renew and release, reservations to
/// settle. Each method gives the calls to send.
#[pyclass(module = "redis_rl_engine")]
struct Holdings {
    inner: rl_engine::Holdings,
}

#[pymethods]
impl Holdings {
    /// The renewals due at `now` for a request admitted at `started` (microseconds).
    fn tick(&mut self, py: Python<'_>, started: u64, now: u64) -> PyResult<Py<PyList>> {
        let due = self
            .inner
            .tick(Instant::from_micros(started), Instant::from_micros(now));
        calls(py, due)
    }

    /// The settlements with the backend's `X-Actual-Cost` (absent or invalid: the estimate)
    /// and the response's status (None: unknown). After a 2xx each reservation is settled and
    /// forgotten, so its Idempotency-Key is charged anew; otherwise only reported units settle.
    /// The request's capacity slot, if it holds one, is given back as answered at `now`
    /// (microseconds; by default the system clock's), teaching an adaptive limit the latency.
    #[pyo3(signature = (actual_cost = None, status = None, now = None))]
    fn settle(
        &mut self,
        py: Python<'_>,
        actual_cost: Option<&[u8]>,
        status: Option<u16>,
        now: Option<u64>,
    ) -> PyResult<Py<PyList>> {
        self.inner
            .answered(status, now.map_or_else(Instant::wall, Instant::from_micros));
        calls(py, self.inner.settle(status, actual_cost))
    }

    /// The releases of every slot held.
    fn release(&mut self, py: Python<'_>) -> PyResult<Py<PyList>> {
        calls(py, self.inner.release())
    }

    /// Settlements, then releases: the calls at the response's end (the capacity slot given
    /// back as by `settle`).
    #[pyo3(signature = (actual_cost = None, status = None, now = None))]
    fn finish(
        &mut self,
        py: Python<'_>,
        actual_cost: Option<&[u8]>,
        status: Option<u16>,
        now: Option<u64>,
    ) -> PyResult<Py<PyList>> {
        self.inner
            .answered(status, now.map_or_else(Instant::wall, Instant::from_micros));
        calls(py, self.inner.finish(status, actual_cost))
    }

    /// How often renewals are due (a third of the shortest lease), in microseconds; None when
    /// no slot is held.
    #[getter]
    fn renew_every_us(&self) -> Option<u64> {
        self.inner
            .renew_every()
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    #[getter]
    fn empty(&self) -> bool {
        self.inner.is_empty()
    }
}

/// A store that answers the engine's calls in memory with the module's own arithmetic (the
/// core crate): tests, offline replay.
#[pyclass(module = "redis_rl_engine")]
struct MemoryStore {
    inner: rl_engine::memory::MemoryStore,
}

#[pymethods]
impl MemoryStore {
    #[new]
    fn new() -> Self {
        MemoryStore {
            inner: rl_engine::memory::MemoryStore::new(),
        }
    }

    /// Answers one call (its `args`) at `now` (Unix microseconds), as redis-py would return
    /// the reply; an error reply is an `Answer` made by `error(text)`.
    fn call(&mut self, py: Python<'_>, args: Vec<PyBackedBytes>, now: u64) -> PyResult<Py<PyAny>> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        convert::to_py(py, self.inner.call(&args, now))
    }
}

/// The content type of a verdict's problem body.
const PROBLEM_CONTENT_TYPE: &str = rl_engine::problem::CONTENT_TYPE;

#[pymodule]
fn redis_rl_engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<Pending>()?;
    m.add_class::<Holdings>()?;
    m.add_class::<allocation::Report>()?;
    m.add_class::<verdict::Calls>()?;
    m.add_class::<verdict::Wait>()?;
    m.add_class::<Verdict>()?;
    m.add_class::<CheckOutcome>()?;
    m.add_class::<Call>()?;
    m.add_class::<Answer>()?;
    m.add_class::<MemoryStore>()?;
    m.add_function(wrap_pyfunction!(load_policy, m)?)?;
    m.add_function(wrap_pyfunction!(headers::render_headers, m)?)?;
    m.add_function(wrap_pyfunction!(convert::timeout, m)?)?;
    m.add_function(wrap_pyfunction!(convert::failed, m)?)?;
    m.add_function(wrap_pyfunction!(convert::overloaded, m)?)?;
    m.add_function(wrap_pyfunction!(convert::error, m)?)?;
    m.add("InvalidPolicy", m.py().get_type::<InvalidPolicy>())?;
    m.add("StalePolicy", m.py().get_type::<StalePolicy>())?;
    m.add("PROBLEM_CONTENT_TYPE", PROBLEM_CONTENT_TYPE)?;
    Ok(())
}
