//! The image on its own: the module is loaded, it admits, it runs unprivileged, and its state
//! survives a restart and a new container on the same volume, through RDB and through AOF.

use redis::{cmd, Connection};
use redis_rl_docker_tests::{
    admit, connect, dump, free_port, image, image_name_and_tag, info_field, module_names,
    unique_name, Volume,
};
use std::fs;
use std::process::Command;
use testcontainers::{clients::Cli, core::WaitFor, Container, GenericImage, RunnableImage};

/// The image with its entrypoint, started on a free port with `args` after the image name.
fn runnable(port: u16, args: &[&str], volume: Option<&Volume>) -> RunnableImage<GenericImage> {
    let (name, tag) = image_name_and_tag();
    let image = GenericImage::new(name, tag)
        .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"));
    let mut argv: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend(args.iter().map(|s| s.to_string()));
    let runnable = RunnableImage::from((image, argv))
        .with_network("host")
        .with_container_name(unique_name("server"));
    match volume {
        Some(v) => runnable.with_volume((v.0.clone(), "/data".to_owned())),
        None => runnable,
    }
}

fn exec(container: &Container<'_, GenericImage>, command: &[&str]) -> String {
    let output = Command::new("docker")
        .arg("exec")
        .arg(container.id())
        .args(command)
        .output()
        .expect("docker exec runs");
    assert!(
        output.status.success(),
        "docker exec {command:?}: {output:?}"
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn the_module_is_loaded_and_the_server_runs_unprivileged() {
    let docker = Cli::default();
    let port = free_port();
    let container = docker.run(runnable(port, &[], None));
    let mut c = connect(port);
    // Valkey lists its built-in `lua` engine as a module too.
    let modules = module_names(&mut c);
    assert!(
        modules.iter().any(|m| m == "rl"),
        "MODULE LIST: {modules:?}"
    );
    // `--port` after the image name reached the server: it answers there.
    assert_eq!(
        info_field(&mut c, "server", "tcp_port"),
        Some(port.to_string())
    );
    // As in the official images, or a client outside the container could not connect.
    let protected: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("protected-mode")
        .query(&mut c)
        .expect("CONFIG GET");
    assert_eq!(protected, ["protected-mode", "no"]);
    let user = exec(&container, &["id", "-un"]);
    assert!(user == "redis" || user == "valkey", "runs as {user}");
    assert_ne!(exec(&container, &["id", "-u"]), "0");
}

#[test]
fn a_config_file_comes_first_and_the_options_after_it_override_it() {
    let dir = std::env::temp_dir().join(unique_name("conf"));
    fs::create_dir_all(&dir).expect("a temporary directory");
    let port = free_port();
    let conf = format!("port {port}\nbind 127.0.0.1\nmaxmemory 1mb\n");
    fs::write(dir.join("rl.conf"), conf).expect("the config file");
    let (name, tag) = image_name_and_tag();
    let image = GenericImage::new(name, tag)
        .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"));
    let args = ["/etc/redis-rl/rl.conf", "--maxmemory", "2mb"]
        .map(String::from)
        .to_vec();
    let docker = Cli::default();
    let runnable = RunnableImage::from((image, args))
        .with_network("host")
        .with_container_name(unique_name("server"))
        .with_volume((dir.display().to_string(), "/etc/redis-rl".to_owned()));
    let container = docker.run(runnable);
    let mut c = connect(port);
    assert!(module_names(&mut c).iter().any(|m| m == "rl"));
    let maxmemory: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut c)
        .expect("CONFIG GET");
    assert_eq!(maxmemory, ["maxmemory", "2097152"]);
    drop(container);
    fs::remove_dir_all(&dir).expect("remove the temporary directory");
}

#[test]
fn rl_module_args_reach_the_module() {
    let docker = Cli::default();
    let port = free_port();
    let runnable = runnable(port, &[], None).with_env_var(("RL_MODULE_ARGS", "skip-effects no"));
    let _container = docker.run(runnable);
    let mut c = connect(port);
    assert_eq!(
        info_field(&mut c, "rl", "rl_skip_effects").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&mut c, "rl", "rl_skip_effects_why").as_deref(),
        Some("module_argument")
    );
}

#[test]
fn version_prints_the_servers_version_and_starts_no_server() {
    let output = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &image(), "--version"])
        .output()
        .expect("docker run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains(" server v="), "{stdout}");
}

#[test]
fn rl_admit_admits_then_refuses() {
    let docker = Cli::default();
    let port = free_port();
    let _container = docker.run(runnable(port, &[], None));
    let mut c = connect(port);
    let first = admit(&mut c, "user:1 2 1h");
    assert_eq!((first[0], first[1], first[2], first[4]), (1, 1, 0, 2));
    assert_eq!(admit(&mut c, "user:1 2 1h")[..3], [1, 0, 0]);
    let refused = admit(&mut c, "user:1 2 1h");
    assert_eq!(refused[0], 0);
    assert!(refused[2] > 0, "a refusal says when to retry: {refused:?}");
}

/// Keys of every algorithm, each spent a few times, and their state as `DUMP` serialises it.
fn write_keys(c: &mut Connection) -> Vec<(String, Vec<u8>)> {
    let rules = [
        ("gcra", "10 1h"),
        ("bucket", "10 1h ALGO bucket"),
        ("window", "10 1h ALGO window"),
        ("sliding", "10 1h ALGO sliding"),
        ("log", "10 1h ALGO log"),
    ];
    rules
        .iter()
        .map(|(name, rule)| {
            let key = format!("persist:{name}");
            for cost in 1..=3 {
                assert_eq!(admit(c, &format!("{key} {rule} COST {cost}"))[0], 1);
            }
            let d = dump(c, &key);
            (key, d)
        })
        .collect()
}

fn assert_same_state(c: &mut Connection, expected: &[(String, Vec<u8>)], when: &str) {
    for (key, d) in expected {
        assert_eq!(&dump(c, key), d, "{key} {when}");
    }
    let keys: i64 = cmd("DBSIZE").query(c).expect("DBSIZE");
    assert_eq!(keys, expected.len() as i64, "keys {when}");
}

/// Writes, restarts the container, then starts a new container on the same volume: the state
/// is the same each time, loaded from what `args` makes the server persist.
fn survives_restart(args: &[&str], volume: &Volume, persistence_field: (&str, &str)) {
    let docker = Cli::default();
    let port = free_port();
    let expected;
    {
        let container = docker.run(runnable(port, args, Some(volume)));
        let mut c = connect(port);
        expected = write_keys(&mut c);
        drop(c);
        container.stop();
        container.start();
        let mut c = connect(port);
        assert_same_state(&mut c, &expected, "after a restart");
        let (field, value) = persistence_field;
        assert_eq!(
            info_field(&mut c, "persistence", field).as_deref(),
            Some(value)
        );
    }
    let port = free_port();
    let _container = docker.run(runnable(port, args, Some(volume)));
    let mut c = connect(port);
    assert_same_state(&mut c, &expected, "in a new container on the same volume");
}

#[test]
fn state_survives_a_restart_through_rdb() {
    let volume = Volume::new("rdb");
    // The save point makes the server write its RDB file when `docker stop` sends SIGTERM.
    survives_restart(
        &["--appendonly", "no", "--save", "3600 1"],
        &volume,
        ("aof_enabled", "0"),
    );
}

#[test]
fn state_survives_a_restart_through_aof() {
    let volume = Volume::new("aof");
    // No save point: nothing writes an RDB file, so the state can only come back from the AOF.
    survives_restart(
        &["--appendonly", "yes", "--save", ""],
        &volume,
        ("aof_enabled", "1"),
    );
}
