//! The shipped nginx and Caddy configurations (`examples/`, only their ports changed) under a
//! hostile caller: headers that describe another request, odd request targets written byte for
//! byte, identities too long to key by. A limited route stays limited, no caller gets a 5xx,
//! and no caller or upstream sees one of Caddy's placeholders.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::forward_auth::{behind, caddy, nginx, Seen};

/// `POST /login` is 3 a minute per caller address; `/orders/{id}` is keyed by user; anything
/// else passes (the default has no rules).
fn policy() -> serde_json::Value {
    json!({
        "version": 1,
        "identity": {"user": "x-user", "trusted_proxies": ["127.0.0.1"]},
        "rules": {"login": {"key": "login:${ip}", "limit": 3, "period": "1m"},
                  "user": {"key": "u:${user}", "limit": 100, "period": "1m"}},
        "routes": [{"method": "POST", "path": "/login", "rules": ["login"]},
                   {"method": "GET", "path": "/orders/{id}", "rules": ["user"]}],
        "default": {"rules": []}
    })
}

const NGINX_MODE: [&str; 2] = ["--auth-deny-status", "403"];

/// A response read off the wire: status, headers (names in lower case), body as received.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request written byte for byte, so no client library cleans its target, on a
/// connection closed after it.
async fn raw(port: u16, method: &str, target: &[u8], headers: &[(&str, &str)]) -> Raw {
    let mut head = format!("{method} ").into_bytes();
    head.extend_from_slice(target);
    head.extend_from_slice(
        b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n",
    );
    for (name, value) in headers {
        head.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.write_all(&head).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw {
        status: status.parse().unwrap(),
        headers,
        body: body.to_string(),
    }
}

/// Five `POST /login` whose headers describe another request (another URI, another method,
/// another caller each time): the proxy's own values decide, so three pass and two are
/// refused, and the upstream saw the three as they were.
async fn forged_headers_change_nothing(port: u16, seen: &Seen) {
    let mut statuses = Vec::new();
    for i in 0..5 {
        let xff = format!("203.0.113.{i}");
        let r = raw(
            port,
            "POST",
            b"/login",
            &[
                ("X-Forwarded-Uri", "/other"),
                ("X-Forwarded-Method", "GET"),
                ("X-Original-URI", "/other"),
                ("X-Original-Method", "GET"),
                ("X-Forwarded-For", &xff),
            ],
        )
        .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let seen = seen.lock().unwrap();
    let uris: Vec<_> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.uri.as_str()))
        .collect();
    assert_eq!(uris, [("POST", "/login"); 3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_as_shipped_decides_the_request_it_received_whatever_the_caller_forges() {
    let (port, seen, _gw, _nginx) = behind("nginx.conf", &policy(), &NGINX_MODE, nginx).await;
    forged_headers_change_nothing(port, &seen).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn caddy_as_shipped_decides_the_request_it_received_whatever_the_caller_forges() {
    let (port, seen, _gw, _caddy) = behind("Caddyfile", &policy(), &[], caddy).await;
    forged_headers_change_nothing(port, &seen).await;
}

/// Odd targets, each decided and none a 5xx: matrix parameters count against `/login`'s
/// limit, an encoded separator is refused as sent (`refused_as_sent`: the status the proxy
/// gives it), raw UTF-8 and invalid bytes reach their route, and so does an identity too long
/// to key by. Of the logins, only the three admitted reach the upstream.
async fn odd_targets_are_decided(port: u16, seen: &Seen, refused_as_sent: u16) {
    let login = |target: &'static [u8]| raw(port, "POST", target, &[]);
    // Three spellings with matrix parameters spend `/login`'s three...
    for target in [
        &b"/login;x=1"[..],
        b"/login/..;/login",
        b"/login;jsessionid=a",
    ] {
        let r = login(target).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(target));
    }
    // ...so it is refused, and so are its other spellings, the absolute form included.
    for target in [
        &b"/login"[..],
        b"http://127.0.0.1/login",
        b"/login/%2e%2e;x/login;y",
        b"//login//",
    ] {
        let r = login(target).await;
        assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(target));
    }
    for target in [
        &b"/login%2f"[..],
        b"/login%2F",
        b"/log%2Fin",
        b"/login%5c",
        b"/login%5C",
        b"/login%00",
    ] {
        let r = login(target).await;
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(target));
    }
    // Raw bytes in the target: decided by the route they reach, with its fields, and passed on
    // (nginx passes them as they came, and the test's upstream, on hyper, refuses `\xff` with
    // a 400 of its own).
    for target in [&b"/orders/caf\xc3\xa9"[..], b"/orders/\xff\xfe"] {
        let r = raw(port, "GET", target, &[("x-user", "ann")]).await;
        let shown = String::from_utf8_lossy(target);
        assert!(r.status < 500, "{shown}: {}", r.status);
        assert_eq!(
            r.header("ratelimit-policy"),
            Some("\"user\";q=100;w=60"),
            "{shown}"
        );
    }
    let long = "a".repeat(300);
    let r = raw(port, "GET", b"/orders/1", &[("x-user", &long)]).await;
    assert_eq!(r.status, refused_as_sent);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.iter().filter(|s| s.method == "POST").count(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_as_shipped_answers_odd_targets_without_a_5xx() {
    let (port, seen, _gw, _nginx) = behind("nginx.conf", &policy(), &NGINX_MODE, nginx).await;
    // nginx has no way to pass rl-gateway's 431 on: a request refused as sent is a 400.
    odd_targets_are_decided(port, &seen, 400).await;
    // That 400 is nginx.conf's problem body.
    let r = raw(port, "POST", b"/login%2f", &[]).await;
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.body.contains("\"status\":400"), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn caddy_as_shipped_answers_odd_targets_without_a_5xx() {
    let (port, seen, _gw, _caddy) = behind("Caddyfile", &policy(), &[], caddy).await;
    odd_targets_are_decided(port, &seen, 431).await;
}

/// No header either side sees holds an unreplaced `{placeholder}`, on a route with rules and
/// one without, with or without a caller's own `RateLimit` fields; the decision's fields reach
/// both sides exactly when there is a decision.
async fn no_placeholder_either_side(port: u16, seen: &Seen, upstream_gets_fields: bool) {
    let client = reqwest::Client::new();
    let cases = [
        ("/orders/7", None),
        ("/elsewhere", None),
        ("/elsewhere", Some("\"user\";r=99;t=1")),
        ("/orders/8", Some("\"user\";r=99;t=1")),
    ];
    for (path, forged) in cases {
        let mut request = client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .header("x-user", "ann");
        if let Some(forged) = forged {
            request = request
                .header("ratelimit", forged)
                .header("ratelimit-policy", "\"user\";q=99;w=1");
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 200);
        for (name, value) in r.headers() {
            assert!(
                !value.as_bytes().contains(&b'{'),
                "{path}: {name}: {value:?}"
            );
        }
        let limited = path.starts_with("/orders/");
        let want = limited.then_some("\"user\";q=100;w=60");
        let got = r
            .headers()
            .get("ratelimit-policy")
            .map(|v| v.to_str().unwrap());
        assert_eq!(got, want, "{path}");
        let upstream = seen.lock().unwrap().last().unwrap().headers.clone();
        for (name, value) in &upstream {
            assert!(
                !value.as_bytes().contains(&b'{'),
                "{path}: {name}: {value:?}"
            );
        }
        if upstream_gets_fields {
            let got = upstream
                .get("ratelimit-policy")
                .map(|v| v.to_str().unwrap());
            assert_eq!(got, want, "{path}");
            let got = upstream
                .get("ratelimit")
                .map(|v| v.to_str().unwrap().to_string());
            assert_eq!(got.is_some(), limited, "{path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn caddy_as_shipped_shows_no_placeholder_to_caller_or_upstream() {
    let (port, seen, _gw, _caddy) = behind("Caddyfile", &policy(), &[], caddy).await;
    no_placeholder_either_side(port, &seen, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_as_shipped_shows_no_placeholder_to_caller_or_upstream() {
    let (port, seen, _gw, _nginx) = behind("nginx.conf", &policy(), &NGINX_MODE, nginx).await;
    no_placeholder_either_side(port, &seen, false).await;
}
