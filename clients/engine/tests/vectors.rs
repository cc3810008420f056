//! Runs the executable contract in `clients/vectors/`: every policy document gives the outcome
//! it states, and every scenario's requests, clock steps and store replies give the statuses,
//! headers, bodies, store calls and metrics it states. Every binding runs the same files; the
//! format is `clients/vectors/README.md`.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rl_engine::engine::Check;
use rl_engine::memory::MemoryStore;
use rl_engine::{
    Answer, Call, Caller, Engine, Holdings, Instant, Metrics, Options, Pending, Policy, Request,
    Step, Verdict,
};
use serde_json::{json, Value};

mod contract;
use contract::{args_json, bytes, check_step, duration_us, expect_calls, matches, Script, R};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vectors")
}

#[test]
fn policy_documents_give_their_stated_outcome() {
    let mut cases = Vec::new();
    for file in json_files(&vectors_dir().join("policies")) {
        let text = std::fs::read_to_string(&file).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        set_env(&doc);
        cases.extend(doc["policies"].as_array().unwrap().iter().cloned());
    }
    assert!(cases.len() >= 100, "only {} policy documents", cases.len());
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        // `text` gives the document's exact bytes, for messages that cite a position.
        let doc = match case["text"].as_str() {
            Some(text) => text.to_string(),
            None => serde_json::to_string(&case["policy"]).unwrap(),
        };
        let got = Policy::from_json_at(&doc, Instant::from_micros(START_US));
        match &case["error"] {
            Value::Null => {
                if let Err(e) = got {
                    panic!("{name}: refused with {e}");
                }
            }
            Value::String(want) => match got {
                Ok(_) => panic!("{name}: accepted, expected {want}"),
                Err(e) => assert_eq!(&e.to_string(), want, "{name}"),
            },
            other => panic!("{name}: error must be a string or null, not {other}"),
        }
    }
}

#[test]
fn scenarios_give_their_stated_responses() {
    let files = json_files(&vectors_dir().join("scenarios"));
    let mut count = 0;
    let mut failures = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let doc: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        set_env(&doc);
        let policies = doc["policies"].as_object().cloned().unwrap_or_default();
        for scenario in doc["scenarios"].as_array().unwrap() {
            count += 1;
            let name = format!(
                "{}: {}",
                file.file_name().unwrap().to_string_lossy(),
                scenario["name"].as_str().unwrap()
            );
            if let Err(e) = Run::new(scenario, &policies).and_then(|mut r| r.run(scenario)) {
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} scenarios failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        count >= 100,
        "the contract holds {count} scenarios, fewer than 100"
    );
}

/// A file's `env`: the variables its documents read (the identity hash key), set before they
/// load. Every file that sets one gives it the same value, so the order files run in does not
/// matter.
fn set_env(doc: &Value) {
    for (name, value) in doc["env"].as_object().into_iter().flatten() {
        std::env::set_var(name, value.as_str().unwrap());
    }
}

fn json_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// The clock every scenario starts at: 2026-01-01T00:00:00Z, in microseconds.
const START_US: u64 = 1_767_225_600_000_000;

struct Run {
    engine: Engine,
    metrics: Arc<Metrics>,
    store: MemoryStore,
    now: u64,
    pending: HashMap<String, (Pending, Step)>,
    leases: HashMap<String, (Holdings, u64)>,
}

