//! The engine alone, without I/O: what one decision costs the gateway's own CPU.
//!
//! - `ask_and_resume`: a 3-rule route (a bucket and a gcra rule in one `RL.MULTI`, a grant
//!   rule spent from its local chunk): `begin` renders the keys and asks the store, `resume`
//!   reads the scripted reply and renders the headers.
//! - `cached_refusal`: the same route refused from the negative cache, no store call.
//! - `ask_and_resume_plans`: `ask_and_resume` under the same policy with 50 plans, 10,000
//!   tenants mapped to them and 10,000 overrides (the caller's tenant has one): what resolving
//!   the plan and the overrides adds to a decision.
//! - `load_plans`: parsing and validating that policy.
//! - `route_1000`: matching a request among 1,000 routes (250 services, each with a literal, a
//!   `{id}` capture, a nested capture and a final `*`), the deepest kind.
//! - `load_routes`: the policy of `ask_and_resume_plans` with those 1,000 routes too.
//!
//! `cargo bench -p redis-rl-engine --bench engine`

// A benchmark stops at its first surprise: it may unwrap, expect, panic and index (the
// workspace's lints forbid them outside tests, and a benchmark is not run by its test harness).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use rl_engine::memory::MemoryStore;
use rl_engine::{Answer, Engine, Instant, Options, Policy, Reply, Request, Step};

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user", "tenant": "x-tenant"},
  "rules": {
    "read":   {"key": "{t:${tenant}}:read:${user}", "algo": "bucket", "limit": 2, "period": "1s", "burst": 20},
    "tenant": {"key": "{t:${tenant}}:tenant", "limit": 1000, "period": "1m"},
    "global": {"key": "global:catalog", "limit": 40000, "period": "1s", "burst": 1000000000, "grant": {"want": 1000000000, "ttl": "1h"}}
  },
  "routes": [{"method": "GET", "path": "/catalog", "rules": ["read", "tenant", "global"]}],
  "negative_cache": {"max": "1h"}
}"#;

/// `POLICY` with 50 plans (each giving `tenant` its own limit), 10,000 tenants mapped to them
/// and 10,000 overrides of `read`, one per tenant (`atlas`'s among them).
fn with_plans() -> String {
    let mut doc: serde_json::Value = serde_json::from_str(POLICY).expect("the policy");
    let limits: serde_json::Map<String, serde_json::Value> = (0..50)
        .map(|p| {
            let numbers = serde_json::json!({"tenant": {"limit": 1000 + p}});
            (format!("plan{p}"), numbers)
        })
        .collect();
    let tenant = |t: usize| {
        if t == 0 {
            "atlas".to_string()
        } else {
            format!("t{t}")
        }
    };
    let tenants: serde_json::Map<String, serde_json::Value> = (0..10_000)
        .map(|t| (tenant(t), serde_json::json!(format!("plan{}", t % 50))))
        .collect();
    let overrides: Vec<serde_json::Value> = (0..10_000)
        .map(|t| {
            serde_json::json!({
                "tenant": tenant(t), "rule": "read", "limit": 3, "owner": "bench",
                "reason": "bench", "expires": "2026-02-01T00:00:00Z"
            })
        })
        .collect();
    doc["identity"]["plan"] = "x-plan".into();
    doc["plans"] = serde_json::json!({"default": "plan0", "tenants": tenants, "limits": limits});
    doc["overrides"] = overrides.into();
    doc.to_string()
}

/// `with_plans` with 1,000 more routes: four per service, of each kind of segment.
fn with_routes() -> String {
    let mut doc: serde_json::Value = serde_json::from_str(&with_plans()).expect("the policy");
    let Some(routes) = doc["routes"].as_array_mut() else {
        panic!("routes is a list");
    };
    for s in 0..250 {
        for path in [
            format!("/svc{s}/health"),
            format!("/svc{s}/items/{{id}}"),
            format!("/svc{s}/items/{{id}}/parts/{{part}}"),
            format!("/svc{s}/files/*"),
        ] {
            routes.push(
                serde_json::json!({"method": "GET", "path": path, "rules": ["read", "tenant"]}),
            );
        }
    }
    doc.to_string()
}

fn engine() -> Engine {
    engine_of(POLICY)
}

