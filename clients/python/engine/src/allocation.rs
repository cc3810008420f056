//! One limit across regions (`clients/CONTRACT.md` section 15): the reports a global rule's
//! keys owe the home store, and its answers, carried across for the driver's reporter loop.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rl_core::allocate::Allotment;
use rl_engine::{AllocationReport, Instant};

/// One report for the home store: what `RL.ALLOCATE` is sent. Handed back to
/// `Engine.allocated` with the answer.
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct Report {
    pub inner: AllocationReport,
}

#[pymethods]
impl Report {
    /// The rule's name (for logs) and the key, as the regional store knows it.
    #[getter]
    fn rule(&self) -> &str {
        &self.inner.rule
    }

    #[getter]
    fn key(&self) -> &str {
        &self.inner.key
    }

    /// `{"limit", "reserve", "regions", "lease_ms"}`: the terms the home allocates by.
    #[getter]
    fn terms<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = &self.inner.terms;
        let terms = PyDict::new(py);
        terms.set_item("limit", t.limit)?;
        terms.set_item("reserve", t.reserve)?;
        terms.set_item("regions", t.regions)?;
        terms.set_item("lease_ms", t.lease_ms)?;
        Ok(terms)
    }

    /// Units asked per period of the rule since the last report.
    #[getter]
    fn demand(&self) -> u64 {
        self.inner.demand
    }

    /// What this gateway enforces now.
    #[getter]
    fn held(&self) -> u64 {
        self.inner.held
    }

    /// When the report was taken (Unix microseconds): the answer's lease counts from here.
    #[getter]
    fn sent(&self) -> u64 {
        self.inner.sent.as_micros()
    }

    fn __repr__(&self) -> String {
        format!(
            "Report(rule={:?}, key={:?}, demand={}, held={})",
            self.inner.rule, self.inner.key, self.inner.demand, self.inner.held
        )
    }
}

/// The reports due at `now`, as the driver sends them.
pub fn reports(engine: &rl_engine::Engine, now: u64) -> Vec<Report> {
    engine
        .allocation_reports(Instant::from_micros(now))
        .into_iter()
        .map(|inner| Report { inner })
        .collect()
}

/// The home's answer read from any object with the reply's four fields (the client's
/// `Allotment`), or None when the home did not answer.
pub fn allotment(answer: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Allotment>> {
    let Some(answer) = answer else {
        return Ok(None);
    };
    if answer.is_none() {
        return Ok(None);
    }
    Ok(Some(Allotment {
        allocation: answer.getattr("allocation")?.extract()?,
        lease_ms: answer.getattr("lease_ms")?.extract()?,
        region_demand: answer.getattr("region_demand")?.extract()?,
        total_demand: answer.getattr("total_demand")?.extract()?,
    }))
}
