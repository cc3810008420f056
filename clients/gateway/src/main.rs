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
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match cli.command {
        Some(Command::Policy(command)) => runtime.block_on(policy_cli::policy_command(command)),
        None => match runtime.block_on(serve::serve(cli.serve)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
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
