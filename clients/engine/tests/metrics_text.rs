//! The Prometheus text stays well formed whatever the policy shows: each sample follows the
//! `# TYPE` line of its own family, and no family is declared twice.

use rl_engine::metrics::Metrics;
use rl_engine::policy::Policy;
use rl_engine::Instant;

#[test]
fn every_sample_follows_its_own_family_header() {
    let policy = Policy::from_json_at(
        r#"{"version": 3, "default": {"rules": ["s"], "on_store_error": {"mode": "allow"}},
            "identity": {"tenant": "x-tenant"},
            "plans": {"default": "free", "limits": {"free": {"r": {"limit": 2}}}},
            "overrides": [{"tenant": "t", "rule": "r", "limit": 9, "owner": "o", "reason": "r",
                           "expires": "2026-01-02T00:00:00Z"}],
            "rules": {"r": {"key": "r:${tenant}", "limit": 5, "period": "1s"},
                      "s": {"key": "s", "limit": 5, "period": "1s", "shadow": true,
                            "expect_refusals": 0.1}},
            "routes": [{"method": "GET", "path": "/a", "rules": ["r"]}]}"#,
        Instant::from_micros(1_767_225_600_000_000),
    )
    .unwrap();
    let m = Metrics::default();
    m.policy_loaded(&policy);
    m.record(rl_engine::metrics::Event::StoreMode(
        rl_engine::wire::Mode::Module,
    ));
    let text = m.render_at(Instant::from_micros(1_767_225_600_000_000));
    let mut family = String::new();
    let mut declared = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap().to_string();
            assert!(
                !declared.contains(&family),
                "{family} declared twice:\n{text}"
            );
            declared.push(family.clone());
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            let own = name == family
                || [&family, "_bucket"].concat() == name
                || [&family, "_sum"].concat() == name
                || [&family, "_count"].concat() == name;
            assert!(own, "{name} after the header of {family}:\n{text}");
        }
    }
    for family in [
        "rl_gateway_unmatched_total",
        "rl_gateway_unknown_plan_total",
        "rl_gateway_overrides",
        "rl_gateway_shadow_alarm",
        "rl_gateway_store_mode",
    ] {
        assert!(declared.iter().any(|d| d == family), "{family}:\n{text}");
    }
}
