//! Forward auth (`--auth`): each request describes another, for nginx `auth_request`, Caddy
//! `forward_auth` and Traefik `ForwardAuth`. The method comes from `X-Forwarded-Method` or
//! `X-Original-Method`, the URI from `X-Forwarded-Uri` or `X-Original-URI`, the caller from the
//! peer and `X-Forwarded-For` as the policy's `trusted_proxies` allow. The answer is `200` with
//! the `RateLimit` headers, the refusal (`429`, or `--auth-deny-status 403` for nginx, which
//! turns every other status into a 500) with `Retry-After` and the problem body, or the posture.
//!
//! This face never sees the described request's response, so semaphore and `settle` rules,
//! which need its end, cannot be enforced here: a policy that gives one to a route is refused.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::Router;
use http::{HeaderMap, Request, Response, StatusCode};
use redis_rl_client::engine::policy::{Policy, RuleKind};
use redis_rl_client::gateway::layer::answer;
use redis_rl_client::gateway::RequestParts;
use redis_rl_client::{Gateway, RlConnection};
use rl_engine::problem;

use crate::proxy::problem_response;

const METHOD_HEADERS: [&str; 2] = ["x-forwarded-method", "x-original-method"];
const URI_HEADERS: [&str; 2] = ["x-forwarded-uri", "x-original-uri"];

/// The status a refusal is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenyStatus(pub StatusCode);

impl DenyStatus {
    pub fn parse(text: &str) -> Result<DenyStatus, String> {
        match text {
            "429" => Ok(DenyStatus(StatusCode::TOO_MANY_REQUESTS)),
            "403" => Ok(DenyStatus(StatusCode::FORBIDDEN)),
            _ => Err(format!(
                "--auth-deny-status {text}: expected 429, or 403 for nginx's auth_request"
            )),
        }
    }
}

/// Refuses a policy this face cannot enforce, naming the first route that needs a response's
/// end (a semaphore, or a `settle` rule).
pub fn check_policy(policy: &Policy) -> Result<(), String> {
    let routes = policy.routes.iter().chain(std::iter::once(&policy.default));
    for route in routes {
        for rule in route.rules.iter().filter(|r| !r.shadow) {
            let needs_end = match &rule.kind {
                RuleKind::Semaphore(_) => Some("a semaphore"),
                RuleKind::Rate(r) if r.settle => Some("a settle rule"),
                RuleKind::Rate(_) => None,
            };
            if let Some(what) = needs_end {
                return Err(format!(
                    "route '{}' has {what} ('{}'), which needs the end of the response that \
                     forward auth never sees; give it to the reverse proxy (--listen) instead",
                    route.name(),
                    rule.name
                ));
            }
        }
    }
    Ok(())
}

struct Auth<C: RlConnection + 'static> {
    gateway: Arc<Gateway<C>>,
    deny: DenyStatus,
}

/// The forward-auth face: every path answers for the request its headers describe.
pub fn router<C: RlConnection + 'static>(gateway: Arc<Gateway<C>>, deny: DenyStatus) -> Router {
    Router::new()
        .fallback(decide::<C>)
        .with_state(Arc::new(Auth { gateway, deny }))
}

fn first<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .filter(|v| !v.is_empty())
}

async fn decide<C: RlConnection + 'static>(
    State(auth): State<Arc<Auth<C>>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    request: Request<Body>,
) -> Response<Body> {
    let headers = request.headers();
    let (Some(method), Some(uri)) = (
        first(headers, &METHOD_HEADERS),
        first(headers, &URI_HEADERS),
    ) else {
        return problem_response(problem::undescribed_request());
    };
    // The URI as the proxy received it: its path decides the route; the query is no part of it.
    let path = uri.split(['?', '#']).next().unwrap_or_default();
    let path = if path.starts_with('/') { path } else { "/" };
    let (verdict, leases) = auth
        .gateway
        .decide(&RequestParts {
            method,
            path,
            headers,
            peer: Some(peer.ip()),
            caller: None,
        })
        .await;
    // Nothing is held: the policy has no semaphore or settle rule on any route (checked at
    // start and at each reload); chunks of `grant` rules are spent as usual.
    drop(leases);
    let mut response = answer(&verdict);
    match verdict.status {
        None => {
            *response.status_mut() = StatusCode::OK;
            *response.body_mut() = Body::empty();
            response.headers_mut().remove(http::header::CONTENT_TYPE);
        }
        Some(429) => *response.status_mut() = auth.deny.0,
        Some(_) => {}
    }
    response
}