fn engine_of(text: &str) -> Engine {
    let policy = Policy::from_json_at(text, Instant::from_micros(NOW_US)).expect("the policy");
    let options = Options {
        log_sample: 0.0,
        ..Options::default()
    };
    Engine::new(policy, Arc::default(), options)
}

/// 2026-01-01T00:00:00Z: the overrides of `with_plans` are active.
const NOW_US: u64 = 1_767_225_600_000_000;

fn multi_reply(allowed: bool) -> Reply {
    let rule = |name: &str, remaining| {
        Reply::Array(vec![
            Reply::Bulk(name.as_bytes().to_vec()),
            Reply::Int(remaining),
            Reply::Int(500),
        ])
    };
    Reply::Array(vec![
        Reply::Int(i64::from(allowed)),
        if allowed {
            Reply::Nil
        } else {
            Reply::Bulk(b"read".to_vec())
        },
        Reply::Int(if allowed { 0 } else { 3_600_000 }),
        Reply::Array(vec![rule("read", 19), rule("tenant", 999)]),
    ])
}

fn bench(c: &mut Criterion) {
    let headers = vec![("x-user", "ann"), ("x-tenant", "atlas")];
    let request = Request {
        method: "GET",
        path: "/catalog",
        headers: &headers,
        peer: Some([192, 0, 2, 1].into()),
        caller: None,
        case_insensitive: false,
    };
    let now = Instant::from_micros(NOW_US);

    // The grant rule's chunk is filled once, from the memory store, and lasts the whole run
    // (a billion tokens for an hour).
    let warm = engine();
    let mut store = MemoryStore::new();
    let (mut pending, mut step) = warm.begin(&request, now);
    while let Step::Calls { calls, .. } = step {
        let answers = calls
            .iter()
            .map(|c| Answer::Reply(store.call(&c.args.to_vecs(), now.as_micros())))
            .collect();
        step = warm.resume(&mut pending, answers, now);
    }

    c.bench_function("ask_and_resume", |b| {
        b.iter(|| {
            let (mut pending, step) = warm.begin(black_box(&request), now);
            let Step::Calls { calls, .. } = step else {
                panic!("the route asks the store: {step:?}");
            };
            // The chunk holds enough for every iteration: only RL.MULTI goes to the store.
            debug_assert_eq!(calls.len(), 1);
            let done = warm.resume(&mut pending, vec![Answer::Reply(multi_reply(true))], now);
            black_box(done)
        })
    });

    let planned = with_plans();
    c.bench_function("load_plans", |b| {
        b.iter(|| Policy::from_json_at(black_box(&planned), now).expect("the policy"))
    });
    let plans = engine_of(&planned);
    // A store of its own: the first engine's chunk took the whole of `global`.
    let mut store = MemoryStore::new();
    let (mut pending, mut step) = plans.begin(&request, now);
    while let Step::Calls { calls, .. } = step {
        let answers = calls
            .iter()
            .map(|c| Answer::Reply(store.call(&c.args.to_vecs(), now.as_micros())))
            .collect();
        step = plans.resume(&mut pending, answers, now);
    }
    c.bench_function("ask_and_resume_plans", |b| {
        b.iter(|| {
            let (mut pending, step) = plans.begin(black_box(&request), now);
            let Step::Calls { calls, .. } = step else {
                panic!("the route asks the store: {step:?}");
            };
            debug_assert_eq!(calls.len(), 1);
            let done = plans.resume(&mut pending, vec![Answer::Reply(multi_reply(true))], now);
            black_box(done)
        })
    });

    let routed = with_routes();
    c.bench_function("load_routes", |b| {
        b.iter(|| Policy::from_json_at(black_box(&routed), now).expect("the policy"))
    });
    let routes = Policy::from_json_at(&routed, now).expect("the policy");
    c.bench_function("route_1000", |b| {
        b.iter(|| {
            let routed = routes.route("GET", black_box("/svc187/items/42/parts/7"), false);
            assert!(routed.is_route());
            black_box(routed.is_route())
        })
    });

    let (mut pending, _) = warm.begin(&request, now);
    let refused = warm.resume(&mut pending, vec![Answer::Reply(multi_reply(false))], now);
    assert!(matches!(refused, Step::Done(ref v) if v.status == Some(429)));
    c.bench_function("cached_refusal", |b| {
        b.iter(|| {
            let (_pending, step) = warm.begin(black_box(&request), now);
            black_box(step)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
