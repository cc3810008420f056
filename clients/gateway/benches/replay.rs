//! `policy replay` throughput: 100,000 generated lines of access log (a third of them with an
//! RFC 3339 `ts`, the rest epoch milliseconds; 150 users of 12 tenants on three plans, about a
//! quarter of the requests refused, a shadow rule on the busiest route), read, parsed and
//! decided by the engine on its in-memory store. The goal is a million lines a minute.

// A benchmark stops at its first surprise: it may unwrap, expect, panic and index (the
// workspace's lints forbid them outside tests, and a benchmark is not run by its test harness).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;

const LINES: u64 = 100_000;

fn policy() -> String {
    json!({
        "version": 7,
        "identity": {"user": "x-user", "tenant": "x-tenant", "plan": "x-plan"},
        "plans": {
            "default": "free",
            "tenants": {"t1": "enterprise", "t2": "standard", "t3": "standard"},
            "limits": {
                "free": {"tenant": {"limit": 2000, "period": "1m"}},
                "standard": {"tenant": {"limit": 5000, "period": "1m"}},
                "enterprise": {"tenant": {"limit": 20000, "period": "1m"}}
            }
        },
        "rules": {
            "read": {"key": "{t:${tenant}}:read:${user}", "algo": "bucket", "limit": 1,
                     "period": "1s", "burst": 5},
            "tenant": {"key": "{t:${tenant}}:tenant", "limit": 1000, "period": "1m"},
            "write": {"key": "{t:${tenant}}:write:${user}", "limit": 5, "period": "1s", "burst": 10},
            "anon": {"key": "anon:${ip}", "algo": "window", "limit": 20, "period": "10s"},
            "search": {"key": "{t:${tenant}}:search:${user}", "limit": 1, "period": "1s",
                       "shadow": true, "expect_refusals": 0.05}
        },
        "routes": [
            {"method": "GET", "path": "/catalog/{id}", "rules": ["read", "tenant", "search"]},
            {"method": "POST", "path": "/checkout", "rules": ["write", "tenant"]},
            {"method": "POST", "path": "/login", "rules": ["anon"]},
            {"method": "GET", "path": "/static/*", "rules": []}
        ],
        "default": {"rules": ["anon"]}
    })
    .to_string()
}

/// About 330 requests a second, from 2026-01-01T00:00:00Z.
fn log() -> Vec<u8> {
    let mut x: u64 = 7;
    let mut next = move |m: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % m
    };
    let mut out = Vec::new();
    for i in 0..LINES {
        let ms = 1_767_225_600_000 + i * 3 + next(3);
        let ts = if i % 3 == 0 {
            let (s, frac) = (ms / 1000 - 1_767_225_600, ms % 1000);
            json!(format!(
                "2026-01-01T{:02}:{:02}:{:02}.{frac:03}Z",
                s / 3600,
                s / 60 % 60,
                s % 60
            ))
        } else {
            json!(ms)
        };
        let user = next(150);
        let (method, path) = match next(100) {
            0..=69 => (
                "GET",
                format!("/catalog/{}?page={}", next(1_000_000), next(9)),
            ),
            70..=84 => ("POST", "/checkout".to_string()),
            85..=91 => ("POST", "/login".to_string()),
            92..=96 => ("GET", format!("/static/app.{}.js", next(100))),
            _ => ("GET", format!("/unknown/{}", next(100))),
        };
        let line = json!({
            "ts": ts, "method": method, "path": path,
            "ip": format!("198.51.{}.{}", user % 256, user / 256), "status": 200,
            "headers": {"x-user": format!("user-{user}"), "x-tenant": format!("t{}", user % 12),
                        "user-agent": "curl/8.5.0", "accept": "*/*"}
        });
        serde_json::to_writer(&mut out, &line).unwrap();
        out.push(b'\n');
    }
    out
}

fn replay(c: &mut Criterion) {
    let (policy, log) = (policy(), log());
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.throughput(Throughput::Elements(LINES));
    group.bench_function("lines", |b| {
        b.iter(|| {
            let report = rl_gateway::replay::replay(&policy, log.as_slice()).unwrap();
            assert_eq!(report.lines(), LINES);
            report
        })
    });
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
