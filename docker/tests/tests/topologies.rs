//! The Compose topologies in docker/, brought up with docker-compose: Sentinel promotes a replica
//! that holds every write the old primary had acknowledged as replicated, and the cluster serves
//! RL.MULTI on keys of one slot and refuses keys across slots.

use redis::{cmd, Connection, ErrorKind, RedisResult, Value};
use redis_rl_docker_tests::{admit, connect, dump, free_port, info_field, wait_until, Compose};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const ALGOS: [&str; 5] = ["gcra", "bucket", "window", "sliding", "log"];

fn ports(n: usize) -> Vec<u16> {
    (0..n).map(|_| free_port()).collect()
}

fn env(pairs: &[(&str, u16)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn array_len(c: &mut Connection, command: &[&str]) -> usize {
    let mut request = cmd(command[0]);
    request.arg(&command[1..]);
    request.query::<Vec<Value>>(c).map(|v| v.len()).unwrap_or(0)
}

/// What the traffic thread saw acknowledged: each key's state after the last admission that
/// `WAIT` reported on both replicas, and the key of the admission in flight when it stopped.
struct Acknowledged {
    state: HashMap<String, Vec<u8>>,
    in_flight: Option<String>,
}

/// Admits (well within each key's limit: the log algorithm's largest is 10000) on 16 keys in turn, each admission followed by `WAIT 2`, until the primary goes away.
fn traffic(port: u16, done: Arc<AtomicUsize>) -> Acknowledged {
    let mut c = connect(port);
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut acked = Acknowledged {
        state: HashMap::new(),
        in_flight: None,
    };
    let started = Instant::now();
    for i in 0..200_000usize {
        if started.elapsed() > Duration::from_secs(120) {
            break;
        }
        let key = format!("hot:{}", i % 16);
        acked.in_flight = Some(key.clone());
        let algo = ALGOS[i % 16 % ALGOS.len()];
        let admitted: RedisResult<Vec<i64>> = cmd("RL.ADMIT")
            .arg(&key)
            .arg("10000")
            .arg("1h")
            .arg("ALGO")
            .arg(algo)
            .query(&mut c);
        if admitted.is_err() {
            break;
        }
        let replicas: RedisResult<i64> = cmd("WAIT").arg(2).arg(2000).query(&mut c);
        if replicas != Ok(2) {
            break;
        }
        let Ok(Some(state)) = cmd("DUMP").arg(&key).query::<Option<Vec<u8>>>(&mut c) else {
            break;
        };
        acked.state.insert(key, state);
        acked.in_flight = None;
        done.fetch_add(1, Ordering::SeqCst);
    }
    acked
}

#[test]
fn sentinel_promotes_a_replica_holding_every_acknowledged_write() {
    let p = ports(6);
    let (primary_port, sentinel_ports) = (p[0], &p[3..]);
    let compose = Compose::up(
        "sentinel.yml",
        env(&[
            ("RL_PRIMARY_PORT", p[0]),
            ("RL_REPLICA1_PORT", p[1]),
            ("RL_REPLICA2_PORT", p[2]),
            ("RL_SENTINEL1_PORT", p[3]),
            ("RL_SENTINEL2_PORT", p[4]),
            ("RL_SENTINEL3_PORT", p[5]),
        ]),
    );
    let mut primary = connect(primary_port);
    wait_until("both replicas synced", Duration::from_secs(60), || {
        ["slave0", "slave1"].iter().all(|replica| {
            info_field(&mut primary, "replication", replica)
                .is_some_and(|v| v.contains("state=online"))
        })
    });
    for &port in sentinel_ports {
        let mut sentinel = connect(port);
        wait_until(
            "each Sentinel to know both replicas and the other two",
            Duration::from_secs(60),
            || {
                array_len(&mut sentinel, &["SENTINEL", "REPLICAS", "rl"]) == 2
                    && array_len(&mut sentinel, &["SENTINEL", "SENTINELS", "rl"]) == 2
            },
        );
    }

    let mut settled = Vec::new();
    for algo in ALGOS {
        for i in 0..4 {
            let key = format!("settled:{algo}:{i}");
            for cost in 1..=3 {
                assert_eq!(
                    admit(
                        &mut primary,
                        &format!("{key} 100 1h ALGO {algo} COST {cost}")
                    )[0],
                    1
                );
            }
            settled.push(key);
        }
    }
    let replicas: i64 = cmd("WAIT")
        .arg(2)
        .arg(10_000)
        .query(&mut primary)
        .expect("WAIT");
    assert_eq!(replicas, 2, "both replicas acknowledge the settled writes");
    let settled: Vec<(String, Vec<u8>)> = settled
        .into_iter()
        .map(|k| {
            let s = dump(&mut primary, &k);
            (k, s)
        })
        .collect();

    let done = Arc::new(AtomicUsize::new(0));
    let traffic = {
        let done = done.clone();
        thread::spawn(move || traffic(primary_port, done))
    };
    wait_until(
        "200 acknowledged admissions",
        Duration::from_secs(60),
        || done.load(Ordering::SeqCst) >= 200 || traffic.is_finished(),
    );
    assert!(
        !traffic.is_finished(),
        "the traffic stopped before the primary did"
    );
    compose.run(&["kill", "primary"]);
    let acked = traffic.join().expect("the traffic thread");
    assert!(
        acked.state.len() == 16,
        "every hot key was acknowledged at least once"
    );

    let mut sentinel = connect(sentinel_ports[0]);
    let mut promoted = primary_port;
    wait_until("a replica promoted", Duration::from_secs(60), || {
        let addr: RedisResult<Vec<String>> = cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg("rl")
            .query(&mut sentinel);
        promoted = addr
            .ok()
            .and_then(|a| a.get(1)?.parse().ok())
            .unwrap_or(primary_port);
        promoted != primary_port
    });
    assert!(
        p[1..3].contains(&promoted),
        "the new primary {promoted} is one of the replicas"
    );
    let mut new_primary = connect(promoted);
    wait_until(
        "the promoted replica to act as primary",
        Duration::from_secs(30),
        || info_field(&mut new_primary, "replication", "role").as_deref() == Some("master"),
    );

    for (key, state) in &settled {
        assert_eq!(
            &dump(&mut new_primary, key),
            state,
            "{key} on the new primary"
        );
    }
    for (key, state) in &acked.state {
        if acked.in_flight.as_ref() == Some(key) {
            // Its last admission may or may not have reached the replica before the kill; it was
            // acknowledged before, so the key still exists either way.
            dump(&mut new_primary, key);
        } else {
            assert_eq!(
                &dump(&mut new_primary, key),
                state,
                "{key} on the new primary"
            );
        }
    }
    let keys: usize = cmd("DBSIZE").query(&mut new_primary).expect("DBSIZE");
    assert_eq!(
        keys,
        settled.len() + acked.state.len(),
        "no key lost or added"
    );

    assert_eq!(admit(&mut new_primary, "after:failover 10 1h")[0], 1);
    wait_until(
        "the other replica to follow the new primary",
        Duration::from_secs(60),
        || info_field(&mut new_primary, "replication", "connected_slaves").as_deref() == Some("1"),
    );
    let replicas: i64 = cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut new_primary)
        .expect("WAIT");
    assert_eq!(replicas, 1, "the new primary replicates");
}

/// The primary serving `slot` and its replicas, from `CLUSTER NODES` (`CLUSTER SLOTS` leaves out
/// a replica until it reports a replication offset, which an idle cluster may not have yet).
fn slot_owner(c: &mut Connection, slot: i64) -> (u16, Vec<u16>) {
    let nodes: String = cmd("CLUSTER").arg("NODES").query(c).expect("CLUSTER NODES");
    let port_of = |addr: &str| -> u16 {
        let host_port = addr.split('@').next().unwrap_or(addr);
        host_port
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    };
    let serves = |range: &str| match range.split_once('-') {
        Some((from, to)) => from.parse::<i64>().ok() <= Some(slot) && Some(slot) <= to.parse().ok(),
        None => range.parse::<i64>().ok() == Some(slot),
    };
    let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
    let primary = lines
        .iter()
        .find(|f| f.len() > 8 && f[8..].iter().any(|r| serves(r)))
        .unwrap_or_else(|| panic!("no node serves slot {slot}:\n{nodes}"));
    let replicas = lines
        .iter()
        .filter(|f| f.len() > 3 && f[3] == primary[0])
        .map(|f| port_of(f[1]));
    (port_of(primary[1]), replicas.collect())
}

fn keyslot(c: &mut Connection, key: &str) -> i64 {
    cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(c)
        .expect("CLUSTER KEYSLOT")
}

fn multi(c: &mut Connection, a: &str, b: &str) -> RedisResult<Value> {
    cmd("RL.MULTI")
        .arg(2)
        .arg(a)
        .arg(b)
        .arg(["RULE", "hour", "10", "1h", "RULE", "day", "1000", "1d"].as_slice())
        .query(c)
}

#[test]
fn cluster_serves_rl_multi_within_a_slot_and_refuses_it_across_slots() {
    let p = ports(6);
    let names = [
        "RL_NODE1_PORT",
        "RL_NODE2_PORT",
        "RL_NODE3_PORT",
        "RL_NODE4_PORT",
        "RL_NODE5_PORT",
        "RL_NODE6_PORT",
    ];
    let pairs: Vec<(&str, u16)> = names.iter().copied().zip(p.iter().copied()).collect();
    let _compose = Compose::up("cluster.yml", env(&pairs));
    for &port in &p {
        let mut node = connect(port);
        wait_until(
            "every node to see three primaries and three replicas, and each replica synced",
            Duration::from_secs(90),
            || {
                info_field_cluster(&mut node, "cluster_state").as_deref() == Some("ok")
                    && roles(&mut node) == (3, 3)
                    && synced(&mut node)
            },
        );
    }

    let mut any = connect(p[0]);
    let (hour, day) = ("{user:1}:hour", "{user:1}:day");
    let slot = keyslot(&mut any, hour);
    assert_eq!(keyslot(&mut any, day), slot);
    let (owner, replicas) = slot_owner(&mut any, slot);
    assert_eq!(replicas.len(), 1, "each primary has one replica");

    let mut c = connect(owner);
    let reply = multi(&mut c, hour, day).expect("RL.MULTI on the slot's primary");
    let Value::Array(fields) = reply else {
        panic!("RL.MULTI replied {reply:?}")
    };
    assert_eq!(fields[0], Value::Int(1), "admitted: {fields:?}");
    let remaining: Vec<i64> = match &fields[3] {
        Value::Array(rules) => rules
            .iter()
            .map(|r| match r {
                Value::Array(rule) => match rule[1] {
                    Value::Int(n) => n,
                    ref v => panic!("remaining {v:?}"),
                },
                v => panic!("rule {v:?}"),
            })
            .collect(),
        v => panic!("rules {v:?}"),
    };
    assert_eq!(remaining, [9, 999]);

    let other = *p
        .iter()
        .find(|&&port| port != owner && !replicas.contains(&port))
        .expect("a node of another shard");
    let moved = multi(&mut connect(other), hour, day).expect_err("another shard redirects");
    assert_eq!(moved.kind(), ErrorKind::Moved, "{moved}");
    assert_eq!(
        moved.redirect_node(),
        Some((format!("127.0.0.1:{owner}").as_str(), slot as u16))
    );

    let replicated: i64 = cmd("WAIT").arg(1).arg(10_000).query(&mut c).expect("WAIT");
    assert_eq!(replicated, 1);
    let mut replica = connect(replicas[0]);
    let _: () = cmd("READONLY").query(&mut replica).expect("READONLY");
    let replica_keys: i64 = cmd("DBSIZE").query(&mut replica).expect("DBSIZE");
    assert_eq!(
        replica_keys,
        2,
        "the replica on {} after WAIT; primary {owner}: {:?}; replica: {:?}",
        replicas[0],
        info_field(&mut c, "replication", "slave0"),
        info_field(&mut replica, "replication", "master_port"),
    );
    for key in [hour, day] {
        assert_eq!(
            dump(&mut replica, key),
            dump(&mut c, key),
            "{key} on the replica"
        );
    }

    let (a, b) = ("user:1:hour", "user:2:hour");
    assert_ne!(keyslot(&mut any, a), keyslot(&mut any, b));
    let crossslot = multi(&mut c, a, b).expect_err("keys in two slots");
    assert_eq!(crossslot.kind(), ErrorKind::CrossSlot, "{crossslot}");
}

fn info_field_cluster(c: &mut Connection, field: &str) -> Option<String> {
    let info: String = cmd("CLUSTER").arg("INFO").query(c).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// True for a primary, and for a replica whose first sync is done: until then `WAIT` would wait
/// on it, and a key whose TTL ran out meanwhile would read as missing on the replica.
fn synced(c: &mut Connection) -> bool {
    match info_field(c, "replication", "role").as_deref() {
        Some("master") => true,
        Some("slave") => {
            info_field(c, "replication", "master_link_status").as_deref() == Some("up")
        }
        _ => false,
    }
}

/// How many connected primaries and replicas a node sees, from `CLUSTER NODES`.
fn roles(c: &mut Connection) -> (usize, usize) {
    let nodes: String = cmd("CLUSTER").arg("NODES").query(c).unwrap_or_default();
    let connected = nodes.lines().filter(|line| line.contains(" connected"));
    connected.fold((0, 0), |(primaries, replicas), line| {
        let flags = line.split(' ').nth(2).unwrap_or("");
        if flags.contains("fail") {
            (primaries, replicas)
        } else if flags.contains("master") {
            (primaries + 1, replicas)
        } else if flags.contains("slave") {
            (primaries, replicas + 1)
        } else {
            (primaries, replicas)
        }
    })
}
