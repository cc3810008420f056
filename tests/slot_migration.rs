//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) on a real 3-primary cluster on
//! loopback, under traffic: every limiter reaches the target with its exact state and expiry.
//! On Redis, which has no atomic slot migration, the test checks nothing and says so.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use common::cluster::*;
use common::*;
use rl_testkit as common;

use redis::ErrorKind;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// `CLUSTER GETSLOTMIGRATIONS` on `c`: one map of fields per job (RESP2 sends each map as a
/// flat array of names and values).
fn slot_migrations(c: &mut Connection) -> Vec<Vec<(String, String)>> {
    let v: Value = cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(c)
        .expect("GETSLOTMIGRATIONS");
    let Value::Array(jobs) = v else {
        panic!("GETSLOTMIGRATIONS: {v:?}")
    };
    let text = |v: &Value| -> String {
        redis::from_redis_value(v).unwrap_or_else(|e| panic!("{v:?}: {e}"))
    };
    jobs.iter()
        .map(|job| match job {
            Value::Array(flat) => flat.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).collect(),
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), text(v))).collect(),
            other => panic!("GETSLOTMIGRATIONS job: {other:?}"),
        })
        .collect()
}

fn field<'a>(job: &'a [(String, String)], name: &str) -> &'a str {
    job.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {job:?}"))
}

/// What the traffic thread saw.
struct Traffic {
    /// Units admitted per counted key (by the source or the target).
    admitted: Vec<i64>,
    /// The `remaining` of the last admission of each counted key.
    last_remaining: Vec<i64>,
    /// Admissions of the key whose capacity runs out.
    spent_admitted: i64,
    /// Leases acquired and released on the semaphore.
    acquired: i64,
    released: i64,
    /// Writes the source answered while the migration ran (before the slots moved).
    on_source_while_migrating: u64,
    /// Whether the source answered `MOVED` to the target.
    redirected: bool,
    /// Keys created while the migration ran, each admitted once (`5 1h`).
    created: Vec<String>,
}

const PHASE_BEFORE: u8 = 0;
const PHASE_MIGRATING: u8 = 1;
const PHASE_DONE: u8 = 2;

/// Where the traffic thread sends its commands: the source until it answers `MOVED` to the
/// target, then the target.
struct Route {
    conn: Connection,
    on_target: bool,
    target: u16,
}

impl Route {
    fn connect(port: u16) -> Connection {
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
            .expect("traffic connection")
    }

    fn query(&mut self, line: &str) -> Value {
        let words = words(line);
        loop {
            match cmd(words[0])
                .arg(&words[1..])
                .query::<Value>(&mut self.conn)
            {
                Ok(v) => return v,
                Err(e) if e.kind() == ErrorKind::Moved && !self.on_target => {
                    let addr = format!("127.0.0.1:{}", self.target);
                    assert_eq!(
                        e.redirect_node().map(|(a, _)| a),
                        Some(addr.as_str()),
                        "{e}"
                    );
                    self.conn = Route::connect(self.target);
                    self.on_target = true;
                }
                Err(e) => panic!("traffic {line}: {e}"),
            }
        }
    }
}

