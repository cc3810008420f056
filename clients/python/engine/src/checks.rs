//! Keyed checks in from Python: each a rule of the policy in force by name, the key it counts
//! on, the units it takes, and whether no request can pass it; read whole before the engine
//! sees any, so a bad one changes nothing.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};
use rl_engine::engine::Check;
use rl_engine::Policy;

/// `(rule, key)` or `(rule, key, cost)` tuples (or lists), or `{"rule", "key", "cost",
/// "blocked"}` dicts; `key` str or UTF-8 bytes, `cost` 1 when not given (0 only asks),
/// `blocked` a bool, false when not given (no request passes: a limit of 0, see
/// `rl_engine::engine::Check::blocked`).
pub fn checks_of(policy: &Policy, items: &Bound<'_, PyAny>) -> PyResult<Vec<Check>> {
    items
        .try_iter()?
        .enumerate()
        .map(|(i, item)| check_of(policy, i, &item?))
        .collect()
}

fn check_of(policy: &Policy, i: usize, item: &Bound<'_, PyAny>) -> PyResult<Check> {
    let (rule, key, cost, blocked) = if let Ok(d) = item.cast::<PyDict>() {
        let field = |name: &str| -> PyResult<Bound<'_, PyAny>> {
            d.get_item(name)?
                .ok_or_else(|| PyValueError::new_err(format!("check {i}: no {name:?}")))
        };
        (
            field("rule")?,
            field("key")?,
            d.get_item("cost")?,
            d.get_item("blocked")?,
        )
    } else if item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>() {
        match item.len()? {
            2 => (item.get_item(0)?, item.get_item(1)?, None, None),
            3 => (
                item.get_item(0)?,
                item.get_item(1)?,
                Some(item.get_item(2)?),
                None,
            ),
            n => {
                return Err(PyValueError::new_err(format!(
                    "check {i}: (rule, key, cost) has 3 items, not {n}"
                )))
            }
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "check {i}: a (rule, key, cost) tuple or a {{rule, key, cost}} dict, not {}",
            item.get_type().name()?
        )));
    };
    let name = rule
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("check {i}: the rule is named by a str")))?;
    let name = name.to_cow()?;
    let rule = policy.rules.get(name.as_ref()).ok_or_else(|| {
        PyValueError::new_err(format!(
            "check {i}: no rule named {name:?} in the policy in force (version {})",
            policy.version
        ))
    })?;
    let key = if let Ok(s) = key.cast::<PyString>() {
        s.to_cow()?.into_owned()
    } else if let Ok(b) = key.cast::<PyBytes>() {
        std::str::from_utf8(b.as_bytes())
            .map_err(|_| PyValueError::new_err(format!("check {i}: the key is not UTF-8")))?
            .to_string()
    } else {
        return Err(PyTypeError::new_err(format!(
            "check {i}: the key is str or bytes, not {}",
            key.get_type().name()?
        )));
    };
    let cost = match cost.filter(|c| !c.is_none()) {
        None => 1,
        Some(c) if c.is_instance_of::<PyBool>() => {
            return Err(PyTypeError::new_err(format!(
                "check {i}: the cost is a number of units, not a bool"
            )))
        }
        Some(c) => c.extract::<u64>().map_err(|_| {
            PyValueError::new_err(format!(
                "check {i}: the cost is a whole number of units from 0 to 2^64-1"
            ))
        })?,
    };
    let blocked = match blocked.filter(|b| !b.is_none()) {
        None => false,
        Some(b) => b
            .cast::<PyBool>()
            .map_err(|_| PyTypeError::new_err(format!("check {i}: blocked is a bool")))?
            .is_true(),
    };
    Ok(Check {
        blocked,
        ..Check::new(Arc::clone(rule), key, cost)
    })
}
