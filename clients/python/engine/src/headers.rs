//! The engine's header rendering (clients/SPEC.md section 3) for what the typed client
//! decided: the gateway's own fields, for an application that calls `admit` or `multi` itself.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rl_engine::headers::{self, HeaderOutcome, HeaderRule};

/// `RateLimit-Policy` and `RateLimit` (with `X-RateLimit-*` when `legacy`) as (name, value)
/// pairs, one item per rule in order. Each rule is a dict: `name`, `limit`, `period_ms`,
/// `capacity`, `remaining`, `reset_after_ms`, `retry_after_ms` (given when it refused), and
/// `semaphore` (true: `limit` is its capacity and there is no period). No rule, no field.
#[pyfunction]
#[pyo3(signature = (rules, legacy = false))]
pub fn render_headers(
    rules: Vec<Bound<'_, PyDict>>,
    legacy: bool,
) -> PyResult<Vec<(&'static str, String)>> {
    let shown = rules
        .iter()
        .enumerate()
        .map(|(i, r)| shown_of(i, r))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(headers::render(&shown, legacy))
}

fn shown_of(i: usize, rule: &Bound<'_, PyDict>) -> PyResult<(HeaderRule, HeaderOutcome)> {
    let field = |name: &str| -> PyResult<Bound<'_, PyAny>> {
        rule.get_item(name)?
            .ok_or_else(|| PyValueError::new_err(format!("rule {i}: no {name:?}")))
    };
    let optional = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        Ok(rule.get_item(name)?.filter(|v| !v.is_none()))
    };
    let semaphore = optional("semaphore")?.map_or(Ok(false), |v| v.is_truthy())?;
    let period_ms: u64 = if semaphore {
        0
    } else {
        field("period_ms")?.extract()?
    };
    let shown = HeaderRule {
        name: field("name")?.extract()?,
        limit: field("limit")?.extract()?,
        period: Duration::from_millis(period_ms),
        capacity: field("capacity")?.extract()?,
        semaphore,
    };
    let outcome = HeaderOutcome {
        remaining: field("remaining")?.extract()?,
        reset_after_ms: field("reset_after_ms")?.extract()?,
        retry_after_ms: optional("retry_after_ms")?
            .map(|v| v.extract())
            .transpose()?,
    };
    Ok((shown, outcome))
}
