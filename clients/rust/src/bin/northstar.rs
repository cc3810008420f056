//! The example gateway of `clients/CONTRACT.md` section 7: the rate-limit layer in front of a
//! stub backend, with `/healthz`, `/metrics` and `POST /-/reload` served by the gateway itself.
//!
//! northstar --redis redis://127.0.0.1:6379 --listen 127.0.0.1:8080 --policy policy.json [--cluster]

use std::error::Error;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use axum::routing::{get, post};
use axum::Router;
use redis_rl_client::gateway::connect::Store;
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Gateway, RateLimitLayer, Rl, RlConnection};
use rl_engine::PolicyError;

struct Args {
    redis: String,
    listen: String,
    policy: String,
    cluster: bool,
}

const USAGE: &str = "usage: northstar --redis redis://127.0.0.1:6379 --listen 127.0.0.1:8080 \
                     --policy policy.json [--cluster]";

fn parse_args() -> Result<Args, String> {
    let mut redis = None;
    let mut listen = None;
    let mut policy = None;
    let mut cluster = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--redis" => redis = Some(value()?),
            "--listen" => listen = Some(value()?),
            "--policy" => policy = Some(value()?),
            "--cluster" => cluster = true,
            _ => return Err(format!("unknown argument {arg}\n{USAGE}")),
        }
    }
    Ok(Args {
        redis: redis.unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
        listen: listen.unwrap_or_else(|| "127.0.0.1:8080".into()),
        policy: policy.ok_or_else(|| format!("--policy is required\n{USAGE}"))?,
        cluster,
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Errors are told as sentences (a policy's names the field), not as debug dumps.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("northstar: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let policies = PolicyStore::load_file(&args.policy)?;
    if args.cluster {
        let client = redis::cluster::ClusterClient::new(vec![args.redis.as_str()])?;
        serve(&args, policies, client.get_async_connection().await?).await
    } else {
        // Listens at once, taking the routes' postures until the store answers.
        let client = redis::Client::open(args.redis.as_str())?;
        serve(&args, policies, Store::connect(client)).await
    }
}

async fn serve<C: RlConnection + 'static>(
    args: &Args,
    policies: PolicyStore,
    conn: C,
) -> Result<(), Box<dyn Error>> {
    let gateway = Arc::new(Gateway::new(Rl::new(conn), policies, Arc::default()));
    let backend = Router::new()
        .fallback(stub)
        .layer(RateLimitLayer::new(Arc::clone(&gateway)));
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics::<C>))
        .route("/-/reload", post(reload::<C>))
        .with_state(gateway)
        .fallback_service(backend);
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    // A caller's next request must not wait for the delayed ACK of our last answer.
    .tcp_nodelay(true)
    .await?;
    Ok(())
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert("content-type", value);
    }
    response
}

async fn metrics<C: RlConnection + 'static>(
    State(gateway): State<Arc<Gateway<C>>>,
) -> Response<Body> {
    respond(
        StatusCode::OK,
        "text/plain; version=0.0.4",
        gateway.metrics().render(),
    )
}

async fn reload<C: RlConnection + 'static>(
    State(gateway): State<Arc<Gateway<C>>>,
) -> Response<Body> {
    let (status, body) = match gateway.reload() {
        Ok(policy) => (
            StatusCode::OK,
            serde_json::json!({"version": policy.version}),
        ),
        Err(e @ PolicyError::Stale { .. }) => (
            StatusCode::CONFLICT,
            serde_json::json!({"error": e.to_string()}),
        ),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": e.to_string()}),
        ),
    };
    respond(status, "application/json", body.to_string())
}

/// The stub backend: 200 with a small JSON body; `?ms=N` waits N ms, `?units=N` reports
/// `X-Actual-Cost: N`; `POST /login` is 401 without `X-Password: ok`.
async fn stub(method: Method, uri: Uri, headers: HeaderMap) -> Response<Body> {
    let param = |name: &str| {
        uri.query()?
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    if let Some(ms) = param("ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let path = uri.path();
    if method == Method::POST
        && path == "/login"
        && headers.get("x-password").and_then(|v| v.to_str().ok()) != Some("ok")
    {
        return respond(
            StatusCode::UNAUTHORIZED,
            "application/json",
            serde_json::json!({"error": "bad password"}).to_string(),
        );
    }
    let mut response = respond(
        StatusCode::OK,
        "application/json",
        serde_json::json!({"ok": true, "method": method.as_str(), "path": path}).to_string(),
    );
    if let Some(units) = param("units") {
        response.headers_mut().insert("x-actual-cost", units.into());
    }
    response
}
