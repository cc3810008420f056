//! The shipped nginx and Caddy configurations (`examples/`), as they are but for their ports, in
//! front of an upstream with rl-gateway's forward-auth face deciding: admissions reach the
//! upstream with the RateLimit fields on the response, refusals are 429 with Retry-After.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::support::{closed_port, policy_file, upstream, Gateway};
use serde_json::json;

fn policy() -> serde_json::Value {
    json!({
        "version": 1,
        "identity": {"user": "x-user", "trusted_proxies": ["127.0.0.1"]},
        "rules": {"user": {"key": "u:${user}", "limit": 2, "period": "1m"}},
        "routes": [{"method": "GET", "path": "/orders/{id}", "rules": ["user"]}],
        "default": {"rules": []}
    })
}

/// A server process of the test, stopped when dropped: with SIGTERM, which nginx's master
/// passes on to its workers (a SIGKILL would leave them running), then SIGKILL if it lingers.
pub(crate) struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn example(name: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    std::fs::read_to_string(file).unwrap()
}

/// The example with its three ports (the proxy's 8080, rl-gateway's 9001, the API's 9000)
/// replaced by this test's.
fn with_ports(text: &str, listen: u16, auth: u16, api: u16) -> String {
    text.replace("127.0.0.1:8080", &format!("127.0.0.1:{listen}"))
        .replace("127.0.0.1:9001", &format!("127.0.0.1:{auth}"))
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{api}"))
}

/// A directory of its own for one proxy (tests run side by side in one process).
fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rl-gateway-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

async fn wait_listening(port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(child.try_wait().unwrap().is_none(), "the proxy exited");
        assert!(Instant::now() < deadline, "the proxy never listened");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) fn nginx(dir: &Path, site: &str) -> Child {
    std::fs::write(dir.join("site.conf"), site).unwrap();
    let d = dir.display();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/site.conf;\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let binary = if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    };
    Command::new(binary)
        .args(["-e", &format!("{d}/error.log"), "-p", &d.to_string(), "-c"])
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub(crate) fn caddy(dir: &Path, caddyfile: &str) -> Child {
    let file = dir.join("Caddyfile");
    std::fs::write(&file, caddyfile).unwrap();
    Command::new("caddy")
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&file)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .env("XDG_CONFIG_HOME", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn get(url: &str, user: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(url)
        .header("x-user", user)
        .send()
        .await
        .unwrap()
}

/// The two admissions and the refusal every shipped configuration gives `ann` at `url`: the
/// refusal's response, for what each proxy adds to it.
async fn admits_twice_then_refuses(url: &str) -> reqwest::Response {
    let ok = get(url, "ann").await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["ratelimit-policy"], "\"user\";q=2;w=60");
    assert_eq!(ok.headers()["ratelimit"], "\"user\";r=1;t=30");
    assert_eq!(get(url, "ann").await.status(), 200);
    let refused = get(url, "ann").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "30");
    refused
}

/// rl-gateway's auth face on memory:// deciding by `policy`, then the proxy `start` makes of
/// the example `name` (its ports replaced) in front of an upstream: the proxy's port, what the
/// upstream saw, and what must live as long as the test.
pub(crate) async fn behind(
    name: &str,
    policy: &serde_json::Value,
    deny: &[&str],
    start: fn(&Path, &str) -> Child,
) -> (u16, Seen, Gateway, Proxy) {
    let (api, seen) = upstream().await;
    let file = policy_file(policy);
    let mut args = vec!["--policy", file.to_str().unwrap(), "--store", "memory://"];
    args.extend_from_slice(&["--auth", "127.0.0.1:0"]);
    args.extend_from_slice(deny);
    let gw = Gateway::start(&args);
    let listen = closed_port();
    let config = with_ports(
        &example(name),
        listen,
        gw.faces["auth"].port(),
        port_of(&api),
    );
    let mut child = start(&scratch(name), &config);
    wait_listening(listen, &mut child).await;
    (listen, seen, gw, Proxy(child))
}

pub(crate) type Seen = std::sync::Arc<std::sync::Mutex<Vec<crate::support::Seen>>>;

#[tokio::test(flavor = "multi_thread")]
async fn nginx_auth_request_as_shipped() {
    let deny = ["--auth-deny-status", "403"];
    let (port, seen, gw, _nginx) = behind("nginx.conf", &policy(), &deny, nginx).await;
    let url = format!("http://127.0.0.1:{port}/orders/7");
    let refused = admits_twice_then_refuses(&url).await;
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(get(&url, "bob").await.status(), 200);
    assert_eq!(seen.lock().unwrap().len(), 3);
    // rl-gateway gone: nginx's auth request fails, and the caller is told the limiter is out.
    drop(gw);
    let out = get(&url, "cy").await;
    assert_eq!(out.status(), 503);
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn caddy_forward_auth_as_shipped() {
    let (port, seen, _gw, _caddy) = behind("Caddyfile", &policy(), &[], caddy).await;
    let url = format!("http://127.0.0.1:{port}/orders/7");
    let refused = admits_twice_then_refuses(&url).await;
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["violated-policies"], json!(["user"]));
    assert_eq!(seen.lock().unwrap().len(), 2);
}
