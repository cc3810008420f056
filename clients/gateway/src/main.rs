//! rl-gateway: the enforcement point for any stack (`clients/CONTRACT.md` sections 10 and 11).
//! See the README for every face and an example session of each.

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use http::StatusCode;
use redis_rl_client::engine::metrics::Metrics;
use redis_rl_client::engine::policy::{Policy, PolicyError};
use redis_rl_client::gateway::connect::Store;
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Gateway, Rl, RlConnection};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use rl_gateway::admin::{self, Ready, Reload};
use rl_gateway::auth::{self, DenyStatus};
use rl_gateway::proxy::{self, Upstream};
use rl_gateway::server::{self, Limits};
use rl_gateway::store::{MemoryConnection, StoreUrl};

#[derive(Parser)]
#[command(
    name = "rl-gateway",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: Serve,
}

#[derive(Subcommand)]
enum Command {
    /// Operate the policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
enum PolicyCommand {
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
}

#[derive(Args)]
struct Serve {
    /// The policy file (JSON); SIGHUP and POST /-/reload re-read it.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// redis://HOST:PORT, or memory:// for this process's own limits.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    store: String,
    /// The store is a Redis Cluster (--store names one of its nodes).
    #[arg(long)]
    cluster: bool,
    /// Reverse proxy: where callers connect.
    #[arg(long, value_name = "ADDR", requires = "upstream")]
    listen: Option<SocketAddr>,
    /// Reverse proxy: http://HOST:PORT of the service behind.
    #[arg(long, value_name = "URL", requires = "listen")]
    upstream: Option<String>,
    /// Reverse proxy: the upstream's response head must come within this.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    upstream_timeout: Duration,
    /// Forward auth (nginx auth_request, Caddy forward_auth, Traefik ForwardAuth).
    #[arg(long, value_name = "ADDR")]
    auth: Option<SocketAddr>,
    /// Forward auth: the status of a refusal (429, or 403 for nginx).
    #[arg(long, value_name = "STATUS", default_value = "429", value_parser = DenyStatus::parse)]
    auth_deny_status: DenyStatus,
    /// /metrics, /healthz, /readyz, POST /-/reload.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// A request head must arrive within this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    header_timeout: Duration,
    /// On SIGTERM, requests in flight may finish within this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    drain_timeout: Duration,
    /// Also send X-RateLimit-Limit/Remaining/Reset.
    #[arg(long)]
    legacy_headers: bool,
}

fn duration(text: &str) -> Result<Duration, String> {
    rl_core::parse::parse_duration(text.as_bytes(), "duration", 86_400_000_000, "1d")
        .map(Duration::from_micros)
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Policy(command)) => policy_command(command),
        None => {
            init_logs();
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => return fail(&format!("cannot start the runtime: {e}")),
            };
            match runtime.block_on(serve(cli.serve)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("rl-gateway: {message}");
    ExitCode::from(2)
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

fn policy_command(command: PolicyCommand) -> ExitCode {
    let _ = command;
    fail("policy subcommands are wired in with rl_gateway::policy_cmd")
}

async fn serve(args: Serve) -> Result<(), String> {
    if args.listen.is_none() && args.auth.is_none() {
        return Err("no face to serve: give --listen with --upstream, or --auth".into());
    }
    let policy = args
        .policy
        .clone()
        .ok_or("--policy FILE is required by --listen and --auth")?;
    match StoreUrl::parse(&args.store)? {
        StoreUrl::Memory => {
            let ready: Ready = Arc::new(|| Box::pin(async { true }));
            faces(args, &policy, MemoryConnection::default(), ready).await
        }
        StoreUrl::Redis(url) if args.cluster => {
            let client = redis::cluster::ClusterClient::new(vec![url.as_str()])
                .map_err(|e| format!("--store {url}: {e}"))?;
            let conn = client
                .get_async_connection()
                .await
                .map_err(|e| format!("--store {url}: {e}"))?;
            let ready = pinger(conn.clone());
            faces(args, &policy, conn, ready).await
        }
        StoreUrl::Redis(url) => {
            let client =
                redis::Client::open(url.as_str()).map_err(|e| format!("--store {url}: {e}"))?;
            // Listens at once, taking the routes' postures until the store answers.
            let conn = Store::connect(client);
            let ready = pinger(conn.clone());
            faces(args, &policy, conn, ready).await
        }
    }
}

/// Ready while the store answers a `PING` within a quarter of a second.
fn pinger<C: RlConnection + 'static>(conn: C) -> Ready {
    Arc::new(move || {
        let mut conn = conn.clone();
        Box::pin(async move {
            let cmd = redis::cmd("PING");
            let ping = cmd.query_async::<String>(&mut conn);
            matches!(
                tokio::time::timeout(Duration::from_millis(250), ping).await,
                Ok(Ok(_))
            )
        })
    })
}

async fn bind(addr: SocketAddr, face: &str) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({face}): {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {local} ({face})");
    let _ = std::io::stdout().flush();
    Ok(listener)
}

async fn faces<C: RlConnection + 'static>(
    args: Serve,
    policy_file: &Path,
    conn: C,
    ready: Ready,
) -> Result<(), String> {
    let metrics = Arc::new(Metrics::default());
    let policies = PolicyStore::load_file(policy_file).map_err(|e| e.to_string())?;
    if args.auth.is_some() {
        auth::check_policy(policies.policy())?;
    }
    let mut gateway = Gateway::new(Rl::new(conn), policies, Arc::clone(&metrics));
    if args.legacy_headers {
        gateway = gateway.with_legacy_headers();
    }
    let gateway = Arc::new(gateway);
    let reload = reloader(
        Arc::clone(&gateway),
        policy_file.to_path_buf(),
        args.auth.is_some(),
    );
    let limits = Limits {
        header_timeout: args.header_timeout,
        drain: args.drain_timeout,
        ..Limits::default()
    };
    let (stop, stopped) = watch::channel(false);
    let mut servers = Vec::new();
    if let (Some(addr), Some(url)) = (args.listen, args.upstream.as_deref()) {
        let upstream = Arc::new(Upstream::new(url, args.upstream_timeout)?);
        let listener = bind(addr, "proxy").await?;
        let app = proxy::router(Arc::clone(&gateway), upstream);
        servers.push(tokio::spawn(server::serve(
            listener,
            app,
            limits,
            stopped.clone(),
        )));
    }
    if let Some(addr) = args.auth {
        let listener = bind(addr, "auth").await?;
        let app = auth::router(Arc::clone(&gateway), args.auth_deny_status);
        servers.push(tokio::spawn(server::serve(
            listener,
            app,
            limits,
            stopped.clone(),
        )));
    }
    if let Some(addr) = args.admin {
        let listener = bind(addr, "admin").await?;
        let app = admin::router(Arc::clone(&metrics), Arc::clone(&reload), ready);
        servers.push(tokio::spawn(server::serve(
            listener,
            app,
            limits,
            stopped.clone(),
        )));
    }
    signals(reload, stop).await?;
    for server in servers {
        if let Ok(Err(e)) = server.await {
            tracing::warn!(error = %e, "a face ended with an error");
        }
    }
    // The releases of leases whose responses ended during the drain are sent on tasks of
    // their own; give them the moment a local store needs before the runtime stops.
    tokio::time::sleep(Duration::from_millis(250)).await;
    Ok(())
}

