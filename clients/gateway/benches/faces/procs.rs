//! The processes of the bench: where they run, the upstream and the stall probe (this binary
//! again), nginx, rl-gateway, and the CPU time they use.

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

use crate::{knob, knob_str, PROBE_ROLE, UPSTREAM_ROLE, WANT};

/// Where processes run.
#[derive(Clone)]
pub(crate) struct Pinning {
    pub(crate) load: Option<String>,
    pub(crate) servers: Option<String>,
}

impl Pinning {
    pub(crate) fn from_env() -> Pinning {
        if knob("PIN", 1) == 0 {
            return Pinning {
                load: None,
                servers: None,
            };
        }
        Pinning {
            load: Some(knob_str("LOAD_CPUS", "0")),
            servers: Some(knob_str("SERVER_CPUS", "1")),
        }
    }

    /// `program` run on the server CPUs.
    pub(crate) fn server_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.servers {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// Moves every thread of a running process onto the server CPUs.
    pub(crate) fn move_to_servers(&self, pid: u32) {
        if let Some(cpus) = &self.servers {
            set_affinity(cpus, pid);
        }
    }

    /// How many CPUs the servers have, if pinned.
    pub(crate) fn server_cpus(&self) -> Option<usize> {
        self.servers.as_deref().map(cpu_count)
    }

    pub(crate) fn describe(&self) -> String {
        match (&self.load, &self.servers) {
            (Some(l), Some(s)) => format!(
                "load generator on CPU {l}, every server (upstream, nginx, rl-gateway, Redis) on CPU {s} (taskset)"
            ),
            _ => "not pinned".into(),
        }
    }
}

pub(crate) fn set_affinity(cpus: &str, pid: u32) {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset");
    assert!(status.success(), "taskset -a -p -c {cpus} {pid}");
}

/// CPUs in a list such as `1`, `0,1` or `2-3`.
pub(crate) fn cpu_count(list: &str) -> usize {
    list.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().unwrap(), b.trim().parse().unwrap());
                b - a + 1
            }
            None => 1,
        })
        .sum()
}

/// A child process, stopped when dropped: with SIGTERM first when `term` (nginx's master,
/// whose workers would outlive a SIGKILL), then SIGKILL.
pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) name: &'static str,
    pub(crate) term: bool,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.term {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Reads the child's stdout until it has printed `faces` lines `listening on ADDR (face)`;
    /// the address of each, by face.
    pub(crate) fn listening(&mut self, faces: usize) -> Vec<(String, SocketAddr)> {
        let out = self.child.stdout.take().expect("a piped stdout");
        let mut lines = BufReader::new(out).lines();
        let mut found = Vec::new();
        while found.len() < faces {
            let Some(Ok(line)) = lines.next() else {
                panic!("{} ended before listening", self.name);
            };
            let Some(rest) = line.strip_prefix("listening on ") else {
                continue;
            };
            let (addr, face) = rest.split_once(' ').expect("ADDR (face)");
            found.push((
                face.trim_matches(['(', ')']).to_string(),
                addr.parse().expect("an address"),
            ));
        }
        // Keep draining, so that the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        found
    }
}

// ---------------------------------------------------------------------------------------------
// The upstream: this binary again, a minimal hyper HTTP/1.1 server answering `200 ok`.

pub(crate) fn upstream_main() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!(
            "listening on {} (upstream)",
            listener.local_addr().expect("an address")
        );
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The machine's own stalls: a thread that sleeps 200 µs at a time, alone on a CPU, and counts
// how often it wakes more than 1 ms late. Nothing of the bench runs meanwhile, so what it sees
// (the hypervisor or the kernel taking the CPU away) is a floor under every tail figure.

pub(crate) fn probe_main() {
    let end = Instant::now() + Duration::from_secs(4);
    let (mut sleeps, mut late, mut worst) = (0u64, 0u64, Duration::ZERO);
    while Instant::now() < end {
        let t = Instant::now();
        std::thread::sleep(Duration::from_micros(200));
        let over = t.elapsed().saturating_sub(Duration::from_micros(200));
        sleeps += 1;
        late += u64::from(over > Duration::from_millis(1));
        worst = worst.max(over);
    }
    println!("{sleeps} {late} {}", worst.as_micros());
}

