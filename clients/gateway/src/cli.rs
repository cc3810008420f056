//! The command line: the `policy` subcommands, and the flags of serving (what the README lists).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redis_rl_client::gateway::published;
use rl_gateway::auth::DenyStatus;

#[derive(Parser)]
#[command(
    name = "rl-gateway",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: Serve,
}

#[derive(Subcommand)]
pub enum Command {
    /// Operate the policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Validates a policy as the gateways do and prints every rule's effective numbers.
    Check { file: PathBuf },
    /// Both policies side by side; fails when an effective limit falls by more than half.
    Diff {
        old: PathBuf,
        new: PathBuf,
        /// Accept limits that fall by more than half.
        #[arg(long)]
        approve_cuts: bool,
    },
    /// Runs the policy over an access log (JSON lines) on the log's own clock: what it would
    /// have refused, by route, rule and plan, the tenants refused most, the shadow rules' ratios.
    Replay {
        file: PathBuf,
        #[arg(long, value_name = "LOG")]
        log: PathBuf,
    },
    /// Stores a policy in Redis for the fleet, if its version is higher than the stored one.
    Publish {
        file: PathBuf,
        /// redis://HOST:PORT
        #[arg(long, value_name = "URL")]
        store: String,
        /// The store is a Redis Cluster.
        #[arg(long)]
        cluster: bool,
        #[arg(long, default_value = published::DEFAULT_KEY)]
        key: String,
        /// Who publishes, recorded with the snapshot (default: $USER).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

#[derive(Args)]
pub struct Serve {
    /// The policy file (JSON), or store:KEY to follow what `policy publish` stores at KEY;
    /// SIGHUP and POST /-/reload re-read it.
    #[arg(long, value_name = "FILE|store:KEY")]
    pub policy: Option<String>,
    /// With --policy store:KEY: the last good snapshot, written on each change and started from
    /// when the store has no good one as new (Redis down, the key empty, the entry refused).
    #[arg(long, value_name = "FILE")]
    pub policy_cache: Option<PathBuf>,
    /// With --policy store:KEY: how often the stored entry's head (its small fields and the
    /// document's length) is read besides the notices; the document only when it changed.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    pub policy_poll: Duration,
    /// redis://HOST:PORT, or memory:// for this process's own limits.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    pub store: String,
    /// The store is a Redis Cluster (--store names one of its nodes).
    #[arg(long)]
    pub cluster: bool,
    /// Reverse proxy: where callers connect.
    #[arg(long, value_name = "ADDR", requires = "upstream")]
    pub listen: Option<SocketAddr>,
    /// Reverse proxy: http://HOST:PORT of the service behind.
    #[arg(long, value_name = "URL", requires = "listen")]
    pub upstream: Option<String>,
    /// Reverse proxy: the upstream's response head must come within this once it has the whole
    /// request body (and a caller's body may pause this long at most).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub upstream_timeout: Duration,
    /// Forward auth (nginx auth_request, Caddy forward_auth, Traefik ForwardAuth).
    #[arg(long, value_name = "ADDR")]
    pub auth: Option<SocketAddr>,
    /// Forward auth: the status of a refusal (429, or 403 for nginx, where a request refused as
    /// sent is then a 401).
    #[arg(long, value_name = "STATUS", default_value = "429", value_parser = DenyStatus::parse)]
    pub auth_deny_status: DenyStatus,
    /// Envoy's rate limit service (gRPC, envoy.service.ratelimit.v3).
    #[arg(long, value_name = "ADDR", requires = "rls_config")]
    pub grpc: Option<SocketAddr>,
    /// The rate limit service's configuration: envoyproxy/ratelimit's YAML, unchanged.
    #[arg(long, value_name = "FILE")]
    pub rls_config: Option<PathBuf>,
    /// /metrics, /healthz, /readyz, POST /-/reload.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// A request head must arrive within this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub header_timeout: Duration,
    /// On SIGTERM, requests in flight may finish within this; those still running then are
    /// answered 503 and what they hold is released before the process exits.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub drain_timeout: Duration,
    /// Also send X-RateLimit-Limit/Remaining/Reset.
    #[arg(long)]
    pub legacy_headers: bool,
    /// This gateway's region, one of the policy's `regions`: its global rules are enforced on
    /// --store by the region's allocation, which --home answers.
    #[arg(long, value_name = "NAME", requires = "home")]
    pub region: Option<String>,
    /// redis://HOST:PORT of the home store, where the regions' allocations are made. With
    /// --home-cluster or --home-sentinel, one or more of the Cluster's nodes or of the Sentinels
    /// (the flag repeated, or the URLs separated by commas).
    #[arg(long, value_name = "URL", requires = "region", value_delimiter = ',')]
    pub home: Vec<String>,
    /// The home store is a Redis Cluster (--home names its nodes).
    #[arg(long, requires = "home", conflicts_with = "home_sentinel")]
    pub home_cluster: bool,
    /// The home store is the primary that Sentinel knows by NAME (--home names the Sentinels):
    /// reports follow it through a failover.
    #[arg(long, value_name = "NAME", requires = "home")]
    pub home_sentinel: Option<String>,
    /// This gateway's name among its region's reporters: stable across restarts, unique in
    /// the region (the default is the host's name and the first listening port).
    #[arg(long, value_name = "NAME", requires = "region")]
    pub reporter: Option<String>,
}

fn duration(text: &str) -> Result<Duration, String> {
    rl_core::parse::parse_duration(text.as_bytes(), "duration", 86_400_000_000, "1d")
        .map(Duration::from_micros)
        .map_err(|e| e.to_string())
}

/// A failure of the command line: its message on stderr, and exit code 2.
pub fn fail(message: &str) -> ExitCode {
    eprintln!("rl-gateway: {message}");
    ExitCode::from(2)
}
