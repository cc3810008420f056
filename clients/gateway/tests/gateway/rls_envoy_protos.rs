//! The rate limit face of the real binary asked by a gRPC client generated from Envoy's own
//! protos rather than built from the server's types: `tests/envoy_client.py`, the PyPI package
//! `envoy-data-plane` (betterproto2 classes generated from Envoy's data-plane API) over grpcio,
//! which `scripts/deps --valkey` installs. The interpreter is `$RL_PYTHON`, or `python3`.
//!
//! Against `memory://`, then against a real server with the module, killed and started again
//! while that client's requests run: under `on_store_error: deny` it sees the gRPC status
//! UNAVAILABLE while the store is down and OK once it is back. No assertion on time.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::Server;
use crate::support::Gateway;
use serde_json::{json, Value};

fn python() -> String {
    std::env::var("RL_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/envoy_client.py")
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ratelimit.yaml")
}

/// Runs the script with `args`: its exit code, stdout and stderr.
fn client(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(python())
        .arg(script())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        !stderr.contains("ModuleNotFoundError"),
        "{} lacks the Envoy client's packages (scripts/deps --valkey installs them):\n{stderr}",
        python()
    );
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        stderr,
    )
}

/// The scenario's JSON summary, which it prints only when every check held.
fn scenario(addr: &str) -> Value {
    let (code, stdout, stderr) = client(&["scenario", addr]);
    assert_eq!(code, Some(0), "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

fn remaining(answer: &Value) -> Vec<u64> {
    answer["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["remaining"].as_u64().unwrap())
        .collect()
}

fn codes(answer: &Value) -> Vec<&str> {
    answer["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["code"].as_str().unwrap())
        .collect()
}

/// `examples/ratelimit.yaml` as the proto-generated client saw it: 100 a minute for each user.
fn assert_the_example_held(summary: &Value) {
    assert!(
        summary["client"]["envoy-data-plane"].is_string(),
        "{summary}"
    );
    assert_eq!(
        summary["passed"],
        json!([
            "countdown",
            "hits_addend",
            "request_order",
            "all_or_nothing"
        ])
    );

    let countdown = &summary["countdown"];
    let want: Vec<u64> = (0..100).rev().collect();
    assert_eq!(
        countdown["remaining"].as_array().unwrap().len(),
        100,
        "{countdown}"
    );
    assert_eq!(countdown["remaining"], json!(want));
    let refused = &countdown["over_limit"];
    assert_eq!(refused["grpc"], "OK");
    assert_eq!(refused["overall"], "OVER_LIMIT");
    assert_eq!(codes(refused), ["OVER_LIMIT"]);
    assert_eq!(remaining(refused), [0]);
    let status = &refused["statuses"][0];
    assert_eq!(
        status["limit"],
        json!({"requests_per_unit": 100, "unit": "MINUTE", "name": "user"})
    );
    let reset = status["reset_ms"].as_u64().unwrap();
    assert!((1..=60_000).contains(&reset), "{status}");
    let other = &countdown["other_user"];
    assert_eq!(
        (other["overall"].as_str(), remaining(other)),
        (Some("OK"), vec![99])
    );

    // hits_addend 0 (unset) and 1 cost 1, 5 costs 5, a descriptor's own 3 and 2 override.
    let steps: Vec<_> = summary["hits_addend"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["request"].as_u64().unwrap(),
                s["descriptor"].as_u64(),
                s["remaining"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            (0, None, 99),
            (1, None, 98),
            (5, None, 93),
            (1, Some(3), 90),
            (0, Some(2), 88)
        ]
    );

    // One status per descriptor, in request order: [w, v] after v was asked once, then
    // [v, unmatched, w].
    let two = &summary["request_order"]["two"];
    assert_eq!(
        (codes(two), remaining(two)),
        (vec!["OK", "OK"], vec![99, 98])
    );
    let three = &summary["request_order"]["three"];
    assert_eq!(
        (codes(three), remaining(three)),
        (vec!["OK", "OK", "OK"], vec![97, 0, 98])
    );
    assert!(three["statuses"][1].get("limit").is_none(), "{three}");
    assert_eq!(three["statuses"][0]["limit"]["requests_per_unit"], 100);

    // One descriptor over its limit refuses the request and debits the other one nothing.
    let refused = &summary["all_or_nothing"]["refused"];
    assert_eq!(refused["overall"], "OVER_LIMIT");
    assert_eq!(
        (codes(refused), remaining(refused)),
        (vec!["OK", "OVER_LIMIT"], vec![100, 0])
    );
    assert_eq!(remaining(&summary["all_or_nothing"]["spare_after"]), [99]);
}

#[test]
fn the_example_configuration_as_an_envoy_generated_client_sees_it() {
    let example = example();
    let gw = Gateway::start(&[
        "--store",
        "memory://",
        "--grpc",
        "127.0.0.1:0",
        "--rls-config",
        example.to_str().unwrap(),
    ]);
    let addr = gw.faces["grpc"].to_string();
    let summary = scenario(&addr);
    assert_the_example_held(&summary);
    // A second run counts from zero again: it asks for callers of its own.
    assert_the_example_held(&scenario(&addr));

    // A limit the service does not have: the script says which check failed, and fails.
    let (code, stdout, stderr) = client(&["scenario", &addr, "--limit", "50"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("check failed: countdown: limit_remaining 99, want 49"),
        "{stderr}"
    );
}

/// The script's `drive` mode: one request a line, one answer a line, over one channel.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Driver {
    fn start(addr: &str) -> Driver {
        let mut child = Command::new(python())
            .arg(script())
            .args(["drive", addr])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Driver {
            child,
            stdin,
            stdout,
        }
    }

    fn ask(&mut self, descriptors: &[&[(&str, &str)]]) -> Value {
        let request = json!({"domain": "api", "descriptors": descriptors});
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(
            !line.is_empty(),
            "the Envoy client ended (see its stderr above)"
        );
        serde_json::from_str(&line).unwrap()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls (at most `polls` times) until `done` holds of what the traffic has seen so far.
fn until(seen: &Mutex<Vec<Value>>, polls: u32, what: &str, done: impl Fn(&[Value]) -> bool) {
    for _ in 0..polls {
        if done(&seen.lock().unwrap()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the traffic never {what}");
}

/// UNAVAILABLE from the service, whose message names the store, not grpcio's own for a
/// service it could not reach ("failed to connect to all addresses").
/// The service's own UNAVAILABLE (the store cannot answer, or the gateway shed the request
/// because its own runtime ran too late to wait for the reply), not a failure to reach it.
fn unavailable_from_the_service(answer: &Value) -> bool {
    let details = answer["details"].as_str().unwrap_or_default();
    answer["grpc"] == "UNAVAILABLE"
        && (details.contains("store") || details.contains("saturated"))
        && !details.contains("connect to all")
}

#[test]
fn a_store_killed_and_started_again_under_envoy_generated_traffic() {
    let mut redis = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-gateway-envoy-protos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ratelimit.yaml");
    let yaml = std::fs::read_to_string(example()).unwrap();
    let yaml = crate::rls_support::generous(&yaml);
    std::fs::write(&config, format!("on_store_error: deny\n{yaml}")).unwrap();
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let gw = Gateway::start(&[
        "--store",
        &store,
        "--grpc",
        "127.0.0.1:0",
        "--rls-config",
        config.to_str().unwrap(),
    ]);
    let addr = gw.faces["grpc"].to_string();

    // The gateway connects to the store in the background: ask until it has.
    let mut probe = Driver::start(&addr);
    let mut ready = probe.ask(&[&[("user", "probe")]]);
    for _ in 0..500 {
        if ready["grpc"] == "OK" {
            break;
        }
        assert!(unavailable_from_the_service(&ready), "{ready}");
        std::thread::sleep(Duration::from_millis(20));
        ready = probe.ask(&[&[("user", "probe")]]);
    }
    assert_eq!(ready["overall"], "OK", "{ready}");

    // The same semantics on the module as on memory://.
    assert_the_example_held(&scenario(&addr));

    // Traffic from another client process, one new caller a request (none reaches its limit),
    // for as long as the store is killed, down and started again.
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (seen, stop, addr) = (Arc::clone(&seen), Arc::clone(&stop), addr.clone());
        std::thread::spawn(move || {
            let mut driver = Driver::start(&addr);
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let user = format!("traffic-{n}");
                let answer = driver.ask(&[&[("user", &user)]]);
                seen.lock().unwrap().push(answer);
            }
        })
    };
    let oks = |s: &[Value]| s.iter().filter(|a| a["grpc"] == "OK").count();
    until(&seen, 3000, "got through", |s| oks(s) >= 20);
    // A caller with a count in the store before it is killed.
    for _ in 0..3 {
        let answer = probe.ask(&[&[("user", "kim")]]);
        assert_eq!(
            (answer["grpc"].as_str(), codes(&answer)),
            (Some("OK"), vec!["OK"])
        );
        assert!(remaining(&answer)[0] < 100, "{answer}");
    }
    redis.stop();
    let before = seen.lock().unwrap().len();
    until(&seen, 3000, "saw the store down", |s| {
        s[before..].iter().filter(|a| a["grpc"] != "OK").count() >= 20
    });

    // While the store is down: each request that needs it is UNAVAILABLE, from the service;
    // one whose descriptor matches no limit needs no store and is OK.
    for _ in 0..5 {
        let answer = probe.ask(&[&[("user", "kim")]]);
        assert!(unavailable_from_the_service(&answer), "{answer}");
    }
    let free = probe.ask(&[&[("rl-gateway-test-unmatched", "x")]]);
    assert_eq!(
        (free["grpc"].as_str(), codes(&free)),
        (Some("OK"), vec!["OK"])
    );
    let mixed = probe.ask(&[&[("rl-gateway-test-unmatched", "x")], &[("user", "kim")]]);
    assert!(unavailable_from_the_service(&mixed), "{mixed}");

    redis.start_again();
    let down = seen.lock().unwrap().len();
    until(&seen, 3000, "got through again", |s| oks(&s[down..]) >= 20);
    stop.store(true, Ordering::SeqCst);
    traffic.join().unwrap();

    // What the traffic saw, in order: OK, then UNAVAILABLE while the store was down, then OK
    // again, and never anything else; every OK a fresh caller's first request.
    let seen = seen.lock().unwrap();
    let mut phases: Vec<&str> = Vec::new();
    for answer in seen.iter() {
        let phase = match answer["grpc"].as_str().unwrap() {
            "OK" => {
                assert_eq!(answer["overall"], "OK", "{answer}");
                assert_eq!(remaining(answer), [99], "{answer}");
                "OK"
            }
            _ => {
                assert!(unavailable_from_the_service(answer), "{answer}");
                "UNAVAILABLE"
            }
        };
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
    }
    assert_eq!(phases, ["OK", "UNAVAILABLE", "OK"]);

    // The restarted server kept nothing (no persistence in the tests): the caller counted
    // before the kill starts again from the top.
    let back = probe.ask(&[&[("user", "kim")]]);
    assert_eq!(
        (back["overall"].as_str(), remaining(&back)),
        (Some("OK"), vec![99])
    );
    assert_eq!(
        back["statuses"][0]["limit"],
        json!({"requests_per_unit": 100, "unit": "MINUTE", "name": "user"})
    );
    assert_the_example_held(&scenario(&addr));
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}
