//! Script mode (`clients/scripts/rl.lua`) replies as the module does: random command sequences
//! sent to one server of each mode, and rules large enough that a double would round.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;
mod script_mode;

use common::{cmd, error_text, Rng, Server, Value};
use script_mode::{load_script, module_call, script_call};

// ---------------------------------------------------------------------------------------------
// The differential run.

fn pick<'a>(rng: &mut Rng, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len() as u64) as usize]
}

const LIMITS: &[&str] = &["1", "2", "3", "10", "1000"];
const PERIODS: &[&str] = &["1h", "90m", "1d", "30d", "3650d", "7200s"];
const ALGOS: &[&str] = &["gcra", "bucket", "window", "sliding", "log"];
const JUNK: &[&str] = &[
    "0",
    "-1",
    "abc",
    "",
    "1x",
    "10",
    "99999999999999999999",
    "9223372036854775808",
    "1.5",
    "BURST",
    "COST",
    "ALGO",
    "DRYRUN",
    "RESERVE",
    "KEEP",
    "FORGET",
    "WANT",
    "TTL",
    "ID",
    "RULE",
    "DEADLINE",
    "leaky",
    "3651d",
    "0ms",
    "\u{1}x",
];

/// Limit and period for `algo` on key number `key` (log takes at most 10000, and none of
/// `LIMITS` is more): rates stay slow (hours and up) so the two
/// servers, reading their clocks a moment apart, decide the same, and each key keeps one period,
/// since converting a level to a much longer period magnifies that moment (a microsecond of a
/// 2 h rule is 44 ms of a 3650 d one).
fn rate_rule(rng: &mut Rng, algo: &str, key: usize) -> (String, String, Option<String>) {
    // A rate key keeps its limit too: a level counted under a limit L1 refills in the time of L2
    // after a change, which turns the moment between the two calls into L1 / L2 times as much.
    let limit = if matches!(algo, "gcra" | "bucket") {
        LIMITS[(key * 7 + 3) % LIMITS.len()]
    } else {
        pick(rng, LIMITS)
    }
    .to_string();
    let period = PERIODS[key % PERIODS.len()].to_string();
    let burst = (matches!(algo, "gcra" | "bucket") && rng.below(2) == 0)
        .then(|| pick(rng, &["1", "5", "20", "1000", "1000000000000000"]).to_string());
    (limit, period, burst)
}

fn rule_options(rng: &mut Rng, algo: &str, key: usize, out: &mut Vec<String>) {
    let (limit, period, burst) = rate_rule(rng, algo, key);
    out.push(limit);
    out.push(period);
    if let Some(b) = burst {
        out.extend(["BURST".into(), b]);
    }
    if rng.below(2) == 0 {
        out.extend(["COST".into(), pick(rng, &["1", "2", "3", "7"]).into()]);
    }
    if algo != "gcra" || rng.below(2) == 0 {
        out.extend(["ALGO".into(), algo.into()]);
    }
}

