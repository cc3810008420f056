// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_rl_client::Mode;
use rl_engine::breaker::BreakerState;
use rl_engine::metrics::{escape, CallResult, Event, Metrics, MetricsHook, Outcome};

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl MetricsHook for Seen {
    fn event(&self, event: &Event<'_>) {
        self.0.lock().unwrap().push(format!("{event:?}"));
    }
}

#[test]
fn renders_exact_prometheus_text() {
    let seen = Arc::new(Seen::default());
    let m = Metrics::new(Some(seen.clone() as Arc<dyn MetricsHook>));
    let d = |route, rule, outcome| Event::Decision {
        route,
        rule,
        outcome,
    };
    m.record(d("GET /catalog", "read", Outcome::Admit));
    m.record(d("GET /catalog", "read", Outcome::Admit));
    m.record(d("GET /catalog", "read", Outcome::RefuseCached));
    m.record(d("POST /x\"y\\z\n", "search", Outcome::ShadowRefuse));
    m.record(Event::StoreCall {
        result: CallResult::Ok,
        latency: Duration::from_micros(800),
    });
    m.record(Event::StoreCall {
        result: CallResult::Ok,
        latency: Duration::from_micros(2500),
    });
    m.record(Event::StoreCall {
        result: CallResult::Timeout,
        latency: Duration::from_secs(2),
    });
    m.record(Event::GrantRefill { rule: "global" });
    m.record(Event::Breaker(BreakerState::Ramping));
    m.record(Event::PolicyVersion(7));
    m.record(Event::RouteMode {
        route: "GET /catalog",
        mode: "fallback",
    });
    m.record(Event::StoreMode(Mode::Script));

    let expected = r#"# HELP rl_gateway_decisions_total Rule decisions by route, rule and outcome.
# TYPE rl_gateway_decisions_total counter
rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="admit"} 2
rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="refuse_cached"} 1
rl_gateway_decisions_total{route="POST /x\"y\\z\n",rule="search",outcome="shadow_refuse"} 1
# HELP rl_gateway_store_call_duration_seconds Store call latency, deadline included.
# TYPE rl_gateway_store_call_duration_seconds histogram
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.0005"} 0
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.001"} 1
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.0025"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.005"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.01"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.025"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.05"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.1"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.25"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="0.5"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="1"} 2
rl_gateway_store_call_duration_seconds_bucket{result="ok",le="+Inf"} 2
rl_gateway_store_call_duration_seconds_sum{result="ok"} 0.0033
rl_gateway_store_call_duration_seconds_count{result="ok"} 2
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.0005"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.001"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.0025"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.005"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.01"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.025"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.05"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.1"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.25"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="0.5"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="1"} 0
rl_gateway_store_call_duration_seconds_bucket{result="timeout",le="+Inf"} 1
rl_gateway_store_call_duration_seconds_sum{result="timeout"} 2
rl_gateway_store_call_duration_seconds_count{result="timeout"} 1
# HELP rl_gateway_grant_refills_total RL.GRANT calls refilling a rule's local chunk.
# TYPE rl_gateway_grant_refills_total counter
rl_gateway_grant_refills_total{rule="global"} 1
# HELP rl_gateway_breaker_state 1 for the store breaker's current state, 0 for the others.
# TYPE rl_gateway_breaker_state gauge
rl_gateway_breaker_state{state="closed"} 0
rl_gateway_breaker_state{state="open"} 0
rl_gateway_breaker_state{state="half_open"} 0
rl_gateway_breaker_state{state="ramping"} 1
# HELP rl_gateway_policy_version Version of the policy in force.
# TYPE rl_gateway_policy_version gauge
rl_gateway_policy_version 7
# HELP rl_gateway_route_mode 1 for each route's posture when the store cannot answer.
# TYPE rl_gateway_route_mode gauge
rl_gateway_route_mode{route="GET /catalog",mode="fallback"} 1
# HELP rl_gateway_unmatched_total Requests no route matched, decided by the policy's default.
# TYPE rl_gateway_unmatched_total counter
rl_gateway_unmatched_total 0
# HELP rl_gateway_decision_records_dropped_total Decision records not written, past the bound of records a second.
# TYPE rl_gateway_decision_records_dropped_total counter
rl_gateway_decision_records_dropped_total 0
# HELP rl_gateway_store_mode 1 for the store's implementation of the commands (module or script), 0 for the other.
# TYPE rl_gateway_store_mode gauge
rl_gateway_store_mode{mode="module"} 0
rl_gateway_store_mode{mode="script"} 1
"#;
    assert_eq!(m.render(), expected);

    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.len(), 12, "the hook receives every event");
    assert_eq!(
        seen[0],
        r#"Decision { route: "GET /catalog", rule: "read", outcome: Admit }"#
    );
    assert_eq!(seen[9], "PolicyVersion(7)");
}

