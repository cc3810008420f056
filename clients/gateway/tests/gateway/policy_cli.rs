//! `rl-gateway policy check` and `policy diff` as a CI job runs them: what they print and their
//! exit statuses (the tables themselves are `policy_cmd.rs`'s).

use crate::support::{policy_file, run};
use serde_json::json;

fn policy(version: u64, period: &str) -> serde_json::Value {
    json!({
        "version": version,
        "identity": {"user": "x-user"},
        "rules": {"user": {"key": "u:${user}", "limit": 5000, "period": period}},
        "routes": [{"method": "GET", "path": "/orders/{id}", "rules": ["user"]}],
        "default": {"rules": []}
    })
}

#[test]
fn check_prints_the_table_or_the_gateways_message() {
    let good = policy_file(&policy(1, "1m"));
    let (code, out, _) = run(&["policy", "check", good.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(out.contains("5,000"), "{out}");
    let bad = policy_file(&json!({"version": 1, "routes": []}));
    let (code, out, err) = run(&["policy", "check", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(out.is_empty());
    assert!(err.contains("invalid policy: "), "{err}");
    let (code, _, err) = run(&["policy", "check", "/nonexistent/policy.json"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/policy.json"), "{err}");
}

#[test]
fn diff_fails_on_a_cut_unless_approved_and_passes_a_rise() {
    // 5000 a second entered for what was 5000 a minute is a rise, and the way back a cut.
    let per_second = policy_file(&policy(1, "1s"));
    let per_minute = policy_file(&policy(2, "1m"));
    let (s, m) = (per_second.to_str().unwrap(), per_minute.to_str().unwrap());
    let (code, out, err) = run(&["policy", "diff", s, m]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.contains("refusing: 1 effective limit falls by more than half"),
        "{err}"
    );
    let (code, _, _) = run(&["policy", "diff", s, m, "--approve-cuts"]);
    assert_eq!(code, Some(0));
    let (code, _, err) = run(&["policy", "diff", m, s]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn replay_reads_a_log_and_counts_what_it_cannot_read() {
    let file = policy_file(&json!({
        "version": 1,
        "identity": {"user": "x-user"},
        "rules": {"user": {"key": "u:${user}", "limit": 1, "period": "1h"}},
        "routes": [{"method": "GET", "path": "/orders/{id}", "rules": ["user"]}],
        "default": {"rules": []}
    }));
    let log = file.with_file_name("access.log");
    std::fs::write(
        &log,
        concat!(
            r#"{"ts": "2026-03-02T09:00:00Z", "method": "GET", "path": "/orders/1", "headers": {"x-user": "ann"}}"#,
            "\n",
            r#"{"ts": "2026-03-02T09:00:01Z", "method": "GET", "path": "/orders/2", "headers": {"x-user": "ann"}}"#,
            "\nnot json\n"
        ),
    )
    .unwrap();
    let (code, out, err) = run(&[
        "policy",
        "replay",
        file.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("1 refused"), "{out}");
    assert!(out.contains("line 3: "), "{out}");
    let (code, _, err) = run(&[
        "policy",
        "replay",
        file.to_str().unwrap(),
        "--log",
        "/nonexistent.log",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent.log"), "{err}");
}
