//! `policy replay`: the engine on its in-memory store over an access log, on the log's clock.
//! Exact counts on a hand-written log, malformed lines counted by number, both timestamp forms,
//! the clock kept from going back, shadow rules' ratios, and the refusals a live rl-gateway
//! made reproduced from the log of the same traffic.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::{policy_file, upstream, Gateway};
use rl_gateway::replay::{replay, Fed, Refusals, Replay, TenantRefusals, FIRST_LINES, MAX_LINE};
use serde_json::{json, Value};

/// 2026-01-01T00:00:00Z in epoch milliseconds.
const T0: u64 = 1_767_225_600_000;

fn plans_policy() -> Value {
    json!({
        "version": 3,
        "identity": {"user": "x-user", "tenant": "x-tenant"},
        "plans": {
            "default": "free",
            "tenants": {"acme": "pro"},
            "limits": {"free": {"tenant": {"limit": 2}}, "pro": {"tenant": {"limit": 4}}}
        },
        "rules": {
            "user": {"key": "{t:${tenant}}:u:${user}", "limit": 3, "period": "1h"},
            "tenant": {"key": "{t:${tenant}}:all", "limit": 100, "period": "1h"},
            "ip": {"key": "ip:${ip}", "limit": 1, "period": "1h"}
        },
        "routes": [
            {"method": "GET", "path": "/orders/{id}", "rules": ["user", "tenant"]},
            {"method": "GET", "path": "/health", "rules": []}
        ],
        "default": {"rules": ["ip"]}
    })
}

fn order(ts: Value, user: &str, tenant: &str) -> String {
    json!({"ts": ts, "method": "GET", "path": "/orders/1", "ip": "192.0.2.1",
           "headers": {"x-user": user, "x-tenant": tenant}})
    .to_string()
}

/// The hand-written log: what each line does is beside it.
fn small_log() -> String {
    [
        order(json!("2026-01-01T00:00:00Z"), "ann", "acme"), // admitted
        order(json!(T0 + 1000), "ann", "acme"),              // admitted
        order(json!(T0 + 2000), "ann", "acme"),              // admitted: ann's third
        order(json!(T0 + 3000), "ann", "acme"),              // refuse:user
        order(json!(T0 + 3100), "ann", "acme"),              // refuse_cached:user
        order(json!(T0 + 4000), "bob", "acme"),              // admitted: acme's fourth (pro)
        order(json!(T0 + 5000), "bob", "acme"),              // refuse:tenant, pro
        order(json!(T0 + 6000), "cid", "birch"),             // admitted
        order(json!(T0 + 7000), "cid", "birch"),             // admitted: birch's second (free)
        order(json!(T0 + 8000), "cid", "birch"),             // refuse:tenant, free
        json!({"ts": T0 + 9000, "method": "GET", "path": "/health"}).to_string(), // exempt
        json!({"ts": T0 + 10_000, "method": "GET", "path": "/nowhere", "ip": "203.0.113.9"})
            .to_string(), // the default admits
        json!({"ts": T0 + 11_000, "method": "GET", "path": "/nowhere?x=1", "ip": "203.0.113.9"})
            .to_string(), // refuse:ip
    ]
    .join("\n")
}

fn row(route: &str, rule: &str, plan: &str, reason: &str, requests: u64) -> Refusals {
    Refusals {
        route: route.into(),
        rule: rule.into(),
        plan: plan.into(),
        reason: reason.into(),
        requests,
    }
}