fn random_command(rng: &mut Rng, prefix: &str) -> Vec<String> {
    let k = rng.below(6) as usize;
    let key = |_: &mut Rng| format!("{{{prefix}}}:{k}");
    let algo = pick(rng, ALGOS);
    let mut args: Vec<String> = Vec::new();
    match rng.below(11) {
        0..=3 => {
            args.extend(["RL.ADMIT".into(), key(rng)]);
            rule_options(rng, algo, k, &mut args);
            if rng.below(4) == 0 {
                args.push("DRYRUN".into());
            }
            if rng.below(3) == 0 {
                args.extend(["RESERVE".into(), pick(rng, &["r1", "r2", "r3"]).into()]);
                if rng.below(2) == 0 {
                    args.extend(["KEEP".into(), pick(rng, &["1h", "7d", "10m"]).into()]);
                }
            }
        }
        4 => {
            let n = 1 + rng.below(3) as usize;
            let mut keys: Vec<usize> = (0..6).collect();
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i as u64 + 1) as usize);
            }
            args.extend(["RL.MULTI".into(), n.to_string()]);
            args.extend(keys.iter().take(n).map(|i| format!("{{{prefix}}}:{i}")));
            for (i, &key) in keys.iter().take(n).enumerate() {
                args.extend(["RULE".into(), format!("r{i}")]);
                let algo = pick(rng, ALGOS);
                rule_options(rng, algo, key, &mut args);
            }
            if rng.below(4) == 0 {
                args.push("DRYRUN".into());
            }
        }
        5 => {
            args.extend(["RL.GRANT".into(), key(rng)]);
            let (limit, period, burst) = rate_rule(rng, algo, k);
            args.extend([limit, period, "ALGO".into(), algo.into()]);
            if let Some(b) = burst {
                args.extend(["BURST".into(), b]);
            }
            args.extend(["WANT".into(), pick(rng, &["1", "3", "50", "5000"]).into()]);
            if rng.below(2) == 0 {
                args.extend(["TTL".into(), pick(rng, &["250ms", "1s", "1d"]).into()]);
            }
        }
        6 => {
            let capacity = pick(rng, &["1", "2", "3"]).to_string();
            let holder = pick(rng, &["a", "b", "c", "d"]).to_string();
            args.extend(["RL.ACQUIRE".into(), key(rng), capacity]);
            args.extend([pick(rng, &["1h", "2h", "1d"]).into(), "ID".into(), holder]);
        }
        7 => {
            let holder = pick(rng, &["a", "b", "c", "d"]).to_string();
            if rng.below(2) == 0 {
                args.extend(["RL.RELEASE".into(), key(rng), holder]);
            } else {
                args.extend(["RL.RENEW".into(), key(rng), holder, "3h".into()]);
            }
        }
        8 => {
            let id = pick(rng, &["r1", "r2", "r3", "r9"]).to_string();
            let actual = pick(rng, &["0", "1", "5", "40", "1000000000000000"]).to_string();
            args.extend(["RL.SETTLE".into(), key(rng), id, actual]);
            if rng.below(3) == 0 {
                args.push(pick(rng, &["FORGET", "forget"]).into());
            }
        }
        9 => {
            // A well-formed call with one argument replaced, cut or added.
            let mut good = random_command(rng, prefix);
            if good[0] == "SET" {
                return good;
            }
            let at = 2 + rng.below(good.len().max(3) as u64 - 1) as usize;
            match rng.below(3) {
                0 if at < good.len() => good[at] = pick(rng, JUNK).into(),
                1 if at < good.len() => good.truncate(at),
                _ => good.push(pick(rng, JUNK).into()),
            }
            return good;
        }
        _ if rng.below(3) == 0 => {
            args.extend(["SET".into(), key(rng), "x".into()]);
        }
        _ => {
            args.extend(["RL.INFO".into(), key(rng)]);
        }
    }
    let spends = matches!(
        args[0].as_str(),
        "RL.ADMIT" | "RL.MULTI" | "RL.GRANT" | "RL.ACQUIRE"
    );
    if spends && rng.below(4) == 0 {
        // On time, late, or too far ahead by the servers' clock (this host's).
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let at = match rng.below(4) {
            0 => now_ms + 600_000,
            1 => now_ms - 60_000,
            2 => 0,
            _ => now_ms + 7_200_000,
        };
        args.extend(["DEADLINE".into(), at.to_string()]);
    }
    args
}

/// Reply positions that are waits or lifetimes (milliseconds read off each server's own clock).
fn timed(command: &str, path: &[usize]) -> bool {
    matches!(
        (command, path),
        ("RL.ADMIT" | "RL.GRANT", [2 | 3]) | ("RL.MULTI", [2] | [3, _, 2]) | ("RL.ACQUIRE", [3])
    )
}