/// Probes each CPU in `cpus` at once; one line saying what they saw.
pub(crate) fn probe_stalls(cpus: &[String]) -> String {
    let exe = std::env::current_exe().expect("this binary");
    let children: Vec<(String, Child)> = cpus
        .iter()
        .map(|cpu| {
            let child = Command::new("taskset")
                .args(["-c", cpu])
                .arg(&exe)
                .env(PROBE_ROLE, "1")
                .stdout(Stdio::piped())
                .spawn()
                .expect("a probe");
            (cpu.clone(), child)
        })
        .collect();
    let seen: Vec<String> = children
        .into_iter()
        .map(|(cpu, child)| {
            let out = child.wait_with_output().expect("a probe's output");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let v: Vec<u64> = text
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            match v.as_slice() {
                [sleeps, late, worst] => format!(
                    "CPU {cpu}: {late} of {sleeps} wake-ups more than 1 ms late, the worst {:.1} ms",
                    *worst as f64 / 1000.0
                ),
                _ => format!("CPU {cpu}: no answer"),
            }
        })
        .collect();
    format!(
        "Idle machine, 4 s, a thread sleeping 200 µs at a time: {}",
        seen.join("; ")
    )
}

pub(crate) fn start_upstream(pin: &Pinning) -> (Proc, SocketAddr) {
    let exe = std::env::current_exe().expect("this binary");
    let child = pin
        .server_command(exe)
        .env(UPSTREAM_ROLE, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the upstream");
    let mut proc = Proc {
        child,
        name: "the upstream",
        term: false,
    };
    let addr = proc.listening(1)[0].1;
    (proc, addr)
}

// ---------------------------------------------------------------------------------------------
// nginx: plain `proxy_pass` to the upstream, keep-alive both sides (the wrapper of
// tests/forward_auth.rs).

pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("an address").port()
}

pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rl-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

