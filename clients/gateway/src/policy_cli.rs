//! The `policy` subcommands as the command line runs them: the files read, the reports printed,
//! the exit codes (the work itself is `policy_cmd`'s and `replay`'s).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use redis_rl_client::gateway::published;
use rl_engine::policy::Policy;
use rl_engine::time::format_rfc3339;
use rl_engine::Instant;
use rl_gateway::policy_cmd;

use crate::cli::{fail, PolicyCommand};

pub async fn policy_command(command: PolicyCommand) -> ExitCode {
    match command {
        PolicyCommand::Publish {
            file,
            store,
            cluster,
            key,
            by,
        } => publish(&file, &store, cluster, &key, by).await,
        PolicyCommand::Check { file } => check(&file),
        PolicyCommand::Replay { file, log } => replay(&file, &log),
        PolicyCommand::Diff {
            old,
            new,
            approve_cuts,
        } => diff(&old, &new, approve_cuts),
    }
}

fn read(file: &Path) -> Result<String, ExitCode> {
    std::fs::read_to_string(file).map_err(|e| fail(&format!("{}: {e}", file.display())))
}

/// `policy check`: 0 valid (the table on stdout), 1 invalid (the gateways' message), 2 unreadable.
fn check(file: &Path) -> ExitCode {
    let text = match read(file) {
        Ok(text) => text,
        Err(code) => return code,
    };
    match policy_cmd::check(&text, Instant::wall()) {
        Ok(report) => {
            print!("{}", report.render());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rl-gateway: {}: {e}", file.display());
            ExitCode::from(1)
        }
    }
}

/// `policy replay`: 0 replayed (malformed lines are counted, never fatal), 2 an invalid policy
/// or a log that cannot be read.
fn replay(file: &Path, log: &Path) -> ExitCode {
    let text = match read(file) {
        Ok(text) => text,
        Err(code) => return code,
    };
    let reader = match std::fs::File::open(log) {
        Ok(f) => std::io::BufReader::with_capacity(1 << 16, f),
        Err(e) => return fail(&format!("{}: {e}", log.display())),
    };
    match rl_gateway::replay::replay(&text, reader) {
        Ok(report) => {
            print!("{}", report.render());
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// `policy diff`: 0 no cut (or `--approve-cuts`), 1 a limit falls by more than half, 2 either
/// file invalid or unreadable.
fn diff(old: &Path, new: &Path, approve_cuts: bool) -> ExitCode {
    let (old_text, new_text) = match (read(old), read(new)) {
        (Ok(o), Ok(n)) => (o, n),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let diff = match policy_cmd::diff(&old_text, &new_text, Instant::wall()) {
        Ok(diff) => diff,
        Err(e) => return fail(&e),
    };
    print!("{}", diff.render());
    match diff.refusal() {
        Some(refusal) if !approve_cuts => {
            eprintln!("rl-gateway: {refusal}");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// `policy publish`: 0 stored, 1 refused (a version not higher is in force), 2 invalid or the
/// store unreachable.
async fn publish(
    file: &Path,
    store: &str,
    cluster: bool,
    key: &str,
    by: Option<String>,
) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => return fail(&format!("{}: {e}", file.display())),
    };
    // Validated here as every gateway will: a fleet is never sent what it would refuse.
    let policy = match Policy::from_json(&text) {
        Ok(policy) => policy,
        Err(e) => return fail(&format!("{}: {e}", file.display())),
    };
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let outcome = match published::Conn::open(store, cluster, Duration::from_secs(2)).await {
        Ok(mut conn) => published::publish(&mut conn, key, &text, &by).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(published::Published::Stored { version, replaced }) => {
            if let Some(why) = replaced {
                eprintln!("rl-gateway: replaced an entry the gateways refuse at {key}: {why}");
            }
            println!("published version {version} at {key}");
            ExitCode::SUCCESS
        }
        Ok(published::Published::Refused { current, by, at_ms }) => {
            eprintln!(
                "rl-gateway: version {} not published: version {current} is in force at {key} \
                 (published by {by} at {})",
                policy.version,
                format_rfc3339(Instant::from_micros(
                    (at_ms / 1000).saturating_mul(1_000_000)
                ))
            );
            ExitCode::from(1)
        }
        Err(e) => fail(&e),
    }
}
