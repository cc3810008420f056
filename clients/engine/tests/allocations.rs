//! How many heap allocations one decision makes: `begin` and `resume` of a 3-rule route (the
//! engine bench's `ask_and_resume`), counted by a global allocator that counts, with the
//! store's reply built beforehand (it is the driver's, not the engine's).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rl_engine::memory::MemoryStore;
use rl_engine::{Answer, Engine, Instant, Options, Policy, Reply, Request, Step};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

fn multi_reply() -> Reply {
    let rule = |name: &str, remaining| {
        Reply::Array(vec![
            Reply::Bulk(name.as_bytes().to_vec()),
            Reply::Int(remaining),
            Reply::Int(500),
        ])
    };
    Reply::Array(vec![
        Reply::Int(1),
        Reply::Nil,
        Reply::Int(0),
        Reply::Array(vec![rule("read", 19), rule("tenant", 999)]),
    ])
}

#[test]
fn a_decision_allocates_little() {
    let now = Instant::from_micros(1_767_225_600_000_000);
    let policy = Policy::from_json_at(POLICY, now).unwrap();
    let options = Options {
        log_sample: 0.0,
        ..Options::default()
    };
    let engine = Engine::new(policy, Arc::default(), options);
    let headers = vec![("x-user", "ann"), ("x-tenant", "atlas")];
    let request = Request {
        method: "GET",
        path: "/catalog",
        headers: &headers,
        peer: Some([192, 0, 2, 1].into()),
        caller: None,
        case_insensitive: false,
    };
    let mut store = MemoryStore::new();
    let (mut pending, mut step) = engine.begin(&request, now);
    while let Step::Calls { calls, .. } = step {
        let answers = calls
            .iter()
            .map(|c| Answer::Reply(store.call(&c.args.to_vecs(), now.as_micros())))
            .collect();
        step = engine.resume(&mut pending, answers, now);
    }
    let mut counts = Vec::new();
    for _ in 0..5 {
        let answers = vec![Answer::Reply(multi_reply())];
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let (mut pending, step) = engine.begin(&request, now);
        let Step::Calls { calls, .. } = step else {
            panic!("the route asks the store: {step:?}");
        };
        assert_eq!(calls.len(), 1);
        drop(calls);
        let done = engine.resume(&mut pending, answers, now);
        drop(done);
        drop(pending);
        counts.push(ALLOCATIONS.load(Ordering::Relaxed) - before);
    }
    eprintln!("allocations per decision: {counts:?}");
    // 61 when every argument was a vector of its own, 35 when RL.MULTI's rules were copied
    // into `MultiRule`s; more than today's is a regression. The 13: the three keys rendered and
    // the list of the rules with them; the call's list of rules (what its reply is read by),
    // its arguments' buffer, its key, the list of calls and of what each is for; the verdict's
    // route name, its list of headers and their two values (`RateLimit-Policy`, `RateLimit`).
    assert!(counts.iter().all(|&n| n <= 13), "{counts:?}");
}
