//! What crosses between JavaScript and the engine: steps, verdicts and calls out; replies,
//! answers and headers in.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::sync::Arc;
use std::time::Duration;

use rl_engine::engine::{Check, CheckOutcome, CheckSource};
use rl_engine::{Answer, Call, Instant, Policy, Reply, Step, Verdict};
use serde_json::Value;

pub(crate) fn instant(us: f64) -> Instant {
    // The driver's clock is Unix microseconds, well within a double's exact integers.
    Instant::from_micros(us.max(0.0) as u64)
}

/// A duration the driver measured in milliseconds; a negative or NaN one is none, one too
/// long for a `Duration` the longest.
pub(crate) fn duration(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(if ms > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
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
    /// Each keyed check's outcome, in the order `check` was given them (empty for a request
    /// `begin` decided).
    pub checks: Vec<CheckOut>,
}

/// One keyed check: a rule of the policy in force by name, the key it counts on (a string, or
/// a Buffer of UTF-8), and the units it takes (1 when not given; 0 only asks).
#[napi(object)]
pub struct CheckIn {
    pub rule: String,
    pub key: Either<String, Buffer>,
    pub cost: Option<f64>,
    /// No request passes it (a limit of 0): refused without a store call, the other checks
    /// then only asked. False when not given.
    pub blocked: Option<bool>,
}

/// What one keyed check decided (for a shadow rule: what it would have decided).
#[napi(object)]
pub struct CheckOut {
    pub over: bool,
    /// Units the key holds after this decision, when the store or a limiter told.
    pub remaining: Option<f64>,
    pub reset_after_ms: Option<f64>,
    /// When over: when the same request would pass.
    pub retry_after_ms: Option<f64>,
    /// `store`, `chunk` (a chunk leased earlier), `cache` (the negative cache), `blocked` (no
    /// request can pass the check: refused without a call), `fallback` (the posture's local
    /// limiter) or `open` (not asked).
    pub source: String,
}

/// The checks as the engine takes them, read whole first: a bad one throws and nothing is
/// decided.
pub(crate) fn checks_in(policy: &Policy, checks: Vec<CheckIn>) -> Result<Vec<Check>> {
    checks
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let invalid =
                |what: String| Error::new(Status::InvalidArg, format!("check {i}: {what}"));
            let rule = policy.rules.get(&c.rule).ok_or_else(|| {
                invalid(format!(
                    "no rule named {:?} in the policy in force (version {})",
                    c.rule, policy.version
                ))
            })?;
            let key = match c.key {
                Either::A(s) => s,
                Either::B(b) => String::from_utf8(b.to_vec())
                    .map_err(|_| invalid("the key is not UTF-8".to_string()))?,
            };
            // A JavaScript number: a whole one within a double's exact integers.
            let cost = match c.cost {
                None => 1,
                Some(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&n) => n as u64,
                Some(n) => {
                    return Err(invalid(format!(
                        "the cost is a whole number of units from 0 to 2^53-1, not {n}"
                    )))
                }
            };
            Ok(Check {
                blocked: c.blocked.unwrap_or(false),
                ..Check::new(Arc::clone(rule), key, cost)
            })
        })
        .collect()
}

/// `Number.MAX_SAFE_INTEGER`.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

fn check_out(c: &CheckOutcome) -> CheckOut {
    CheckOut {
        over: c.over,
        remaining: c.remaining.map(|n| n as f64),
        reset_after_ms: c.reset_after_ms.map(|n| n as f64),
        retry_after_ms: c.retry_after_ms.map(|n| n as f64),
        source: match c.source {
            CheckSource::Store => "store",
            CheckSource::Chunk => "chunk",
            CheckSource::Cache => "cache",
            CheckSource::Blocked => "blocked",
            CheckSource::Fallback => "fallback",
            CheckSource::Open => "open",
        }
        .to_string(),
    }
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
        checks: v.checks.iter().map(check_out).collect(),
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
