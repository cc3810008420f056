//! Script mode (`clients/SPEC.md` section 5): against a server without the module the client
//! runs the same commands as `clients/scripts/rl.lua`, loads the script itself, reloads it when
//! the server forgets it, follows the server when it gains or loses the module, logs its mode
//! once per change and reports it in the metrics.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;
mod support;

use std::sync::Arc;
use std::time::Duration;

use common::{cmd, Server};
use redis::aio::ConnectionManager;
use redis_rl_client::mode::SCRIPT;
use redis_rl_client::{Admit, Decision, Error, Mode, Multi, MultiRule, Rl};
use rl_engine::metrics::{Event, Metrics};
use support::Captured;

const HOUR: Duration = Duration::from_secs(3600);

async fn manager(server: &Server) -> ConnectionManager {
    redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap()
}

/// The admission, retried while a restarted server's connection is re-established (the
/// manager answers the first call after a restart with the broken connection's error).
async fn admit_after_restart(rl: &Rl<ConnectionManager>, request: &Admit) -> Decision {
    for _ in 0..100 {
        match rl.admit(request).await {
            Ok(d) => return d,
            Err(e) if e.is_unavailable() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the restarted server never answered");
}

fn script_calls(server: &Server) -> i64 {
    common::info_field(&mut server.conn(), "commandstats", "cmdstat_evalsha")
        .and_then(|v| v.split(',').next()?.strip_prefix("calls=")?.parse().ok())
        .unwrap_or(0)
}

fn noscript_replies(server: &Server) -> i64 {
    common::info_field(&mut server.conn(), "errorstats", "errorstat_NOSCRIPT")
        .and_then(|v| v.strip_prefix("count=")?.parse().ok())
        .unwrap_or(0)
}

// One thread, so the subscriber set for the test sees every event.
#[tokio::test(flavor = "current_thread")]
async fn without_the_module_the_client_runs_the_script_and_says_so_once() {
    let captured = Captured::default();
    let _default = tracing::subscriber::set_default(captured.subscriber());

    let server = Server::start_plain(&[]);
    let rl = Rl::new(manager(&server).await);
    let metrics = Arc::new(Metrics::default());
    let reported = Arc::clone(&metrics);
    rl.on_mode(move |mode| reported.record(Event::StoreMode(mode)));
    assert_eq!(rl.mode(), None);
    assert!(
        !metrics.render().contains("rl_gateway_store_mode{"),
        "no mode is claimed before one is detected"
    );

    let user = Admit::new("user:17", 2, Duration::from_secs(1)).burst(20);
    let first = rl.admit(&user).await.unwrap();
    assert_eq!(
        first,
        Decision {
            allowed: true,
            remaining: 19,
            retry_after_ms: 0,
            reset_after_ms: 500,
            capacity: 20
        }
    );
    assert_eq!(rl.mode(), Some(Mode::Script));
    let second = rl.admit(&user).await.unwrap();
    assert_eq!((second.allowed, second.remaining), (true, 18));
    // The key is a plain one: nothing of the module's type exists on this server.
    let kind: String = cmd("TYPE")
        .arg("user:17")
        .query(&mut server.conn())
        .unwrap();
    assert_ne!(kind, "none");
    assert_ne!(kind, "rllimiter");
    // The first call was answered NOSCRIPT, loaded the script and was sent again.
    assert_eq!(script_calls(&server), 3);
    assert_eq!(noscript_replies(&server), 1);

    let text = metrics.render();
    assert!(
        text.contains("rl_gateway_store_mode{mode=\"module\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("rl_gateway_store_mode{mode=\"script\"} 1\n"),
        "{text}"
    );
    let lines = captured.lines_of("redis_rl_client::mode");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("mode=\"script\""), "{}", lines[0]);

    // An emptied script cache (a restart, a failover, SCRIPT FLUSH) is refilled from the
    // client's own copy, and the key's state is still there.
    let _: () = cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    let third = rl.admit(&user).await.unwrap();
    assert_eq!((third.allowed, third.remaining), (true, 17));
    assert_eq!(noscript_replies(&server), 2);
    let sha: String = cmd("SCRIPT")
        .arg("LOAD")
        .arg(SCRIPT)
        .query(&mut server.conn())
        .unwrap();
    let loaded: Vec<i64> = cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(loaded, [1]);
    assert_eq!(
        captured.lines_of("redis_rl_client::mode").len(),
        1,
        "the mode did not change"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_client_follows_a_server_that_gains_or_loses_the_module() {
    let mut server = Server::start_plain(&[]);
    let rl = Rl::new(manager(&server).await);
    let hourly = |key: &str| Admit::new(key.to_string(), 5, HOUR);

    assert_eq!(rl.admit(&hourly("a")).await.unwrap().remaining, 4);
    assert_eq!(rl.mode(), Some(Mode::Script));

    // The operator loads the module: the restarted server has no scripts, the client finds
    // the module and sends native commands from then on.
    server.with_module_on_restart(true);
    server.restart(true, &[]);
    let d = admit_after_restart(&rl, &hourly("b")).await;
    assert_eq!((d.allowed, d.remaining), (true, 4));
    assert_eq!(rl.mode(), Some(Mode::Module));
    let kind: String = cmd("TYPE").arg("b").query(&mut server.conn()).unwrap();
    assert_eq!(kind, "rllimiter");
    // A key the scripts wrote cannot be read as the module's: WRONGTYPE, never a reset.
    match rl.admit(&hourly("a")).await {
        Err(Error::Refused(text)) => assert!(text.starts_with("WRONGTYPE"), "{text}"),
        other => panic!("{other:?}"),
    }

    // A failover onto a server without the module: `unknown command`, and the script again.
    server.with_module_on_restart(false);
    server.restart(false, &[]);
    let d = admit_after_restart(&rl, &hourly("c")).await;
    assert_eq!((d.allowed, d.remaining), (true, 4));
    assert_eq!(rl.mode(), Some(Mode::Script));
}

#[tokio::test(flavor = "current_thread")]
async fn multi_spends_all_or_nothing_through_the_script() {
    let server = Server::start_plain(&[]);
    let rl = Rl::new(manager(&server).await);
    let rules = |tenant_limit| {
        Multi::new(vec![
            MultiRule::new("user", "{t:atlas}:user:17", 10, HOUR),
            MultiRule::new("tenant", "{t:atlas}", tenant_limit, HOUR),
        ])
    };
    let d = rl.multi(&rules(1)).await.unwrap();
    assert!(d.allowed, "{d:?}");
    assert_eq!(
        d.rules.iter().map(|r| r.remaining).collect::<Vec<_>>(),
        [9, 0]
    );
    let refused = rl.multi(&rules(1)).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.denied_by.as_deref(), Some("tenant"));
    // Nothing was spent on the user's key by the refusal.
    let user = rl
        .admit(&Admit::new("{t:atlas}:user:17", 10, HOUR))
        .await
        .unwrap();
    assert_eq!(user.remaining, 8);
}
