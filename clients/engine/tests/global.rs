//! A global rule (section 15) decided by the region's allocation: the floor before any answer,
//! the home store's answer while its lease runs (from when the report was sent), then the
//! smaller of it and the safe share; refused without a call when the allocation cannot pass a
//! request; the demand reported in units per period; and the policy's checks of `global` and
//! `regions`.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;

use rl_core::allocate::Allotment;
use rl_engine::memory::MemoryStore;
use rl_engine::metrics::Metrics;
use rl_engine::{Answer, Engine, Instant, Options, Policy, Request, Step, Verdict, VerdictKind};

/// 10,000 a second shared by three regions, a tenth held back, reported every 2 s: the pool is
/// 9,000, the safe share 3,000 and the floor 150 (the pool's 5 % over three regions).
const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "regions": ["eu", "us", "ap"],
  "identity": {"tenant": "x-tenant"},
  "rules": {
    "tenant": {"key": "{t:${tenant}}:tenant", "limit": 10000, "period": "1s",
               "global": {"reserve": 0.1, "every": "2s"}}
  },
  "routes": [{"method": "GET", "path": "/", "rules": ["tenant"]}]
}"#;

fn engine() -> Engine {
    let policy = Policy::from_json(POLICY).unwrap();
    policy.require_region(Some("eu")).unwrap();
    Engine::new(policy, Arc::new(Metrics::new(None)), Options::default())
}

/// Decides one request of tenant `atlas` at `now`, and returns the verdict with the limits the
/// store was sent (one per call).
fn decide(engine: &Engine, store: &mut MemoryStore, now: Instant) -> (Verdict, Vec<String>) {
    let headers = vec![("x-tenant", "atlas".to_string())];
    let request = Request {
        method: "GET",
        path: "/",
        headers: &headers,
        peer: None,
        caller: None,
        case_insensitive: false,
    };
    let (mut pending, mut step) = engine.begin(&request, now);
    let mut sent = Vec::new();
    loop {
        match step {
            Step::Done(verdict) => return (verdict, sent),
            Step::Wait { until } => step = engine.resume(&mut pending, Vec::new(), until),
            Step::Calls { calls, .. } => {
                let answers = calls
                    .iter()
                    .map(|c| {
                        let args: Vec<String> = c
                            .args
                            .iter()
                            .map(|a| String::from_utf8_lossy(a).into_owned())
                            .collect();
                        sent.push(args.join(" "));
                        Answer::Reply(store.call(&c.args.to_vecs(), now.as_micros()))
                    })
                    .collect();
                step = engine.resume(&mut pending, answers, now);
            }
        }
    }
}

/// The home's answer: `allocation`, its region none of the live demand, so its target is the
/// floor and an answer of the floor or more is no cap.
fn answer(allocation: u64) -> Allotment {
    Allotment {
        allocation,
        lease_ms: 10_000,
        region_demand: 0,
        total_demand: 1,
    }
}

fn at(ms: u64) -> Instant {
    Instant::from_micros(1_000_000_000 + ms * 1000)
}

/// The limit and burst of the one admission call sent (`RL.MULTI 1 key RULE name limit ...`).
fn limit_sent(sent: &[String]) -> (u64, Option<u64>) {
    assert_eq!(sent.len(), 1, "{sent:?}");
    let words: Vec<&str> = sent[0].split(' ').collect();
    assert_eq!(
        words[..5],
        ["RL.MULTI", "1", "{t:atlas}:tenant", "RULE", "tenant"]
    );
    let limit_at = 5;
    let burst = words
        .iter()
        .position(|w| *w == "BURST")
        .map(|i| words[i + 1].parse().unwrap());
    (words[limit_at].parse().unwrap(), burst)
}