pub(crate) fn start_nginx(pin: &Pinning, upstream: SocketAddr, dir: &Path) -> (Proc, SocketAddr) {
    let port = free_port();
    let d = dir.display();
    let workers = pin
        .server_cpus()
        .map_or_else(|| "auto".to_string(), |n| n.to_string());
    let conf = format!(
        "worker_processes {workers};\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\nhttp {{\n  access_log off;\n  \
         client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
         scgi_temp_path {d}/scgi;\n  \
         upstream api {{ server {upstream}; keepalive 256; }}\n  \
         server {{\n    listen 127.0.0.1:{port};\n    keepalive_requests 1000000;\n    \
         location / {{\n      proxy_pass http://api;\n      proxy_http_version 1.1;\n      \
         proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
    let binary = std::env::var("NGINX").unwrap_or_else(|_| {
        if Path::new("/usr/sbin/nginx").exists() {
            "/usr/sbin/nginx".into()
        } else {
            "nginx".into()
        }
    });
    let child = pin
        .server_command(binary)
        .args(["-e", &format!("{d}/error.log"), "-p", &d.to_string(), "-c"])
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx");
    let mut proc = Proc {
        child,
        name: "nginx",
        term: true,
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            proc.child.try_wait().expect("nginx").is_none(),
            "nginx exited: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        assert!(Instant::now() < deadline, "nginx never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    (proc, addr)
}

// ---------------------------------------------------------------------------------------------
// rl-gateway.

pub(crate) fn policy() -> String {
    serde_json::json!({
        "version": 1,
        "identity": {"user": "x-user"},
        "rules": {
            "user": {"key": "bench:u:${user}", "limit": 1_000_000_000u64, "period": "1s"},
            "hot": {"key": "bench:hot", "limit": 1_000_000_000u64, "period": "1s",
                    "grant": {"want": WANT, "ttl": "1s"}}
        },
        "routes": [
            {"method": "GET", "path": "/x", "rules": ["user"]},
            {"method": "GET", "path": "/hot", "rules": ["hot"]}
        ],
        "default": {"rules": []}
    })
    .to_string()
}

/// The same route as `/x` with its rule shared across regions (section 15): the gateway
/// enforces its region's allocation and reports to a home store off the request path.
pub(crate) fn global_policy() -> String {
    serde_json::json!({
        "version": 1,
        "regions": ["eu", "us"],
        "identity": {"user": "x-user"},
        "rules": {
            "user": {"key": "bench:g:${user}", "limit": 1_000_000_000u64, "period": "1s",
                     "global": {"reserve": 0.1, "every": "2s"}}
        },
        "routes": [{"method": "GET", "path": "/x", "rules": ["user"]}],
        "default": {"rules": []}
    })
    .to_string()
}

/// Five descriptor keys, each its own limit no request reaches.
pub(crate) fn rls_config() -> String {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for i in 1..=5 {
        yaml.push_str(&format!(
            "  - key: d{i}\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000000\n"
        ));
    }
    // The hot descriptor: one key every request counts on, spent from chunks. A fixed
    // window's chunk lapses when its window ends, so an hour's window shows the steady state.
    yaml.push_str(&format!(
        "  - key: hot\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1000000000\n      grant:\n        want: {}\n        ttl: 1s\n",
        crate::WANT
    ));
    yaml
}

pub(crate) struct Faces {
    pub(crate) proxy: SocketAddr,
    pub(crate) grpc: SocketAddr,
    pub(crate) admin: SocketAddr,
}

/// rl-gateway (`binary`) on `store` with `policy`, and `extra` flags.
pub(crate) fn start_gateway(
    binary: &Path,
    pin: &Pinning,
    (store, policy, extra): (&str, &str, &[&str]),
    upstream: SocketAddr,
    dir: &Path,
    log: &str,
) -> (Proc, Faces) {
    std::fs::write(dir.join("policy.json"), policy).expect("policy.json");
    std::fs::write(dir.join("rls.yaml"), rls_config()).expect("rls.yaml");
    let stderr = std::fs::File::create(dir.join(log)).expect("a log file");
    let child = pin
        .server_command(binary)
        .arg("--policy")
        .arg(dir.join("policy.json"))
        .args(["--store", store, "--listen", "127.0.0.1:0", "--upstream"])
        .arg(format!("http://{upstream}"))
        .args([
            "--admin",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--rls-config",
        ])
        .arg(dir.join("rls.yaml"))
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("rl-gateway");
    let mut proc = Proc {
        child,
        name: "rl-gateway",
        term: false,
    };
    let faces = proc.listening(3);
    let face = |name: &str| {
        faces
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no {name} face"))
    };
    let faces = Faces {
        proxy: face("proxy"),
        grpc: face("grpc"),
        admin: face("admin"),
    };
    (proc, faces)
}

// ---------------------------------------------------------------------------------------------
// CPU time of the servers (`/proc/PID/stat`), to say where the server CPU goes.

/// User plus system CPU time of `pid` and of its children (nginx's workers), in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command's `)`: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    own + children(pid).into_iter().map(cpu_ticks).sum::<u64>()
}

pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let ppid = stat
                        .rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .to_string();
                    ppid.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

pub(crate) fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The machine's busy CPU time (`/proc/stat`: all but idle and iowait), in clock ticks.
pub(crate) fn machine_busy_ticks() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            let line = stat.lines().next()?.strip_prefix("cpu ")?.to_string();
            let v: Vec<u64> = line
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal (guest is counted in user).
            Some(v.iter().take(8).sum::<u64>() - v.get(3)? - v.get(4)?)
        })
        .unwrap_or(0)
}

/// The servers whose CPU time is read around each load: a name and a pid each.
pub(crate) struct Servers(pub(crate) Vec<(&'static str, u32)>);

impl Servers {
    pub(crate) fn ticks(&self) -> Vec<u64> {
        self.0.iter().map(|(_, pid)| cpu_ticks(*pid)).collect()
    }

    /// The ticks of the rl-gateways, and of Redis.
    pub(crate) fn split(&self) -> (u64, u64) {
        let mut out = (0, 0);
        for ((name, _), t) in self.0.iter().zip(self.ticks()) {
            if name.contains("rl-gateway") {
                out.0 += t;
            } else if *name == "Redis" {
                out.1 += t;
            }
        }
        out
    }
}
