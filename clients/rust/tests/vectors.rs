//! Runs `clients/vectors/*.json` (format in `clients/SPEC.md`) against a real server with the
//! module, over RESP2 and RESP3: the typed request must build exactly the vector's arguments,
//! the raw reply must be the vector's, and the typed client must parse it into the vector's
//! decision and render the vector's headers. With `RL_MODE=script` the server has no module and
//! the same vectors run through the script (`clients/SPEC.md` section 5).

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Value};
use redis_rl_client::client::{cmd_of, error_of};
use redis_rl_client::Mode;
use redis_rl_client::{Acquire, Admit, Algo, Error, Grant, Multi, MultiRule, Rl};
use rl_engine::headers::{self, HeaderOutcome as Outcome, HeaderRule as RuleSpec};
use rl_engine::wire::Args;
use serde_json::{json, Value as J};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A prefix no other run of any vector uses, for `$p`.
fn fresh_prefix() -> String {
    format!(
        "v{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Replaces `$p` in every string.
fn substitute(v: &J, prefix: &str) -> J {
    match v {
        J::String(s) => J::String(s.replace("$p", prefix)),
        J::Array(items) => J::Array(items.iter().map(|i| substitute(i, prefix)).collect()),
        J::Object(map) => J::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, prefix)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn to_json(v: &Value) -> J {
    match v {
        Value::Nil => J::Null,
        Value::Int(n) => json!(n),
        Value::BulkString(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => J::String(s.clone()),
        Value::Okay => json!("OK"),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect()),
        Value::Map(pairs) => J::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let J::String(k) = to_json(k) else {
                        panic!("map key {k:?}")
                    };
                    (k, to_json(v))
                })
                .collect(),
        ),
        other => panic!("no JSON form for {other:?}"),
    }
}

/// `expected` may hold `{"$range": [lo, hi]}` (an integer within) and `{"$any": true}`
/// (anything but null).
fn matches(expected: &J, actual: &J) -> bool {
    match expected {
        J::Object(m) if m.contains_key("$range") => {
            let bounds = &m["$range"];
            match (bounds[0].as_i64(), bounds[1].as_i64(), actual.as_i64()) {
                (Some(lo), Some(hi), Some(n)) => (lo..=hi).contains(&n),
                _ => false,
            }
        }
        J::Object(m) if m.contains_key("$any") => !actual.is_null(),
        J::Object(m) => {
            let Some(a) = actual.as_object() else {
                return false;
            };
            a.len() == m.len()
                && m.iter()
                    .all(|(k, v)| a.get(k).is_some_and(|got| matches(v, got)))
        }
        J::Array(items) => actual.as_array().is_some_and(|a| {
            a.len() == items.len() && items.iter().zip(a).all(|(e, g)| matches(e, g))
        }),
        other => other == actual,
    }
}

fn u(req: &J, field: &str) -> u64 {
    req[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {req}"))
}

fn opt_u(req: &J, field: &str) -> Option<u64> {
    req.get(field).and_then(J::as_u64)
}

fn s(req: &J, field: &str) -> String {
    req[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {req}"))
        .to_string()
}

/// `<name>_ms`, or `<name>_us` for durations finer than a millisecond.
fn dur(req: &J, name: &str) -> Option<Duration> {
    opt_u(req, &format!("{name}_ms"))
        .map(Duration::from_millis)
        .or_else(|| opt_u(req, &format!("{name}_us")).map(Duration::from_micros))
}

fn algo(req: &J) -> Option<Algo> {
    req.get("algo").and_then(J::as_str).map(|name| {
        Algo::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .unwrap_or_else(|| panic!("algo {name}"))
    })
}

fn admit_of(req: &J) -> Admit {
    let mut a = Admit::new(s(req, "key"), u(req, "limit"), dur(req, "period").unwrap());
    a.burst = opt_u(req, "burst");
    a.cost = opt_u(req, "cost");
    a.algo = algo(req);
    a.dry_run = req.get("dry_run").and_then(J::as_bool).unwrap_or(false);
    a.reserve = req
        .get("reserve")
        .map(|r| (s(r, "id").into_bytes(), dur(r, "keep")));
    a
}

fn multi_of(req: &J) -> Multi {
    let rules = req["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut rule = MultiRule::new(
                s(r, "name"),
                s(r, "key"),
                u(r, "limit"),
                dur(r, "period").unwrap(),
            );
            rule.burst = opt_u(r, "burst");
            rule.cost = opt_u(r, "cost");
            rule.algo = algo(r);
            rule
        })
        .collect();
    let mut m = Multi::new(rules);
    m.dry_run = req.get("dry_run").and_then(J::as_bool).unwrap_or(false);
    m
}