#[test]
fn a_small_log_gives_exact_counts_by_route_rule_and_plan() {
    let report = replay(&plans_policy().to_string(), small_log().as_bytes()).unwrap();
    assert_eq!((report.lines(), report.requests()), (13, 13));
    let o = report.outcomes();
    assert_eq!((o.admitted, o.refused, o.exempt), (7, 5, 1));
    assert_eq!((o.passed, o.rejected, o.posture, o.error), (0, 0, 0, 0));
    assert_eq!(report.refusals(), 5);
    assert_eq!(report.unmatched(), 2);
    let orders = "GET /orders/{id}";
    assert_eq!(
        report.refusals_by(),
        [
            row("GET /orders/{id}", "tenant", "free", "refuse:tenant", 1),
            row(orders, "tenant", "pro", "refuse:tenant", 1),
            row(orders, "user", "pro", "refuse:user", 1),
            row(orders, "user", "pro", "refuse_cached:user", 1),
            row("default", "ip", "free", "refuse:ip", 1),
        ]
    );
    let tenant = |name: &str, refusals| TenantRefusals {
        tenant: name.into(),
        refusals,
        uncertainty: 0,
    };
    assert_eq!(report.tenants(), [tenant("acme", 3), tenant("birch", 1)]);
    assert_eq!(report.malformed(), 0);

    let text = report.render();
    println!("{text}");
    for part in [
        "policy version 3: 13 lines, 2026-01-01T00:00:00Z to 2026-01-01T00:00:11Z",
        "13 requests: 7 admitted, 5 refused (38.5 %), 1 exempt",
        "2 matched no route",
        "postures: none (the in-memory store always answers)",
        "refused by route, rule and plan",
        "GET /orders/{id}  user    pro   refuse_cached:user         1",
        "tenants refused most (header x-tenant; 2 tenants refused)",
        "acme           3",
        "1 refused request named no tenant",
    ] {
        assert!(text.contains(part), "no {part:?} in\n{text}");
    }
}

#[test]
fn malformed_lines_are_counted_with_their_numbers_and_the_rest_decided() {
    let good = json!({"ts": T0, "method": "GET", "path": "/health"}).to_string();
    let mut log: Vec<u8> = Vec::new();
    let lines: Vec<Vec<u8>> = vec![
        good.clone().into_bytes(),                                        // 1
        b"not json".to_vec(),                                             // 2
        br#"{"ts": 1767225600000, "method": "GET"}"#.to_vec(),            // 3: no path
        br#"{"ts": "yesterday", "method": "GET", "path": "/"}"#.to_vec(), // 4
        br#"{"ts": -5, "method": "GET", "path": "/"}"#.to_vec(),          // 5
        b"   ".to_vec(),                                                  // 6: blank
        b"{\"ts\": 1767225600000, \"method\": \"GET\", \"path\": \"/\xff\"}".to_vec(), // 7
        good.clone().into_bytes(),                                        // 8
        br#"{"ts": 1767225600000, "method": "GET", "path": "/", "ip": "nope"}"#.to_vec(), // 9
        vec![b'x'; MAX_LINE + 1],                                         // 10: too long
    ];
    for line in lines.iter().chain(std::iter::repeat_n(&b"{}".to_vec(), 20)) {
        log.extend_from_slice(line);
        log.push(b'\n');
    }
    let report = replay(&plans_policy().to_string(), log.as_slice()).unwrap();
    assert_eq!(report.lines(), 30);
    assert_eq!(report.requests(), 2);
    assert_eq!(report.malformed(), 27);
    let numbers: Vec<u64> = report.first_malformed().iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers.len(), FIRST_LINES);
    assert_eq!(numbers, [2, 3, 4, 5, 7, 9, 10, 11, 12, 13]);
    let why: Vec<&str> = report
        .first_malformed()
        .iter()
        .map(|(_, w)| w.as_str())
        .collect();
    assert!(why[1].starts_with("missing field `path`"), "{why:?}");
    assert!(
        why[2].contains("\"yesterday\", expected an RFC 3339 timestamp"),
        "{why:?}"
    );
    assert!(why[5].starts_with("ip: \"nope\""), "{why:?}");
    assert_eq!(why[6], format!("longer than {MAX_LINE} bytes"));
    let text = report.render();
    assert!(
        text.contains("27 malformed lines (the first 10):"),
        "{text}"
    );
    assert!(text.contains("    line 3: missing field `path`"), "{text}");
}

fn one_per_ten_seconds() -> String {
    json!({
        "version": 1,
        "rules": {"one": {"key": "one", "limit": 1, "period": "10s"}},
        "routes": [{"method": "GET", "path": "/", "rules": ["one"]}],
        "default": {"rules": []}
    })
    .to_string()
}

fn statuses(replay: &mut Replay, lines: &[Value]) -> Vec<Fed> {
    lines
        .iter()
        .map(|l| replay.feed(l.to_string().as_bytes()))
        .collect()
}