/// Compares two replies: exact, but for times, which may differ by the moment between the two
/// calls (TOLERANCE_MS).
fn same(command: &str, path: &mut Vec<usize>, a: &Value, b: &Value) -> bool {
    const TOLERANCE_MS: i64 = 250;
    const TIMES: [&[u8]; 6] = [
        b"reset_after_ms",
        b"ttl_ms",
        b"next_expiry_ms",
        b"tat_us",
        b"updated_us",
        b"window_start_ms",
    ];
    if let (Value::Array(xs), Value::Array(ys), "RL.INFO") = (a, b, command) {
        return xs.len() == ys.len()
            && xs.chunks(2).zip(ys.chunks(2)).all(|(x, y)| match (x, y) {
                ([Value::BulkString(n), Value::Int(v)], [m, Value::Int(w)])
                    if TIMES.contains(&n.as_slice()) =>
                {
                    let scale = if n.ends_with(b"_us") { 1000 } else { 1 };
                    x[0] == *m && (v - w).abs() <= TOLERANCE_MS * scale
                }
                _ => x == y,
            });
    }
    match (a, b) {
        (Value::Int(x), Value::Int(y)) if timed(command, path) => (x - y).abs() <= TOLERANCE_MS,
        // A generated holder is the clock in hex and the key's sequence number: only the
        // sequence can agree.
        (Value::BulkString(x), Value::BulkString(y)) if command == "RL.ACQUIRE" && *path == [1] => {
            let seq = |h: &[u8]| h.rsplit(|&b| b == b'-').next().map(<[u8]>::to_vec);
            seq(x) == seq(y)
        }
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len()
                && xs.iter().zip(ys).enumerate().all(|(i, (x, y))| {
                    path.push(i);
                    let ok = same(command, path, x, y);
                    path.pop();
                    ok
                })
        }
        _ => a == b,
    }
}

/// Redis answers a wrong argument count itself for the module (its declared arity, with the
/// command's name in lower case); the script answers it with the module's own text. How late a
/// call was is each server's own clock.
fn normal_error(text: &str) -> String {
    if let Some(rest) = text.strip_prefix("DEADLINE the call reached the server ") {
        let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        return format!("DEADLINE the call reached the server N{after}");
    }
    match text.strip_prefix("ERR wrong number of arguments for '") {
        Some(rest) => format!(
            "ERR wrong number of arguments for '{}",
            rest.to_ascii_uppercase().replace(" COMMAND", " command")
        ),
        None => text.to_string(),
    }
}

fn run_differential(seed: u64, steps: usize) -> Vec<String> {
    let module = Server::start();
    let plain = Server::start_plain(&[]);
    let (mut m, mut s) = (module.conn(), plain.conn());
    let info: Value = cmd("COMMAND")
        .arg("INFO")
        .arg("RL.ADMIT")
        .query(&mut m)
        .unwrap();
    assert!(
        !matches!(&info, Value::Array(a) if a.iter().all(|v| *v == Value::Nil)),
        "the module is not loaded on the module side"
    );
    let sha = load_script(&mut s);
    let mut rng = Rng(seed);
    let mut differences = Vec::new();
    for step in 0..steps {
        let prefix = format!("d{}", step / 40);
        let args = random_command(&mut rng, &prefix);
        let a = module_call(&mut m, &args);
        let b = script_call(&mut s, &sha, &args);
        let agree = match (&a, &b) {
            (Ok(x), Ok(y)) => same(&args[0], &mut Vec::new(), x, y),
            (Err(x), Err(y)) => normal_error(&error_text(x)) == normal_error(&error_text(y)),
            _ => false,
        };
        if std::env::var("RL_TRACE").is_ok_and(|k| args.contains(&k)) {
            eprintln!("{step}: {args:?}\n   {a:?}\n   {b:?}");
        }
        if !agree {
            differences.push(format!(
                "step {step}: {args:?}\n  module {a:?}\n  script {b:?}"
            ));
        }
    }
    differences
}

