//! One limit across regions (section 15), run for real: three regional Redis servers, a home
//! Redis behind a proxy that delays every byte by each region's one-way delay (50, 100 and
//! 150 ms), and one rl-gateway per region in front of one upstream. A tenant's global limit of
//! 100 a second (a tenth held back, reported every 500 ms) is asked 160 a second in `eu`, 80 in
//! `us` and not at all in `ap`:
//! - no second's admissions across the regions exceed the limit plus the reserve, and the whole
//!   run admits at most the limit's worth (plus 1 %);
//! - the regions share the pool by demand (eu twice us) and use it (at least 90 % of the pool
//!   once converged);
//! - with the home stopped (`SIGSTOP`) for five periods and more, no second exceeds the bound
//!   and both busy regions keep admitting.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::sentinel::Sentinel;
use crate::common::Server;
use crate::support::{policy_file, upstream, Gateway};

const LIMIT: u64 = 100;
const RESERVE: u64 = 10;

fn policy() -> serde_json::Value {
    json!({
        "version": 1,
        "regions": ["eu", "us", "ap"],
        "identity": {"tenant": "x-tenant"},
        "rules": {"tenant": {
            "key": "{t:${tenant}}:tenant", "algo": "window", "limit": LIMIT, "period": "1s",
            "global": {"reserve": 0.1, "every": "500ms"}
        }},
        "routes": [{"method": "GET", "path": "/r", "rules": ["tenant"]}],
        "default": {"rules": []}
    })
}

/// A TCP proxy to `target` on 127.0.0.1 that holds every chunk `delay` before passing it on,
/// both ways: a home store `delay` away.
async fn delaying_proxy(target: u16, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pipe(cr, sw, delay));
            tokio::spawn(pipe(sr, cw, delay));
        }
    });
    port
}

/// Copies `from` to `to`, each chunk delivered `delay` after it was read (chunks in order,
/// never slowed by each other: a link's latency, not its bandwidth).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let chunk = buf.get(..n).unwrap_or_default().to_vec();
        if tx
            .send((tokio::time::Instant::now() + delay, chunk))
            .is_err()
        {
            return;
        }
    }
}

