//! Capacity in rl-gateway (section 14 of the contract): `policy check` shows each capacity; and
//! through the proxy face a flood of batch work at twice what the capacity admits leaves
//! critical traffic served, while the batch requests shed get the capacity's own 503.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{policy_file, upstream, Gateway};
use rl_engine::Instant;
use rl_gateway::policy_cmd;
use serde_json::json;

/// 2026-01-01T00:00:00Z, the instant every policy vector is loaded at.
const NOW: Instant = Instant::from_micros(1_767_225_600_000_000);

const CAPACITY_TYPE: &str = "urn:redis-rl:problem:capacity-exceeded";

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_flood_at_twice_the_capacity_leaves_critical_requests_served() {
    let (up, _seen) = upstream().await;
    let file = policy_file(&json!({
        "version": 1,
        "identity": {"tenant": "x-tenant"},
        "rules": {"tenant": {"key": "{t:${tenant}}:all", "limit": 100000, "period": "1s"}},
        "capacity": {"orders": {"limit": {"fixed": 8}}},
        "routes": [
            {"method": "POST", "path": "/checkout", "rules": ["tenant"], "capacity": "orders", "priority": "critical"},
            {"method": "POST", "path": "/reports/export", "rules": ["tenant"], "capacity": "orders", "priority": "batch"}
        ],
        "default": {"rules": []}
    }));
    let gw = Gateway::start(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        "memory://",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--admin",
        "127.0.0.1:0",
    ]);
    let url = gw.url("proxy");
    let client = reqwest::Client::new();
    let running = Arc::new(AtomicBool::new(true));
    let (batch_ok, batch_shed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // Sixteen batch callers back to back, each request 50 ms at the backend: twice the 8 the
    // capacity admits.
    let mut flood = Vec::new();
    for _ in 0..16 {
        let (client, url, running) = (client.clone(), url.clone(), running.clone());
        let (ok, shed) = (batch_ok.clone(), batch_shed.clone());
        flood.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let r = client
                    .post(format!("{url}/reports/export?ms=50"))
                    .header("x-tenant", "acme")
                    .send()
                    .await
                    .unwrap();
                match r.status().as_u16() {
                    200 => ok.fetch_add(1, Ordering::Relaxed),
                    503 => {
                        let body: serde_json::Value = r.json().await.unwrap();
                        assert_eq!(body["type"], CAPACITY_TYPE);
                        let n = shed.fetch_add(1, Ordering::Relaxed);
                        // A shed caller comes back after a moment, as Retry-After asks.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        n
                    }
                    other => panic!("batch answered {other}"),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Critical requests meanwhile, four at a time: every one served.
    for _ in 0..10 {
        let calls = (0..4).map(|_| {
            client
                .post(format!("{url}/checkout?ms=50"))
                .header("x-tenant", "acme")
                .send()
        });
        for r in futures_util::future::join_all(calls).await {
            assert_eq!(r.unwrap().status(), 200);
        }
    }
    running.store(false, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let (ok, shed) = (
        batch_ok.load(Ordering::Relaxed),
        batch_shed.load(Ordering::Relaxed),
    );
    assert!(ok > 0 && shed > 0, "batch: {ok} served, {shed} shed");
    let metrics = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains("rl_gateway_capacity_shed_total{capacity=\"orders\",class=\"critical\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "rl_gateway_capacity_shed_total{{capacity=\"orders\",class=\"batch\"}} {shed}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("rl_gateway_capacity_limit{capacity=\"orders\"} 8"),
        "{metrics}"
    );
}

/// A policy's capacities under the rules' table: each one's limit, wait and sharing, the
/// routes drawing on it with their class, and a warning for one no route draws on. A rule
/// charged by status says so in its notes.
#[test]
fn check_shows_each_capacity_and_who_draws_on_it() {
    let text = json!({
      "version": 1,
      "identity": {"tenant": "x-tenant", "user": "x-user"},
      "rules": {
        "tenant": {"key": "{t:${tenant}}:all", "limit": 100, "period": "1s"},
        "login": {"key": "{l:${user}}:fails", "limit": 5, "period": "15m",
                  "charge": {"on_status": [401, 403]}}
      },
      "capacity": {
        "orders": {"limit": {"adaptive": {"min": 4, "max": 1000, "initial": 16}},
                   "queue": {"max_wait": "20ms"}, "fair": "tenant"},
        "search": {"limit": {"fixed": 64}}
      },
      "routes": [
        {"method": "POST", "path": "/checkout", "rules": ["tenant"], "capacity": "orders", "priority": "critical"},
        {"method": "POST", "path": "/reports/export", "rules": ["tenant"], "capacity": "orders", "priority": "batch"},
        {"method": "GET", "path": "/orders/{id}", "rules": ["tenant"], "capacity": "orders"},
        {"method": "POST", "path": "/login", "rules": ["login"]}
      ],
      "default": {"rules": []}
    })
    .to_string();
    let text = policy_cmd::check(&text, NOW).unwrap().render();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("capacity"))
        .unwrap();
    assert_eq!(
        &lines[at..at + 4],
        [
            "capacity  limit                     wait  fair    drawn on by",
            "--------  ------------------------  ----  ------  ------------------------------------------------------------------------------------",
            "orders    adaptive 4..1000 from 16  20ms  tenant  POST /checkout (critical), POST /reports/export (batch), GET /orders/{id} (standard)",
            "search    fixed 64                  -     -       (no route)",
        ]
    );
    assert!(text.contains("charged on 401/403"), "{text}");
    assert!(
        text.contains("warning: capacity.search: no route draws on it: it protects nothing"),
        "{text}"
    );
}
