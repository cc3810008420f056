//! Values across the boundary: store calls out as Python lists of bytes, replies in from
//! whatever redis-py (or valkey-py) returned, and the failures a driver reports.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use rl_engine::{Answer as EngineAnswer, Call as EngineCall, Reply};

/// One store call: `args`, the module's command; `key`, the key that routes it in a cluster.
/// `script_keys()` gives the keys a script-mode `EVALSHA` declares.
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct Call {
    #[pyo3(get)]
    args: Py<PyList>,
    #[pyo3(get)]
    key: Py<PyBytes>,
    inner: rl_engine::wire::Args,
}

#[pymethods]
impl Call {
    /// The keys the command touches (none for `WAIT`): what `EVALSHA` declares.
    fn script_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let keys = self
            .inner
            .keys()
            .map_err(|e| PyTypeError::new_err(e.to_string()))?;
        PyList::new(py, keys.map(|k| PyBytes::new(py, k)))
    }

    fn __repr__(&self) -> String {
        let args: Vec<String> = self
            .inner
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        format!("Call({args:?})")
    }
}

pub fn call(py: Python<'_>, c: EngineCall) -> PyResult<Py<Call>> {
    let args = PyList::new(py, c.args.iter().map(|a| PyBytes::new(py, a)))?.unbind();
    let key = PyBytes::new(py, &c.key).unbind();
    Py::new(
        py,
        Call {
            args,
            key,
            inner: c.args,
        },
    )
}

pub fn calls(py: Python<'_>, cs: Vec<EngineCall>) -> PyResult<Py<PyList>> {
    let items = cs
        .into_iter()
        .map(|c| call(py, c))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.unbind())
}

/// How a call ended when it gave no reply to read: made by `timeout()`, `failed(text)`,
/// `overloaded()` and `error(text)`, handed to `resume` in the reply's place.
#[pyclass(frozen, module = "redis_rl_engine")]
pub struct Answer {
    pub inner: EngineAnswer,
}

#[pymethods]
impl Answer {
    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Answer>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
}

/// No reply by the step's deadline.
#[pyfunction]
pub fn timeout() -> Answer {
    Answer {
        inner: EngineAnswer::Timeout,
    }
}

/// No reply at all: a refused or dropped connection, an I/O error, a server error that says
/// the store could not answer (`LOADING`, `BUSY`, ...).
#[pyfunction]
pub fn failed(message: String) -> Answer {
    Answer {
        inner: EngineAnswer::Failed(message),
    }
}

/// The driver could not wait for the reply because its own process is saturated (its event
/// loop ran later than the deadline): the request is shed, and the breaker does not count it.
#[pyfunction]
pub fn overloaded() -> Answer {
    Answer {
        inner: EngineAnswer::Overloaded,
    }
}

/// A server error reply, its code first (`ERR ...`, `WRONGTYPE ...`).
#[pyfunction]
pub fn error(text: String) -> Answer {
    Answer {
        inner: EngineAnswer::Reply(Reply::Error(text)),
    }
}

/// A reply as redis-py returns it, RESP2 or RESP3: `None`, an int (a bool is 0 or 1), bytes
/// (bulk), str (a status, or a bulk string decoded by `decode_responses`), a float (its text),
/// a list or tuple, a dict (a RESP3 map); or an `Answer`.
pub fn answer(value: &Bound<'_, PyAny>) -> PyResult<EngineAnswer> {
    if let Ok(a) = value.cast::<Answer>() {
        return Ok(a.get().inner.clone());
    }
    reply(value).map(EngineAnswer::Reply)
}

fn reply(value: &Bound<'_, PyAny>) -> PyResult<Reply> {
    if value.is_none() {
        return Ok(Reply::Nil);
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Reply::Bulk(b.as_bytes().to_vec()));
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(Reply::Int(i64::from(value.is_truthy()?)));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(Reply::Int(value.extract()?));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Reply::Status(s.to_cow()?.into_owned()));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return list
            .iter()
            .map(|v| reply(&v))
            .collect::<PyResult<_>>()
            .map(Reply::Array);
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return tuple
            .iter()
            .map(|v| reply(&v))
            .collect::<PyResult<_>>()
            .map(Reply::Array);
    }
    if let Ok(map) = value.cast::<PyDict>() {
        return map
            .iter()
            .map(|(k, v)| Ok((reply(&k)?, reply(&v)?)))
            .collect::<PyResult<_>>()
            .map(Reply::Map);
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(Reply::Bulk(value.str()?.to_cow()?.as_bytes().to_vec()));
    }
    if let Ok(a) = value.cast::<Answer>() {
        if let EngineAnswer::Reply(r) = &a.get().inner {
            return Ok(r.clone());
        }
    }
    Err(PyTypeError::new_err(format!(
        "not a store reply: {}",
        value.get_type().name()?
    )))
}

/// A reply back into Python, as `reply` reads it (an error reply as `error(text)`).
pub fn to_py(py: Python<'_>, r: Reply) -> PyResult<Py<PyAny>> {
    Ok(match r {
        Reply::Nil => py.None(),
        Reply::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        Reply::Bulk(b) => PyBytes::new(py, &b).into_any().unbind(),
        Reply::Status(s) => PyString::new(py, &s).into_any().unbind(),
        Reply::Error(text) => Py::new(py, error(text))?.into_any(),
        Reply::Array(items) => {
            let items = items
                .into_iter()
                .map(|i| to_py(py, i))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Reply::Map(pairs) => {
            let d = PyDict::new(py);
            for (k, v) in pairs {
                d.set_item(to_py(py, k)?, to_py(py, v)?)?;
            }
            d.into_any().unbind()
        }
    })
}