#[test]
fn rfc3339_and_epoch_milliseconds_are_one_clock() {
    let at = |ts: Value| json!({"ts": ts, "method": "GET", "path": "/"});
    let mut r = Replay::new(&one_per_ten_seconds()).unwrap();
    let got = statuses(
        &mut r,
        &[
            at(json!("2026-01-01T00:00:00Z")),
            at(json!(T0 + 5000)),                     // within the ten seconds
            at(json!("2026-01-01T01:00:10.5+01:00")), // 10.5 s after the first
            at(json!(1_767_225_610_750.25)),          // a quarter second later
            at(json!("2026-01-01T00:00:21Z")),        // ten seconds after the last admission
        ],
    );
    let (admit, refuse) = (Fed::Decided(None), Fed::Decided(Some(429)));
    assert_eq!(got, [admit, refuse, admit, refuse, admit]);
    assert_eq!(r.finish().out_of_order(), 0);
}

#[test]
fn an_earlier_line_is_decided_at_the_instant_before_it_and_counted() {
    let at = |ms: u64| json!({"ts": ms, "method": "GET", "path": "/"});
    let mut r = Replay::new(&one_per_ten_seconds()).unwrap();
    let got = statuses(
        &mut r,
        &[at(T0), at(T0 + 11_000), at(T0 + 6000), at(T0 + 21_500)],
    );
    // The third is decided at the second's instant, just after its admission.
    let (admit, refuse) = (Fed::Decided(None), Fed::Decided(Some(429)));
    assert_eq!(got, [admit, admit, refuse, admit]);
    let report = r.finish();
    assert_eq!(report.out_of_order(), 1);
    assert_eq!(report.first_out_of_order(), [3]);
    let text = report.render();
    let said =
        "1 line out of order, decided at the latest instant before them (at most 5.000 s back): 3";
    assert!(text.contains(said), "{text}");
}

#[test]
fn a_shadow_rules_ratio_is_reported_against_its_expectation() {
    let policy = json!({
        "version": 1,
        "identity": {"user": "x-user"},
        "rules": {
            "user": {"key": "u:${user}", "limit": 1_000_000, "period": "1h"},
            "tight": {"key": "t:${user}", "limit": 10, "period": "1h", "shadow": true,
                      "expect_refusals": 0.01},
            "loose": {"key": "l:${user}", "limit": 400, "period": "1h", "shadow": true,
                      "expect_refusals": 0.5}
        },
        "routes": [{"method": "GET", "path": "/search", "rules": ["user", "tight", "loose"]}],
        "default": {"rules": []}
    });
    // Four users, 500 requests each, in turn, a millisecond apart: `tight` admits each user's
    // first 10 and `loose` their first 400.
    let log: Vec<String> = (0..2000u64)
        .map(|i| {
            let user = format!("user-{}", i % 4);
            json!({"ts": T0 + i, "method": "GET", "path": "/search", "headers": {"x-user": user}})
                .to_string()
        })
        .collect();
    let report = replay(&policy.to_string(), log.join("\n").as_bytes()).unwrap();
    // Shadow rules never refuse.
    assert_eq!((report.outcomes().admitted, report.refusals()), (2000, 0));
    let shadows = report.shadows();
    let (loose, tight) = (&shadows[0], &shadows[1]);
    assert_eq!(
        (tight.rule.as_str(), tight.evaluated, tight.refused),
        ("tight", 2000, 1960)
    );
    assert_eq!(tight.ratio(), Some(0.98));
    assert_eq!(tight.expect, Some(0.01));
    // Once evaluated 1000 times (960 refusals by then), the ratio is far past ten times 1 %.
    assert_eq!(tight.alarm_line, Some(1000));
    assert_eq!(
        (loose.rule.as_str(), loose.evaluated, loose.refused),
        ("loose", 2000, 400)
    );
    assert_eq!((loose.ratio(), loose.alarm_line), (Some(0.2), None));
    let text = report.render();
    println!("{text}");
    for part in [
        "rule   evaluated  would refuse   ratio  expected  alarm",
        "tight       2000          1960  0.9800      0.01  raised at line 1000",
        "loose       2000           400  0.2000       0.5  no",
    ] {
        assert!(text.contains(part), "no {part:?} in\n{text}");
    }
}

#[test]
fn an_invalid_policy_is_refused_with_the_gateways_message() {
    let text = r#"{"version": 1, "rules": {}, "routes": []}"#;
    let want = rl_engine::Policy::from_json(text).unwrap_err().to_string();
    assert_eq!(replay(text, "".as_bytes()).err(), Some(want));
}

