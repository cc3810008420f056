//! The rate limit service when the store cannot answer, and on `memory://`: a store that is
//! down, one that stops answering (SIGSTOP: connected, silent), one killed and started again,
//! each under `deny` (the gRPC status UNAVAILABLE), `allow` (OK) and `fallback` (decided in
//! process). No assertion on time: a store that hangs shows as an answer, not as a wait.

use std::process::Command;

use crate::common::Server;
use crate::rls_support::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis_rl_client::Rl;
use rl_gateway::rls::Config;
use rl_gateway::store::MemoryConnection;

/// The deadline is short so that the frozen store's test ends soon; nothing else here waits
/// on a store that answers.
fn limits(on_store_error: &str) -> String {
    format!(
        r#"
domain: api
on_store_error: {on_store_error}
store_timeout: 200ms
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: watch
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
"#
    )
}

const USER: &[(&str, &str)] = &[("user", "17")];
const WATCH: &[(&str, &str)] = &[("watch", "17")];

#[tokio::test]
async fn memory_store_decides_without_redis() {
    let mut s = serve(&limits("deny"), Rl::new(MemoryConnection::default())).await;
    assert_eq!(
        codes(&s.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 1)]
    );
    assert_eq!(
        codes(&s.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 0)]
    );
    let r = s.ok(request("api", &[USER, WATCH], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::Ok, 0)]);
}

/// A store nobody listens on: a server started, then stopped, keeps its port.
fn down() -> Server {
    let mut server = Server::start();
    server.stop();
    server
}

#[tokio::test]
async fn a_store_that_is_down_under_each_posture() {
    let server = down();
    let mut deny = serve(&limits("deny"), connecting(server.port)).await;
    let e = deny.ask(request("api", &[USER], 1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    // A shadow limit never refuses, store or no store.
    let r = deny.ok(request("api", &[WATCH], 1)).await;
    assert_eq!(overall(&r), Code::Ok);
    let text = deny.metrics.render();
    let line =
        r#"rl_gateway_decisions_total{route="rls:api",rule="user",outcome="unavailable_deny"} 1"#;
    assert!(text.contains(line), "{text}");

    let mut allow = serve(&limits("allow"), connecting(server.port)).await;
    for _ in 0..3 {
        let r = allow.ok(request("api", &[USER], 1)).await;
        assert_eq!(overall(&r), Code::Ok);
    }
    let line = r#"rule="user",outcome="open_admit"} 3"#;
    assert!(allow.metrics.render().contains(line));

    let mut fallback = serve(&limits("fallback"), connecting(server.port)).await;
    assert_eq!(
        codes(&fallback.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 1)]
    );
    assert_eq!(
        codes(&fallback.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 0)]
    );
    let r = fallback.ok(request("api", &[USER], 1)).await;
    assert_eq!(
        (overall(&r), codes(&r)),
        (Code::OverLimit, vec![(Code::OverLimit, 0)])
    );
    let text = fallback.metrics.render();
    assert!(
        text.contains(r#"rule="user",outcome="fallback_admit"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"rule="user",outcome="fallback_refuse"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"rl_gateway_route_mode{route="rls:api",mode="fallback"} 1"#));
}

/// Resumes a stopped server when dropped, so that a failing test leaves none frozen.
struct Frozen(String);

impl Frozen {
    fn freeze(server: &Server) -> Frozen {
        let pid = server.pid().unwrap().to_string();
        assert!(Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success());
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

#[tokio::test]
async fn a_store_that_stops_answering_is_cut_by_the_deadline() {
    let server = Server::start();
    let rl = store(server.port).await;
    let mut s = serve(&limits("deny"), rl).await;
    assert_eq!(
        codes(&s.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 1)]
    );
    let frozen = Frozen::freeze(&server);
    // The client waits far longer than the service's deadline: the answer comes from the
    // service giving up on the store, not from the client giving up on the service.
    let mut ask = tonic::Request::new(request("api", &[USER], 1));
    ask.set_timeout(std::time::Duration::from_secs(30));
    let e = s.client.should_rate_limit(ask).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    let text = s.metrics.render();
    let timeout = r#"rl_gateway_store_call_duration_seconds_count{result="timeout"} 1"#;
    assert!(text.contains(timeout), "{text}");

    // Under fallback, the same silence is decided in process, from a fresh count.
    s.rls.reload(Config::parse(&limits("fallback")).unwrap());
    assert_eq!(
        codes(&s.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 1)]
    );

    // Resumed, the store runs what it had received: the call cut by the deadline was
    // delivered, so it spent its unit late, and the user's second unit is gone.
    drop(frozen);
    s.rls.reload(Config::parse(&limits("deny")).unwrap());
    let r = s.ok(request("api", &[USER], 1)).await;
    assert_eq!(codes(&r), [(Code::OverLimit, 0)]);
}

#[tokio::test]
async fn with_the_store_stalled_the_breaker_stops_calling_it() {
    let server = Server::start();
    let rl = store(server.port).await;
    let mut s = serve(&limits("deny"), rl).await;
    assert_eq!(
        codes(&s.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 1)]
    );
    let frozen = Frozen::freeze(&server);
    // Five calls (the breaker's failures) wait out the deadline; then the breaker is open and
    // the posture answers without a call: no request waits on a store that is not answering.
    for _ in 0..25 {
        let e = s.ask(request("api", &[USER], 1)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    }
    let text = s.metrics.render();
    let timeouts = r#"rl_gateway_store_call_duration_seconds_count{result="timeout"} 5"#;
    assert!(text.contains(timeouts), "{text}");
    assert!(
        text.contains(r#"rl_gateway_breaker_state{state="open"} 1"#),
        "{text}"
    );
    let denied = r#"rule="user",outcome="unavailable_deny"} 25"#;
    assert!(text.contains(denied), "{text}");
    drop(frozen);
}

#[tokio::test]
async fn a_store_killed_and_started_again() {
    let mut server = Server::start();
    let rl = store(server.port).await;
    let mut s = serve(&limits("deny"), rl).await;
    assert_eq!(
        codes(&s.ok(request("api", &[USER], 1)).await),
        [(Code::Ok, 1)]
    );
    server.stop();
    let e = s.ask(request("api", &[USER], 1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    server.start_again();
    // The connection comes back by itself; the restarted server kept nothing (no
    // persistence in the tests), so the user starts again from 2.
    let mut answer = s.ask(request("api", &[USER], 1)).await;
    for _ in 0..250 {
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        answer = s.ask(request("api", &[USER], 1)).await;
    }
    assert_eq!(codes(&answer.unwrap()), [(Code::Ok, 1)]);
}