/// SIGHUP reloads; SIGTERM and SIGINT stop accepting and drain.
async fn signals(reload: Reload, stop: watch::Sender<bool>) -> Result<(), String> {
    let mut hup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            _ = hup.recv() => match reload() {
                Ok(version) => tracing::info!(version, "policy reloaded"),
                Err((_, message)) => tracing::warn!("policy not reloaded: {message}"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!("stopping: no new connections; requests in flight finish");
    let _ = stop.send(true);
    Ok(())
}

/// Re-reads the policy file and puts it in force if it is valid, its version higher, and (with
/// the forward-auth face) no route needs a response's end.
fn reloader<C: RlConnection + 'static>(
    gateway: Arc<Gateway<C>>,
    file: PathBuf,
    auth: bool,
) -> Reload {
    Arc::new(move || {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("{}: {e}", file.display())))?;
        let policy =
            Policy::from_json(&text).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        if auth {
            auth::check_policy(&policy).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
        }
        for warning in &policy.warnings {
            tracing::warn!(version = policy.version, "{warning}");
        }
        match gateway.engine().reload(policy) {
            Ok(policy) => Ok(policy.version),
            Err(e @ PolicyError::Stale { .. }) => Err((StatusCode::CONFLICT, e.to_string())),
            Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string())),
        }
    })
}
