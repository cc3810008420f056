//! The system calls and context switches of each proxy per request, counted by the kernel's
//! tracepoints (`perf stat -e syscalls:sys_enter_*`, attached to the servers' processes while
//! a closed loop runs through them): what each proxy asks of the kernel, read side by side.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use tonic::transport::Channel;

use crate::load::{closed_loop, open_loop, rls_call};
use crate::procs::{children, clock_ticks_per_second};

/// The calls counted apart; the rest are in `raw_syscalls:sys_enter`'s total.
const CALLS: [&str; 12] = [
    "read",
    "recvfrom",
    "readv",
    "write",
    "writev",
    "sendto",
    "sendmsg",
    "epoll_wait",
    "epoll_pwait",
    "epoll_ctl",
    "futex",
    "sched_yield",
];

/// The columns: a name, and the calls it sums.
const COLUMNS: [(&str, &[&str]); 6] = [
    ("reads", &["read", "recvfrom", "readv"]),
    ("writes", &["write", "writev", "sendto", "sendmsg"]),
    ("epoll_wait", &["epoll_wait", "epoll_pwait"]),
    ("epoll_ctl", &["epoll_ctl"]),
    ("futex", &["futex"]),
    ("sched_yield", &["sched_yield"]),
];

/// A proxy under the load: its name, where it listens, the path asked, and the process whose
/// threads (and children: nginx's workers) are counted.
pub(crate) struct Traced<'a> {
    pub(crate) name: &'a str,
    pub(crate) addr: SocketAddr,
    pub(crate) path: &'a str,
    pub(crate) pid: u32,
    /// The upstream's process: counted too, to show what each proxy makes it do.
    pub(crate) upstream: u32,
}

/// The same for the RLS: `ShouldRateLimit` with one descriptor, open loop at `rate` over one
/// HTTP/2 connection, counted on the gateway (`pid`) and on the store's server (`store`).
pub(crate) fn rls_syscalls(
    gateways: &[(&str, SocketAddr, u32)],
    store: u32,
    rate: u64,
    run: Duration,
) {
    println!(
        "\n### System calls per `ShouldRateLimit` (one descriptor, open loop at {rate}/s, {} s each)\n",
        run.as_secs()
    );
    table_head("service", "store");
    let hz = clock_ticks_per_second();
    for (name, grpc, pid) in gateways {
        let grpc = *grpc;
        let (counts, requests) = counted(&[vec![*pid], vec![store]], async move {
            let channel = Channel::from_shared(format!("http://{grpc}"))
                .expect("a URI")
                .tcp_nodelay(true)
                .connect()
                .await
                .expect("a gRPC connection");
            let call = rls_call(channel, 1);
            open_loop(rate, run, &call).await.len() as u64
        });
        row(name, &counts, requests, hz);
    }
}

/// The head of a table of [`row`]s: `first` names the column of names, `behind` the process
/// counted apart.
fn table_head(first: &str, behind: &str) {
    let head: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
    println!(
        "| {first} | requests | {} | other | all | switches: voluntary / involuntary | CPU µs: user / system | {behind}: calls, CPU µs |",
        head.join(" | ")
    );
    println!(
        "|---|---:|{}---:|---:|---:|---:|---:|",
        "---:|".repeat(head.len())
    );
}

fn row(name: &str, counts: &[Vec<(String, u64)>], requests: u64, hz: f64) {
    let (ours, other) = (&counts[0], &counts[1]);
    let per = |n: u64| n as f64 / requests.max(1) as f64;
    let cells: Vec<String> = COLUMNS
        .iter()
        .map(|(_, names)| format!("{:.2}", per(get(ours, names))))
        .collect();
    let named: u64 = COLUMNS.iter().map(|(_, names)| get(ours, names)).sum();
    let all = get(ours, &["all"]);
    let micros = |counts: &[(String, u64)], names: &[&str]| {
        get(counts, names) as f64 / hz * 1e6 / requests.max(1) as f64
    };
    println!(
        "| {name} | {requests} | {} | {:.2} | {:.2} | {:.2} / {:.2} | {:.1} / {:.1} | {:.2}, {:.1} |",
        cells.join(" | "),
        per(all.saturating_sub(named)),
        per(all),
        per(get(ours, &["voluntary"])),
        per(get(ours, &["involuntary"])),
        micros(ours, &["user"]),
        micros(ours, &["system"]),
        per(get(other, &["all"])),
        micros(other, &["user", "system"]),
    );
}

