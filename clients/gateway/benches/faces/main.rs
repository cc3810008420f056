//! rl-gateway's faces measured as processes on 127.0.0.1, side by side in one run, against a real server with the module (`RL_SERVER`, `RL_MODULE` as in the
//! tests; the module is built first if needed):
//!
//! - proxy: the latency one request at a time over a keep-alive connection (p50, p99) and the
//!   requests/s of `CONNECTIONS` connections sending back to back, for a minimal hyper upstream
//!   reached directly, through nginx's plain `proxy_pass` (Debian's `/usr/sbin/nginx`, or
//!   `NGINX`), and through `rl-gateway --listen` with a one-rule route on `memory://` and on the
//!   Redis server;
//! - RLS: `ShouldRateLimit` with one and five descriptors, open loop at `RLS_RATE` requests/s
//!   (5,000) over one HTTP/2 connection, latency counted from each request's scheduled instant
//!   (so a stall delays the requests behind it in the figures, not in the schedule), against
//!   the same `RL.MULTI` sent straight to the server at the same rate;
//! - hot key: one `grant` rule (chunks of 100) through the proxy: store calls per admitted
//!   request, from `/metrics` and from the server's `INFO commandstats`;
//! - RLS hot descriptor: one descriptor with `grant` (chunks of 100), open loop at `RLS_RATE`:
//!   store calls per request;
//! - RLS stalled: Redis stopped (SIGSTOP) under the open loop at `RLS_RATE`: the latency of
//!   the answers once the breaker is open, apart from the first 100 ms in which it opens;
//! - syscalls: the system calls, context switches and CPU time per request of nginx and
//!   rl-gateway (and of the upstream or store behind them), counted by the kernel's tracepoints
//!   with `perf stat` while the proxy's closed loop, then the RLS's open loop, run through them.
//!
//! `BEFORE=<another rl-gateway binary>` starts that build too (on `memory://` and on Redis) and
//! measures it beside this one in the proxy, RLS and syscalls parts: before and after a change,
//! in one run.
//!
//! The load generator is this process (hyper and tonic clients); the upstream is this binary
//! again, in a process of its own. With `PIN=1` (the default) the load generator runs on the
//! CPUs `LOAD_CPUS` (default `0`) and every server (upstream, nginx, rl-gateway, Redis) on
//! `SERVER_CPUS` (default `1`), with `taskset`; nginx then runs one worker per server CPU and
//! rl-gateway's runtime as many threads. Contenders alternate in `ROUNDS` rounds (3) so that a
//! change of load on the machine hits them alike; each load lasts `SECONDS_PER_RUN` (3) per
//! round. `LATENCY_REQUESTS` (9,000) sequential requests per contender, `CONNECTIONS` (32).
//! `PARTS` (`proxy,rls,hot,rlshot,rlsstall`; `syscalls` when asked) picks the parts; `RLS_TRACE=1` prints on stderr when, in each RLS
//! round, requests took more than 1 ms. Before the servers start, a probe on each CPU counts
//! the machine's own stalls (wake-ups more than 1 ms late), and at the end the bench says how
//! much CPU other processes used while it ran.
//!
//! `cargo bench -p rl-gateway --bench faces` prints Markdown tables; results are in
//! `README.md` beside this file. Nothing here asserts a time.

// A benchmark stops at its first surprise: it may unwrap, expect, panic and index (the
// workspace's lints forbid them outside tests, and a benchmark is not run by its test harness).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{cmd, Server};
use parts::{hot_key, proxy, rls, rls_hot, rls_stall};
use procs::{
    clock_ticks_per_second, cpu_ticks, global_policy, machine_busy_ticks, policy, probe_main,
    probe_stalls, scratch, set_affinity, start_gateway, start_nginx, start_upstream, upstream_main,
    Pinning, Servers,
};

mod load;
mod parts;
mod procs;
mod syscalls;

/// The role of this binary when it is started again as the upstream.
pub(crate) const UPSTREAM_ROLE: &str = "RL_BENCH_UPSTREAM";
/// The role of this binary when it is started again to probe a CPU for stalls.
pub(crate) const PROBE_ROLE: &str = "RL_BENCH_PROBE";
/// Chunk size of the hot key's `grant` rule.
pub(crate) const WANT: u64 = 100;