fn grant_of(req: &J) -> Grant {
    let mut g = Grant::new(
        s(req, "key"),
        u(req, "limit"),
        dur(req, "period").unwrap(),
        u(req, "want"),
    );
    g.burst = opt_u(req, "burst");
    g.algo = algo(req);
    g.ttl = dur(req, "ttl");
    g
}

fn acquire_of(req: &J) -> Acquire {
    let mut a = Acquire::new(
        s(req, "key"),
        u(req, "capacity"),
        dur(req, "lease").unwrap(),
    );
    a.holder = req.get("holder").map(|_| s(req, "holder").into_bytes());
    a
}

/// The command the typed API builds for `req`.
fn build(req: &J) -> Result<Cmd, Error> {
    build_args(req).map(|a| cmd_of(a.iter()))
}

fn build_args(req: &J) -> Result<Args, Error> {
    use redis_rl_client::command;
    let key = || s(req, "key").into_bytes();
    match req["type"].as_str().unwrap() {
        "admit" => admit_of(req).args(),
        "multi" => multi_of(req).args(),
        "grant" => grant_of(req).args(),
        "acquire" => acquire_of(req).args(),
        "release" => Ok(command::release(&key(), s(req, "holder").as_bytes())),
        "renew" => command::renew(
            &key(),
            s(req, "holder").as_bytes(),
            dur(req, "lease").unwrap(),
        ),
        "settle" if req["forget"].as_bool() == Some(true) => Ok(command::settle_and_forget(
            &key(),
            s(req, "id").as_bytes(),
            u(req, "actual"),
        )),
        "settle" => Ok(command::settle(
            &key(),
            s(req, "id").as_bytes(),
            u(req, "actual"),
        )),
        "info" => Ok(command::info(&key())),
        other => panic!("request type {other}"),
    }
}

fn words(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Arg::Cursor => panic!("cursor"),
        })
        .collect()
}

