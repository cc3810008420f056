//! Forward auth (`--auth`): each request describes another, for nginx `auth_request`, Caddy
//! `forward_auth` and Traefik `ForwardAuth`. The method comes from `X-Forwarded-Method` or
//! `X-Original-Method`, the URI from `X-Forwarded-Uri` or `X-Original-URI`, the caller from the
//! peer and `X-Forwarded-For` as the policy's `trusted_proxies` allow: the proxy in front must
//! set (or clear) each of them, as the shipped examples do, or its callers describe their own
//! requests. The answer is `200` with the `RateLimit` headers, the refusal (`429`) with
//! `Retry-After` and the problem body, or the posture.
//!
//! nginx turns every status of the auth request but 2xx, 401 and 403 into a 500, so with
//! `--auth-deny-status 403` (nginx's mode) a refusal is `403` and a request refused as sent
//! (`400`, `414`, `431`: the caller's doing, not the limiter's) is `401`, which the shipped
//! `nginx.conf` answers with a `400`.
//!
//! This face never sees the described request's response, so semaphore and `settle` rules,
//! which need its end, cannot be enforced here: a policy that gives one to a route is refused.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::Router;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use redis_rl_client::gateway::layer::answer;
use redis_rl_client::gateway::HttpHeaders;
use redis_rl_client::{Gateway, RlConnection};
use rl_engine::policy::{Policy, RuleKind};
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
/// end (a semaphore, a `settle` or `charge` rule, or a capacity).
pub fn check_policy(policy: &Policy) -> Result<(), String> {
    let routes = policy.routes.iter().chain(std::iter::once(&policy.default));
    for route in routes {
        if let Some(capacity) = &route.capacity {
            return Err(format!(
                "route '{}' draws on capacity '{}', which needs the end of the response that \
                 forward auth never sees; give it to the reverse proxy (--listen) instead",
                route.name(),
                capacity.name
            ));
        }
        for rule in route.rules.iter().filter(|r| !r.shadow) {
            let needs_end = match &rule.kind {
                RuleKind::Semaphore(_) => Some("a semaphore"),
                RuleKind::Rate(r) if r.settle => Some("a settle rule"),
                RuleKind::Rate(r) if r.charge.is_some() => Some("a charge rule"),
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

/// The first of `names` the request has with a value: an empty one (which no proxy sends for a
/// request it received) gives way to the next.
fn first<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a [u8]> {
    names
        .iter()
        .filter_map(|name| headers.get(*name))
        .map(HeaderValue::as_bytes)
        .find(|v| !v.is_empty())
}

/// The described URI's path, in the form every face matches: a byte outside visible ASCII
/// (raw UTF-8 or invalid bytes, which a proxy passes on as the caller sent them) written as the
/// `%XX` escape a client should have sent, so any URI is decided and none is a 400; without
/// its query or fragment; `/` for a URI with no path (`*`, or an empty header).
fn described_path(uri: &[u8]) -> Cow<'_, str> {
    let end = uri
        .iter()
        .position(|b| matches!(b, b'?' | b'#'))
        .unwrap_or(uri.len());
    let path = uri.get(..end).unwrap_or_default();
    if path.first() != Some(&b'/') {
        return Cow::Borrowed("/");
    }
    if path.iter().all(u8::is_ascii_graphic) {
        if let Ok(text) = std::str::from_utf8(path) {
            return Cow::Borrowed(text);
        }
    }
    let mut text = String::with_capacity(path.len().saturating_mul(3));
    for &b in path {
        if b.is_ascii_graphic() {
            text.push(char::from(b));
        } else {
            let _ = write!(text, "%{b:02X}");
        }
    }
    Cow::Owned(text)
}

async fn decide<C: RlConnection + 'static>(
    State(auth): State<Arc<Auth<C>>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    request: Request<Body>,
) -> Response<Body> {
    let headers = request.headers();
    let method = first(headers, &METHOD_HEADERS).and_then(|m| std::str::from_utf8(m).ok());
    // A URI header present but empty is `/`; none at all describes nothing.
    let described = URI_HEADERS.iter().any(|name| headers.contains_key(*name));
    let (Some(method), true) = (method, described) else {
        return auth.for_proxy(problem_response(problem::undescribed_request()));
    };
    let path = described_path(first(headers, &URI_HEADERS).unwrap_or_default());
    let (verdict, leases) = auth
        .gateway
        .decide(&rl_engine::Request {
            method,
            path: &path,
            headers: &HttpHeaders(headers),
            peer: Some(peer.ip()),
            caller: None,
            // The proxy in front matches its own routes with their case, and so does the policy.
            case_insensitive: false,
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
    auth.for_proxy(response)
}

impl<C: RlConnection + 'static> Auth<C> {
    /// In nginx's mode, a request refused as sent (a 4xx other than the refusal) is a 401, the
    /// one status left that nginx passes on as the caller's: the problem body stays as it is.
    fn for_proxy(&self, mut response: Response<Body>) -> Response<Body> {
        let status = response.status();
        if self.deny.0 == StatusCode::FORBIDDEN
            && status.is_client_error()
            && status != StatusCode::FORBIDDEN
        {
            *response.status_mut() = StatusCode::UNAUTHORIZED;
        }
        response
    }
}
