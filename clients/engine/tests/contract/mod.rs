//! The scenario format's parts every step uses: scripted store answers, values as JSON, and
//! the comparison of what was expected with what came out (`clients/vectors/README.md`).

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_engine::{Answer, Call, Reply, Step};
use serde_json::{json, Value};

pub type R<T> = Result<T, String>;

/// The store's scripted answers for one request: each entry names the call it expects (or
/// `"*"`) and gives a reply, an error, or a failure; `"memory"` lets the memory store answer
/// that call, and the script may end with `"rest": "memory"`.
pub struct Script {
    entries: Vec<Value>,
    next: usize,
    rest_memory: bool,
    pub made: Vec<Vec<Vec<u8>>>,
    pub deadlines: Vec<u64>,
}

impl Script {
    pub fn new(spec: Option<&Value>) -> Script {
        let (entries, rest_memory) = match spec {
            None => (Vec::new(), true),
            Some(Value::String(s)) if s == "memory" => (Vec::new(), true),
            Some(Value::Array(a)) => (a.clone(), false),
            Some(Value::Object(o)) => (
                o.get("script")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                o.get("rest").and_then(Value::as_str) == Some("memory"),
            ),
            Some(_) => (Vec::new(), false),
        };
        Script {
            entries,
            next: 0,
            rest_memory,
            made: Vec::new(),
            deadlines: Vec::new(),
        }
    }

    /// A `{"wait": "1ms"}` entry answers a `Wait` step by advancing the clock.
    pub fn wait(&mut self) -> R<Option<u64>> {
        match self.entries.get(self.next) {
            Some(e) if e.get("wait").is_some() => {
                self.next += 1;
                Ok(Some(duration_us(&e["wait"])?))
            }
            _ => Ok(None),
        }
    }

    /// The answer to `call` (`None`: the memory store answers it) and how far the clock moves
    /// before it arrives.
    pub fn next(&mut self, call: &Call) -> R<(Option<Answer>, u64)> {
        let Some(entry) = self.entries.get(self.next).cloned() else {
            return if self.rest_memory {
                Ok((None, 0))
            } else {
                Err(format!(
                    "unscripted call {}",
                    args_json(&call.args.to_vecs())
                ))
            };
        };
        self.next += 1;
        if let Some(want) = entry.get("call") {
            if want != "*" {
                matches(want, &args_json(&call.args.to_vecs()), "call")?;
            }
        }
        let advance = match entry.get("after") {
            Some(d) => duration_us(d)?,
            None => 0,
        };
        if entry.get("memory").is_some() {
            return Ok((None, advance));
        }
        let answer = if let Some(r) = entry.get("reply") {
            Answer::Reply(reply_of(r))
        } else if let Some(e) = entry.get("error") {
            Answer::Reply(Reply::Error(e.as_str().unwrap_or_default().to_string()))
        } else {
            match entry.get("fail").and_then(Value::as_str) {
                Some("timeout") => Answer::Timeout,
                Some("overloaded") => Answer::Overloaded,
                Some(other) => Answer::Failed(other.to_string()),
                None => return Err(format!("script entry {entry} gives no answer")),
            }
        };
        Ok((Some(answer), advance))
    }

    pub fn done(&self) -> R<()> {
        match self.entries.get(self.next) {
            Some(e) => Err(format!("scripted store entries left unused, from {e}")),
            None => Ok(()),
        }
    }
}

pub fn check_step(want: &Value, step: &Step) -> R<()> {
    let got = match step {
        Step::Done(v) => json!({"done": v.status.unwrap_or(200)}),
        Step::Wait { .. } => json!("wait"),
        Step::Calls { calls, .. } => {
            json!({"calls": calls.iter().map(|c| args_json(&c.args.to_vecs())).collect::<Vec<_>>()})
        }
    };
    matches(want, &got, "step")
}

pub fn expect_calls(want: Option<&Value>, calls: &[Call]) -> R<()> {
    let Some(want) = want else {
        return Ok(());
    };
    let got: Vec<Value> = calls.iter().map(|c| args_json(&c.args.to_vecs())).collect();
    matches(want, &Value::Array(got), "calls")
}

