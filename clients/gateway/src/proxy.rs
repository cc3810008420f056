//! The reverse proxy (`--listen`, `--upstream`): every request decided by the gateway's layer,
//! then forwarded with its method, the path as matched (normalized), its query, its headers
//! less the hop-by-hop ones, and its body streamed; the upstream's response streamed back (one
//! of at most [`SMALL_RESPONSE`] read whole first).
//! `X-Actual-Cost` settles the request's reservations and is not passed to the caller; leases
//! end when the response body ends or the caller goes away (the layer's guard). The upstream
//! has `--upstream-timeout` to answer once it has the whole request body ([`upload`]).

mod upload;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rl_engine::policy::{decode_unreserved, NormalPath};
use rl_engine::problem::{self, Problem};

use redis_rl_client::gateway::ACTUAL_COST;
use redis_rl_client::{Gateway, RateLimitLayer, RlConnection};
use tower::{Service, ServiceBuilder};

use crate::server::Peer;

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1), and
/// `Proxy-*` ones meant for this hop; names made once, not parsed again for each request.
const HOP_BY_HOP: [HeaderName; 8] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Where requests go.
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
    client: Client<HttpConnector, Body>,
    /// The upstream's response head must come within this once the request body has ended
    /// (and the request body may pause this long at most); the response body then streams
    /// freely.
    timeout: Duration,
}

impl Upstream {
    /// `url`: `http://HOST:PORT`, without a path (requests keep theirs).
    pub fn new(url: &str, timeout: Duration) -> Result<Upstream, String> {
        let uri: Uri = url.parse().map_err(|e| format!("--upstream {url}: {e}"))?;
        let (Some("http"), Some(authority)) = (uri.scheme_str(), uri.authority().cloned()) else {
            return Err(format!("--upstream {url}: expected http://HOST:PORT"));
        };
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(format!(
                "--upstream {url}: no path (requests are forwarded with their own)"
            ));
        }
        let mut connector = HttpConnector::new();
        // The upstream's answer must not wait for the delayed ACK of our request's last bytes.
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Upstream {
            scheme: Scheme::HTTP,
            authority,
            client,
            timeout,
        })
    }
}

/// The proxy face: the gateway's layer around the forwarding service, as a plain tower stack
/// (every path goes to the one forwarder: no router to match, no boxed middleware).
pub fn service<C: RlConnection + 'static>(
    gateway: Arc<Gateway<C>>,
    upstream: Arc<Upstream>,
) -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
> + Clone
       + Send
       + 'static {
    ServiceBuilder::new()
        // Outside the layer, which reads it to settle: the caller never sees it.
        .map_response(|mut response: Response<Body>| {
            response.headers_mut().remove(ACTUAL_COST);
            response
        })
        .layer(RateLimitLayer::new(gateway))
        .service_fn(move |request| {
            let upstream = Arc::clone(&upstream);
            async move { Ok::<_, Infallible>(forward(&upstream, request).await) }
        })
}

