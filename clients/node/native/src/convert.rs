//! What crosses between JavaScript and the engine: steps, verdicts and calls out; replies,
//! answers and headers in.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use rl_engine::{Answer, Call, Instant, Reply, Step, Verdict};
use serde_json::Value;

pub(crate) fn instant(us: f64) -> Instant {
    // The driver's clock is Unix microseconds, well within a double's exact integers.
    Instant::from_micros(us.max(0.0) as u64)
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn reason(e: impl std::fmt::Display) -> Error {
    Error::from_reason(e.to_string())
}

/// One store call: the module's arguments (name first) and the key that routes it.
#[napi(object)]
pub struct CallOut {
    pub args: Vec<String>,
    pub key: String,
}

pub(crate) fn calls_out(calls: Vec<Call>) -> Vec<CallOut> {
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
    /// `refuse:<rule>`, `refuse_cached:<rule>`, `unavailable:deny`, `unmatched`, ...
    pub reason: String,
    pub route: String,
    pub rule: String,
    /// The caller's plan; empty when the policy has none.
    pub plan: String,
    pub policy_version: f64,
    pub outcome: String,
    /// The request's id, shared by its records.
    pub decision: String,
}

#[napi(object)]
pub struct VerdictOut {
    /// `admit`, `refuse`, `unavailable`, `error`, `reject` or `shed`.
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

pub(crate) fn step_out(step: Step) -> StepOut {
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
            verdict: Some(verdict_out(v)),
            ..empty("done")
        },
    }
}

pub(crate) fn verdict_out(v: Verdict) -> VerdictOut {
    VerdictOut {
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
                reason: r.reason,
                route: r.route,
                rule: r.rule,
                plan: r.plan,
                policy_version: r.policy_version as f64,
                outcome: r.outcome.to_string(),
                decision: r.decision,
            })
            .collect(),
    }
}

/// ioredis on RESP3 without `replyMapping` flattens a map into `[name, value, ...]`; no RESP2
/// reply of the module's is an even-length array with a field name at every even place.
fn flat_map(items: &[Value]) -> bool {
    !items.is_empty()
        && items.chunks_exact(2).remainder().is_empty()
        && items.iter().step_by(2).all(|k| {
            k.as_str().is_some_and(|k| {
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            })
        })
}

/// A reply in the JSON of the vectors: integers, null, strings (bulk), arrays,
/// `{"error"}`, `{"status"}`, `{"map": [[k, v], ...]}`.
pub(crate) fn reply_of(v: &Value) -> Reply {
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
        Value::Array(a) if flat_map(a) => Reply::Map(
            a.chunks_exact(2)
                .map(|pair| match pair {
                    [k, v] => (reply_of(k), reply_of(v)),
                    _ => (Reply::Nil, Reply::Nil),
                })
                .collect(),
        ),
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

pub(crate) fn json_of(r: Reply) -> Value {
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

/// `{"reply": v}`, `{"error": text}` (a server error), `{"fail": "timeout"}`,
/// `{"fail": "overloaded"}` (the driver's own saturation kept it from waiting) or
/// `{"fail": text}` (no answer: a refused or dropped connection).
pub(crate) fn answer_of(v: &Value) -> Answer {
    if let Some(r) = v.get("reply") {
        return Answer::Reply(reply_of(r));
    }
    if let Some(e) = v.get("error") {
        return Answer::Reply(Reply::Error(e.as_str().unwrap_or_default().to_string()));
    }
    match v.get("fail").and_then(Value::as_str) {
        Some("timeout") | None => Answer::Timeout,
        Some("overloaded") => Answer::Overloaded,
        Some(other) => Answer::Failed(other.to_string()),
    }
}

/// A header's value: a string (its bytes as `latin1` says) or a Buffer.
pub(crate) fn header_bytes(value: &Unknown, latin1: bool) -> Result<Option<Vec<u8>>> {
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
pub(crate) fn read_headers(headers: &Object, latin1: bool) -> Result<Vec<(String, Vec<u8>)>> {
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