#[test]
fn random_sequences_reply_the_same_in_both_modes() {
    let seed = std::env::var("RL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0014);
    let differences = run_differential(seed, 3000);
    assert!(
        differences.is_empty(),
        "{} differences (seed {seed}):\n{}",
        differences.len(),
        differences
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Exactness where a double would round: values near 2^53 and beyond.

#[test]
fn large_rules_decide_exactly_as_the_module() {
    let lines = [
        "RL.ADMIT big:1 100000000 3650d BURST 100000000 COST 99999999",
        "RL.ADMIT big:1 100000000 3650d BURST 100000000 COST 3",
        "RL.ADMIT big:1 100000000 3650d BURST 100000000 COST 1",
        "RL.ADMIT big:1 99999999 3650d BURST 100000000 COST 1 ALGO bucket",
        "RL.ADMIT big:2 7 3650d BURST 7 COST 7",
        "RL.ADMIT big:2 7 3650d BURST 7 COST 1",
        "RL.ADMIT big:3 100000000 3650d ALGO sliding COST 99999999",
        "RL.ADMIT big:3 100000000 3650d ALGO sliding COST 2",
        "RL.ADMIT big:4 3 3650d BURST 3 COST 3 RESERVE x",
        "RL.SETTLE big:4 x 1000000000000000",
        "RL.ADMIT big:4 3 3650d BURST 3",
        "RL.GRANT big:5 100000000 3650d WANT 99999999",
        "RL.GRANT big:5 100000000 3650d WANT 5",
        "RL.ADMIT big:6 1000000000000000 1h BURST 1 COST 1 ALGO bucket",
        "RL.ADMIT big:7 1 3650d BURST 1000000000000000",
        "RL.ADMIT big:8 1000000000000000 3650d BURST 1000000000000000 COST 1000000000000001",
        // Rule changes toward a faster refill, where the moment between the calls shrinks.
        "RL.ADMIT conv:1 10 1h BURST 10 COST 1",
        "RL.ADMIT conv:1 3 1h BURST 5 COST 1",
        "RL.ADMIT conv:1 1000 1h BURST 20 COST 2 ALGO bucket",
        "RL.ADMIT conv:2 7 3650d COST 3",
        "RL.ADMIT conv:2 7 1h COST 1 ALGO bucket",
        "RL.ADMIT conv:2 70 1h BURST 7 COST 1",
        "RL.ADMIT conv:3 10 1h ALGO window COST 4",
        "RL.ADMIT conv:3 5 1h ALGO sliding COST 1",
        "RL.ADMIT conv:3 20 2h ALGO window COST 3",
    ];
    module_and_script_agree(&lines, |e| e.to_string());
}

// ---------------------------------------------------------------------------------------------
// RL.SETTLE ... FORGET: the same id is charged anew, in both modes.

#[test]
fn a_forgotten_reservation_is_charged_anew_in_both_modes() {
    let lines = [
        "RL.ADMIT fg:1 10 1h BURST 100 COST 10 RESERVE idem KEEP 1h",
        "RL.ADMIT fg:1 10 1h BURST 100 COST 10 RESERVE other KEEP 2h",
        "RL.SETTLE fg:1 idem 14 KEEP",
        "RL.SETTLE fg:1 idem 14 FORGET FORGET",
        "RL.SETTLE fg:1 idem 14 forget",
        "RL.SETTLE fg:1 idem 14",
        "RL.SETTLE fg:1 idem 14 FORGET",
        "RL.INFO fg:1",
        "RL.ADMIT fg:1 10 1h BURST 100 COST 10 RESERVE idem KEEP 1h",
        "RL.INFO fg:1",
        // A settled reservation, then forgotten: its first settlement, and the key's TTL
        // follows the reservation left.
        "RL.SETTLE fg:1 other 2",
        "RL.SETTLE fg:1 other 30 FORGET",
        "RL.SETTLE fg:1 other 30",
        "RL.INFO fg:1",
        "RL.SETTLE fg:1 idem 10 FORGET",
        "RL.INFO fg:1",
        "RL.SETTLE fg:2 nothing 1 FORGET",
        // A key that refills within minutes lives as long as its latest reservation: forgetting
        // that one shortens its TTL to the next one's (1h), then to the refill (12 minutes).
        "RL.ADMIT fg:3 100 1h BURST 100 COST 10 RESERVE a KEEP 2h",
        "RL.ADMIT fg:3 100 1h BURST 100 COST 10 RESERVE b KEEP 1h",
        "RL.SETTLE fg:3 a 10 FORGET",
        "RL.INFO fg:3",
        "RL.SETTLE fg:3 b 10",
        "RL.SETTLE fg:3 b 0 FORGET",
        "RL.INFO fg:3",
        // An empty id (two spaces), then with a bad token too: the token is checked first.
        "RL.SETTLE fg:1  1 FORGET",
        "RL.SETTLE fg:1  -1 KEEP",
        "RL.SETTLE fg:1 idem",
    ];
    module_and_script_agree(&lines, normal_error);
}

// ---------------------------------------------------------------------------------------------
// DEADLINE: a late call changes nothing, in both modes, with the same replies and errors.

#[test]
fn a_late_call_changes_nothing_in_both_modes() {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (late, soon, ahead) = (now_ms - 2000, now_ms + 600_000, now_ms + 3_700_000);
    let lines: Vec<String> = [
        "RL.ADMIT dl:1 10 1h BURST 20 COST 3 DEADLINE {soon}",
        "RL.ADMIT dl:1 10 1h BURST 20 COST 3 DEADLINE {late}",
        "RL.ADMIT dl:1 10 1h BURST 20 COST 3 RESERVE r deadline {late}",
        "RL.INFO dl:1",
        "RL.ADMIT dl:2 10 1h DRYRUN DEADLINE {late}",
        "RL.INFO dl:2",
        "RL.MULTI 2 {dl}:a {dl}:b RULE a 5 1h DEADLINE {late} RULE b 5 1h",
        "RL.MULTI 2 {dl}:a {dl}:b RULE a 5 1h RULE b 5 1h COST 2 DEADLINE {soon}",
        "RL.INFO {dl}:b",
        "RL.GRANT dl:3 100 1h WANT 10 DEADLINE {late}",
        "RL.INFO dl:3",
        "RL.GRANT dl:3 100 1h DEADLINE {soon} WANT 10",
        "RL.ACQUIRE dl:4 1 1h DEADLINE {late} ID h",
        "RL.INFO dl:4",
        "RL.ACQUIRE dl:4 1 1h ID h DEADLINE {soon}",
        "RL.ACQUIRE dl:4 1 1h ID g DEADLINE {late}",
        "RL.INFO dl:4",
        // Argument errors first, then the clock.
        "RL.ADMIT dl:1 10 1 DEADLINE {late}",
        "RL.ADMIT dl:1 10 1h DEADLINE",
        "RL.ADMIT dl:1 10 1h DEADLINE 1 DEADLINE 1",
        "RL.ADMIT dl:1 10 1h DEADLINE 1.5",
        "RL.ADMIT dl:1 10 1h DEADLINE -1",
        "RL.ADMIT dl:1 10 1h DEADLINE 99999999999999999999",
        "RL.ADMIT dl:1 10 1h DEADLINE {ahead}",
        "RL.ACQUIRE dl:4 1 1h ID a ID b",
        "RL.ACQUIRE dl:4 1 1h ID a DEADLINE",
        "RL.MULTI 1 dl:5 RULE a 5 1h DEADLINE 0 DEADLINE 0",
        "SET dl:6 x",
        "RL.ADMIT dl:6 10 1h DEADLINE {late}",
        "RL.INFO dl:1",
    ]
    .iter()
    .map(|l| {
        l.replace("{late}", &late.to_string())
            .replace("{soon}", &soon.to_string())
            .replace("{ahead}", &ahead.to_string())
    })
    .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    module_and_script_agree(&lines, normal_error);
}

/// Runs each line on a server with the module and on one with the script only, and asserts
/// the same replies (errors compared as `errors` reads them).
fn module_and_script_agree(lines: &[&str], errors: fn(&str) -> String) {
    let module = Server::start();
    let plain = Server::start_plain(&[]);
    let (mut m, mut s) = (module.conn(), plain.conn());
    let sha = load_script(&mut s);
    for line in lines {
        let args: Vec<String> = line.split(' ').map(String::from).collect();
        let a = module_call(&mut m, &args);
        let b = script_call(&mut s, &sha, &args);
        let agree = match (&a, &b) {
            (Ok(x), Ok(y)) => same(&args[0], &mut Vec::new(), x, y),
            (Err(x), Err(y)) => errors(&error_text(x)) == errors(&error_text(y)),
            _ => false,
        };
        assert!(agree, "{line}\n  module {a:?}\n  script {b:?}");
    }
}