/// A header value: a string, or `{"hex": "e9"}` for bytes that are not UTF-8, or
/// `{"repeat": "a", "times": 257}`.
pub fn bytes(v: &Value) -> Vec<u8> {
    if let Some(hex) = v.get("hex").and_then(Value::as_str) {
        return (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
    }
    if let Some(text) = v.get("repeat").and_then(Value::as_str) {
        let times = v["times"].as_u64().unwrap() as usize;
        return text.repeat(times).into_bytes();
    }
    v.as_str().unwrap_or_default().as_bytes().to_vec()
}

pub fn args_json(args: &[Vec<u8>]) -> Value {
    Value::Array(
        args.iter()
            .map(|a| match std::str::from_utf8(a) {
                Ok(text) => json!(text),
                Err(_) => json!({"hex": a.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
            })
            .collect(),
    )
}

pub fn reply_of(v: &Value) -> Reply {
    match v {
        Value::Null => Reply::Nil,
        Value::Bool(b) => Reply::Int(i64::from(*b)),
        Value::Number(n) => Reply::Int(n.as_i64().unwrap_or_default()),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Array(a) => Reply::Array(a.iter().map(reply_of).collect()),
        Value::Object(o) => match (o.get("error"), o.get("status"), o.get("map")) {
            (Some(e), _, _) => Reply::Error(e.as_str().unwrap_or_default().to_string()),
            (_, Some(s), _) => Reply::Status(s.as_str().unwrap_or_default().to_string()),
            (_, _, Some(Value::Array(pairs))) => Reply::Map(
                pairs
                    .iter()
                    .map(|p| (reply_of(&p[0]), reply_of(&p[1])))
                    .collect(),
            ),
            _ => Reply::Nil,
        },
    }
}

pub fn duration_us(v: &Value) -> R<u64> {
    let text = v.as_str().ok_or("a duration is a string like 250ms")?;
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = digits.parse().map_err(|_| format!("bad duration {text}"))?;
    let scale = match unit {
        "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        _ => return Err(format!("bad duration unit in {text}")),
    };
    Ok(n * scale)
}

/// `want` matches `got`: equal, or `{"$range": [lo, hi]}` for a number, `{"$any": true}` for
/// anything present, an object's listed fields only (`{"$exact": {...}}` for all), an array
/// element by element.
pub fn matches(want: &Value, got: &Value, what: &str) -> R<()> {
    let fail = || Err(format!("{what}: expected {want}, got {got}"));
    match want {
        Value::String(s) if s == "*" => Ok(()),
        Value::Object(w) if w.contains_key("$range") => {
            let lo = w["$range"][0].as_f64().unwrap_or(f64::MIN);
            let hi = w["$range"][1].as_f64().unwrap_or(f64::MAX);
            match got.as_f64() {
                Some(g) if g >= lo && g <= hi => Ok(()),
                _ => fail(),
            }
        }
        Value::Object(w) if w.contains_key("$any") => {
            if got.is_null() {
                fail()
            } else {
                Ok(())
            }
        }
        Value::Object(w) if w.contains_key("$exact") => {
            if &w["$exact"] == got {
                Ok(())
            } else {
                fail()
            }
        }
        Value::Object(w) => {
            let Value::Object(g) = got else {
                return fail();
            };
            for (k, v) in w {
                matches(v, g.get(k).unwrap_or(&Value::Null), &format!("{what}.{k}"))?;
            }
            Ok(())
        }
        Value::Array(w) => {
            let Value::Array(g) = got else {
                return fail();
            };
            if w.len() != g.len() {
                return fail();
            }
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                matches(w, g, &format!("{what}[{i}]"))?;
            }
            Ok(())
        }
        Value::Number(n) => match (n.as_f64(), got.as_f64()) {
            (Some(a), Some(b)) if a == b => Ok(()),
            _ => fail(),
        },
        _ if want == got => Ok(()),
        _ => fail(),
    }
}