/// Admissions by region and by second of the Unix clock since the start (the windows the
/// stores count in).
type Tally = Arc<Mutex<BTreeMap<(u64, &'static str), u64>>>;

/// Sends `rate` requests a second of tenant `atlas` to `gateway` until `until`, counting the
/// admitted ones by second.
async fn load(
    url: String,
    region: &'static str,
    rate: u64,
    start: u64,
    until: Instant,
    tally: Tally,
) {
    let client = reqwest::Client::new();
    let gap = Duration::from_micros(1_000_000 / rate);
    let mut next = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    while Instant::now() < until {
        next += gap;
        tokio::time::sleep_until(next).await;
        let (client, url, tally) = (client.clone(), url.clone(), Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            let sent = unix_secs();
            let r = client
                .get(&url)
                .header("x-tenant", "atlas")
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                let second = sent - start;
                *tally.lock().unwrap().entry((second, region)).or_default() += 1;
            } else {
                assert_eq!(r.status(), 429);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

async fn gauge(gw: &Gateway, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn kill(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Resumes the stopped home when dropped, so a failing test leaves no server frozen.
struct Stopped(u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        kill(self.0, "CONT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_regions_share_one_limit_within_the_reserve() {
    let home = Server::start();
    let (up, _) = upstream().await;
    let policy = policy_file(&policy());
    let policy = policy.to_str().unwrap();
    let mut regionals = Vec::new();
    let mut gateways = Vec::new();
    for (region, delay_ms) in [("eu", 50), ("us", 100), ("ap", 150)] {
        let store = Server::start();
        let proxy = delaying_proxy(home.port, Duration::from_millis(delay_ms)).await;
        let (store_url, home_url) = (
            format!("redis://127.0.0.1:{}", store.port),
            format!("redis://127.0.0.1:{proxy}"),
        );
        let mut gw = Gateway::start(&[
            "--store",
            &store_url,
            "--policy",
            policy,
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up,
            "--admin",
            "127.0.0.1:0",
            "--region",
            region,
            "--home",
            &home_url,
            "--reporter",
            &format!("{region}-1"),
        ]);
        gw.discard_log();
        gw.ready().await;
        regionals.push(store);
        gateways.push(gw);
    }
    // Starts on a second of the Unix clock, so the test's seconds are the stores' windows.
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1) - Duration::from_nanos(unix.subsec_nanos().into()))
        .await;
    let (start, start_unix) = (Instant::now(), unix_secs());
    let tally: Tally = Arc::default();
    let until = start + Duration::from_secs(14);
    let loads = [("eu", 160), ("us", 80)].map(|(region, rate)| {
        let i = ["eu", "us"].iter().position(|r| *r == region).unwrap();
        tokio::spawn(load(
            format!("{}/r", gateways[i].url("proxy")),
            region,
            rate,
            start_unix,
            until,
            Arc::clone(&tally),
        ))
    });

    // Converged by 4 s: eu's allocation about twice us's, their sum about the pool.
    tokio::time::sleep_until((start + Duration::from_secs(4)).into()).await;
    let series = "rl_gateway_allocation_units{rule=\"tenant\"}";
    let (eu, us) = (
        gauge(&gateways[0], series).await.unwrap(),
        gauge(&gateways[1], series).await.unwrap(),
    );
    let pool = (LIMIT - RESERVE) as f64;
    assert!((eu / us - 2.0).abs() < 0.25, "eu {eu} us {us}");
    assert!(eu + us >= 0.9 * pool && eu + us <= pool, "eu {eu} us {us}");
    let age = gauge(
        &gateways[0],
        "rl_gateway_allocation_lease_age_seconds{rule=\"tenant\"}",
    )
    .await
    .unwrap();
    assert!(age < 1.5, "lease age {age}");

    // The home stops answering for 4 s (eight periods; the lease is five).
    let home_pid = home.pid().unwrap();
    tokio::time::sleep_until((start + Duration::from_secs(8)).into()).await;
    kill(home_pid, "STOP");
    let stopped = Stopped(home_pid);
    tokio::time::sleep_until((start + Duration::from_secs(12)).into()).await;
    let stale = gauge(
        &gateways[0],
        "rl_gateway_allocation_lease_age_seconds{rule=\"tenant\"}",
    )
    .await
    .unwrap();
    assert!(
        stale >= 3.5,
        "the lease age shows the home's silence: {stale}"
    );
    drop(stopped);
    for l in loads {
        l.await.unwrap();
    }

    let tally = tally.lock().unwrap().clone();
    let second = |s: u64, r: &str| tally.get(&(s, r)).copied().unwrap_or(0);
    let total = |s: u64| second(s, "eu") + second(s, "us");
    for s in 0..14 {
        // Requests counted by when they were sent: a window's admissions straddle two
        // seconds by a request's flight, so a second may see a little of its neighbour's.
        assert!(
            total(s) <= LIMIT + RESERVE,
            "second {s}: {} {tally:?}",
            total(s)
        );
    }
    let seconds: Vec<(u64, u64)> = (0..14)
        .map(|s| (second(s, "eu"), second(s, "us")))
        .collect();
    eprintln!("admitted (eu, us) in each second: {seconds:?}");
    let converged: u64 = (4..8).map(total).sum();
    assert!(
        converged as f64 >= 0.9 * 4.0 * pool,
        "{converged} {tally:?}"
    );
    let all: u64 = (0..14).map(total).sum();
    assert!(all as f64 <= 14.0 * LIMIT as f64 * 1.01, "{all}");
    // With the home stopped, both busy regions kept admitting every second.
    for s in 9..12 {
        assert!(
            second(s, "eu") > 0 && second(s, "us") > 0,
            "second {s}: {tally:?}"
        );
    }
    drop(regionals);
}

/// Sends the tenant's requests until this gateway is allocated more than the floor, which
/// only the home's answer to one of its reports can raise it from: the floor is 90 / 40 = 2 a
/// second, and a region alone with demand is answered most of the pool.
async fn allocated(gw: &Gateway, from: &str) {
    let client = reqwest::Client::new();
    let series = "rl_gateway_allocation_units{rule=\"tenant\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for _ in 0..20 {
            let r = client
                .get(format!("{}/r", gw.url("proxy")))
                .header("x-tenant", "atlas")
                .send()
                .await
                .unwrap();
            assert!([200, 429].contains(&r.status().as_u16()));
        }
        if gauge(gw, series).await.is_some_and(|a| a > 40.0) {
            return;
        }
        assert!(Instant::now() < deadline, "no allocation {from}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The home a Redis Cluster (`--home-cluster`): the region's reports reach the node that owns the
/// key's slot, and its answer raises the allocation above the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_may_be_a_cluster() {
    let home = crate::common::cluster::Cluster::start();
    let store = Server::start();
    let (up, _) = upstream().await;
    let mut doc = policy();
    doc["regions"] = json!(["eu", "us"]);
    let policy = policy_file(&doc);
    let home_url = format!("redis://127.0.0.1:{}", home.nodes[0].port);
    let mut gw = Gateway::start(&[
        "--store",
        &format!("redis://127.0.0.1:{}", store.port),
        "--policy",
        policy.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--admin",
        "127.0.0.1:0",
        "--region",
        "eu",
        "--home",
        &home_url,
        "--home-cluster",
        "--reporter",
        "eu-1",
    ]);
    gw.discard_log();
    gw.ready().await;
    allocated(&gw, "from the cluster home").await;
    let mut conn = redis::cluster::ClusterClient::new(vec![home_url.as_str()])
        .unwrap()
        .get_connection()
        .unwrap();
    let record: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("rl:alloc:{t:atlas}:tenant")
        .query(&mut conn)
        .unwrap();
    assert_eq!(record.len(), 1, "{record:?}");
    assert_eq!(record[0].0, "eu eu-1");
}

/// The home behind Sentinel (`--home-sentinel`): the reports reach the primary Sentinel names,
/// and after a failover they reach the new primary (the old one, back as a replica, answers
/// `READONLY`, which sends the gateway to the Sentinel again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_may_be_behind_sentinel() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut sentinel = Sentinel::watch(&primary, 1);
    let store = Server::start();
    let (up, _) = upstream().await;
    let mut doc = policy();
    doc["regions"] = json!(["eu", "us"]);
    let policy = policy_file(&doc);
    let mut gw = Gateway::start(&[
        "--store",
        &format!("redis://127.0.0.1:{}", store.port),
        "--policy",
        policy.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--admin",
        "127.0.0.1:0",
        "--region",
        "eu",
        "--home",
        &format!("redis://127.0.0.1:{}", sentinel.port),
        "--home-sentinel",
        "rl",
        "--reporter",
        "eu-1",
    ]);
    gw.discard_log();
    gw.ready().await;
    allocated(&gw, "from the primary Sentinel names").await;
    let key = "rl:alloc:{t:atlas}:tenant";
    let record = |server: &Server| -> Vec<String> {
        redis::cmd("HKEYS")
            .arg(key)
            .query(&mut server.conn())
            .unwrap()
    };
    assert_eq!(record(&primary), ["eu eu-1"]);

    assert_eq!(sentinel.fail_over(), replica.port);
    // The new primary holds the record by replication: removed, only a report sent to it
    // after the failover writes it again.
    crate::common::wait_until(10, "the replica to be promoted", || {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut replica.conn()).unwrap();
        role.first() == Some(&redis::Value::BulkString(b"master".to_vec()))
    });
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut replica.conn())
        .unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while record(&replica).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no report reached the new primary"
        );
        for _ in 0..10 {
            let _ = client
                .get(format!("{}/r", gw.url("proxy")))
                .header("x-tenant", "atlas")
                .send()
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(record(&replica), ["eu eu-1"]);
}

/// What cannot work is refused at start, with what to do instead: a global rule without a
/// region, a region the policy does not name, two homes that are neither a Cluster's nodes nor
/// Sentinels, a home that is not a Redis URL, and a Cluster that is also behind Sentinel.
#[test]
fn the_region_flags_refuse_what_cannot_work() {
    let store = Server::start();
    let policy = policy_file(&policy());
    let store_url = format!("redis://127.0.0.1:{}", store.port);
    let serve = [
        "--store",
        store_url.as_str(),
        "--policy",
        policy.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://127.0.0.1:9",
    ];
    let cases: [(&[&str], &str); 5] = [
        (&[], "rules.tenant.global: a global rule is enforced by allocation, and this gateway was given no region"),
        (
            &["--region", "mars", "--home", "redis://127.0.0.1:9"],
            "this gateway's region 'mars' is not one of [eu, us, ap]",
        ),
        (
            &["--region", "eu", "--home", "redis://127.0.0.1:9,redis://127.0.0.1:10"],
            "--home names 2 servers: the home store is one server, or a Cluster's nodes with --home-cluster, or Sentinels with --home-sentinel NAME",
        ),
        (
            &["--region", "eu", "--home", "http://127.0.0.1:9"],
            "--home http://127.0.0.1:9: expected redis://HOST:PORT or rediss://HOST:PORT",
        ),
        (
            &["--region", "eu", "--home", "redis://127.0.0.1:9", "--home-cluster", "--home-sentinel", "rl"],
            "cannot be used with",
        ),
    ];
    for (flags, said) in cases {
        let args: Vec<&str> = serve.iter().chain(flags).copied().collect();
        let (code, _, err) = crate::support::run(&args);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(said), "{flags:?}: {err}");
    }
}
