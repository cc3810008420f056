//! The parts of the bench, each printing its tables: proxy, RLS, hot key, the RLS on a hot
//! descriptor and the RLS with its store stalled.

use std::net::SocketAddr;
use std::time::Duration;

use tonic::transport::Channel;

use crate::common::Server;
use crate::load::{
    closed_loop, connect, get, metric, multi_call, not_ok, open_loop, percentile, rls_call,
    rls_one, sequential, server_calls, slow_windows, Call, Load, Series, Timed,
};
use crate::procs::{clock_ticks_per_second, Faces, Servers};
use crate::WANT;

pub(crate) async fn proxy(
    contenders: &[(&str, SocketAddr, &str)],
    servers: &Servers,
    rounds: usize,
    run: Duration,
    connections: usize,
    latency_requests: usize,
) {
    // Latency: one keep-alive connection each, warmed, then blocks in turn.
    let mut senders = Vec::new();
    for (_, addr, path) in contenders {
        let mut s = connect(*addr).await;
        sequential(&mut s, *addr, path, 500, &mut Vec::new()).await;
        senders.push(s);
    }
    let blocks = 10;
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); contenders.len()];
    for _ in 0..blocks {
        for (i, (_, addr, path)) in contenders.iter().enumerate() {
            sequential(
                &mut senders[i],
                *addr,
                path,
                latency_requests / blocks,
                &mut lat[i],
            )
            .await;
        }
    }
    drop(senders);
    // Requests/s: closed loop, rounds in turn.
    let mut loads: Vec<Load> = contenders.iter().map(|_| Load::default()).collect();
    for (_, addr, path) in contenders {
        closed_loop(*addr, path, connections, Duration::from_millis(300)).await;
    }
    // CPU ticks each server spent during each contender's loads.
    let mut cpu: Vec<Vec<u64>> = vec![vec![0; servers.0.len()]; contenders.len()];
    for _ in 0..rounds {
        for (i, (_, addr, path)) in contenders.iter().enumerate() {
            let before = servers.ticks();
            let load = closed_loop(*addr, path, connections, run).await;
            for (total, (after, before)) in
                cpu[i].iter_mut().zip(servers.ticks().iter().zip(before))
            {
                *total += after - before;
            }
            loads[i].add(load);
        }
    }
    for l in &mut lat {
        l.sort();
    }
    for l in &mut loads {
        l.latencies.sort();
    }
    let direct50 = percentile(&lat[0], 0.5);
    let direct99 = percentile(&lat[0], 0.99);
    let direct_rps = loads[0].per_second();
    let nginx_rps = loads[1].per_second();
    println!(
        "\n### Proxy: GET /x, one rule (`RL.MULTI` per request on Redis); {} sequential requests per path, then {connections} connections back to back\n",
        lat[0].len()
    );
    println!("| path | p50 (µs) | p99 (µs) | p50 over direct | p99 over direct | requests/s | vs direct | vs nginx | p50 / p99 under load (µs) | answers not 200 under load |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (i, (name, _, _)) in contenders.iter().enumerate() {
        let (p50, p99) = (percentile(&lat[i], 0.5), percentile(&lat[i], 0.99));
        let rps = loads[i].per_second();
        let over = |v: f64, base: f64| {
            if i == 0 {
                "".to_string()
            } else {
                format!("{:+.0}", v - base)
            }
        };
        println!(
            "| {name} | {p50:.0} | {p99:.0} | {} | {} | {rps:.0} | {:.2}x | {} | {:.0} / {:.0} | {} |",
            over(p50, direct50),
            over(p99, direct99),
            rps / direct_rps,
            if i == 0 {
                String::new()
            } else {
                format!("{:.2}x", rps / nginx_rps)
            },
            percentile(&loads[i].latencies, 0.5),
            percentile(&loads[i].latencies, 0.99),
            not_ok(&loads[i]),
        );
    }
    // Where the server CPU went, per request.
    let hz = clock_ticks_per_second();
    println!("\nServer CPU time per request during those loads (µs, user + system, from `/proc/PID/stat`):\n");
    let names: Vec<&str> = servers.0.iter().map(|(n, _)| *n).collect();
    println!(
        "| path | {} | all servers | server CPU busy (of one CPU) |",
        names.join(" | ")
    );
    println!("|---|{}---:|---:|", "---:|".repeat(names.len()));
    for (i, (name, _, _)) in contenders.iter().enumerate() {
        let requests = (loads[i].ok + loads[i].refused + loads[i].other).max(1) as f64;
        let per = |ticks: u64| ticks as f64 / hz * 1e6 / requests;
        let cells: Vec<String> = cpu[i].iter().map(|t| format!("{:.1}", per(*t))).collect();
        let busy = cpu[i].iter().sum::<u64>() as f64 / hz / loads[i].elapsed.as_secs_f64();
        println!(
            "| {name} | {} | {:.1} | {:.0} % |",
            cells.join(" | "),
            per(cpu[i].iter().sum()),
            100.0 * busy
        );
    }
    let named = |name: &str| contenders.iter().position(|(n, _, _)| *n == name);
    let last = named("rl-gateway, Redis").unwrap_or(contenders.len() - 1);
    let (g50, grps) = (percentile(&lat[last], 0.5), loads[last].per_second());
    if let Some(global) = named("rl-gateway, Redis, the rule global") {
        println!(
            "\nA global rule against the same rule regional (issue 40: the request path unchanged): p50 {:+.0} µs, p99 {:+.0} µs, requests/s {:.2}x.",
            percentile(&lat[global], 0.5) - g50,
            percentile(&lat[global], 0.99) - percentile(&lat[last], 0.99),
            loads[global].per_second() / grps.max(1e-9),
        );
    }
    println!(
        "\nAims: p50 over direct ≤ +150 µs: +{:.0} µs ({}); requests/s ≥ nginx's: {:.2}x ({}).",
        g50 - direct50,
        if g50 - direct50 <= 150.0 {
            "met"
        } else {
            "not met"
        },
        grps / nginx_rps,
        if grps >= nginx_rps { "met" } else { "not met" }
    );
}