async fn forward(upstream: &Upstream, request: Request<Body>) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    // The server puts the caller's address on every request.
    let Some(ConnectInfo(peer)) = parts.extensions.get::<Peer>().copied() else {
        return problem_response(problem::upstream_unreachable());
    };
    // The path as the route matched it, so neither `/a/../admin`, `/%61dmin` nor
    // `/admin;x=1` can reach what `/admin`'s rules guard under another name; the layer answered
    // a path it refused (above the root, an encoded separator).
    let decoded = decode_unreserved(parts.uri.path());
    let path = match NormalPath::of(&decoded) {
        Ok(path) => path.text(),
        Err(error) => return problem_response(problem::bad_path(error)),
    };
    let target = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let Ok(path_and_query) = PathAndQuery::try_from(target) else {
        return problem_response(problem::above_root());
    };
    let uri = Uri::builder()
        .scheme(upstream.scheme.clone())
        .authority(upstream.authority.clone())
        .path_and_query(path_and_query)
        .build();
    let Ok(uri) = uri else {
        return problem_response(problem::upstream_unreachable());
    };
    let original_host = parts.headers.get(HOST).cloned();
    strip_hop_by_hop(&mut parts.headers);
    forwarded_headers(&mut parts.headers, peer.ip(), original_host);
    if let Ok(host) = HeaderValue::from_str(upstream.authority.as_str()) {
        parts.headers.insert(HOST, host);
    }
    parts.uri = uri;
    let (body, upload) = upload::watch(body);
    let answered = upstream.client.request(Request::from_parts(parts, body));
    tokio::pin!(answered);
    // The deadline moves with the body, so it is read again each time it passes.
    let answered = loop {
        tokio::select! {
            answered = &mut answered => break Ok(answered),
            () = tokio::time::sleep_until(upload.deadline(upstream.timeout)) => {
                if upload.deadline(upstream.timeout) <= tokio::time::Instant::now() {
                    break Err(upload.late());
                }
            }
        }
    };
    match answered {
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            if !small(&parts.headers) {
                return Response::from_parts(parts, Body::new(body));
            }
            // Read whole, as nginx's `proxy_buffering` does, so that the head and the body
            // leave in one write (streamed, the head would go before the body reached this
            // task: a second write, and a second wake-up of the caller). It waits for the body
            // as the caller would have.
            match body.collect().await {
                Ok(body) => Response::from_parts(parts, Body::from(body.to_bytes())),
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream's response ended early");
                    problem_response(problem::upstream_unreachable())
                }
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the upstream could not be reached");
            problem_response(problem::upstream_unreachable())
        }
        Err(upload::Late::Upstream) => problem_response(problem::upstream_timeout()),
        Err(upload::Late::Caller) => problem_response(problem::body_timeout()),
    }
}

/// A response at most this large (its `Content-Length`) is read whole before it is passed on.
const SMALL_RESPONSE: u64 = 16 << 10;

fn small(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= SMALL_RESPONSE)
}

/// Removes the hop-by-hop headers, and those the `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// `X-Forwarded-For` gains the peer (the upstream trusts its rightmost entry, ours);
/// `-Proto` is this hop's scheme; `-Host` is the host the caller asked for.
fn forwarded_headers(headers: &mut HeaderMap, peer: std::net::IpAddr, host: Option<HeaderValue>) {
    let peer = peer.to_canonical().to_string();
    // Most callers come with no chain: the peer alone, without the join's allocations.
    let chain = if headers.contains_key(X_FORWARDED_FOR) {
        headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .chain(std::iter::once(peer.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        peer
    };
    headers.remove(X_FORWARDED_FOR);
    if let Ok(chain) = HeaderValue::from_str(&chain) {
        headers.insert(X_FORWARDED_FOR, chain);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    match host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST, host);
        }
        None => {
            headers.remove(X_FORWARDED_HOST);
        }
    }
}

pub(crate) fn problem_response(problem: Problem) -> Response<Body> {
    let mut response = Response::new(Body::from(problem.body));
    *response.status_mut() =
        StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(problem::CONTENT_TYPE),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn forwarded_for_appends_the_peer_to_the_chain() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("203.0.113.1"));
        h.append("x-forwarded-for", HeaderValue::from_static("198.51.100.2"));
        forwarded_headers(
            &mut h,
            "::ffff:10.0.0.1".parse().unwrap(),
            Some(HeaderValue::from_static("api.example")),
        );
        assert_eq!(h["x-forwarded-for"], "203.0.113.1, 198.51.100.2, 10.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
    }

    #[test]
    fn upstreams_are_http_without_a_path() {
        let t = Duration::from_secs(1);
        assert!(Upstream::new("http://127.0.0.1:9000", t).is_ok());
        assert!(Upstream::new("https://127.0.0.1:9000", t).is_err());
        assert!(Upstream::new("http://127.0.0.1:9000/api", t).is_err());
        assert!(Upstream::new("127.0.0.1:9000", t).is_err());
    }
}
