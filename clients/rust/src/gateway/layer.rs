//! The gateway as tower middleware (axum-compatible): resolves the caller (optionally, and
//! possibly asynchronously), runs [`Gateway::decide`] per request,
//! answers 429 and 503 itself with a problem body, puts the [`Verdict`] into the request's
//! extensions, sets the rate-limit headers on every response, settles `settle` rules with the
//! backend's `X-Actual-Cost`, and holds the request's semaphore slots until the response body
//! has been sent (or dropped). A request still waiting for the inner service when the gateway
//! is cut ([`Gateway::cut`]) is answered 503 and ends what it holds.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::Frame;
use tower_layer::Layer;
use tower_service::Service;

use rl_engine::headers::{POLICY, RATELIMIT};
use rl_engine::problem;

use super::{Caller, Gateway, HttpHeaders, Leases, Verdict, ACTUAL_COST};
use crate::client::RlConnection;

/// Resolves who a request's caller is, possibly asynchronously (an API key looked up, a token
/// verified); `None` leaves it to the policy's identity headers.
pub type Identify = Arc<
    dyn Fn(&Request<Body>) -> Pin<Box<dyn Future<Output = Option<Caller>> + Send>> + Send + Sync,
>;

/// Wraps services with the gateway. Cloning shares the gateway.
pub struct RateLimitLayer<C: RlConnection + 'static> {
    gateway: Arc<Gateway<C>>,
    identify: Option<Identify>,
}

impl<C: RlConnection + 'static> RateLimitLayer<C> {
    pub fn new(gateway: Arc<Gateway<C>>) -> RateLimitLayer<C> {
        RateLimitLayer {
            gateway,
            identify: None,
        }
    }

    /// Resolves each request's caller with `identify` before it is decided. The future gets
    /// what it needs from the request before it is awaited (it must be `'static`); the
    /// resolved [`Caller`] is also put into the request's extensions.
    pub fn identify<F, Fut>(mut self, identify: F) -> RateLimitLayer<C>
    where
        F: Fn(&Request<Body>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Caller>> + Send + 'static,
    {
        self.identify = Some(Arc::new(move |request| Box::pin(identify(request))));
        self
    }
}

impl<C: RlConnection + 'static> Clone for RateLimitLayer<C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            gateway: Arc::clone(&self.gateway),
            identify: self.identify.clone(),
        }
    }
}

impl<S, C: RlConnection + 'static> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimit<S, C>;

    fn layer(&self, inner: S) -> RateLimit<S, C> {
        RateLimit {
            inner,
            gateway: Arc::clone(&self.gateway),
            identify: self.identify.clone(),
        }
    }
}

/// The middleware service; `Clone` when the inner service is, sharing one gateway.
pub struct RateLimit<S, C: RlConnection + 'static> {
    inner: S,
    gateway: Arc<Gateway<C>>,
    identify: Option<Identify>,
}

impl<S: Clone, C: RlConnection + 'static> Clone for RateLimit<S, C> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            gateway: Arc::clone(&self.gateway),
            identify: self.identify.clone(),
        }
    }
}

impl<S, C> Service<Request<Body>> for RateLimit<S, C>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    C: RlConnection + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let gateway = Arc::clone(&self.gateway);
        let identify = self.identify.clone();
        Box::pin(async move {
            // A request that passes untouched (no route, a default without rules): its caller is not
            // looked up either.
            let routed = identify.is_some() && {
                let policy = gateway.policy();
                let path = rl_engine::policy::decode_unreserved(request.uri().path());
                let route = policy.route(request.method().as_str(), &path, false);
                route.is_route()
            };
            let caller = match &identify {
                Some(identify) if routed => identify(&request).await,
                _ => None,
            };
            let peer = request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip());
            let (verdict, leases) = gateway
                .decide(&rl_engine::Request {
                    method: request.method().as_str(),
                    path: request.uri().path(),
                    headers: &HttpHeaders(request.headers()),
                    peer,
                    caller: caller.as_ref(),
                    // axum (matchit) routes paths with their case.
                    case_insensitive: false,
                })
                .await;
            if verdict.status.is_some() {
                return Ok(answer(&verdict));
            }
            request.extensions_mut().insert(verdict.clone());
            if let Some(caller) = caller {
                request.extensions_mut().insert(caller);
            }
            // Cut short (the server stops at the end of its drain): the inner service is
            // dropped unanswered, and the caller gets the gateway's 503 instead of nothing.
            let mut response = tokio::select! {
                biased;
                () = gateway.cut_off() => {
                    return Ok(answer(&gateway.drained(&verdict, leases)));
                }
                response = inner.call(request) => response?,
            };
            set_headers(response.headers_mut(), &verdict);
            let mut leases = leases;
            // Without a report from the backend, the estimate stands.
            let actual = response.headers().get(ACTUAL_COST).map(|v| v.as_bytes());
            leases.settle(response.status().as_u16(), actual).await;
            if leases.is_empty() {
                return Ok(response);
            }
            Ok(guard(response, leases))
        })
    }
}

/// Takes the inner service that was polled ready, leaving a fresh clone in its place: the one
/// polled ready is the one that must be called (tower's rule).
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let fresh = inner.clone();
    std::mem::replace(inner, fresh)
}

/// Holds `leases` until `response`'s body has been sent or dropped.
pub(crate) fn guard<C: RlConnection + 'static>(
    response: Response<Body>,
    leases: Leases<C>,
) -> Response<Body> {
    response.map(|body| {
        Body::new(Guarded {
            body,
            _leases: Box::new(leases),
        })
    })
}

/// The gateway's own answer: 429 or 503 with its problem body and headers.
pub fn answer(verdict: &Verdict) -> Response<Body> {
    let problem = verdict
        .problem
        .clone()
        .unwrap_or_else(problem::limiter_unavailable);
    let status = verdict
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut response = Response::new(Body::from(problem.body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(problem::CONTENT_TYPE),
    );
    set_headers(response.headers_mut(), verdict);
    response
}

pub(crate) fn set_headers(headers: &mut HeaderMap, verdict: &Verdict) {
    for (name, value) in &verdict.headers {
        // Rendered values are ASCII structured fields and digits; one that is not is dropped
        // rather than failing the response.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            // The RateLimit fields are lists: a second layer (a concurrency limit around the
            // gateway, say) adds its items to the first's instead of replacing them.
            if name == POLICY || name == RATELIMIT {
                headers.append(name, value);
            } else {
                headers.insert(name, value);
            }
        }
    }
}

/// A response body that holds the request's semaphore slots until it is dropped, which hyper
/// does once the body has been sent or the connection is gone.
struct Guarded<C: RlConnection + 'static> {
    body: Body,
    // Boxed so the body stays `Unpin` whatever the connection type is.
    _leases: Box<Leases<C>>,
}

impl<C: RlConnection + 'static> http_body::Body for Guarded<C> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
