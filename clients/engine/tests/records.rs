//! Decision ids (CONTRACT.md section 8.7): one per request, shared by its records, never
//! repeated; what the vectors cannot say, since they compare one record at a time.

use std::sync::Arc;

use rl_engine::metrics::Metrics;
use rl_engine::policy::Policy;
use rl_engine::{Answer, Engine, Instant, Options, Request, Step};

const START_US: u64 = 1_767_225_600_000_000;

#[test]
fn the_records_of_one_request_share_its_id_and_no_two_requests_share_one() {
    let policy = Policy::from_json_at(
        r#"{"version": 1, "default": {"rules": []},
            "rules": {"a": {"key": "{k}:a", "limit": 1, "period": "1h"},
                      "b": {"key": "{k}:b", "limit": 1, "period": "1h"}},
            "routes": [{"method": "GET", "path": "/x", "rules": ["a", "b"]}]}"#,
        Instant::from_micros(START_US),
    )
    .unwrap();
    let options = Options {
        log_per_second: u64::MAX,
        ..Options::default()
    };
    let engine = Engine::new(policy, Arc::new(Metrics::default()), options);
    let headers: Vec<(&str, &str)> = Vec::new();
    let request = Request {
        method: "GET",
        path: "/x",
        headers: &headers,
        peer: None,
        caller: None,
        case_insensitive: false,
    };
    let mut ids = Vec::new();
    for i in 0..1000u64 {
        let now = Instant::from_micros(START_US + i);
        // The store is down (then the breaker is open): both rules are answered by the deny
        // posture, one record each.
        let (mut pending, mut step) = engine.begin(&request, now);
        let verdict = loop {
            match step {
                Step::Calls { calls, .. } => {
                    let answers = calls.iter().map(|_| Answer::Timeout).collect();
                    step = engine.resume(&mut pending, answers, now);
                }
                Step::Done(verdict) => break verdict,
                Step::Wait { .. } => panic!("no chunk to wait for"),
            }
        };
        assert_eq!(verdict.status, Some(503));
        let [a, b] = verdict.log.as_slice() else {
            panic!("{:?}", verdict.log);
        };
        assert_eq!((a.rule.as_str(), b.rule.as_str()), ("a", "b"));
        assert_eq!(a.decision, b.decision);
        assert_eq!(a.decision.len(), 16);
        assert!(a.decision.bytes().all(|c| c.is_ascii_hexdigit()));
        ids.push(a.decision.clone());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1000);
}

#[test]
fn a_request_cut_short_by_the_drain_is_a_503_with_its_own_record() {
    let policy = Policy::from_json_at(
        r#"{"version": 3, "default": {"rules": []},
            "rules": {"a": {"key": "a", "limit": 5, "period": "1h"}},
            "routes": [{"method": "GET", "path": "/x", "rules": ["a"]}]}"#,
        Instant::from_micros(START_US),
    )
    .unwrap();
    let engine = Engine::new(policy, Arc::new(Metrics::default()), Options::default());
    let headers: Vec<(&str, &str)> = Vec::new();
    let request = Request {
        method: "GET",
        path: "/x",
        headers: &headers,
        peer: None,
        caller: None,
        case_insensitive: false,
    };
    let now = Instant::from_micros(START_US);
    // The module's arithmetic answers the calls.
    let mut store = rl_engine::memory::MemoryStore::default();
    let (mut pending, mut step) = engine.begin(&request, now);
    let admitted = loop {
        match step {
            Step::Calls { calls, .. } => {
                let answers = calls
                    .iter()
                    .map(|c| Answer::Reply(store.call(&c.args.to_vecs(), START_US)))
                    .collect();
                step = engine.resume(&mut pending, answers, now);
            }
            Step::Done(verdict) => break verdict,
            Step::Wait { .. } => panic!("no chunk to wait for"),
        }
    };
    assert_eq!(admitted.status, None);
    let cut = engine.drained(&admitted, now);
    assert_eq!(cut.status, Some(503));
    let body: serde_json::Value = serde_json::from_str(&cut.problem.unwrap().body).unwrap();
    assert_eq!(body["status"], 503);
    assert!(body["detail"].as_str().unwrap().contains("stopped"));
    let header = |name: &str| {
        cut.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    let sent = admitted.headers.iter().find(|(n, _)| *n == "RateLimit");
    assert!(sent.is_some(), "{:?}", admitted.headers);
    assert_eq!(header("ratelimit"), sent.map(|(_, v)| v.clone()));
    let [record] = cut.log.as_slice() else {
        panic!("{:?}", cut.log);
    };
    assert_eq!(record.reason, "drain");
    assert_eq!(record.route, "GET /x");
    assert_eq!(record.policy_version, 3);
    assert_eq!(record.decision.len(), 16);
}
