//! The admin face (`--admin`): `/metrics` (Prometheus text), `/healthz` (the process answers;
//! never the store, so an orchestrator does not restart gateways because Redis is down),
//! `/readyz` (`503` while the store cannot answer, so a load balancer can prefer a gateway
//! that can) and `POST /-/reload` (a higher version only).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::routing::{get, post};
use axum::Router;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};
use rl_engine::metrics::Metrics;

/// Puts the policy's next snapshot in force (the file re-read, or the store's read): its
/// version, or the status and message of the refusal (`409` for a version not higher than the
/// one in force, `400` for an invalid one, `503` for a store that cannot be read).
pub type Reload = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<u64, (StatusCode, String)>> + Send>>
        + Send
        + Sync,
>;

/// Whether the store answers now.
pub type Ready = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

#[derive(Clone)]
struct Admin {
    metrics: Arc<Metrics>,
    reload: Reload,
    ready: Ready,
}

pub fn router(metrics: Arc<Metrics>, reload: Reload, ready: Ready) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route(
            "/healthz",
            get(|| async { text(StatusCode::OK, "ok\n".into()) }),
        )
        .route("/readyz", get(readyz))
        .route("/-/reload", post(reload_policy))
        .with_state(Admin {
            metrics,
            reload,
            ready,
        })
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn metrics_text(State(admin): State<Admin>) -> Response<Body> {
    let mut response = text(StatusCode::OK, admin.metrics.render());
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

async fn readyz(State(admin): State<Admin>) -> Response<Body> {
    if (admin.ready)().await {
        text(StatusCode::OK, "ready\n".into())
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the store cannot answer; routes take their posture\n".into(),
        )
    }
}

async fn reload_policy(State(admin): State<Admin>) -> Response<Body> {
    let (status, body) = match (admin.reload)().await {
        Ok(version) => (StatusCode::OK, serde_json::json!({ "version": version })),
        Err((status, message)) => (status, serde_json::json!({ "error": message })),
    };
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