#[test]
fn the_floor_then_the_answer_then_the_smaller_of_it_and_the_safe_share() {
    let engine = engine();
    let mut store = MemoryStore::new();
    // Before any answer: the floor.
    let (v, sent) = decide(&engine, &mut store, at(0));
    assert_eq!(v.kind, VerdictKind::Admit);
    assert_eq!(limit_sent(&sent).0, 150);
    // Not yet due: the first report waits `every` after the key's first request.
    assert!(engine.allocation_reports(at(1_999)).is_empty());
    for i in 0..99 {
        decide(&engine, &mut store, at(10 + i));
    }
    let reports = engine.allocation_reports(at(2_000));
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(report.key, "rl:alloc:{t:atlas}:tenant");
    assert_eq!(report.rule, "tenant");
    // 100 requests in 2 s: 50 a second.
    assert_eq!(report.demand, 50);
    assert_eq!(report.held, 150);
    assert_eq!(
        (
            report.terms.limit,
            report.terms.reserve,
            report.terms.regions
        ),
        (10_000, 1_000, 3)
    );
    assert_eq!(report.terms.lease_ms, 10_000);
    // One report in flight per key.
    decide(&engine, &mut store, at(2_001));
    assert!(engine.allocation_reports(at(4_500)).is_empty());
    engine.allocated(report, Some(answer(6_000)));
    let (_, sent) = decide(&engine, &mut store, at(2_100));
    assert_eq!(limit_sent(&sent).0, 6_000);
    // The lease counts from when the report was sent (2,000): until 12,000.
    assert_eq!(
        limit_sent(&decide(&engine, &mut store, at(11_999)).1).0,
        6_000
    );
    assert_eq!(
        limit_sent(&decide(&engine, &mut store, at(12_000)).1).0,
        3_000
    );
    // Forgotten after ten leases: the floor again.
    assert_eq!(
        limit_sent(&decide(&engine, &mut store, at(102_000)).1).0,
        150
    );
}

#[test]
fn a_failed_report_keeps_the_allocation_and_the_next_is_due_again() {
    let engine = engine();
    let mut store = MemoryStore::new();
    decide(&engine, &mut store, at(0));
    let first = engine.allocation_reports(at(2_000)).pop().unwrap();
    engine.allocated(&first, Some(answer(4_000)));
    decide(&engine, &mut store, at(2_500));
    let second = engine.allocation_reports(at(4_000)).pop().unwrap();
    assert_eq!(second.held, 4_000);
    engine.allocated(&second, None);
    assert_eq!(
        limit_sent(&decide(&engine, &mut store, at(5_000)).1).0,
        4_000
    );
    // Due again `every` after the failed one, with the demand since.
    assert!(engine.allocation_reports(at(5_999)).is_empty());
    let third = engine.allocation_reports(at(6_000)).pop().unwrap();
    assert_eq!((third.held, third.demand), (4_000, 0));
    engine.allocated(&third, Some(answer(5_000)));
    // No demand since: nothing to report, and no call to the home.
    assert!(engine.allocation_reports(at(9_000)).is_empty());
}

#[test]
fn an_allocation_of_zero_refuses_without_a_call_and_counts_the_demand() {
    let engine = engine();
    let mut store = MemoryStore::new();
    decide(&engine, &mut store, at(0));
    let report = engine.allocation_reports(at(2_000)).pop().unwrap();
    engine.allocated(&report, Some(answer(0)));
    let (v, sent) = decide(&engine, &mut store, at(2_001));
    assert_eq!(v.kind, VerdictKind::Refuse);
    assert!(sent.is_empty(), "{sent:?}");
    // Retried after the next report.
    let retry = v
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("retry-after"));
    assert_eq!(retry.map(|(_, v)| v.as_str()), Some("2"), "{:?}", v.headers);
    let next = engine.allocation_reports(at(4_001)).pop().unwrap();
    assert_eq!(
        next.demand, 0,
        "one request in 2 s is 0 a second, rounded down"
    );
}