/// Calls the typed API and returns the decision as the vectors write it, with the headers it
/// renders (admit and multi only).
async fn typed(
    rl: &Rl<MultiplexedConnection>,
    req: &J,
    rule_name: Option<&str>,
) -> Result<(J, Option<J>), Error> {
    let k = || s(req, "key").into_bytes();
    Ok(match req["type"].as_str().unwrap() {
        "admit" => {
            let a = admit_of(req);
            let d = rl.admit(&a).await?;
            let rendered = rule_name.map(|name| {
                let rule = RuleSpec {
                    name: name.to_string(),
                    limit: a.limit,
                    period: a.period,
                    capacity: d.capacity,
                    semaphore: false,
                };
                let outcome = Outcome {
                    remaining: d.remaining,
                    reset_after_ms: d.reset_after_ms,
                    retry_after_ms: (!d.allowed).then_some(d.retry_after_ms),
                };
                header_json(&[(rule, outcome)])
            });
            let j = json!({"allowed": d.allowed, "remaining": d.remaining,
                "retry_after_ms": d.retry_after_ms, "reset_after_ms": d.reset_after_ms,
                "capacity": d.capacity});
            (j, rendered)
        }
        "multi" => {
            let m = multi_of(req);
            let d = rl.multi(&m).await?;
            let pairs: Vec<_> = m
                .rules
                .iter()
                .zip(&d.rules)
                .map(|(rule, got)| {
                    let spec = RuleSpec {
                        name: rule.name.clone(),
                        limit: rule.limit,
                        period: rule.period,
                        capacity: rule.burst.unwrap_or(rule.limit),
                        semaphore: false,
                    };
                    let refused = d.denied_by.as_deref() == Some(rule.name.as_str());
                    let outcome = Outcome {
                        remaining: got.remaining,
                        reset_after_ms: got.reset_after_ms,
                        retry_after_ms: refused.then_some(d.retry_after_ms),
                    };
                    (spec, outcome)
                })
                .collect();
            let rules: Vec<J> = d
                .rules
                .iter()
                .map(|r| json!({"name": r.name, "remaining": r.remaining, "reset_after_ms": r.reset_after_ms}))
                .collect();
            let j = json!({"allowed": d.allowed, "denied_by": d.denied_by,
                "retry_after_ms": d.retry_after_ms, "rules": rules});
            (j, Some(header_json(&pairs)))
        }
        "grant" => {
            let g = rl.grant(&grant_of(req)).await?;
            let j = json!({"granted": g.granted, "remaining": g.remaining,
                "valid_ms": g.valid_ms, "retry_after_ms": g.retry_after_ms});
            (j, None)
        }
        "acquire" => {
            let l = rl.acquire(&acquire_of(req)).await?;
            let holder = l.holder.map(|h| String::from_utf8_lossy(&h).into_owned());
            let j = json!({"acquired": l.acquired, "holder": holder,
                "in_flight": l.in_flight, "retry_after_ms": l.retry_after_ms});
            (j, None)
        }
        "release" => (
            json!(rl.release(&k(), s(req, "holder").as_bytes()).await?),
            None,
        ),
        "renew" => {
            let lease = dur(req, "lease").unwrap();
            (
                json!(rl.renew(&k(), s(req, "holder").as_bytes(), lease).await?),
                None,
            )
        }
        "settle" => {
            let (id, actual) = (s(req, "id"), u(req, "actual"));
            let st = if req["forget"].as_bool() == Some(true) {
                rl.settle_and_forget(&k(), id.as_bytes(), actual).await?
            } else {
                rl.settle(&k(), id.as_bytes(), actual).await?
            };
            let j = st.map_or(
                J::Null,
                |st| json!({"delta": st.delta, "remaining": st.remaining}),
            );
            (j, None)
        }
        "info" => {
            let Some(i) = rl.info(&k()).await? else {
                return Ok((J::Null, None));
            };
            let mut m = serde_json::Map::new();
            m.insert("algo".into(), json!(i.algo.name()));
            for (name, v) in [
                ("limit", Some(i.limit)),
                ("period_ms", Some(i.period_ms)),
                ("capacity", Some(i.capacity)),
                ("remaining", Some(i.remaining)),
                ("reset_after_ms", Some(i.reset_after_ms)),
                ("tat_us", i.tat_us),
                ("updated_us", i.updated_us),
                ("window_start_ms", i.window_start_ms),
                ("count", i.count),
                ("previous", i.previous),
                ("current", i.current),
                ("entries", i.entries),
                ("logged_units", i.logged_units),
                ("in_flight", i.in_flight),
                ("next_expiry_ms", i.next_expiry_ms),
                ("reservations", i.reservations),
                ("debt", i.debt),
            ] {
                if let Some(v) = v {
                    m.insert(name.into(), json!(v));
                }
            }
            if let Some(t) = i.tokens {
                m.insert("tokens".into(), json!(t));
            }
            m.insert("ttl_ms".into(), json!(i.ttl_ms));
            (J::Object(m), None)
        }
        other => panic!("request type {other}"),
    })
}

fn header_json(rules: &[(RuleSpec, Outcome)]) -> J {
    J::Object(
        headers::render(rules, true)
            .into_iter()
            .map(|(k, v)| (k.to_string(), J::String(v)))
            .collect(),
    )
}

/// `cmd` as this run sends it raw: itself, or in script mode the script call standing for a
/// command of the module's (a setup's `SET` stays a `SET`).
fn as_sent(cmd: Cmd) -> Cmd {
    let ours = cmd
        .args_iter()
        .next()
        .is_some_and(|name| matches!(name, redis::Arg::Simple(n) if n.starts_with(b"RL.")));
    if common::script_mode() && ours {
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                redis::Arg::Cursor => None,
            })
            .collect();
        let mut native = Args::new(&String::from_utf8_lossy(&args[0]));
        for a in &args[1..] {
            native.arg(a.as_slice());
        }
        cmd_of(native.encode(Mode::Script).unwrap())
    } else {
        cmd
    }
}

