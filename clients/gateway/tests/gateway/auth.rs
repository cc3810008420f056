//! The forward-auth face: the described request decided, 200 with the RateLimit fields, the
//! refusal as 429 or 403, the request that describes nothing a 400, and a policy this face
//! cannot enforce refused at start.

use crate::support::{policy_file, run, Gateway};
use serde_json::json;

fn policy() -> serde_json::Value {
    json!({
        "version": 1,
        "identity": {"user": "x-user", "trusted_proxies": ["127.0.0.1"]},
        "rules": {"user": {"key": "u:${user}", "limit": 1, "period": "1m"},
                  "ip": {"key": "ip:${ip}", "limit": 1, "period": "1m"}},
        "routes": [{"method": "GET", "path": "/orders/{id}", "rules": ["user"]},
                   {"method": "POST", "path": "/login", "rules": ["ip"]}],
        "default": {"rules": []}
    })
}

fn start(extra: &[&str]) -> Gateway {
    let file = policy_file(&policy());
    let mut args = vec![
        "--policy",
        file.to_str().unwrap(),
        "--store",
        "memory://",
        "--auth",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Gateway::start(&args)
}

async fn ask(gw: &Gateway, method: &str, uri: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}/auth", gw.url("auth")))
        .header("x-forwarded-method", method)
        .header("x-forwarded-uri", uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_described_request_is_decided_and_a_refusal_is_429_with_its_body() {
    let gw = start(&[]);
    let ok = ask(&gw, "GET", "/orders/7?x=1", &[("x-user", "ann")]).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["ratelimit-policy"], "\"user\";q=1;w=60");
    assert_eq!(ok.headers()["ratelimit"], "\"user\";r=0;t=60");
    assert!(ok.bytes().await.unwrap().is_empty());
    let refused = ask(&gw, "GET", "/orders/8", &[("x-user", "ann")]).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "60");
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    // The X-Original-* names (nginx's) work too, and another user has a budget of their own.
    let other = reqwest::Client::new()
        .get(format!("{}/auth", gw.url("auth")))
        .header("x-original-method", "GET")
        .header("x-original-uri", "/orders/8")
        .header("x-user", "bob")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    // An unmatched request passes under the default with no rules.
    assert_eq!(ask(&gw, "GET", "/elsewhere", &[]).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_caller_is_the_rightmost_untrusted_forwarded_address_and_nginx_gets_403() {
    let gw = start(&["--auth-deny-status", "403"]);
    let login = |xff: &'static str| {
        let gw = &gw;
        async move {
            ask(gw, "POST", "/login", &[("x-forwarded-for", xff)])
                .await
                .status()
        }
    };
    assert_eq!(login("198.51.100.1").await, 200);
    assert_eq!(login("198.51.100.1").await, 403);
    // Another caller behind the same proxy is another key.
    assert_eq!(login("198.51.100.2").await, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_that_describes_nothing_is_400() {
    let gw = start(&[]);
    let r = reqwest::get(format!("{}/auth", gw.url("auth")))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("X-Forwarded-Method"));
}

#[test]
fn a_policy_with_a_semaphore_or_settle_rule_on_a_route_is_refused_naming_the_route() {
    let file = policy_file(&json!({
        "version": 1,
        "rules": {"slots": {"key": "s", "concurrency": 2, "lease": "30s"}},
        "routes": [{"name": "exports", "method": "POST", "path": "/export", "rules": ["slots"]}],
        "default": {"rules": []}
    }));
    let (code, _, err) = run(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        "memory://",
        "--auth",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("route 'exports' has a semaphore ('slots')"),
        "{err}"
    );
}

/// A capacity and a rule charged by status both need the response's end, too.
#[test]
fn a_policy_with_a_capacity_or_charge_rule_on_a_route_is_refused_naming_the_route() {
    let cases = [
        (
            json!({
                "version": 1,
                "rules": {"r": {"key": "k", "limit": 5, "period": "1s"}},
                "capacity": {"orders": {"limit": {"fixed": 8}}},
                "routes": [{"name": "checkout", "method": "POST", "path": "/checkout",
                            "rules": ["r"], "capacity": "orders", "priority": "critical"}],
                "default": {"rules": []}
            }),
            "route 'checkout' draws on capacity 'orders'",
        ),
        (
            json!({
                "version": 1,
                "rules": {"fails": {"key": "k", "limit": 5, "period": "15m",
                                    "charge": {"on_status": [401]}}},
                "routes": [{"name": "login", "method": "POST", "path": "/login", "rules": ["fails"]}],
                "default": {"rules": []}
            }),
            "route 'login' has a charge rule ('fails')",
        ),
    ];
    for (policy, message) in cases {
        let file = policy_file(&policy);
        let (code, _, err) = run(&[
            "--policy",
            file.to_str().unwrap(),
            "--store",
            "memory://",
            "--auth",
            "127.0.0.1:0",
        ]);
        assert_eq!(code, Some(2));
        assert!(err.contains(message), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_uri_the_face_cannot_read_as_text_is_decided_never_a_400() {
    let gw = start(&[]);
    let ask_raw = |method: &'static str, uri: &'static [u8], original: Option<&'static str>| {
        let mut request = reqwest::Client::new()
            .get(format!("{}/auth", gw.url("auth")))
            .header("x-forwarded-method", method)
            .header(
                "x-forwarded-uri",
                reqwest::header::HeaderValue::from_bytes(uri).unwrap(),
            )
            .header("x-user", String::from_utf8_lossy(uri).into_owned());
        if let Some(original) = original {
            request = request.header("x-original-uri", original);
        }
        request.send()
    };
    // Raw UTF-8 and invalid bytes reach their route, whose fields come back.
    for uri in [&b"/orders/caf\xc3\xa9"[..], b"/orders/\xff\xfe?q=\x80"] {
        let r = ask_raw("GET", uri, None).await.unwrap();
        assert_eq!(r.status(), 200, "{}", String::from_utf8_lossy(uri));
        assert_eq!(r.headers()["ratelimit-policy"], "\"user\";q=1;w=60");
    }
    // An empty URI gives way to the next header, else it is `/` (no rules there).
    assert_eq!(
        ask_raw("POST", b"", Some("/login")).await.unwrap().status(),
        200
    );
    assert_eq!(
        ask_raw("POST", b"", Some("/login")).await.unwrap().status(),
        429
    );
    assert_eq!(ask_raw("POST", b"", None).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn in_nginx_mode_a_request_refused_as_sent_is_401_never_a_status_nginx_makes_a_500() {
    let nginx = start(&["--auth-deny-status", "403"]);
    let plain = start(&[]);
    let long = "a".repeat(300);
    for (gw, want) in [(&nginx, [401, 401, 401]), (&plain, [431, 400, 400])] {
        let too_long = ask(gw, "GET", "/orders/7", &[("x-user", &long)]).await;
        let separator = ask(gw, "GET", "/orders%2F7", &[("x-user", "ann")]).await;
        let nothing = reqwest::get(format!("{}/auth", gw.url("auth")))
            .await
            .unwrap();
        let got = [too_long.status(), separator.status(), nothing.status()];
        assert_eq!(got, want);
        // The problem body is the engine's, whatever the status nginx is given.
        let body: serde_json::Value = too_long.json().await.unwrap();
        assert_eq!(body["status"], 431);
    }
}