/// Admits on `counted` (window, never refused), `spent` (gcra, runs out) and keys it creates
/// while the phase is MIGRATING; acquires and releases leases on `sem`. Stops by itself: 500
/// operations after the phase is DONE, after 400,000 operations, or after 90 s.
fn run_traffic(
    source: u16,
    target: u16,
    counted: Vec<String>,
    spent: String,
    sem: String,
    phase: std::sync::Arc<std::sync::atomic::AtomicU8>,
    progress: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Traffic {
    use std::sync::atomic::Ordering;
    let mut route = Route {
        conn: Route::connect(source),
        on_target: false,
        target,
    };
    let mut t = Traffic {
        admitted: vec![0; counted.len()],
        last_remaining: vec![0; counted.len()],
        spent_admitted: 0,
        acquired: 0,
        released: 0,
        on_source_while_migrating: 0,
        redirected: false,
        created: Vec::new(),
    };
    let ints = |v: &Value| -> Vec<i64> {
        redis::from_redis_value(v).unwrap_or_else(|e| panic!("{v:?}: {e}"))
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut after_done = 0;
    for i in 0..400_000usize {
        let now_phase = phase.load(Ordering::SeqCst);
        if now_phase == PHASE_DONE {
            after_done += 1;
            if after_done > 500 {
                break;
            }
        }
        if Instant::now() > deadline {
            break;
        }
        let k = i % counted.len();
        if now_phase == PHASE_MIGRATING && i % 50 == 0 {
            let key = format!("{}:new:{i}", counted[k]);
            let r = ints(&route.query(&format!("RL.ADMIT {key} 5 1h")));
            assert_eq!(r[..3], [1, 4, 0], "{key}: {r:?}");
            t.created.push(key);
        } else if i % 7 == 0 {
            t.spent_admitted += ints(&route.query(&format!("RL.ADMIT {spent} 100 1d")))[0];
        } else if i % 11 == 0 {
            let acquire = format!("RL.ACQUIRE {sem} 100000 1h ID h{i}");
            let (acquired, _, _, _): (i64, String, i64, i64) =
                redis::from_redis_value(&route.query(&acquire)).expect("RL.ACQUIRE reply");
            assert_eq!(acquired, 1, "{acquire}");
            t.acquired += 1;
            if i % 3 == 0 {
                let released: i64 =
                    redis::from_redis_value(&route.query(&format!("RL.RELEASE {sem} h{i}")))
                        .expect("RL.RELEASE reply");
                assert_eq!(released, 1, "h{i}");
                t.released += 1;
            }
        } else {
            let line = format!("RL.ADMIT {} 1000000 1d ALGO window", counted[k]);
            let r = ints(&route.query(&line));
            assert_eq!(r[0], 1, "{line}: {r:?}");
            t.admitted[k] += 1;
            t.last_remaining[k] = r[1];
        }
        progress.fetch_add(1, Ordering::SeqCst);
        if !route.on_target && now_phase == PHASE_MIGRATING {
            t.on_source_while_migrating += 1;
        }
    }
    t.redirected = route.on_target;
    t
}

/// Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) under traffic: the snapshot (the
/// type's `aof_rewrite`) and the streamed effects of the writes made meanwhile bring every key
/// to the target with its exact state and expiry.
#[test]
fn limiters_survive_atomic_slot_migration_under_traffic() {
    if !is_valkey() {
        eprintln!("skipped: CLUSTER MIGRATESLOTS (atomic slot migration) is Valkey 9 only");
        return;
    }
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
    use std::sync::Arc;

    let cluster = Cluster::start();
    let map = cluster.wait_converged("before migration");
    // A owns slot 0 (and so the lowest slots); B owns the last slot.
    let (a, b) = (cluster.owner_in(&map, 0), cluster.owner_in(&map, SLOTS - 1));
    assert_ne!(a, b);
    let a_slots = cluster.slots_of(&map, a);
    let (mut ca, mut cb) = (cluster.conn(a), cluster.conn(b));

    // Hash tags in slots 0..100, all A's: one per key below.
    let candidates: Vec<String> = (0..20_000).map(|i| format!("{{asm{i}}}")).collect();
    let slots = keyslots(&mut ca, &candidates);
    let tags: Vec<(String, i64)> = candidates
        .into_iter()
        .zip(slots)
        .filter(|(_, s)| *s < 100)
        .take(13)
        .collect();
    assert_eq!(tags.len(), 13);
    let last_slot = tags.iter().map(|(_, s)| *s).max().unwrap();
    assert!(
        (0..=last_slot).all(|s| a_slots.contains(&s)),
        "A owns 0..={last_slot}"
    );

    // Keys written once before the migration and never during it: their digests must match.
    let fixed = |i: usize, name: &str| format!("{}:{name}", tags[i].0);
    let admitted_thrice = [
        (fixed(0, "gcra"), "5 1h"),
        (fixed(1, "bucket"), "5 1h ALGO bucket"),
        (fixed(2, "window"), "5 1d ALGO window"),
        (fixed(3, "sliding"), "5 1d ALGO sliding"),
        (fixed(4, "log"), "5 1h ALGO log"),
    ];
    let day = server_secs(&mut ca) / 86_400;
    for (key, rule) in &admitted_thrice {
        for left in [4, 3, 2] {
            let r = admit(&mut ca, &format!("{key} {rule}"));
            assert_eq!(r[..3], [1, left, 0], "{key} {rule}: {r:?}");
        }
    }
    let spent = fixed(5, "spent");
    admit(&mut ca, &format!("{spent} 2 1h"));
    admit(&mut ca, &format!("{spent} 2 1h"));
    assert_eq!(admit(&mut ca, &format!("{spent} 2 1h"))[..2], [0, 0]);
    let sem = fixed(6, "sem");
    for holder in ["h1", "h2"] {
        let (acquired, _, in_flight, _): (i64, String, i64, i64) = cmd("RL.ACQUIRE")
            .arg(&sem)
            .arg(words("2 1h ID"))
            .arg(holder)
            .query(&mut ca)
            .expect("RL.ACQUIRE");
        assert_eq!(acquired, 1, "{holder}");
        assert!(in_flight >= 1);
    }
    let res = fixed(7, "res");
    let reserve = format!("{res} 10 1h COST 4 RESERVE r1 KEEP 1h");
    let reserved = admit(&mut ca, &reserve);
    assert_eq!(reserved[..3], [1, 6, 0], "{reserved:?}");

    let mut fixed_keys: Vec<String> = admitted_thrice.iter().map(|(k, _)| k.clone()).collect();
    fixed_keys.extend([spent.clone(), sem.clone(), res.clone()]);
    let before: Vec<(String, i64)> = fixed_keys
        .iter()
        .map(|k| (digest(&mut ca, k.as_bytes()), pttl(&mut ca, k.as_bytes())))
        .collect();
    let recorded = Instant::now();
    for (k, (d, t)) in fixed_keys.iter().zip(&before) {
        assert_ne!(*d, "0".repeat(40), "{k}");
        assert!(*t > 0, "{k}: pttl {t}");
    }

    // Traffic on four more keys (and on new ones) for the whole migration.
    let counted: Vec<String> = (8..12).map(|i| fixed(i, "w")).collect();
    let traffic_spent = fixed(12, "g");
    let traffic_sem = fixed(12, "sem");
    let phase = Arc::new(AtomicU8::new(PHASE_BEFORE));
    let progress = Arc::new(AtomicU64::new(0));
    let traffic = {
        let (source, target) = (cluster.port(a), cluster.port(b));
        let (counted, spent, sem, phase, progress) = (
            counted.clone(),
            traffic_spent.clone(),
            traffic_sem.clone(),
            phase.clone(),
            progress.clone(),
        );
        std::thread::spawn(move || {
            run_traffic(source, target, counted, spent, sem, phase, progress)
        })
    };
    wait_until(30, "traffic started", || {
        progress.load(Ordering::SeqCst) >= 300
    });

    // The snapshot child waits 50 ms per key it writes, so the traffic surely writes to the
    // moving slots after their snapshot: only the streamed effects carry those writes.
    let _: () = cmd("CONFIG")
        .arg(words("SET rdb-key-save-delay 50000"))
        .query(&mut ca)
        .expect("CONFIG SET");
    phase.store(PHASE_MIGRATING, Ordering::SeqCst);
    let _: () = cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(0)
        .arg(last_slot)
        .arg("NODE")
        .arg(cluster.id(b))
        .query(&mut ca)
        .expect("CLUSTER MIGRATESLOTS");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = slot_migrations(&mut ca);
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        let job = &jobs[0];
        assert_eq!(field(job, "operation"), "EXPORT", "{job:?}");
        assert_eq!(
            field(job, "slot_ranges"),
            format!("0-{last_slot}"),
            "{job:?}"
        );
        match field(job, "state") {
            "success" => break,
            "failed" | "cancelled" => panic!("migration ended: {job:?}"),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "migration did not finish: {job:?}"
        );
        sleep(Duration::from_millis(20));
    }
    phase.store(PHASE_DONE, Ordering::SeqCst);
    let traffic = traffic.join().expect("traffic thread");
    let elapsed = recorded.elapsed().as_millis() as i64;
    eprintln!(
        "migrated slots 0-{last_slot}: {} writes on the source while migrating, {} keys created",
        traffic.on_source_while_migrating,
        traffic.created.len()
    );

    // The target reports the import done, and every node sees B as the owner.
    let imports = slot_migrations(&mut cb);
    assert!(
        imports
            .iter()
            .any(|j| field(j, "operation") == "IMPORT" && field(j, "state") == "success"),
        "{imports:?}"
    );
    let after = cluster.wait_converged("after migration");
    for s in 0..=last_slot {
        assert_eq!(cluster.owner_in(&after, s), b, "slot {s}");
    }
    assert!(traffic.redirected, "the source never answered MOVED");
    assert!(
        traffic.on_source_while_migrating > 0 && !traffic.created.is_empty(),
        "no write happened during the migration"
    );
    assert_eq!(dbsize(&mut ca), 0, "A kept keys of the moved slots");
    let expected = fixed_keys.len() + counted.len() + 2 + traffic.created.len();
    assert_eq!(dbsize(&mut cb), expected as i64, "B has every key");

    // Keys untouched since: the same state (digest) and expiry on the target.
    for (k, (d, t)) in fixed_keys.iter().zip(&before) {
        assert_eq!(digest(&mut cb, k.as_bytes()), *d, "{k}");
        let now = pttl(&mut cb, k.as_bytes());
        assert!(
            (0..=elapsed + 100).contains(&(t - now)),
            "{k}: pttl {t} before, {now} after, {elapsed} ms apart"
        );
    }
    // And they go on where they were: nothing back to full capacity.
    let same_day = server_secs(&mut cb) / 86_400 == day;
    for (key, rule) in &admitted_thrice {
        if !same_day && rule.contains("1d") {
            continue; // a new daily window began during the test (23:59:59 UTC)
        }
        let r = admit(&mut cb, &format!("{key} {rule}"));
        assert_eq!(r[..3], [1, 1, 0], "{key} {rule}: {r:?}");
    }
    assert_eq!(admit(&mut cb, &format!("{spent} 2 1h"))[..2], [0, 0]);
    let (acquired, _, in_flight, _): (i64, String, i64, i64) = cmd("RL.ACQUIRE")
        .arg(&sem)
        .arg(words("2 1h ID h3"))
        .query(&mut cb)
        .expect("RL.ACQUIRE");
    assert_eq!((acquired, in_flight), (0, 2), "both leases moved");
    let retried = admit(&mut cb, &reserve);
    assert_eq!(
        (&retried[..3], retried[4]),
        (&reserved[..3], reserved[4]),
        "the retried reservation spends nothing: {retried:?}"
    );
    let settled: (i64, i64) = cmd("RL.SETTLE")
        .arg(&res)
        .arg(words("r1 4"))
        .query(&mut cb)
        .expect("RL.SETTLE");
    assert_eq!(settled, (0, 6), "settled once, against the moved balance");

    // Keys written during the migration: every admission counted on the target.
    if same_day {
        for (i, k) in counted.iter().enumerate() {
            assert!(traffic.admitted[i] > 0, "{k}");
            assert_eq!(
                traffic.last_remaining[i],
                1_000_000 - traffic.admitted[i],
                "{k}: the replies counted every admission"
            );
            let r = admit(&mut cb, &format!("{k} 1000000 1d ALGO window"));
            assert_eq!(
                r[..2],
                [1, 1_000_000 - traffic.admitted[i] - 1],
                "{k}: {} admitted before",
                traffic.admitted[i]
            );
        }
    }
    // 100 a day: the burst of 100 was spent during the test and stays spent.
    assert_eq!(traffic.spent_admitted, 100);
    assert_eq!(admit(&mut cb, &format!("{traffic_spent} 100 1d"))[0], 0);
    // Every lease taken and not released is still held.
    let (acquired, _, in_flight, _): (i64, String, i64, i64) = cmd("RL.ACQUIRE")
        .arg(&traffic_sem)
        .arg(words("100000 1h ID last"))
        .query(&mut cb)
        .expect("RL.ACQUIRE");
    assert_eq!(acquired, 1);
    assert!(traffic.released > 0);
    assert_eq!(in_flight, traffic.acquired - traffic.released + 1, "leases");
    for k in &traffic.created {
        let r = admit(&mut cb, &format!("{k} 5 1h"));
        assert_eq!(r[..3], [1, 3, 0], "{k}: {r:?}");
    }
}
