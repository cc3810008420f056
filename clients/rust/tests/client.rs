//! The typed client against real servers with the module (`$RL_SERVER`, default `redis-server`):
//! every command over a multiplexed connection (RESP2 and RESP3), a `ConnectionManager` and a
//! 3-node cluster; `RL.MULTI` routing and its one-slot check; a store that cannot answer.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use std::time::Duration;

use common::cluster::Cluster;
use common::{info_field, Server};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::ProtocolVersion;
use redis_rl_client::{
    Acquire, Admit, Algo, Decision, Error, Grant, GrantReply, Lease, Multi, MultiRule, Rl,
    RlConnection, RuleOutcome,
};

const HOUR: Duration = Duration::from_secs(3600);

fn url(server: &Server, resp3: bool) -> String {
    let proto = if resp3 { "?protocol=resp3" } else { "" };
    format!("redis://127.0.0.1:{}/{proto}", server.port)
}

async fn multiplexed(server: &Server, resp3: bool) -> MultiplexedConnection {
    redis::Client::open(url(server, resp3))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every command once, with values that do not depend on timing, on keys under the hash tag
/// `{tag}` (so that one cluster slot holds them all).
async fn every_command<C: RlConnection>(rl: &Rl<C>, tag: &str) {
    let k = |name: &str| format!("{{{tag}}}:{name}");

    let user = Admit::new(k("user"), 2, Duration::from_secs(1)).burst(20);
    let d = rl.admit(&user).await.unwrap();
    assert_eq!(
        d,
        Decision {
            allowed: true,
            remaining: 19,
            retry_after_ms: 0,
            reset_after_ms: 500,
            capacity: 20
        }
    );
    let peek = rl.admit(&user.clone().cost(19).dry_run()).await.unwrap();
    assert_eq!((peek.allowed, peek.remaining), (true, 0));
    let heavy = rl.admit(&user.clone().cost(20)).await.unwrap();
    assert!(!heavy.allowed);
    assert!((1..=500).contains(&heavy.retry_after_ms), "{heavy:?}");

    let hourly = Admit::new(k("hourly"), 1, HOUR);
    assert!(rl.admit(&hourly).await.unwrap().allowed);
    let refused = rl.admit(&hourly).await.unwrap();
    assert!(!refused.allowed);
    assert!(refused.retry_after_ms > 3_590_000, "{refused:?}");

    let log = Admit::new(k("log"), 20, Duration::from_secs(600)).algo(Algo::Log);
    assert_eq!(rl.admit(&log).await.unwrap().reset_after_ms, 600_000);

    match rl
        .admit(&Admit::new(k("user"), 2, Duration::from_secs(1)).algo(Algo::Window))
        .await
    {
        Err(Error::Refused(text)) => assert_eq!(
            text,
            "ERR key holds an ALGO gcra limiter, not window: use another key, or DEL this one \
             to change the algorithm"
        ),
        other => panic!("{other:?}"),
    }

    // Reserve, retry, settle, retry the settlement.
    let export = Admit::new(k("batch"), 10, HOUR)
        .cost(6)
        .reserve("job-7", Some(Duration::from_secs(600)));
    let first = rl.admit(&export).await.unwrap();
    assert_eq!((first.allowed, first.remaining), (true, 4));
    assert_eq!(rl.admit(&export).await.unwrap(), first);
    let settled = rl
        .settle(k("batch").as_bytes(), b"job-7", 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((settled.delta, settled.remaining), (-4, 8));
    let again = rl.settle(k("batch").as_bytes(), b"job-7", 9).await.unwrap();
    assert_eq!(again, Some(settled));
    assert_eq!(
        rl.settle(k("batch").as_bytes(), b"nope", 1).await.unwrap(),
        None
    );

    let info = rl.info(k("batch").as_bytes()).await.unwrap().unwrap();
    assert_eq!(
        (info.algo, info.limit, info.period_ms),
        (Algo::Gcra, 10, 3_600_000)
    );
    assert_eq!(
        (info.remaining, info.reservations, info.debt),
        (8, Some(1), Some(0))
    );
    assert!(info.tat_us.is_some() && info.tokens.is_none());
    assert_eq!(rl.info(k("nobody").as_bytes()).await.unwrap(), None);

    let grant = Grant::new(k("global"), 10, HOUR, 4).ttl(Duration::from_millis(250));
    assert_eq!(
        rl.grant(&grant).await.unwrap(),
        GrantReply {
            granted: 4,
            remaining: 6,
            valid_ms: 250,
            retry_after_ms: 0
        }
    );
    let rest = rl
        .grant(&Grant::new(k("global"), 10, HOUR, 100))
        .await
        .unwrap();
    assert_eq!((rest.granted, rest.remaining, rest.valid_ms), (6, 0, 1000));

    // A semaphore of 2: a named holder, a generated one, a refusal, renew and release.
    let pool = k("pool");
    let a = rl
        .acquire(&Acquire::new(pool.clone(), 2, HOUR).holder("a"))
        .await
        .unwrap();
    assert_eq!(
        a,
        Lease {
            acquired: true,
            holder: Some(b"a".to_vec()),
            in_flight: 1,
            retry_after_ms: 0
        }
    );
    let generated = rl
        .acquire(&Acquire::new(pool.clone(), 2, HOUR))
        .await
        .unwrap();
    assert!(generated.acquired && generated.in_flight == 2);
    let holder = generated.holder.unwrap();
    assert!(holder.contains(&b'-'), "{holder:?}");
    let full = rl
        .acquire(&Acquire::new(pool.clone(), 2, HOUR))
        .await
        .unwrap();
    assert!(!full.acquired && full.holder.is_none() && full.retry_after_ms > 3_590_000);
    assert!(rl
        .renew(pool.as_bytes(), b"a", Duration::from_secs(60))
        .await
        .unwrap());
    assert!(!rl
        .renew(pool.as_bytes(), b"z", Duration::from_secs(60))
        .await
        .unwrap());
    assert!(rl.release(pool.as_bytes(), b"a").await.unwrap());
    assert!(!rl.release(pool.as_bytes(), b"a").await.unwrap());
    let sem = rl.info(pool.as_bytes()).await.unwrap().unwrap();
    assert_eq!(
        (sem.algo, sem.in_flight, sem.remaining),
        (Algo::Semaphore, Some(1), 1)
    );

    // All or nothing over three keys of one tag.
    let rules = |tenant_cost: u64| {
        Multi::new(vec![
            MultiRule::new("user", k("m:user"), 2, Duration::from_secs(1)).burst(20),
            MultiRule::new("tenant", k("m:tenant"), 1000, Duration::from_secs(60))
                .cost(tenant_cost),
            MultiRule::new("route", k("m:route"), 100_000, HOUR),
        ])
    };
    let admitted = rl.multi(&rules(1)).await.unwrap();
    assert!(admitted.allowed && admitted.denied_by.is_none());
    assert_eq!(
        admitted.rules,
        vec![
            RuleOutcome {
                name: "user".into(),
                remaining: 19,
                reset_after_ms: 500
            },
            RuleOutcome {
                name: "tenant".into(),
                remaining: 999,
                reset_after_ms: 60
            },
            RuleOutcome {
                name: "route".into(),
                remaining: 99_999,
                reset_after_ms: 36
            },
        ]
    );
    let denied = rl.multi(&rules(1000)).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.denied_by.as_deref(), Some("tenant"));
    // Nothing was spent: the user still has 19, less what refilled meanwhile.
    let user_left = rl.multi(&rules(1).dry_run()).await.unwrap();
    assert!(user_left.allowed);
    assert!((18..=20).contains(&user_left.rules[0].remaining));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_over_a_multiplexed_connection_in_resp2_and_resp3() {
    let server = Server::start();
    for resp3 in [false, true] {
        let rl = Rl::new(multiplexed(&server, resp3).await);
        every_command(&rl, if resp3 { "mx3" } else { "mx2" }).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_over_a_connection_manager() {
    let server = Server::start();
    for resp3 in [false, true] {
        let client = redis::Client::open(url(&server, resp3)).unwrap();
        let rl = Rl::new(ConnectionManager::new(client).await.unwrap());
        every_command(&rl, if resp3 { "cm3" } else { "cm2" }).await;
    }
}

fn multi_calls(c: &mut redis::Connection) -> i64 {
    common::command_calls(c, "rl.multi")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_routes_every_command_and_refuses_cross_slot_multi_before_sending() {
    let cluster = Cluster::start();
    let nodes: Vec<String> = (0..3)
        .map(|i| format!("redis://127.0.0.1:{}/", cluster.port(i)))
        .collect();
    for (protocol, tags) in [
        (ProtocolVersion::RESP2, ["a", "b", "c", "d"]),
        (ProtocolVersion::RESP3, ["e", "f", "g", "h"]),
    ] {
        let conn = ClusterClientBuilder::new(nodes.clone())
            .use_protocol(protocol)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let rl = Rl::new(conn);
        // Tags in several slots, so the keys live on more than one node.
        for tag in tags {
            every_command(&rl, tag).await;
            // WAIT has no key: it goes to the primary serving the given key's slot, and only
            // there (no replica in this cluster acknowledges anything).
            let acked = rl
                .wait_replicas(
                    format!("{{{tag}}}:k").as_bytes(),
                    1,
                    Duration::from_millis(1),
                )
                .await
                .unwrap();
            assert_eq!(acked, 0);
        }
        let calls = || -> i64 { (0..3).map(|i| multi_calls(&mut cluster.conn(i))).sum() };
        let before = calls();
        let cross = Multi::new(vec![
            MultiRule::new("user", "user:17", 2, Duration::from_secs(1)),
            MultiRule::new("tenant", "tenant:atlas", 1000, Duration::from_secs(60)),
        ]);
        match rl.multi(&cross).await {
            Err(Error::InvalidRequest(text)) => {
                assert!(text.contains("one cluster slot"), "{text}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(calls(), before, "a cross-slot RL.MULTI reached a node");
    }
    // In script mode every command is one EVALSHA: only the module counts RL.MULTI alone.
    if !common::script_mode() {
        let total: i64 = (0..3).map(|i| multi_calls(&mut cluster.conn(i))).sum();
        assert_eq!(total, 8 * 3);
    }
    let waits: i64 = (0..3)
        .map(|i| {
            info_field(&mut cluster.conn(i), "commandstats", "cmdstat_wait")
                .and_then(|v| v.split(',').next()?.strip_prefix("calls=")?.parse().ok())
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(waits, 8, "each WAIT reached one node");
    // Each went straight to its slot's primary: routed by `numkeys` instead, it would have
    // been answered MOVED (which the servers count) before the redirect was followed.
    for i in 0..3 {
        let moved = info_field(&mut cluster.conn(i), "errorstats", "errorstat_MOVED");
        assert_eq!(moved, None, "node {i} answered MOVED");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_slot_multi_is_refused_on_a_single_server_too() {
    let server = Server::start();
    let rl = Rl::new(multiplexed(&server, false).await);
    let cross = Multi::new(vec![
        MultiRule::new("user", "user:17", 2, Duration::from_secs(1)),
        MultiRule::new("tenant", "tenant:atlas", 1000, Duration::from_secs(60)),
    ]);
    assert!(matches!(
        rl.multi(&cross).await,
        Err(Error::InvalidRequest(_))
    ));
    assert_eq!(multi_calls(&mut server.conn()), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_answer_is_unavailable_never_a_refusal() {
    let admit = Admit::new("k", 10, Duration::from_secs(1));

    // A deadline passes while the server sleeps.
    let server = Server::start();
    let conn = redis::Client::open(url(&server, false))
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Duration::from_millis(200))
                .set_connection_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let rl = Rl::new(conn);
    assert!(rl.admit(&admit).await.unwrap().allowed);
    // A long sleep and a generous head start: on a loaded machine the sleeper's command may
    // take a while to reach the server, and the admission must arrive while it sleeps.
    let sleeper = std::thread::spawn({
        let mut c = server.conn();
        move || {
            redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("3")
                .query::<()>(&mut c)
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let e = rl.admit(&admit).await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    sleeper.join().unwrap().unwrap();

    // The server is gone.
    drop(server);
    let e = rl.admit(&admit).await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");

    // A refusal is not unavailability.
    let server = Server::start();
    let rl = Rl::new(multiplexed(&server, true).await);
    let e = rl.admit(&admit.clone().cost(11)).await.unwrap_err();
    assert!(!e.is_unavailable(), "{e:?}");
    assert!(
        matches!(e, Error::Refused(ref t) if t.starts_with("ERR COST 11")),
        "{e:?}"
    );

    // A duration the module cannot express is refused before any round trip.
    let fine = Admit::new("k", 10, Duration::from_micros(1500));
    assert!(matches!(
        rl.admit(&fine).await,
        Err(Error::InvalidRequest(_))
    ));
    assert_eq!(common::command_calls(&mut server.conn(), "rl.admit"), 1);
}

/// The server's clock in Unix milliseconds (the one a `DEADLINE` is judged by; this host's).
fn unix_ms() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(now.as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_its_deadline_is_not_spent_when_the_server_catches_up() {
    let server = Server::start();
    let conn = redis::Client::open(url(&server, false))
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Duration::from_millis(200))
                .set_connection_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let rl = Rl::new(conn);
    let (with, without) = (Admit::new("with", 1, HOUR), Admit::new("without", 1, HOUR));
    // On time, each option is the call without it (and the mode is known before the stall).
    let soon = unix_ms() + 10_000;
    let k = |name: &str| format!("{{t}}:{name}");
    assert!(
        rl.admit(&Admit::new(k("a"), 1, HOUR).deadline(soon))
            .await
            .unwrap()
            .allowed
    );
    let multi = Multi::new(vec![MultiRule::new("m", k("m"), 1, HOUR)]).deadline(soon);
    assert!(rl.multi(&multi).await.unwrap().allowed);
    let grant = Grant::new(k("g"), 10, HOUR, 4).deadline(soon);
    assert_eq!(rl.grant(&grant).await.unwrap().granted, 4);
    let acquire = Acquire::new(k("s"), 1, HOUR).holder("h").deadline(soon);
    assert!(rl.acquire(&acquire).await.unwrap().acquired);

    // Both calls are sent while the server sleeps and are cut by the client's timeout; the
    // server runs them when it wakes, and only the one without a deadline spends.
    let sleeper = std::thread::spawn({
        let mut c = server.conn();
        move || {
            redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("2")
                .query::<()>(&mut c)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let e = rl
        .admit(&with.clone().deadline(unix_ms() + 200))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    let e = rl.admit(&without).await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    sleeper.join().unwrap().unwrap();
    assert!(
        rl.admit(&with).await.unwrap().allowed,
        "the late call spent"
    );
    assert!(!rl.admit(&without).await.unwrap().allowed);

    // A call that reaches the server late answers DEADLINE: the store could not take it in
    // time, as for a timeout, and it changed nothing.
    let late = Admit::new(k("late"), 1, HOUR).deadline(unix_ms() - 1000);
    let e = rl.admit(&late).await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(e.to_string().contains("the call reached the server"), "{e}");
    assert_eq!(rl.info(k("late").as_bytes()).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_busy_with_a_script_is_unavailable() {
    let server = Server::start_with(&["--busy-reply-threshold", "100"]);
    let rl = Rl::new(multiplexed(&server, false).await);
    // Connected before the script runs: a new connection's PING would wait it out.
    let mut killer = server.conn();
    let spinner = std::thread::spawn({
        let mut c = server.conn();
        move || {
            let script = "local s = redis.call('TIME')[1] \
                          while redis.call('TIME')[1] - s < 3 do end";
            redis::cmd("EVAL").arg(script).arg(0).query::<()>(&mut c)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let e = rl
        .admit(&Admit::new("k", 10, Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(e.to_string().contains("BUSY"), "{e}");
    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut killer).unwrap();
    assert!(spinner.join().unwrap().is_err(), "the script was killed");
    assert!(
        rl.admit(&Admit::new("k", 10, Duration::from_secs(1)))
            .await
            .unwrap()
            .allowed
    );
}
