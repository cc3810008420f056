//! Serving: the store connected, the policy loaded or followed, each face the flags ask for
//! bound, reloads wired to `SIGHUP` and `POST /-/reload`, until `SIGTERM` and the drain.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use redis_rl_client::gateway::connect::Store;
use redis_rl_client::gateway::published::{self, Check, PublishedPolicy};
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Gateway, Rl, RlConnection};
use rl_engine::metrics::Metrics;
use rl_engine::policy::{Policy, PolicyError};
use rl_gateway::admin::{self, Ready, Reload};
use rl_gateway::auth;
use rl_gateway::proxy::{self, Upstream};
use rl_gateway::rls::{self, Rls};
use rl_gateway::server::{self, bind, Limits};
use rl_gateway::shutdown::Stopping;
use rl_gateway::store::{MemoryConnection, StoreUrl};

use crate::cli::Serve;
use crate::home;

/// Where the policy comes from.
enum Source {
    File(PathBuf),
    Store(Box<PublishedPolicy>),
}

pub async fn serve(args: Serve) -> Result<(), String> {
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

/// One HTTP face's server, a task of its own.
fn spawn_http<S>(
    listener: tokio::net::TcpListener,
    app: S,
    limits: Limits,
    shutdown: server::Shutdown,
) -> tokio::task::JoinHandle<Result<(), String>>
where
    S: tower::Service<
            http::Request<axum::body::Body>,
            Response = http::Response<axum::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    tokio::spawn(async move {
        server::serve(listener, app, limits, shutdown)
            .await
            .map_err(|e| e.to_string())
    })
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
    let (stopping, shutdown) = Stopping::new();
    if let (Some((gateway, _)), Some(home)) = (&gateway, home::Home::of(&args)?) {
        home.report(Arc::clone(gateway), shutdown.stop.clone());
    }
    let reload = reloader(
        gateway
            .as_ref()
            .map(|(gateway, reload)| (Arc::clone(reload), Arc::clone(gateway))),
        rls.clone(),
    );
    let limits = Limits {
        header_timeout: args.header_timeout,
        ..Limits::default()
    };
    let mut servers: Vec<tokio::task::JoinHandle<Result<(), String>>> = Vec::new();
    if let (Some((gateway, _)), Some(addr), Some(url)) =
        (&gateway, args.listen, args.upstream.as_deref())
    {
        let upstream = Arc::new(Upstream::new(url, args.upstream_timeout)?);
        let listener = bind(addr, "proxy").await?;
        let app = proxy::service(Arc::clone(gateway), upstream);
        servers.push(spawn_http(listener, app, limits, shutdown.clone()));
    }
    if let (Some((gateway, _)), Some(addr)) = (&gateway, args.auth) {
        let listener = bind(addr, "auth").await?;
        let app = auth::router(Arc::clone(gateway), args.auth_deny_status);
        servers.push(spawn_http(listener, app, limits, shutdown.clone()));
    }
    if let Some(addr) = args.admin {
        let listener = bind(addr, "admin").await?;
        let app = admin::router(Arc::clone(&metrics), Arc::clone(&reload), ready);
        servers.push(spawn_http(listener, app, limits, shutdown.clone()));
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
    let region = args.region.clone();
    let check: Check = Arc::new(move |policy: &Policy| {
        policy
            .require_region(region.as_deref())
            .map_err(|e| e.to_string())?;
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
/// faces), and the rate limit service's configuration re-read. The configuration is read
/// first and put in force only once the policy's part succeeded, so a refusal of either file
/// changes nothing. A policy not newer than the one in force is no refusal when there is a
/// configuration: it stays in force, and the reload was for the configuration (the answer is
/// the version in force).
fn reloader<C: RlConnection + 'static>(
    policy: Option<(Reload, Arc<Gateway<C>>)>,
    rls: Option<(Arc<Rls<C>>, PathBuf)>,
) -> Reload {
    Arc::new(move || {
        let (policy, rls) = (policy.clone(), rls.clone());
        Box::pin(async move {
            let config = match &rls {
                Some((_, file)) => {
                    Some(rls::Config::load(file).map_err(|e| (StatusCode::BAD_REQUEST, e))?)
                }
                None => None,
            };
            let version = match &policy {
                Some((reload, gateway)) => match reload().await {
                    Ok(version) => version,
                    Err((StatusCode::CONFLICT, _)) if config.is_some() => gateway.policy().version,
                    Err(e) => return Err(e),
                },
                None => 0,
            };
            if let (Some((rls, _)), Some(config)) = (&rls, config) {
                rls.reload(config);
            }
            Ok(version)
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
