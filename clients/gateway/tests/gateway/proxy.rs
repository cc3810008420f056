//! The reverse proxy face against a real upstream on loopback: decisions, the forwarded
//! request (matched path, query, headers, streamed body), `X-Actual-Cost` consumed, 502 and
//! 504 (counted from the end of the request body), a slow or huge request head refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{closed_port, policy_file, upstream, Gateway};
use serde_json::json;

fn policy() -> serde_json::Value {
    json!({
        "version": 1,
        "identity": {"user": "x-user"},
        "rules": {
            "user": {"key": "u:${user}", "limit": 2, "period": "1m"},
            "export": {"key": "x:${user}", "limit": 10, "period": "1h", "cost": 4, "settle": true}
        },
        "routes": [
            {"method": "GET", "path": "/orders/{id}", "rules": ["user"]},
            {"method": "POST", "path": "/export", "rules": ["export"]}
        ],
        "default": {"rules": []}
    })
}

fn start(upstream: &str, extra: &[&str]) -> Gateway {
    start_by(Gateway::start, upstream, extra)
}

/// The same gateway, started by `launch` (as is, or pinned to one CPU).
fn start_by(launch: fn(&[&str]) -> Gateway, upstream: &str, extra: &[&str]) -> Gateway {
    let file = policy_file(&policy());
    let mut args = vec![
        "--policy",
        file.to_str().unwrap(),
        "--store",
        "memory://",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        upstream,
    ];
    args.extend_from_slice(extra);
    launch(&args)
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_are_decided_then_forwarded_with_the_matched_path_and_their_headers() {
    let (up, seen) = upstream().await;
    let gw = start(&up, &[]);
    let client = reqwest::Client::new();
    let url = gw.url("proxy");
    let get = |path: &str| {
        client
            .get(format!("{url}{path}"))
            .header("x-user", "ann")
            .header("x-forwarded-for", "203.0.113.7")
            .header("connection", "keep-alive, x-hop")
            .header("x-hop", "1")
            .header("te", "trailers")
            .header("x-kept", "yes")
            .send()
    };
    let first = get("/orders/../orders//7?page=2").await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["ratelimit-policy"], "\"user\";q=2;w=60");
    assert!(first.headers().get("x-upstream-secret").is_none());
    assert_eq!(get("/orders/8").await.unwrap().status(), 200);
    let refused = get("/orders/9").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "30");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["violated-policies"], json!(["user"]));
    // The refusal never reached the upstream.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let one = &seen[0];
    assert_eq!(one.method, "GET");
    assert_eq!(one.uri, "/orders/7?page=2");
    assert_eq!(one.headers["x-forwarded-for"], "203.0.113.7, 127.0.0.1");
    assert_eq!(one.headers["x-forwarded-proto"], "http");
    assert_eq!(
        one.headers["x-forwarded-host"],
        gw.faces["proxy"].to_string()
    );
    assert_eq!(one.headers["x-kept"], "yes");
    for hop in ["x-hop", "te", "connection"] {
        assert!(one.headers.get(hop).is_none(), "{hop} was forwarded");
    }
}