/// The live gateway's policy. Every limit is per hour and the algorithms are gcra and bucket,
/// whose state moves continuously: the few milliseconds between the instant a request was
/// logged (just before it was sent) and the instant the gateway decided it cannot change a
/// decision, since no limit gives a token back within the seconds the test runs (the
/// quickest, 60 an hour, one a minute). A fixed window could turn between the two clocks,
/// so there is none.
fn live_policy() -> Value {
    json!({
        "version": 1,
        "identity": {"user": "x-user", "tenant": "x-tenant", "plan": "x-plan"},
        "plans": {
            "default": "free",
            "tenants": {"acme": "pro"},
            "limits": {"free": {"tenant": {"limit": 30}}, "pro": {"tenant": {"limit": 60}}}
        },
        "rules": {
            "user": {"key": "{t:${tenant}}:u:${user}", "limit": 20, "period": "1h"},
            "tenant": {"key": "{t:${tenant}}:all", "algo": "bucket", "limit": 30, "period": "1h"},
            "export": {"key": "x:${tenant}", "limit": 12, "period": "1h", "cost": 2},
            "per_ip": {"key": "ip:${ip}", "limit": 40, "period": "1h"}
        },
        "routes": [
            {"method": "GET", "path": "/orders/{id}", "rules": ["user", "tenant"]},
            {"method": "POST", "path": "/export", "rules": ["export"]}
        ],
        "default": {"rules": ["per_ip"]},
        // Refusals from the store as well as from the cache: requests come a millisecond or so
        // apart.
        "negative_cache": {"max": "5ms"}
    })
}

/// A request of the generated traffic.
struct Sent {
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
}

fn traffic(n: usize) -> Vec<Sent> {
    let mut x: u64 = 0x5EED;
    let mut next = move |m: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % m
    };
    let tenants = [
        "acme", "acme", "acme", "birch", "birch", "birch", "", "cedar",
    ];
    (0..n)
        .map(|_| {
            let u = next(8);
            let mut headers = vec![("x-user", format!("u{u}"))];
            let tenant = tenants[u as usize];
            if !tenant.is_empty() {
                headers.push(("x-tenant", tenant.to_string()));
            }
            if next(10) == 0 {
                headers.push(("x-plan", "pro".to_string()));
            }
            let (method, path) = match next(20) {
                0..=13 => ("GET", format!("/orders/{}", next(1000))),
                14..=16 => ("POST", "/export".to_string()),
                _ => ("GET", format!("/other/{}", next(1000))),
            };
            Sent {
                method,
                path,
                headers,
            }
        })
        .collect()
}

fn epoch_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_refuses_exactly_what_the_live_gateway_refused() {
    let (up, _) = upstream().await;
    let policy = live_policy();
    let file = policy_file(&policy);
    let gw = Gateway::start(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        "memory://",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    let client = reqwest::Client::new();
    let mut log = Vec::new();
    let mut live = Vec::new();
    for Sent {
        method,
        path,
        headers,
    } in traffic(400)
    {
        let mut request = client.request(
            method.parse().unwrap(),
            format!("{}{path}", gw.url("proxy")),
        );
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        let ts = epoch_ms();
        let status = request.send().await.unwrap().status().as_u16();
        assert!(status == 200 || status == 429, "{status}");
        live.push(status == 429);
        let headers: serde_json::Map<String, Value> = headers
            .into_iter()
            .map(|(n, v)| (n.to_string(), json!(v)))
            .collect();
        // The caller's address as the gateway saw it: the test's own, on loopback.
        log.push(
            json!({"ts": ts, "method": method, "path": path, "ip": "127.0.0.1",
                        "headers": headers})
            .to_string(),
        );
    }
    let refused = live.iter().filter(|r| **r).count();
    assert!(
        refused > 50 && refused < 350,
        "{refused} of 400 refused live"
    );

    let mut r = Replay::new(&policy.to_string()).unwrap();
    let replayed: Vec<bool> = log
        .iter()
        .map(|line| match r.feed(line.as_bytes()) {
            Fed::Decided(status) => status == Some(429),
            other => panic!("{other:?} for {line}"),
        })
        .collect();
    let differ: Vec<usize> = (0..live.len())
        .filter(|i| live[*i] != replayed[*i])
        .collect();
    assert!(differ.is_empty(), "lines decided otherwise: {differ:?}");
    let report = replay(&policy.to_string(), log.join("\n").as_bytes()).unwrap();
    assert_eq!(report.refusals(), refused as u64);
    assert_eq!(report.requests(), 400);
    println!("{}", report.render());
}