impl Run {
    fn new(scenario: &Value, policies: &serde_json::Map<String, Value>) -> R<Run> {
        let policy = match &scenario["policy"] {
            Value::String(name) => policies
                .get(name)
                .ok_or_else(|| format!("no policy named {name}"))?
                .clone(),
            other => other.clone(),
        };
        let policy = Policy::from_json_at(&policy.to_string(), Instant::from_micros(START_US))
            .map_err(|e| e.to_string())?;
        let o = &scenario["options"];
        let options = Options {
            legacy_headers: o["legacy_headers"].as_bool().unwrap_or(false),
            log_sample: o["log_sample"].as_f64().unwrap_or(0.0),
            log_per_second: o["log_per_second"].as_u64().unwrap_or(100),
            seed: o["seed"].as_u64().unwrap_or(1),
            table_bytes: o["table_bytes"]
                .as_u64()
                .and_then(|b| usize::try_from(b).ok())
                .unwrap_or(rl_engine::engine::DEFAULT_TABLE_BYTES),
            cluster: o["cluster"].as_bool().unwrap_or(false),
        };
        let metrics = Arc::new(Metrics::default());
        Ok(Run {
            engine: Engine::new(policy, Arc::clone(&metrics), options),
            metrics,
            store: MemoryStore::new(),
            now: START_US,
            pending: HashMap::new(),
            leases: HashMap::new(),
        })
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.now)
    }

    fn run(&mut self, scenario: &Value) -> R<()> {
        let steps = scenario["steps"].as_array().ok_or("no steps")?;
        for (i, step) in steps.iter().enumerate() {
            self.step(step).map_err(|e| format!("step {i}: {e}"))?;
        }
        Ok(())
    }

    fn step(&mut self, step: &Value) -> R<()> {
        if let Some(d) = step.get("advance") {
            self.now = self.now.saturating_add(duration_us(d)?);
            return Ok(());
        }
        if let Some(times) = step.get("repeat") {
            let n = times.as_u64().ok_or("repeat must be a count")?;
            let body = step.get("do").ok_or("repeat without do")?;
            for k in 0..n {
                self.step(body)
                    .map_err(|e| format!("repetition {k}: {e}"))?;
            }
            return Ok(());
        }
        if let Some(request) = step.get("request") {
            return self.request(request, step);
        }
        if let Some(check) = step.get("check") {
            return self.check(check, step);
        }
        if let Some(id) = step.get("resume").and_then(Value::as_str) {
            let (mut pending, first) = self.pending.remove(id).ok_or("no such held request")?;
            let mut script = Script::new(step.get("store"));
            let verdict = self.drive(&mut pending, first, &mut script)?;
            script.done()?;
            return self.check_verdict(step, &verdict, &script);
        }
        if let Some(id) = step.get("drop").and_then(Value::as_str) {
            let (mut pending, _) = self.pending.remove(id).ok_or("no such held request")?;
            let calls = pending.abandon();
            return expect_calls(step.get("calls"), &calls);
        }
        if let Some(id) = step.get("finish").and_then(Value::as_str) {
            // The lease stays known: a later `tick` or `finish` of it must give nothing.
            let actual = step.get("actual_cost").and_then(Value::as_str);
            // The response's status: 200 unless the step says otherwise (`null`: unknown).
            let status = match step.get("status") {
                None => Some(200),
                Some(s) => s.as_u64().and_then(|s| u16::try_from(s).ok()),
            };
            let now = self.now();
            let (lease, _) = self.leases.get_mut(id).ok_or("no lease of that request")?;
            lease.answered(status, now);
            let calls = lease.finish(status, actual.map(str::as_bytes));
            expect_calls(step.get("calls"), &calls)?;
            self.send_to_memory(&calls);
            return Ok(());
        }
        if let Some(id) = step.get("tick").and_then(Value::as_str) {
            let now = self.now();
            let (lease, started) = self.leases.get_mut(id).ok_or("no lease of that request")?;
            let calls = lease.tick(Instant::from_micros(*started), now);
            expect_calls(step.get("calls"), &calls)?;
            self.send_to_memory(&calls);
            return Ok(());
        }
        if let Some(doc) = step.get("reload") {
            let at = Instant::from_micros(self.now);
            let result =
                Policy::from_json_at(&doc.to_string(), at).and_then(|p| self.engine.reload(p));
            return match (result, step.get("error").and_then(Value::as_str)) {
                (Ok(_), None) => Ok(()),
                (Ok(_), Some(want)) => Err(format!("reload accepted, expected {want}")),
                (Err(e), Some(want)) if e.to_string() == want => Ok(()),
                (Err(e), _) => Err(format!("reload refused: {e}")),
            };
        }
        if let Some(want) = step.get("metrics") {
            return self.check_metrics(want);
        }
        if let Some(want) = step.get("tables") {
            let t = self.engine.tables();
            let got = json!({
                "negative_cache": t.negative_cache.entries,
                "chunks": t.chunks.entries,
                "fallback": t.fallback.entries,
            });
            return matches(want, &got, "tables");
        }
        Err(format!("unknown step {step}"))
    }

    fn request(&mut self, request: &Value, step: &Value) -> R<()> {
        let headers: Vec<(String, Vec<u8>)> = match &request["headers"] {
            Value::Object(map) => map
                .iter()
                .flat_map(|(k, v)| match v {
                    Value::Array(values) => values.iter().map(|v| (k.clone(), bytes(v))).collect(),
                    v => vec![(k.clone(), bytes(v))],
                })
                .collect(),
            _ => Vec::new(),
        };
        let caller = request.get("caller").map(|c| Caller {
            user: c["user"].as_str().map(str::to_string),
            tenant: c["tenant"].as_str().map(str::to_string),
        });
        let peer = request["peer"]
            .as_str()
            .unwrap_or("192.0.2.1")
            .parse()
            .map_err(|e| format!("peer: {e}"))?;
        let req = Request {
            method: request["method"].as_str().unwrap_or("GET"),
            path: request["path"].as_str().ok_or("request without a path")?,
            headers: &headers,
            peer: Some(peer),
            caller: caller.as_ref(),
            case_insensitive: request["case_insensitive"].as_bool().unwrap_or(false),
        };
        if step.get("shed").and_then(Value::as_bool) == Some(true) {
            // The driver sheds the request before deciding it: no store call at all.
            let verdict = self.engine.shed(&req, self.now());
            return self.check_verdict(step, &verdict, &Script::new(None));
        }
        let started = self.now;
        let (mut pending, first) = self.engine.begin(&req, self.now());
        if let Some(id) = step.get("hold").and_then(Value::as_str) {
            // Held after its first step, unanswered: the next requests run beside it.
            if let Some(want) = step.get("step") {
                check_step(want, &first)?;
            }
            self.pending.insert(id.to_string(), (pending, first));
            return Ok(());
        }
        let mut script = Script::new(step.get("store"));
        let verdict = self.drive(&mut pending, first, &mut script)?;
        script.done()?;
        self.check_verdict(step, &verdict, &script)?;
        if let Some(id) = step.get("id").and_then(Value::as_str) {
            self.leases
                .insert(id.to_string(), (pending.holdings(), started));
        }
        Ok(())
    }

    /// Keyed checks under a route, each naming a rule of the policy.
    fn check(&mut self, check: &Value, step: &Value) -> R<()> {
        let route = check["route"].as_str().ok_or("check without a route")?;
        let policy = self.engine.policy();
        let items = check["items"].as_array().ok_or("check without items")?;
        let mut checks = Vec::with_capacity(items.len());
        for item in items {
            let name = item["rule"].as_str().ok_or("a check without a rule")?;
            let rule = policy
                .rules
                .get(name)
                .ok_or_else(|| format!("no rule {name}"))?;
            checks.push(Check {
                rule: Arc::clone(rule),
                key: item["key"]
                    .as_str()
                    .ok_or("a check without a key")?
                    .to_string(),
                cost: item["cost"].as_u64().unwrap_or(1),
                blocked: item["blocked"].as_bool().unwrap_or(false),
            });
        }
        let (mut pending, first) = self.engine.check(route, checks, self.now());
        let mut script = Script::new(step.get("store"));
        let verdict = self.drive(&mut pending, first, &mut script)?;
        script.done()?;
        self.check_verdict(step, &verdict, &script)?;
        if let Some(want) = step.get("expect").and_then(|e| e.get("checks")) {
            let got: Vec<Value> = verdict
                .checks
                .iter()
                .map(|c| {
                    json!({
                        "over": c.over,
                        "remaining": c.remaining,
                        "reset_after_ms": c.reset_after_ms,
                        "retry_after_ms": c.retry_after_ms,
                        "source": format!("{:?}", c.source).to_lowercase(),
                    })
                })
                .collect();
            matches(want, &Value::Array(got), "checks")?;
        }
        Ok(())
    }

    /// Answers each step from the script, or from the memory store when the script has no
    /// entries left for it and allows that.
    fn drive(&mut self, pending: &mut Pending, mut step: Step, script: &mut Script) -> R<Verdict> {
        for _ in 0..64 {
            match step {
                Step::Done(verdict) => {
                    self.send_to_memory(&verdict.background);
                    return Ok(verdict);
                }
                Step::Wait { until } => {
                    if let Some(advance) = script.wait()? {
                        self.now = self.now.saturating_add(advance);
                    } else {
                        self.now = until.as_micros();
                    }
                    step = self.engine.resume(pending, Vec::new(), self.now());
                }
                Step::Calls { calls, deadline } => {
                    script
                        .deadlines
                        .push(deadline.as_micros().saturating_sub(self.now));
                    let mut answers = Vec::new();
                    for call in &calls {
                        script.made.push(call.args.to_vecs());
                        let (answer, advance) = script.next(call)?;
                        self.now = self.now.saturating_add(advance);
                        let answer = answer.unwrap_or_else(|| {
                            Answer::Reply(self.store.call(&call.args.to_vecs(), self.now))
                        });
                        answers.push(answer);
                    }
                    step = self.engine.resume(pending, answers, self.now());
                }
            }
        }
        Err("more than 64 steps for one request".into())
    }

    fn send_to_memory(&mut self, calls: &[Call]) {
        for call in calls {
            self.store.call(&call.args.to_vecs(), self.now);
        }
    }

    fn check_verdict(&mut self, step: &Value, v: &Verdict, script: &Script) -> R<()> {
        let Some(want) = step.get("expect") else {
            return Ok(());
        };
        let status = v.status.unwrap_or(200);
        if let Some(s) = want.get("status") {
            matches(s, &json!(status), "status")?;
        }
        if let Some(o) = want.get("outcome") {
            matches(o, &json!(v.outcome.map(|o| o.name())), "outcome")?;
        }
        if let Some(k) = want.get("kind") {
            let kind = format!("{:?}", v.kind).to_lowercase();
            matches(k, &json!(kind), "kind")?;
        }
        if let Some(r) = want.get("route") {
            matches(r, &json!(v.route), "route")?;
        }
        if let Some(h) = want.get("headers") {
            let got: serde_json::Map<String, Value> = v
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            let want = h.as_object().ok_or("headers must be an object")?;
            for (name, value) in want {
                match (value, got.get(name)) {
                    (Value::Null, None) => {}
                    (Value::Null, Some(g)) => {
                        return Err(format!("header {name} is {g}, expected none"))
                    }
                    (_, None) => return Err(format!("no header {name}; headers {:?}", v.headers)),
                    (w, Some(g)) => {
                        // Retry-After is a number of seconds: a range compares it as one.
                        let g = match (w, g.as_str().and_then(|s| s.parse::<u64>().ok())) {
                            (Value::Object(_), Some(n)) => json!(n),
                            _ => g.clone(),
                        };
                        matches(w, &g, &format!("header {name}"))?
                    }
                }
            }
        }
        if let Some(true) = want.get("no_rate_headers").and_then(Value::as_bool) {
            if let Some((k, _)) = v.headers.iter().find(|(k, _)| k.starts_with("RateLimit")) {
                return Err(format!("unexpected header {k}"));
            }
        }
        if let Some(p) = want.get("problem") {
            let got = match &v.problem {
                Some(p) => serde_json::from_str::<Value>(&p.body).map_err(|e| e.to_string())?,
                None => Value::Null,
            };
            matches(p, &got, "problem")?;
        }
        if let Some(c) = want.get("calls") {
            let made: Vec<Value> = script.made.iter().map(|a| args_json(a)).collect();
            matches(c, &Value::Array(made), "calls")?;
        }
        if let Some(d) = want.get("deadlines_ms") {
            let got: Vec<u64> = script.deadlines.iter().map(|us| us / 1000).collect();
            matches(d, &json!(got), "deadlines_ms")?;
        }
        if let Some(b) = want.get("background") {
            expect_calls(Some(b), &v.background)?;
        }
        if let Some(l) = want.get("log") {
            let got: Vec<Value> = v
                .log
                .iter()
                .map(|r| {
                    json!({
                        "rule": r.rule,
                        "outcome": r.outcome,
                        "level": format!("{:?}", r.level).to_lowercase(),
                        "reason": r.reason,
                        "route": r.route,
                        "plan": r.plan,
                        "policy_version": r.policy_version,
                        "decision": r.decision,
                    })
                })
                .collect();
            matches(l, &Value::Array(got), "log")?;
        }
        Ok(())
    }

    fn check_metrics(&self, want: &Value) -> R<()> {
        let text = self.metrics.render_at(Instant::from_micros(self.now));
        for (series, value) in want.as_object().ok_or("metrics must be an object")? {
            let got = text
                .lines()
                .find_map(|l| l.strip_prefix(series.as_str())?.strip_prefix(' '))
                .map(|v| v.parse::<f64>().unwrap_or(f64::NAN));
            match (value, got) {
                (Value::Null, None) => {}
                (Value::Null, Some(g)) => return Err(format!("{series} is {g}, expected none")),
                (_, None) => return Err(format!("no series {series} in\n{text}")),
                (w, Some(g)) => matches(w, &json!(g), series)?,
            }
        }
        Ok(())
    }
}
