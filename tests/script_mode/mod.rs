//! What the script-mode suites share: the script loaded from the work tree, and a module command
//! sent either to the module or through the script.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![allow(dead_code)] // each suite uses a different part

use crate::common::{cmd, Connection, Value};

/// Read when a test runs, so an edit of the script is tested without a rebuild.
pub fn repo_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The keys of a module command, as the calling convention declares them.
pub fn keys_of(args: &[String]) -> Vec<String> {
    if args[0].eq_ignore_ascii_case("RL.MULTI") {
        let n: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        return args.iter().skip(2).take(n).cloned().collect();
    }
    args.get(1).into_iter().cloned().collect()
}

/// Sends `args` as the script's call (module commands) or as they are (anything else).
pub fn script_call(c: &mut Connection, sha: &str, args: &[String]) -> redis::RedisResult<Value> {
    if !args[0].to_ascii_uppercase().starts_with("RL.") {
        let mut command = cmd(&args[0]);
        command.arg(&args[1..]);
        return command.query(c);
    }
    let keys = keys_of(args);
    let mut command = cmd("EVALSHA");
    command.arg(sha).arg(keys.len()).arg(&keys).arg(args);
    command.query(c)
}

pub fn module_call(c: &mut Connection, args: &[String]) -> redis::RedisResult<Value> {
    let mut command = cmd(&args[0]);
    command.arg(&args[1..]);
    command.query(c)
}

pub fn load_script(c: &mut Connection) -> String {
    cmd("SCRIPT")
        .arg("LOAD")
        .arg(repo_file("clients/scripts/rl.lua"))
        .query(c)
        .expect("SCRIPT LOAD")
}