#[test]
fn the_burst_is_scaled_with_the_allocation() {
    let policy = POLICY.replace(r#""period": "1s","#, r#""period": "1s", "burst": 20000,"#);
    let engine = Engine::new(
        Policy::from_json(&policy).unwrap(),
        Arc::new(Metrics::new(None)),
        Options::default(),
    );
    let mut store = MemoryStore::new();
    decide(&engine, &mut store, at(0));
    let report = engine.allocation_reports(at(2_000)).pop().unwrap();
    engine.allocated(&report, Some(answer(2_500)));
    let (_, sent) = decide(&engine, &mut store, at(2_001));
    assert_eq!(limit_sent(&sent), (2_500, Some(5_000)));
}

#[test]
fn metrics_show_allocation_demand_and_lease_age() {
    let engine = engine();
    let mut store = MemoryStore::new();
    decide(&engine, &mut store, at(0));
    let report = engine.allocation_reports(at(2_000)).pop().unwrap();
    engine.allocated(&report, Some(answer(6_000)));
    decide(&engine, &mut store, at(2_500));
    let text = engine.metrics().render_at(at(3_000));
    for line in [
        "rl_gateway_allocation_units{rule=\"tenant\"} 6000",
        "rl_gateway_allocation_keys{rule=\"tenant\"} 1",
        "rl_gateway_allocation_lease_age_seconds{rule=\"tenant\"} 1",
        // One request in the second since the report.
        "rl_gateway_allocation_demand{rule=\"tenant\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
}

#[test]
fn global_rules_and_regions_are_checked() {
    let bad = |from: &str, to: &str| {
        let doc = POLICY.replace(from, to);
        assert_ne!(doc, POLICY, "{from}");
        Policy::from_json(&doc).err().unwrap().to_string()
    };
    for (from, to, expect) in [
        (
            r#""reserve": 0.1"#,
            r#""reserve": 1"#,
            "rules.tenant.global.reserve: must be in [0, 1)",
        ),
        (
            r#""every": "2s""#,
            r#""every": "50ms""#,
            "rules.tenant.global.every: must be at least 100ms",
        ),
        (
            r#""every": "2s""#,
            r#""every": "2s", "lease": "1s""#,
            "rules.tenant.global.lease: must be longer than every",
        ),
        (
            r#""regions": ["eu", "us", "ap"],"#,
            "",
            "rules.tenant.global: a global rule needs the policy's `regions`",
        ),
        (
            r#"["eu", "us", "ap"]"#,
            r#"["eu", "us", "eu"]"#,
            "regions[2]: 'eu' is also regions[0]",
        ),
        (
            r#"["eu", "us", "ap"]"#,
            r#"["eu", "u s"]"#,
            "regions[1]: must be 1 to 64 bytes",
        ),
        (
            r#""every": "2s""#,
            r#""every": "2s", "x": 1"#,
            "unknown field `x`",
        ),
    ] {
        let got = bad(from, to);
        assert!(got.contains(expect), "{got}\nexpected: {expect}");
    }
    let policy = Policy::from_json(POLICY).unwrap();
    let no_region = policy.require_region(None).unwrap_err().to_string();
    assert!(
        no_region.contains("rules.tenant.global") && no_region.contains("--region"),
        "{no_region}"
    );
    let elsewhere = policy.require_region(Some("mars")).unwrap_err().to_string();
    assert!(
        elsewhere.contains("'mars' is not one of [eu, us, ap]"),
        "{elsewhere}"
    );
    // A policy without global rules takes any gateway, with a region or without.
    let without = POLICY.replace(
        ",\n               \"global\": {\"reserve\": 0.1, \"every\": \"2s\"}",
        "",
    );
    assert_ne!(without, POLICY);
    let plain = Policy::from_json(&without).unwrap();
    assert!(plain.require_region(None).is_ok());
}

#[test]
fn a_jump_in_demand_is_reported_a_quarter_period_after_the_last_report() {
    let engine = engine();
    let mut store = MemoryStore::new();
    // 300 requests in the first 500 ms: 600 a second, where the home heard nothing.
    for i in 0..300 {
        decide(&engine, &mut store, at(i));
    }
    assert!(engine.allocation_reports(at(499)).is_empty());
    let first = engine.allocation_reports(at(500)).pop().unwrap();
    assert_eq!(first.demand, 600);
    engine.allocated(&first, Some(answer(3_000)));
    // The same rate for a second: no jump, no report before the cycle's end.
    for i in 0..600 {
        decide(&engine, &mut store, at(500 + i * 5 / 3));
    }
    assert!(engine.allocation_reports(at(1_500)).is_empty());
    // Then 1,800 in half a second: 2,400 in 1.5 s, 1,600 a second, reported at once.
    for i in 0..1_800 {
        decide(&engine, &mut store, at(1_500 + i * 5 / 18));
    }
    let jump = engine.allocation_reports(at(2_000)).pop().unwrap();
    assert_eq!(jump.demand, 1_600);
}

#[test]
fn a_rise_below_a_fiftieth_of_the_limit_is_noise() {
    let engine = engine();
    let mut store = MemoryStore::new();
    // 100 a second where the home heard nothing: less than 200 (a fiftieth of 10,000) apart.
    for i in 0..50 {
        decide(&engine, &mut store, at(i * 10));
    }
    assert!(engine.allocation_reports(at(500)).is_empty());
    assert_eq!(
        engine.allocation_reports(at(2_000)).pop().unwrap().demand,
        25
    );
}

#[test]
fn an_idle_key_is_reported_until_the_home_heard_it_hold_its_last_grant() {
    let engine = engine();
    let mut store = MemoryStore::new();
    for i in 0..100 {
        decide(&engine, &mut store, at(i));
    }
    let first = engine.allocation_reports(at(2_000)).pop().unwrap();
    assert_eq!((first.demand, first.held), (50, 150));
    engine.allocated(&first, Some(answer(4_000)));
    // No request since: still reported, with no demand and the grant it now holds, since the
    // home heard demand and a hold of the floor.
    let idle = engine.allocation_reports(at(4_000)).pop().unwrap();
    assert_eq!((idle.demand, idle.held), (0, 4_000));
    // Lost: reported again.
    engine.allocated(&idle, None);
    let again = engine.allocation_reports(at(6_000)).pop().unwrap();
    assert_eq!((again.demand, again.held), (0, 4_000));
    engine.allocated(&again, Some(answer(150)));
    // The home heard no demand: one more report says it holds the smaller grant.
    let last = engine.allocation_reports(at(8_000)).pop().unwrap();
    assert_eq!((last.demand, last.held), (0, 150));
    engine.allocated(&last, Some(answer(150)));
    assert!(engine.allocation_reports(at(10_000)).is_empty());
    assert!(engine.allocation_reports(at(20_000)).is_empty());
}

#[test]
fn a_region_answered_below_its_target_asks_again_a_quarter_period_later() {
    let engine = engine();
    let mut store = MemoryStore::new();
    for i in 0..100 {
        decide(&engine, &mut store, at(i));
    }
    let first = engine.allocation_reports(at(2_000)).pop().unwrap();
    // All the live demand is this region's: its target is 150 + 8,550; the others' holds
    // left it 1,150.
    engine.allocated(
        &first,
        Some(Allotment {
            allocation: 1_150,
            lease_ms: 10_000,
            region_demand: 50,
            total_demand: 50,
        }),
    );
    decide(&engine, &mut store, at(2_100));
    assert!(engine.allocation_reports(at(2_499)).is_empty());
    let again = engine.allocation_reports(at(2_500)).pop().unwrap();
    assert_eq!(again.held, 1_150);
    // Given its target, it waits for the cycle.
    engine.allocated(
        &again,
        Some(Allotment {
            allocation: 8_700,
            lease_ms: 10_000,
            region_demand: 50,
            total_demand: 50,
        }),
    );
    decide(&engine, &mut store, at(2_600));
    assert!(engine.allocation_reports(at(4_499)).is_empty());
    assert_eq!(engine.allocation_reports(at(4_500)).len(), 1);
}