#[test]
fn an_empty_registry_still_declares_every_family() {
    let text = Metrics::default().render();
    for family in [
        "rl_gateway_decisions_total counter",
        "rl_gateway_store_call_duration_seconds histogram",
        "rl_gateway_grant_refills_total counter",
        "rl_gateway_breaker_state gauge",
        "rl_gateway_policy_version gauge",
        "rl_gateway_unmatched_total counter",
        "rl_gateway_route_mode gauge",
        "rl_gateway_store_mode gauge",
    ] {
        assert!(text.contains(&format!("# TYPE {family}\n")), "{family}");
    }
    assert!(text.contains("rl_gateway_breaker_state{state=\"closed\"} 1\n"));
    assert!(text.contains("rl_gateway_policy_version 0\n"));
}

#[test]
fn every_outcome_has_its_contract_name_and_escaping_is_exact() {
    let names: Vec<&str> = [
        Outcome::Admit,
        Outcome::Refuse,
        Outcome::RefuseCached,
        Outcome::UnavailableDeny,
        Outcome::FallbackAdmit,
        Outcome::FallbackRefuse,
        Outcome::OpenAdmit,
        Outcome::ShadowRefuse,
        Outcome::UnreplicatedAdmit,
    ]
    .iter()
    .map(|o| o.name())
    .collect();
    assert_eq!(
        names,
        [
            "admit",
            "refuse",
            "refuse_cached",
            "unavailable_deny",
            "fallback_admit",
            "fallback_refuse",
            "open_admit",
            "shadow_refuse",
            "unreplicated_admit"
        ]
    );
    assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    assert_eq!(escape("plain é"), "plain é");
}

#[test]
fn a_loaded_policy_sets_its_version_and_route_modes() {
    let policy = rl_engine::policy::Policy::from_json(
        r#"{"version": 12, "default": {"rules": []},
            "rules": {"r": {"key": "k:${user}", "limit": 5, "period": "1s"}},
            "routes": [
              {"method": "GET", "path": "/a", "rules": ["r"]},
              {"method": "post", "path": "/b", "rules": ["r"],
               "on_store_error": {"mode": "fallback", "limit": 5, "period": "1s"}},
              {"method": "PUT", "path": "/c", "rules": ["r"], "on_store_error": {"mode": "allow"}}
            ]}"#,
    )
    .unwrap();
    let m = Metrics::default();
    m.policy_loaded(&policy);
    let text = m.render();
    let tail = text
        .split("# HELP rl_gateway_policy_version")
        .nth(1)
        .and_then(|t| t.split("# HELP rl_gateway_unmatched_total").next())
        .unwrap();
    assert_eq!(
        tail,
        r#" Version of the policy in force.
# TYPE rl_gateway_policy_version gauge
rl_gateway_policy_version 12
# HELP rl_gateway_route_mode 1 for each route's posture when the store cannot answer.
# TYPE rl_gateway_route_mode gauge
rl_gateway_route_mode{route="GET /a",mode="deny"} 1
rl_gateway_route_mode{route="POST /b",mode="fallback"} 1
rl_gateway_route_mode{route="PUT /c",mode="allow"} 1
"#
    );
}