/// Pinned to one CPU, the gateway runs on one thread (tokio's current-thread runtime), and
/// answers as on many: decisions, a small response (read whole before it is passed on) and a
/// large one (streamed), both bodies intact.
#[tokio::test(flavor = "multi_thread")]
async fn on_one_cpu_the_gateway_runs_one_thread_and_answers_the_same() {
    let (up, seen) = upstream().await;
    let gw = start_by(Gateway::start_on_one_cpu, &up, &[]);
    let client = reqwest::Client::new();
    let post = |bytes: usize| {
        client
            .post(format!("{}/echo", gw.url("proxy")))
            .header("x-user", "ida")
            .body(vec![b'y'; bytes])
            .send()
    };
    for bytes in [0, 2, 16 << 10, (16 << 10) + 1, 300_000] {
        let r = post(bytes).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-length"], bytes.to_string());
        assert_eq!(r.bytes().await.unwrap(), vec![b'y'; bytes]);
    }
    let get = |path: &'static str| {
        client
            .get(format!("{}{path}", gw.url("proxy")))
            .header("x-user", "ida")
            .send()
    };
    assert_eq!(get("/orders/1").await.unwrap().status(), 200);
    assert_eq!(get("/orders/2").await.unwrap().status(), 200);
    assert_eq!(get("/orders/3").await.unwrap().status(), 429);
    assert_eq!(seen.lock().unwrap().len(), 7);
    assert_eq!(gw.threads(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escaped_spelling_of_a_path_is_decided_and_forwarded_as_the_path_it_names() {
    let (up, seen) = upstream().await;
    let gw = start(&up, &[]);
    let client = reqwest::Client::new();
    let get = |path: &'static str| {
        client
            .get(format!("{}{path}", gw.url("proxy")))
            .header("x-user", "eve")
            .send()
    };
    // Three spellings of one route share its limit of 2; the upstream sees the path they name.
    assert_eq!(get("/%6Frders/1").await.unwrap().status(), 200);
    assert_eq!(get("/orders/%31").await.unwrap().status(), 200);
    assert_eq!(get("/ord%65rs/1").await.unwrap().status(), 429);
    // A '%' that starts no escape is forwarded as %25: decoding it once more finds nothing new.
    assert_eq!(get("/%%36Frders/1").await.unwrap().status(), 200);
    let uris: Vec<String> = seen.lock().unwrap().iter().map(|s| s.uri.clone()).collect();
    assert_eq!(uris, ["/orders/1", "/orders/1", "/%256Frders/1"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_stream_both_ways_and_the_actual_cost_settles_without_reaching_the_caller() {
    let (up, seen) = upstream().await;
    let gw = start(&up, &[]);
    let client = reqwest::Client::new();
    let post = |units: u64| {
        client
            .post(format!("{}/export?units={units}", gw.url("proxy")))
            .header("x-user", "bea")
            .body(vec![b'x'; 300_000])
            .send()
    };
    // 10 units an hour, 4 reserved per request and settled at 1: the seventh leaves 3, fewer
    // than the next request's reservation.
    for _ in 0..7 {
        let r = post(1).await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("x-actual-cost").is_none());
        assert_eq!(r.bytes().await.unwrap().len(), 300_000);
    }
    assert_eq!(post(1).await.unwrap().status(), 429);
    assert_eq!(seen.lock().unwrap()[0].body.len(), 300_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_refuses_is_502_and_one_that_does_not_answer_in_time_504() {
    let gw = start(&format!("http://127.0.0.1:{}", closed_port()), &[]);
    let r = reqwest::get(format!("{}/anything", gw.url("proxy")))
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let (up, _) = upstream().await;
    let slow = start(&up, &["--upstream-timeout", "200ms"]);
    let r = reqwest::get(format!("{}/slow?ms=5000", slow.url("proxy")))
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], 504);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_request_head_is_cut_and_a_huge_one_refused() {
    let (up, _) = upstream().await;
    let gw = start(&up, &["--header-timeout", "200ms"]);
    let mut slow = TcpStream::connect(gw.faces["proxy"]).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    slow.write_all(b"GET /orders/1 HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut answer = Vec::new();
    // The server ends the connection (with a 408 or without a word): the read ends.
    slow.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );

    let mut huge = TcpStream::connect(gw.faces["proxy"]).unwrap();
    huge.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let head = format!(
        "GET /orders/1 HTTP/1.1\r\nHost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let _ = huge.write_all(head.as_bytes());
    let mut answer = Vec::new();
    let _ = huge.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn matrix_parameters_are_decided_and_forwarded_as_the_path_they_name() {
    let (up, seen) = upstream().await;
    let gw = start(&up, &[]);
    let client = reqwest::Client::new();
    let get = |path: &'static str| {
        client
            .get(format!("{}{path}", gw.url("proxy")))
            .header("x-user", "max")
            .send()
    };
    // As Tomcat, Jetty and Spring route them, three spellings of `/orders/1` share its limit;
    // the upstream sees the path that was decided, with the query.
    assert_eq!(get("/orders;v=1/1?page=2").await.unwrap().status(), 200);
    assert_eq!(
        get("/orders/x/..;/1;jsessionid=a").await.unwrap().status(),
        200
    );
    assert_eq!(get("/orders/1;x").await.unwrap().status(), 429);
    let uris: Vec<String> = seen.lock().unwrap().iter().map(|s| s.uri.clone()).collect();
    assert_eq!(uris, ["/orders/1?page=2", "/orders/1"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_encoded_separator_in_a_segment_is_400_and_never_forwarded() {
    let (up, seen) = upstream().await;
    let gw = start(&up, &[]);
    for path in [
        "/orders%2F1",
        "/orders/1%2f..%2f..%2fexport",
        "/orders%5C1",
        "/orders/%00",
    ] {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", gw.url("proxy")))
            .header("x-user", "max")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            body["detail"],
            "A path segment holds an encoded '/', '\\' or NUL (%2F, %5C, %00), which servers do \
             not agree on.",
            "{path}"
        );
    }
    assert!(seen.lock().unwrap().is_empty());
}

/// POSTs `path` with a chunked body of `chunks` pieces, `every` apart, then its end unless
/// `ends` is false (the caller then stops sending): the answer, and how long after the last
/// byte sent it came.
async fn upload(
    addr: SocketAddr,
    path: &str,
    chunks: usize,
    every: Duration,
    ends: bool,
) -> (String, Duration) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // A gateway that answers before the body ends closes the connection: the answer is read.
    for _ in 0..chunks {
        tokio::time::sleep(every).await;
        if s.write_all(b"5\r\nhello\r\n").await.is_err() {
            break;
        }
    }
    if ends {
        let _ = s.write_all(b"0\r\n\r\n").await;
    }
    let sent = Instant::now();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    (
        String::from_utf8_lossy(&answer).into_owned(),
        sent.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstream_timeout_counts_from_the_end_of_the_request_body() {
    let (up, seen) = upstream().await;
    let gw = start(&up, &["--upstream-timeout", "300ms"]);
    let proxy = gw.faces["proxy"];
    // An upload of a second and a half, five times the timeout: the upstream reads it all,
    // then answers.
    let every = Duration::from_millis(150);
    let (answer, _) = upload(proxy, "/upload", 10, every, true).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&"hello".repeat(10)), "{answer}");
    assert_eq!(seen.lock().unwrap()[0].body, "hello".repeat(10).as_bytes());

    // An upstream that has the whole body and never answers: 504 within the timeout.
    let (answer, after) = upload(proxy, "/upload?ms=60000", 10, every, true).await;
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    // Counted from the end of the body, never before it (an upper bound would time the
    // machine, not the gateway).
    assert!(after >= Duration::from_millis(250), "{after:?}");

    // A caller that stops sending its body: 408 once it paused as long.
    let (answer, after) = upload(proxy, "/upload", 2, Duration::ZERO, false).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(after >= Duration::from_millis(250), "{after:?}");
}
