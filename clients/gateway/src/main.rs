//! rl-gateway: the enforcement point for any stack (`clients/CONTRACT.md` sections 10 and 11).
//! See the README for every face and an example session of each.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use http::StatusCode;
use redis_rl_client::gateway::connect::Store;
use redis_rl_client::gateway::published::{self, Check, PublishedPolicy};
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Gateway, Rl, RlConnection};
use rl_engine::metrics::Metrics;
use rl_engine::policy::{Policy, PolicyError};

use rl_engine::time::format_rfc3339;
use rl_engine::Instant;
use rl_gateway::admin::{self, Ready, Reload};
use rl_gateway::auth::{self, DenyStatus};
use rl_gateway::policy_cmd;
use rl_gateway::proxy::{self, Upstream};
use rl_gateway::rls::{self, Rls};
use rl_gateway::server::{self, bind, Limits};
use rl_gateway::shutdown::Stopping;
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
struct Serve {
    /// The policy file (JSON), or store:KEY to follow what `policy publish` stores at KEY;
    /// SIGHUP and POST /-/reload re-read it.
    #[arg(long, value_name = "FILE|store:KEY")]
    policy: Option<String>,
    /// With --policy store:KEY: the last good snapshot, written on each change and started from
    /// when the store has no good one as new (Redis down, the key empty, the entry refused).
    #[arg(long, value_name = "FILE")]
    policy_cache: Option<PathBuf>,
    /// With --policy store:KEY: how often the stored entry's head (its small fields and the
    /// document's length) is read besides the notices; the document only when it changed.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    policy_poll: Duration,
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
    /// Reverse proxy: the upstream's response head must come within this once it has the whole
    /// request body (and a caller's body may pause this long at most).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    upstream_timeout: Duration,
    /// Forward auth (nginx auth_request, Caddy forward_auth, Traefik ForwardAuth).
    #[arg(long, value_name = "ADDR")]
    auth: Option<SocketAddr>,
    /// Forward auth: the status of a refusal (429, or 403 for nginx, where a request refused as
    /// sent is then a 401).
    #[arg(long, value_name = "STATUS", default_value = "429", value_parser = DenyStatus::parse)]
    auth_deny_status: DenyStatus,
    /// Envoy's rate limit service (gRPC, envoy.service.ratelimit.v3).
    #[arg(long, value_name = "ADDR", requires = "rls_config")]
    grpc: Option<SocketAddr>,
    /// The rate limit service's configuration: envoyproxy/ratelimit's YAML, unchanged.
    #[arg(long, value_name = "FILE")]
    rls_config: Option<PathBuf>,
    /// /metrics, /healthz, /readyz, POST /-/reload.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// A request head must arrive within this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    header_timeout: Duration,
    /// On SIGTERM, requests in flight may finish within this; those still running then are
    /// answered 503 and what they hold is released before the process exits.
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
    init_logs();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match cli.command {
        Some(Command::Policy(command)) => runtime.block_on(policy_command(command)),
        None => match runtime.block_on(serve(cli.serve)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
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

async fn policy_command(command: PolicyCommand) -> ExitCode {
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

/// Where the policy comes from.
enum Source {
    File(PathBuf),
    Store(Box<PublishedPolicy>),
}

async fn serve(args: Serve) -> Result<(), String> {
    let http = args.listen.is_some() || args.auth.is_some();
    if !http && args.grpc.is_none() {
        return Err(
            "no face to serve: give --listen with --upstream, --auth, or --grpc with --rls-config"
                .into(),
        );
    }
    let store = StoreUrl::parse(&args.store)?;
    let source = match (http, args.policy.clone()) {
        (true, None) => {
            return Err("--policy FILE (or store:KEY) is required by --listen and --auth".into())
        }
        (false, Some(_)) => {
            return Err("--policy is for --listen and --auth; --grpc takes --rls-config".into())
        }
        (false, None) => None,
        (true, Some(policy)) => Some(source_of(&policy, &store, &args)?),
    };
    match store {
        StoreUrl::Memory => {
            let ready: Ready = Arc::new(|| Box::pin(async { true }));
            faces(args, source, MemoryConnection::default(), ready).await
        }
        StoreUrl::Redis(url) if args.cluster => {
            let client = redis::cluster::ClusterClient::new(vec![url.as_str()])
                .map_err(|e| format!("--store {url}: {e}"))?;
            let conn = client
                .get_async_connection()
                .await
                .map_err(|e| format!("--store {url}: {e}"))?;
            let ready = pinger(conn.clone());
            faces(args, source, conn, ready).await
        }
        StoreUrl::Redis(url) => {
            let client =
                redis::Client::open(url.as_str()).map_err(|e| format!("--store {url}: {e}"))?;
            // Listens at once, taking the routes' postures until the store answers.
            let conn = Store::connect(client);
            let ready = pinger(conn.clone());
            faces(args, source, conn, ready).await
        }
    }
}

/// Where `--policy` points: a file, or `store:KEY` in the store `--store` names.
fn source_of(policy: &str, store: &StoreUrl, args: &Serve) -> Result<Source, String> {
    let Some(key) = policy.strip_prefix("store:") else {
        return Ok(Source::File(PathBuf::from(policy)));
    };
    let StoreUrl::Redis(url) = store else {
        return Err("--policy store:KEY reads the policy from Redis: give --store redis://".into());
    };
    let mut followed = PublishedPolicy::new(url.clone())
        .cluster(args.cluster)
        .key(if key.is_empty() {
            published::DEFAULT_KEY
        } else {
            key
        })
        .poll(args.policy_poll);
    if let Some(cache) = &args.policy_cache {
        followed = followed.cache(cache.clone());
    }
    Ok(Source::Store(Box::new(followed)))
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

async fn faces<C: RlConnection + 'static>(
    args: Serve,
    source: Option<Source>,
    conn: C,
    ready: Ready,
) -> Result<(), String> {
    let metrics = Arc::new(Metrics::default());
    let rls = match (args.grpc, &args.rls_config) {
        (Some(_), Some(file)) => {
            let config = rls::Config::load(file)?;
            let rl = Rl::new(conn.clone());
            Some((
                Rls::new(config, rl, Arc::clone(&metrics), args.cluster),
                file.clone(),
            ))
        }
        (Some(_), None) => return Err("--grpc needs --rls-config FILE".into()),
        (None, Some(_)) => return Err("--rls-config is the configuration of --grpc".into()),
        (None, None) => None,
    };
    let gateway = match source {
        Some(source) => Some(http_gateway(&args, source, conn, &metrics).await?),
        None => None,
    };
    let reload = reloader(
        gateway.as_ref().map(|(_, reload)| Arc::clone(reload)),
        rls.clone(),
    );
    let limits = Limits {
        header_timeout: args.header_timeout,
        ..Limits::default()
    };
    let (stopping, shutdown) = Stopping::new();
    let mut servers: Vec<tokio::task::JoinHandle<Result<(), String>>> = Vec::new();
    let mut http = |listener, app| {
        let serving = server::serve(listener, app, limits, shutdown.clone());
        servers.push(tokio::spawn(async move {
            serving.await.map_err(|e| e.to_string())
        }));
    };
    if let (Some((gateway, _)), Some(addr), Some(url)) =
        (&gateway, args.listen, args.upstream.as_deref())
    {
        let upstream = Arc::new(Upstream::new(url, args.upstream_timeout)?);
        let listener = bind(addr, "proxy").await?;
        http(listener, proxy::router(Arc::clone(gateway), upstream));
    }
    if let (Some((gateway, _)), Some(addr)) = (&gateway, args.auth) {
        let listener = bind(addr, "auth").await?;
        http(
            listener,
            auth::router(Arc::clone(gateway), args.auth_deny_status),
        );
    }
    if let Some(addr) = args.admin {
        let listener = bind(addr, "admin").await?;
        http(
            listener,
            admin::router(Arc::clone(&metrics), Arc::clone(&reload), ready),
        );
    }
    if let (Some((rls, _)), Some(addr)) = (&rls, args.grpc) {
        let listener = bind(addr, "grpc").await?;
        let mut stopped = shutdown.stop.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await.map(|_| ());
        };
        servers.push(tokio::spawn(Arc::clone(rls).serve(listener, shutdown)));
    }
    let gateway = gateway.map(|(gateway, _)| gateway);
    stopping
        .serve_until_stopped(reload, servers, args.drain_timeout, gateway)
        .await
}

/// The engine's gateway for the HTTP faces, on the policy's first snapshot, and how it reloads.
async fn http_gateway<C: RlConnection + 'static>(
    args: &Serve,
    source: Source,
    conn: C,
    metrics: &Arc<Metrics>,
) -> Result<(Arc<Gateway<C>>, Reload), String> {
    let with_auth = args.auth.is_some();
    let check: Check = Arc::new(move |policy: &Policy| {
        if with_auth {
            auth::check_policy(policy)
        } else {
            Ok(())
        }
    });
    let (policies, source) = match source {
        Source::File(file) => (
            PolicyStore::load_file(&file).map_err(|e| e.to_string())?,
            Source::File(file),
        ),
        Source::Store(followed) => {
            // A snapshot a face cannot enforce is refused like an invalid one.
            let followed = (*followed).check(Arc::clone(&check));
            let policy = followed.load().await?;
            (
                PolicyStore::snapshot(policy),
                Source::Store(Box::new(followed)),
            )
        }
    };
    check(policies.policy())?;
    let mut gateway = Gateway::new(Rl::new(conn), policies, Arc::clone(metrics));
    if args.legacy_headers {
        gateway = gateway.with_legacy_headers();
    }
    let gateway = Arc::new(gateway);
    let reload = match source {
        Source::File(file) => file_reloader(Arc::clone(&gateway), file, Arc::clone(&check)),
        Source::Store(followed) => {
            let followed = Arc::new(*followed);
            followed.follow(Arc::clone(&gateway));
            store_reloader(Arc::clone(&gateway), followed)
        }
    };
    Ok((gateway, reload))
}

/// `SIGHUP` and `POST /-/reload`: the policy's next snapshot (its version, 0 without HTTP
/// faces), and the rate limit service's configuration re-read; either refusal is the answer.
fn reloader<C: RlConnection + 'static>(
    policy: Option<Reload>,
    rls: Option<(Arc<Rls<C>>, PathBuf)>,
) -> Reload {
    Arc::new(move || {
        let (policy, rls) = (policy.clone(), rls.clone());
        Box::pin(async move {
            if let Some((rls, file)) = &rls {
                let config = rls::Config::load(file).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
                rls.reload(config);
            }
            match policy {
                Some(reload) => reload().await,
                None => Ok(0),
            }
        })
    })
}

/// Re-reads the policy file and puts it in force if it is valid, its version higher, and every
/// face can enforce it.
fn file_reloader<C: RlConnection + 'static>(
    gateway: Arc<Gateway<C>>,
    file: PathBuf,
    check: Check,
) -> Reload {
    Arc::new(move || {
        let result = (|| {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| (StatusCode::BAD_REQUEST, format!("{}: {e}", file.display())))?;
            let policy =
                Policy::from_json(&text).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
            check(&policy).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
            for warning in &policy.warnings {
                tracing::warn!(version = policy.version, "{warning}");
            }
            match gateway.engine().reload(policy) {
                Ok(policy) => Ok(policy.version),
                Err(e @ PolicyError::Stale { .. }) => Err((StatusCode::CONFLICT, e.to_string())),
                Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string())),
            }
        })();
        Box::pin(async move { result })
    })
}

/// Reads the store's snapshot now (as a notice would make it): the version in force after.
fn store_reloader<C: RlConnection + 'static>(
    gateway: Arc<Gateway<C>>,
    followed: Arc<PublishedPolicy>,
) -> Reload {
    Arc::new(move || {
        let (gateway, followed) = (Arc::clone(&gateway), Arc::clone(&followed));
        Box::pin(async move {
            match followed.refresh(&gateway).await {
                Ok(Some(version)) => Ok(version),
                Ok(None) => Err((
                    StatusCode::CONFLICT,
                    format!(
                        "the snapshot at {} is not newer than version {}, in force",
                        followed.key_name(),
                        gateway.policy().version
                    ),
                )),
                Err(published::Error::Refused(e)) => Err((StatusCode::BAD_REQUEST, e)),
                Err(published::Error::Store(e)) => Err((StatusCode::SERVICE_UNAVAILABLE, e)),
            }
        })
    })
}