/// User and system CPU ticks, and voluntary and involuntary context switches, of `pids` and
/// all their threads (`/proc/PID/stat`, `/proc/PID/task/TID/status`).
fn usage(pids: &[u32]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for pid in pids {
        if let Some(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_string()))
        {
            let fields: Vec<u64> = stat
                .split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            // After the command: utime is the 12th field, stime the 13th.
            out[0] += fields.get(11).copied().unwrap_or(0);
            out[1] += fields.get(12).copied().unwrap_or(0);
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            for line in status.lines() {
                let value = |prefix: &str| {
                    line.strip_prefix(prefix)
                        .and_then(|v| v.trim().parse::<u64>().ok())
                };
                if let Some(v) = value("voluntary_ctxt_switches:") {
                    out[2] += v;
                } else if let Some(v) = value("nonvoluntary_ctxt_switches:") {
                    out[3] += v;
                }
            }
        }
    }
    out
}

/// Counts per event name over the load, one set per group of processes (a `perf stat` each),
/// and the requests the load made.
fn counted(
    groups: &[Vec<u32>],
    run: impl std::future::Future<Output = u64>,
) -> (Vec<Vec<(String, u64)>>, u64) {
    let mut events: Vec<String> = CALLS
        .iter()
        .map(|c| format!("syscalls:sys_enter_{c}"))
        .collect();
    events.push("raw_syscalls:sys_enter".into());
    let perfs: Vec<_> = groups
        .iter()
        .enumerate()
        .map(|(i, pids)| {
            let out =
                std::env::temp_dir().join(format!("rl-bench-perf-{}-{i}.csv", std::process::id()));
            let pids = pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let perf = Command::new("perf")
                .args(["stat", "-x", ",", "-o"])
                .arg(&out)
                .args(["-e", &events.join(","), "-p", &pids])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("perf (Debian's linux-perf), with tracepoints readable");
            (perf, out)
        })
        .collect();
    // perf attaches before it counts; a moment for it.
    std::thread::sleep(Duration::from_millis(300));
    let before: Vec<[u64; 4]> = groups.iter().map(|g| usage(g)).collect();
    let requests = tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(run));
    let after: Vec<[u64; 4]> = groups.iter().map(|g| usage(g)).collect();
    let counts = perfs
        .into_iter()
        .zip(before.iter().zip(&after))
        .map(|((mut perf, out), (before, after))| {
            let _ = Command::new("kill")
                .args(["-INT", &perf.id().to_string()])
                .status();
            let _ = perf.wait();
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let _ = std::fs::remove_file(&out);
            let used = ["user", "system", "voluntary", "involuntary"]
                .into_iter()
                .zip(after.iter().zip(before))
                .map(|(name, (a, b))| (name.to_string(), a.saturating_sub(*b)));
            text.lines()
                .filter_map(|line| {
                    let mut f = line.split(',');
                    let count = f.next()?.trim().parse::<u64>().ok()?;
                    let _unit = f.next()?;
                    let event = f.next()?.trim();
                    let name = match event.strip_prefix("syscalls:sys_enter_") {
                        Some(call) => call,
                        None if event == "raw_syscalls:sys_enter" => "all",
                        None => event,
                    };
                    Some((name.to_string(), count))
                })
                .chain(used)
                .collect()
        })
        .collect();
    (counts, requests)
}

fn get(counts: &[(String, u64)], names: &[&str]) -> u64 {
    counts
        .iter()
        .filter(|(n, _)| names.contains(&n.as_str()))
        .map(|(_, c)| *c)
        .sum()
}

/// Prints, for each proxy, the system calls per request of the proxy and of the upstream
/// behind it, over `run` of `connections` connections back to back.
pub(crate) fn syscalls(traced: &[Traced], run: Duration, connections: usize) {
    println!(
        "\n### System calls per proxied request ({connections} connections back to back, {} s each, `perf stat` on the kernel's tracepoints)\n",
        run.as_secs()
    );
    table_head("proxy", "upstream");
    let hz = clock_ticks_per_second();
    for t in traced {
        let mut proxy = vec![t.pid];
        proxy.extend(children(t.pid));
        let (addr, path) = (t.addr, t.path.to_string());
        let (counts, requests) = counted(&[proxy, vec![t.upstream]], async move {
            let load = closed_loop(addr, &path, connections, run).await;
            load.ok + load.refused + load.other
        });
        row(t.name, &counts, requests, hz);
    }
}