pub(crate) fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub(crate) fn knob_str(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn main() {
    if std::env::var_os(UPSTREAM_ROLE).is_some() {
        upstream_main();
        return;
    }
    if std::env::var_os(PROBE_ROLE).is_some() {
        probe_main();
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let pin = Pinning::from_env();
    // Before any thread starts, so that the runtime's threads inherit it.
    if let Some(cpus) = &pin.load {
        set_affinity(cpus, std::process::id());
    }
    let rounds = knob("ROUNDS", 3) as usize;
    let run = Duration::from_secs(knob("SECONDS_PER_RUN", 3));
    let connections = knob("CONNECTIONS", 32) as usize;
    let latency_requests = knob("LATENCY_REQUESTS", 9000) as usize;
    let rate = knob("RLS_RATE", 5000);
    let parts = knob_str("PARTS", "proxy,rls,hot,rlshot,rlsstall");

    let probe_cpus: Vec<String> = (0..cpus).map(|c| c.to_string()).collect();
    let stalls = probe_stalls(&probe_cpus);
    let server = Server::start();
    pin.move_to_servers(server.pid().expect("the server runs"));
    let version: String = cmd("INFO")
        .arg("server")
        .query::<String>(&mut server.conn())
        .expect("INFO server")
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        .unwrap_or_default();
    let dir = scratch("faces");
    let (upstream_proc, upstream) = start_upstream(&pin);
    let (nginx_proc, nginx) = start_nginx(&pin, upstream, &dir.join("nginx").tap_mkdir());
    let redis_url = format!("redis://127.0.0.1:{}", server.port);
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_rl-gateway"));
    let (gw_mem, mem) = start_gateway(
        &ours,
        &pin,
        ("memory://", &policy(), &[]),
        upstream,
        &dir.join("memory").tap_mkdir(),
        "gateway.log",
    );
    let (gw_redis, red) = start_gateway(
        &ours,
        &pin,
        (&redis_url, &policy(), &[]),
        upstream,
        &dir.join("redis").tap_mkdir(),
        "gateway.log",
    );
    // A region's gateway: its home is the same server (what a request costs does not depend on
    // where the home is: no request waits for it).
    let (gw_global, global) = start_gateway(
        &ours,
        &pin,
        (
            &redis_url,
            &global_policy(),
            &[
                "--region",
                "eu",
                "--home",
                &redis_url,
                "--reporter",
                "bench",
            ],
        ),
        upstream,
        &dir.join("global").tap_mkdir(),
        "gateway.log",
    );
    // `BEFORE`: another build of rl-gateway, measured beside this one in the same run.
    let before = std::env::var_os("BEFORE").map(|binary| {
        let start = |store: &str, name: &str| {
            start_gateway(
                Path::new(&binary),
                &pin,
                (store, &policy(), &[]),
                upstream,
                &dir.join(name).tap_mkdir(),
                "gateway.log",
            )
        };
        (
            start("memory://", "before-memory"),
            start(&redis_url, "before-redis"),
        )
    });
    let mut servers = Servers(vec![
        ("upstream", upstream_proc.child.id()),
        ("nginx", nginx_proc.child.id()),
        ("rl-gateway `memory://`", gw_mem.child.id()),
        ("rl-gateway Redis", gw_redis.child.id()),
        ("rl-gateway Redis, global rule", gw_global.child.id()),
        ("Redis", server.pid().expect("the server runs")),
    ]);
    if let Some(((mem, _), (red, _))) = &before {
        servers
            .0
            .push(("before: rl-gateway `memory://`", mem.child.id()));
        servers.0.push(("before: rl-gateway Redis", red.child.id()));
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let nginx_version = Command::new(knob_str("NGINX", "/usr/sbin/nginx"))
        .arg("-v")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
        .unwrap_or_default();
    println!(
        "Redis {version} ({}, module {}); {nginx_version}; {} CPUs online; {}; {rounds} rounds, \
         {} s per load per round, {connections} connections, load average {}",
        common::server_binary(),
        common::module_path().display(),
        cpus,
        pin.describe(),
        run.as_secs(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("{stalls}.");
    let (busy0, ours0, started) = (
        machine_busy_ticks(),
        cpu_ticks(std::process::id()),
        Instant::now(),
    );
    let part = |name: &str| parts.split(',').any(|p| p == name);
    runtime.block_on(async {
        let mut contenders = vec![
            ("upstream direct", upstream, "/x"),
            ("nginx `proxy_pass`", nginx, "/x"),
            ("rl-gateway, a route with no rule", mem.proxy, "/free"),
            ("rl-gateway, `memory://`", mem.proxy, "/x"),
            ("rl-gateway, Redis", red.proxy, "/x"),
            ("rl-gateway, Redis, the rule global", global.proxy, "/x"),
        ];
        if let Some(((_, mem), (_, red))) = &before {
            contenders.extend([
                (
                    "before: rl-gateway, a route with no rule",
                    mem.proxy,
                    "/free",
                ),
                ("before: rl-gateway, `memory://`", mem.proxy, "/x"),
                ("before: rl-gateway, Redis", red.proxy, "/x"),
            ]);
        }
        if part("proxy") {
            proxy(
                &contenders,
                &servers,
                rounds,
                run,
                connections,
                latency_requests,
            )
            .await;
        }
        if part("syscalls") {
            let (upstream_pid, nginx_pid, mem_pid, red_pid) = (
                upstream_proc.child.id(),
                nginx_proc.child.id(),
                gw_mem.child.id(),
                gw_redis.child.id(),
            );
            let traced = |name, addr, path, pid| syscalls::Traced {
                name,
                addr,
                path,
                pid,
                upstream: upstream_pid,
            };
            let mut traced_ones = vec![
                traced("nginx `proxy_pass`", nginx, "/x", nginx_pid),
                traced(
                    "rl-gateway, a route with no rule",
                    mem.proxy,
                    "/free",
                    mem_pid,
                ),
                traced("rl-gateway, `memory://`", mem.proxy, "/x", mem_pid),
                traced("rl-gateway, Redis", red.proxy, "/x", red_pid),
            ];
            if let Some(((mem_proc, mem), (red_proc, red))) = &before {
                let (mem_pid, red_pid) = (mem_proc.child.id(), red_proc.child.id());
                traced_ones.extend([
                    traced(
                        "before: rl-gateway, a route with no rule",
                        mem.proxy,
                        "/free",
                        mem_pid,
                    ),
                    traced("before: rl-gateway, `memory://`", mem.proxy, "/x", mem_pid),
                    traced("before: rl-gateway, Redis", red.proxy, "/x", red_pid),
                ]);
            }
            syscalls::syscalls(&traced_ones, run, connections);
            let mut rls = vec![
                ("rl-gateway, `memory://`", mem.grpc, mem_pid),
                ("rl-gateway, Redis", red.grpc, red_pid),
            ];
            if let Some((_, (red_proc, red))) = &before {
                rls.push(("before: rl-gateway, Redis", red.grpc, red_proc.child.id()));
            }
            syscalls::rls_syscalls(&rls, server.pid().expect("the server runs"), rate, run);
        }
        if part("rls") {
            let mut gateways = vec![
                ("rl-gateway, `memory://`", &mem),
                ("rl-gateway, Redis", &red),
            ];
            if let Some((_, (_, red))) = &before {
                gateways.push(("before: rl-gateway, Redis", red));
            }
            rls(&server, &servers, &gateways, rounds, run, rate).await;
        }
        if part("hot") {
            hot_key(
                &server,
                &red,
                run * u32::try_from(rounds).unwrap_or(1),
                connections,
            )
            .await;
        }
        if part("rlshot") {
            rls_hot(
                &server,
                &red,
                rate,
                run * u32::try_from(rounds).unwrap_or(1),
            )
            .await;
        }
        // Last: the server resumes after it, with whatever it received meanwhile.
        if part("rlsstall") {
            rls_stall(&server, &red, rate, run).await;
        }
    });
    let hz = clock_ticks_per_second();
    let busy = (machine_busy_ticks() - busy0) as f64 / hz;
    let ours = (cpu_ticks(std::process::id()) - ours0) as f64 / hz;
    let wall = started.elapsed().as_secs_f64();
    println!(
        "\nWhile it ran ({wall:.0} s): this bench and its servers used {ours:.0} CPU-seconds, \
         other processes {:.0} ({:.0} % of {cpus} CPUs); load average at the end {}",
        (busy - ours).max(0.0),
        100.0 * (busy - ours).max(0.0) / (wall * cpus as f64),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    drop((
        upstream_proc,
        nginx_proc,
        gw_mem,
        gw_redis,
        gw_global,
        before,
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).expect("a directory");
        self
    }
}