async fn run_setup(conn: &mut MultiplexedConnection, setup: &J) {
    for line in setup.as_array().unwrap() {
        let mut cmd = redis::cmd(line[0].as_str().unwrap());
        for arg in &line.as_array().unwrap()[1..] {
            cmd.arg(arg.as_str().unwrap());
        }
        conn.req_packed_command(&as_sent(cmd))
            .await
            .unwrap_or_else(|e| panic!("setup {line}: {e}"));
    }
}

async fn run_vector(server: &common::Server, resp3: bool, vector: &J) {
    let name = vector["name"].as_str().unwrap();
    let proto = if resp3 { "RESP3" } else { "RESP2" };
    let url = format!(
        "redis://127.0.0.1:{}/{}",
        server.port,
        if resp3 { "?protocol=resp3" } else { "" }
    );
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let rl = Rl::new(conn.clone());

    if let Some(kind) = vector.get("client_error") {
        assert_eq!(kind, "invalid_request", "{name}");
        let v = substitute(vector, &fresh_prefix());
        let got = typed(&rl, &v["request"], None).await;
        assert!(
            matches!(got, Err(Error::InvalidRequest(_))),
            "{name}: {got:?}"
        );
        return;
    }

    // The raw command: the arguments the typed request builds, and the reply as sent.
    let v = substitute(vector, &fresh_prefix());
    let cmd = build(&v["request"]).unwrap_or_else(|e| panic!("{name}: {e}"));
    let want_args: Vec<String> = v["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(words(&cmd), want_args, "{name}: arguments");
    run_setup(&mut conn, &v["setup"]).await;
    // A multiplexed connection hands a server's error back as a value.
    let raw = match conn.req_packed_command(&as_sent(cmd)).await {
        Ok(Value::ServerError(e)) => Err(redis::RedisError::from(e)),
        other => other,
    };
    match v.get("error") {
        Some(text) => {
            let e = error_of(&raw.expect_err(name));
            assert!(
                matches!(&e, Error::Refused(t) if t == text.as_str().unwrap()),
                "{name} ({proto}): {e:?}"
            );
        }
        None => {
            let got = to_json(&raw.unwrap_or_else(|e| panic!("{name} ({proto}): {e}")));
            // A script replies arrays whatever the protocol (clients/SPEC.md section 5).
            let want = &v[if resp3 && !common::script_mode() {
                "resp3"
            } else {
                "resp2"
            }];
            assert!(matches(want, &got), "{name} ({proto}): {got} is not {want}");
        }
    }

    // The typed call, on fresh keys set up again.
    let v = substitute(vector, &fresh_prefix());
    run_setup(&mut conn, &v["setup"]).await;
    let rule_name = v.get("rule_name").and_then(J::as_str);
    let got = typed(&rl, &v["request"], rule_name).await;
    match v.get("error") {
        Some(text) => assert!(
            matches!(&got, Err(Error::Refused(t)) if t == text.as_str().unwrap()),
            "{name} ({proto}): {got:?}"
        ),
        None => {
            let (decision, rendered) = got.unwrap_or_else(|e| panic!("{name} ({proto}): {e}"));
            assert!(
                matches(&v["decision"], &decision),
                "{name} ({proto}): {decision} is not {}",
                v["decision"]
            );
            if let Some(want) = v.get("headers") {
                let rendered = rendered.unwrap_or(J::Null);
                for (header, value) in want.as_object().unwrap() {
                    assert_eq!(&rendered[header], value, "{name} ({proto}): {header}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_vector_over_resp2_and_resp3() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vectors in {}", dir.display());
    let server = common::Server::start();
    if common::script_mode() {
        // The raw calls are EVALSHA of the script the typed client loads on its first call.
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(redis_rl_client::mode::SCRIPT)
            .query(&mut server.conn())
            .unwrap();
    }
    let mut count = 0;
    for file in files {
        let doc: J = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(doc["format"], 1, "{}", file.display());
        for vector in doc["vectors"].as_array().unwrap() {
            for resp3 in [false, true] {
                run_vector(&server, resp3, vector).await;
            }
            count += 1;
        }
    }
    assert!(count >= 50, "only {count} vectors");
}
