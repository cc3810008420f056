//! The rl-gateway image (`RL_GATEWAY_IMAGE`, which docker/test builds): it starts as a
//! non-root user, decides with `memory://`, answers its admin face, and `docker stop` ends it
//! with exit status 0.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use redis_rl_docker_tests::{free_port, unique_name, wait_until};

fn image() -> String {
    std::env::var("RL_GATEWAY_IMAGE").expect("RL_GATEWAY_IMAGE names the image under test")
}

/// One HTTP/1.1 request on a fresh connection: the status and the whole response.
fn request(port: u16, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("{head}Host: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_image_decides_reports_and_stops_cleanly() {
    let dir = std::env::temp_dir().join(unique_name("policy"));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        r#"{"version": 1, "identity": {"user": "x-user"},
            "rules": {"user": {"key": "u:${user}", "limit": 2, "period": "1m"}},
            "routes": [{"method": "GET", "path": "/orders/{id}", "rules": ["user"]}],
            "default": {"rules": []}}"#,
    )
    .unwrap();
    let (auth, admin) = (free_port(), free_port());
    let name = unique_name("gateway");
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "-v",
        &format!("{}:/etc/rl-gateway/policy.json:ro", policy.display()),
        &image(),
        "--policy",
        "/etc/rl-gateway/policy.json",
        "--store",
        "memory://",
        "--auth",
        &format!("127.0.0.1:{auth}"),
        "--admin",
        &format!("127.0.0.1:{admin}"),
    ]);
    let cleanup = scopeguard(&name);
    wait_until("the admin face answers", Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", admin)).is_ok()
    });
    let ask = "GET /auth HTTP/1.1\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Uri: /orders/1\r\nX-User: ann\r\n";
    assert_eq!(request(auth, ask).0, 200);
    assert_eq!(request(auth, ask).0, 200);
    let (status, text) = request(auth, ask);
    assert_eq!(status, 429, "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: "),
        "{text}"
    );
    assert_eq!(request(admin, "GET /healthz HTTP/1.1\r\n").0, 200);
    let (_, metrics) = request(admin, "GET /metrics HTTP/1.1\r\n");
    assert!(
        metrics.contains(r#"rule="user",outcome="refuse"} 1"#),
        "{metrics}"
    );
    assert_ne!(docker(&["exec", &name, "id", "-u"]), "0");
    docker(&["stop", "-t", "20", &name]);
    assert_eq!(
        docker(&["inspect", "--format", "{{.State.ExitCode}}", &name]),
        "0"
    );
    let logs = docker(&["logs", &name]);
    assert!(logs.contains("listening on 127.0.0.1"), "{logs}");
    drop(cleanup);
}

/// Removes the container when the test ends, passed or not.
fn scopeguard(name: &str) -> impl Drop + '_ {
    struct Remove<'a>(&'a str);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rm", "-f", self.0]).output();
        }
    }
    Remove(name)
}
