use rl_engine::problem::{limiter_unavailable, too_many_requests, CONTENT_TYPE};
use serde_json::{json, Value};

#[test]
fn quota_exceeded_names_the_violated_policies() {
    let p = too_many_requests(&["read", "tenant"]);
    assert_eq!(p.status, 429);
    let body: Value = serde_json::from_str(&p.body).unwrap();
    assert_eq!(
        body,
        json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "A rate limit was exceeded; retry after the time in Retry-After.",
            "violated-policies": ["read", "tenant"]
        })
    );
    assert_eq!(CONTENT_TYPE, "application/problem+json");
}

#[test]
fn unavailable_says_the_limiter_is_down_without_rate_fields() {
    let p = limiter_unavailable();
    assert_eq!(p.status, 503);
    assert_eq!(
        p.body,
        r#"{"detail":"The rate limiter is unavailable; retry after the time in Retry-After.","status":503,"title":"Service Unavailable","type":"about:blank"}"#
    );
}
