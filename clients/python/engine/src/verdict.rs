//! The engine's steps out: calls to send, a wait, or the verdict (with each keyed check's
//! outcome).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use rl_engine::engine::{CheckOutcome as EngineCheckOutcome, CheckSource};
use rl_engine::LogLevel;

use crate::convert::calls;

/// Send these calls in order on one connection before `deadline` (Unix microseconds), and
/// resume with one answer each; calls left unanswered count as timeouts.
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct Calls {
    #[pyo3(get)]
    calls: Py<PyList>,
    #[pyo3(get)]
    deadline: u64,
}

/// Another request is refilling a chunk this one needs: resume with no answers at `until`.
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct Wait {
    #[pyo3(get)]
    until: u64,
}

/// The engine's answer for one request.
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct Verdict {
    /// None when the request goes on; 429, 503, 500 or 431 when the gateway answers it.
    #[pyo3(get)]
    status: Option<u16>,
    /// `admit`, `refuse`, `unavailable`, `error` or `reject`.
    #[pyo3(get)]
    kind: &'static str,
    /// The route-level outcome as counted; None for a request that passes untouched (no route matched, the default has no rules).
    #[pyo3(get)]
    outcome: Option<&'static str>,
    #[pyo3(get)]
    route: Option<String>,
    #[pyo3(get)]
    policy_version: u64,
    /// (name, value) pairs of str, sent on the response whatever answers it.
    #[pyo3(get)]
    headers: Py<PyList>,
    /// The problem+json body when the gateway answers the request itself.
    #[pyo3(get)]
    problem: Option<Py<PyBytes>>,
    /// Calls to send after answering (releases, refunds); their replies do not matter.
    #[pyo3(get)]
    background: Py<PyList>,
    /// Decision records, each a dict: `level` (`info`/`warn`), `message`, `reason`, `route`,
    /// `rule`, `plan`, `policy_version`, `outcome`, `decision` (the request's id).
    #[pyo3(get)]
    log: Py<PyList>,
    /// Each keyed check's `CheckOutcome`, in the order `Engine.check` was given them (empty
    /// for a request `begin` decided).
    #[pyo3(get)]
    checks: Py<PyList>,
}

/// What one keyed check decided (for a shadow rule: what it would have decided).
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct CheckOutcome {
    #[pyo3(get)]
    over: bool,
    /// Units the key holds after this decision, when the store or a limiter told.
    #[pyo3(get)]
    remaining: Option<u64>,
    #[pyo3(get)]
    reset_after_ms: Option<u64>,
    /// When over: when the same request would pass.
    #[pyo3(get)]
    retry_after_ms: Option<u64>,
    /// Where the outcome came from: `store`, `chunk` (a chunk leased earlier), `cache` (the
    /// negative cache), `fallback` (the local limiter of the posture) or `open` (not asked).
    #[pyo3(get)]
    source: &'static str,
}

#[pymethods]
impl CheckOutcome {
    fn __repr__(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "None".to_string(), |n| n.to_string());
        format!(
            "CheckOutcome(over={}, remaining={}, reset_after_ms={}, retry_after_ms={}, source={:?})",
            if self.over { "True" } else { "False" },
            opt(self.remaining),
            opt(self.reset_after_ms),
            opt(self.retry_after_ms),
            self.source,
        )
    }
}

fn check_outcome(c: &EngineCheckOutcome) -> CheckOutcome {
    CheckOutcome {
        over: c.over,
        remaining: c.remaining,
        reset_after_ms: c.reset_after_ms,
        retry_after_ms: c.retry_after_ms,
        source: match c.source {
            CheckSource::Store => "store",
            CheckSource::Chunk => "chunk",
            CheckSource::Cache => "cache",
            CheckSource::Blocked => "blocked",
            CheckSource::Fallback => "fallback",
            CheckSource::Open => "open",
        },
    }
}

pub fn step_to_py(py: Python<'_>, step: rl_engine::Step) -> PyResult<Py<PyAny>> {
    Ok(match step {
        rl_engine::Step::Calls {
            calls: cs,
            deadline,
        } => Py::new(
            py,
            Calls {
                calls: calls(py, cs)?,
                deadline: deadline.as_micros(),
            },
        )?
        .into_any(),
        rl_engine::Step::Wait { until } => Py::new(
            py,
            Wait {
                until: until.as_micros(),
            },
        )?
        .into_any(),
        rl_engine::Step::Done(v) => Py::new(py, verdict(py, v)?)?.into_any(),
    })
}

pub fn verdict(py: Python<'_>, v: rl_engine::Verdict) -> PyResult<Verdict> {
    let headers = PyList::new(
        py,
        v.headers
            .iter()
            .map(|(k, val)| (PyString::new(py, k), PyString::new(py, val))),
    )?;
    let log = PyList::empty(py);
    for r in &v.log {
        let record = PyDict::new(py);
        let level = match r.level {
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
        };
        record.set_item("level", level)?;
        record.set_item("message", r.message)?;
        record.set_item("reason", r.reason.as_str())?;
        record.set_item("route", r.route.as_str())?;
        record.set_item("rule", r.rule.as_str())?;
        record.set_item("plan", r.plan.as_str())?;
        record.set_item("policy_version", r.policy_version)?;
        record.set_item("outcome", r.outcome)?;
        record.set_item("decision", r.decision.as_str())?;
        log.append(record)?;
    }
    let checks = v
        .checks
        .iter()
        .map(|c| Py::new(py, check_outcome(c)))
        .collect::<PyResult<Vec<_>>>()?;
    let kind = match v.kind {
        rl_engine::VerdictKind::Admit => "admit",
        rl_engine::VerdictKind::Refuse => "refuse",
        rl_engine::VerdictKind::Unavailable => "unavailable",
        rl_engine::VerdictKind::Error => "error",
        rl_engine::VerdictKind::Reject => "reject",
        rl_engine::VerdictKind::Shed => "shed",
    };
    Ok(Verdict {
        status: v.status,
        kind,
        outcome: v.outcome.map(|o| o.name()),
        route: v.route,
        policy_version: v.policy_version,
        headers: headers.unbind(),
        problem: v
            .problem
            .map(|p| PyBytes::new(py, p.body.as_bytes()).unbind()),
        background: calls(py, v.background)?,
        log: log.unbind(),
        checks: PyList::new(py, checks)?.unbind(),
    })
}
