//! rl-gateway: the enforcement point for any stack (`clients/CONTRACT.md` sections 10 and 11).
//! See the README for every face and an example session of each.

mod cli;
mod home;
mod policy_cli;
mod sentinel;
mod serve;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;

use cli::{fail, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs();
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match cli.command {
        Some(Command::Policy(command)) => runtime.block_on(policy_cli::policy_command(command)),
        None => match runtime.block_on(async {
            tokio::spawn(tick());
            serve::serve(cli.serve).await
        }) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
    }
}

/// One thread per CPU the process may use; on one CPU, the runtime of one thread, which wakes
/// its tasks without the work-stealing scheduler's cross-thread bookkeeping.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if cpus == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

/// A timer every second that does nothing, so that the runtime's next wake is never further
/// away than that. tokio wakes its own driver (an eventfd write, then one more event to read)
/// whenever a timer is armed before the next wake, and each request arms timers seconds away
/// (its head's deadline, its upstream's): without this, half a system call and a wake-up more
/// per request whenever no earlier timer was pending.
async fn tick() {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        every.tick().await;
    }
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a file or a collector.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