pub(crate) async fn rls(
    server: &Server,
    servers: &Servers,
    gateways: &[(&'static str, &Faces)],
    rounds: usize,
    run: Duration,
    rate: u64,
) {
    let channel = |addr: SocketAddr| async move {
        Channel::from_shared(format!("http://{addr}"))
            .expect("a URI")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("a gRPC connection")
    };
    let mut channels = Vec::new();
    for (name, faces) in gateways {
        channels.push((*name, channel(faces.grpc).await));
    }
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).expect("a client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let mut series: Vec<(&str, usize, Call, Series)> = Vec::new();
    for n in [1, 5] {
        series.push((
            "`RL.MULTI` straight to Redis",
            n,
            multi_call(conn.clone(), n),
            Series::default(),
        ));
        for (name, channel) in &channels {
            series.push((name, n, rls_call(channel.clone(), n), Series::default()));
        }
    }
    let trace = std::env::var_os("RLS_TRACE").is_some();
    // Warm-up, not counted.
    for (_, _, call, _) in &series {
        open_loop(rate, Duration::from_millis(500), call).await;
    }
    for _ in 0..rounds {
        for (name, n, call, s) in series.iter_mut() {
            let before = servers.split();
            let timed = open_loop(rate, run, call).await;
            let after = servers.split();
            if trace {
                slow_windows(name, *n, rate, &timed);
            }
            s.cpu.0 += after.0 - before.0;
            s.cpu.1 += after.1 - before.1;
            s.add(timed, run.as_secs_f64());
        }
    }
    println!("\n### RLS: `ShouldRateLimit`, open loop at {rate} requests/s over one HTTP/2 connection, latency from each request's scheduled instant\n");
    println!("| descriptors | path | requests | failed | p50 (µs) | p99 (µs) | p99 of each round (µs) | p99.9 (µs) | max (µs) | p99 vs `RL.MULTI` alone | aim p99 ≤ 1 ms | CPU per request (µs): rl-gateway + Redis | load generator's lag p50 / p99 (µs) |");
    println!("|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|");
    let hz = clock_ticks_per_second();
    let mut base99 = 0.0;
    for (name, n, _, s) in series.iter_mut() {
        s.sort();
        let p99 = percentile(&s.latencies, 0.99);
        let is_base = name.starts_with('`');
        if is_base {
            base99 = p99;
        }
        println!(
            "| {n} | {name} | {} | {} | {:.0} | {p99:.0} | {} | {:.0} | {:.0} | {} | {} | {:.1} + {:.1} | {:.0} / {:.0} |",
            s.sent,
            s.failed,
            percentile(&s.latencies, 0.5),
            s.round_p99
                .iter()
                .map(|p| format!("{p:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            percentile(&s.latencies, 0.999),
            s.latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e6),
            if is_base { String::new() } else { format!("{:.2}x", p99 / base99) },
            if name.ends_with("Redis") && !is_base {
                if p99 <= 1000.0 { "met" } else { "not met" }
            } else {
                ""
            },
            s.cpu.0 as f64 / hz * 1e6 / s.sent.max(1) as f64,
            s.cpu.1 as f64 / hz * 1e6 / s.sent.max(1) as f64,
            percentile(&s.lags, 0.5),
            percentile(&s.lags, 0.99),
        );
    }
}

pub(crate) async fn hot_key(server: &Server, red: &Faces, run: Duration, connections: usize) {
    const CALLS: &str = "rl_gateway_store_call_duration_seconds_count";
    const REFILLS: &str = "rl_gateway_grant_refills_total";
    let (calls0, refills0, server0) = (
        metric(red.admin, CALLS).await,
        metric(red.admin, REFILLS).await,
        server_calls(server),
    );
    let load = closed_loop(red.proxy, "/hot", connections, run).await;
    let (calls1, refills1, server1) = (
        metric(red.admin, CALLS).await,
        metric(red.admin, REFILLS).await,
        server_calls(server),
    );
    // What the gateway still holds when the load stops is valid, not lost: its next requests
    // spend it. Count them: requests until the next refill.
    let mut held = 0;
    let mut sender = connect(red.proxy).await;
    while held <= WANT {
        let status = get(&mut sender, red.proxy, "/hot", "probe").await;
        if metric(red.admin, REFILLS).await > refills1 {
            break;
        }
        held += u64::from(status == 200);
    }
    let (calls, refills, at_server) = (calls1 - calls0, refills1 - refills0, server1 - server0);
    let percent = |part: u64, whole: u64| 100.0 * part as f64 / whole.max(1) as f64;
    println!(
        "\n### Hot key: one `grant` rule (`want` {WANT}, `ttl` 1s) through the proxy on Redis, {connections} connections, {:.1} s\n",
        load.elapsed.as_secs_f64()
    );
    println!("| measure | value | baseline | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| requests admitted (per second) | {} ({:.0}) | | |",
        load.ok,
        load.ok as f64 / load.elapsed.as_secs_f64()
    );
    println!("| answers not 200 | {} | | |", not_ok(&load));
    println!("| `{CALLS}` (`/metrics`): store calls answered | {calls} | | |");
    println!("| `{REFILLS}` (`/metrics`): `RL.GRANT` calls | {refills} | | |");
    println!("| store calls, Redis `INFO commandstats` (`RL.*`) | {at_server} | | |");
    println!(
        "| store calls per admitted request | {:.3} % | floor 1/want = {:.3} % | {:.3}x |",
        percent(at_server, load.ok),
        100.0 / WANT as f64,
        percent(at_server, load.ok) * WANT as f64 / 100.0
    );
    println!(
        "| the same, the {held} units still held at the end counted as spent | {:.3} % | aim ≤ 1 % | {} |",
        percent(at_server, load.ok + held),
        if percent(at_server, load.ok + held) <= 1.0 { "met" } else { "not met" }
    );
}

async fn grpc(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a URI")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("a gRPC connection")
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The RLS on one hot descriptor with `grant` (`want` [`WANT`]), open loop at `rate`: store
/// calls per request, counted by Redis and by the gateway.
pub(crate) async fn rls_hot(server: &Server, red: &Faces, rate: u64, run: Duration) {
    const REFILLS: &str = "rl_gateway_grant_refills_total";
    let call = rls_one(grpc(red.grpc).await, "hot", "all");
    open_loop(rate, Duration::from_millis(300), &call).await;
    let (refills0, server0) = (metric(red.admin, REFILLS).await, server_calls(server));
    let mut s = Series::default();
    s.add(open_loop(rate, run, &call).await, run.as_secs_f64());
    let (refills, at_server) = (
        metric(red.admin, REFILLS).await - refills0,
        server_calls(server) - server0,
    );
    s.sort();
    let percent = 100.0 * at_server as f64 / s.sent.max(1) as f64;
    println!(
        "\n### RLS, hot descriptor: one descriptor every request counts on, `grant` (`want` {WANT}, `ttl` 1s), open loop at {rate} requests/s for {} s on Redis\n",
        run.as_secs()
    );
    println!("| measure | value | aim |");
    println!("|---|---:|---|");
    println!("| requests (not `OK`) | {} ({}) | |", s.sent, s.failed);
    println!(
        "| p50 / p99 (µs) | {:.0} / {:.0} | |",
        percentile(&s.latencies, 0.5),
        percentile(&s.latencies, 0.99)
    );
    println!("| store calls, Redis `INFO commandstats` (`RL.*`) | {at_server} | |");
    println!("| `{REFILLS}` (`/metrics`) | {refills} | |");
    println!(
        "| store calls per request | {percent:.3} % | ≤ 1 % ({}) |",
        if percent <= 1.0 { "met" } else { "not met" }
    );
}

/// The RLS with Redis stopped (SIGSTOP: connected, silent), open loop at `rate` for `run`,
/// under `deny`: how long the answers take once the breaker is open. Resumed after.
pub(crate) async fn rls_stall(server: &Server, red: &Faces, rate: u64, run: Duration) {
    // The window in which the breaker opens: its failures' store timeouts (10 ms each, side by
    // side), with room to spare.
    const OPENING: Duration = Duration::from_millis(100);
    let call = rls_one(grpc(red.grpc).await, "d1", "stalled");
    open_loop(rate, Duration::from_millis(300), &call).await;
    let pid = server.pid().expect("the server runs").to_string();
    let signal = |s: &str| {
        let _ = std::process::Command::new("kill").args([s, &pid]).status();
    };
    signal("-STOP");
    let timed = open_loop(rate, run, &call).await;
    signal("-CONT");
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let opening = usize::try_from(OPENING.as_nanos() / period.as_nanos().max(1)).unwrap_or(0);
    let (first, after) = timed.split_at(opening.min(timed.len()));
    let sorted = |t: &[Timed]| {
        let mut l: Vec<Duration> = t.iter().map(|t| t.latency).collect();
        l.sort();
        l
    };
    let (first, after) = (sorted(first), sorted(after));
    let waited = |l: &[Duration]| {
        l.iter()
            .filter(|d| **d >= Duration::from_millis(10))
            .count()
    };
    println!(
        "\n### RLS, Redis stalled (SIGSTOP), `on_store_error: deny`, `store_timeout` 10 ms: open loop at {rate} requests/s for {} s\n",
        run.as_secs()
    );
    println!("| answers | requests | answered `OK` | p50 (µs) | p99 (µs) | p99.9 (µs) | max (µs) | waited ≥ 10 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let ok = |t: &[Timed]| t.iter().filter(|t| t.ok).count();
    let (ok_first, ok_after) = (ok(&timed[..first.len()]), ok(&timed[first.len()..]));
    for (name, l, ok) in [
        (
            format!("first {} ms (the breaker opening)", OPENING.as_millis()),
            &first,
            ok_first,
        ),
        (
            "after, breaker open (aim p99 < 1 ms)".to_string(),
            &after,
            ok_after,
        ),
    ] {
        println!(
            "| {name} | {} | {ok} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            l.len(),
            percentile(l, 0.5),
            percentile(l, 0.99),
            percentile(l, 0.999),
            micros(l.last().copied().unwrap_or_default()),
            waited(l),
        );
    }
}
