//! A distributed concurrency limit as tower middleware: at most `capacity` requests per key in
//! flight across every process that shares the store, on the module's semaphore
//! (`RL.ACQUIRE`/`RL.RENEW`/`RL.RELEASE`). A request takes a slot before the inner service
//! runs, renews it at a third of its lease while the service works, and releases it when the
//! response body has been sent or dropped; a crashed process frees its slots when their leases
//! run out. Where a policy's semaphore rules fit, [`crate::RateLimitLayer`] applies them; this
//! layer serves a service that wants only the concurrency limit, keyed by code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use rl_core::rule::{MAX_PERIOD_TEXT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY};
use rl_engine::headers::{self, HeaderOutcome, HeaderRule};
use rl_engine::metrics::{CallResult, Event, Metrics, Outcome};
use rl_engine::problem;
use rl_engine::wire::command::{duration_arg, Acquire};
use rl_engine::{Holdings, Verdict, VerdictKind};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::layer::{answer, guard, set_headers, take_ready};
use super::{Leases, RETRY_AFTER};
use crate::client::{Error, Rl, RlConnection};

/// The key of a request's semaphore, possibly looked up asynchronously; `None` leaves the
/// request unlimited.
pub type KeyFn = Arc<
    dyn Fn(&Request<Body>) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send + Sync,
>;

/// What a request gets when the store cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenUnavailable {
    /// 503 with a problem body (the default).
    Deny,
    /// Passes unlimited, counted `open_admit`.
    Allow,
}

#[derive(Clone)]
struct Limit<C> {
    rl: Rl<C>,
    name: String,
    capacity: u64,
    lease: Duration,
    key: KeyFn,
    timeout: Duration,
    unavailable: WhenUnavailable,
    metrics: Arc<Metrics>,
}

/// Wraps services with the concurrency limit. Cloning shares it.
pub struct ConcurrencyLimitLayer<C> {
    limit: Arc<Limit<C>>,
}

impl<C> Clone for ConcurrencyLimitLayer<C> {
    fn clone(&self) -> Self {
        ConcurrencyLimitLayer {
            limit: Arc::clone(&self.limit),
        }
    }
}

impl<C: RlConnection + 'static> ConcurrencyLimitLayer<C> {
    /// At most `capacity` requests in flight per key; `name` labels the headers, the problem
    /// body and the metrics. A slot whose holder stops renewing it is free after `lease`.
    /// Store calls have a 50 ms deadline and a store that cannot answer denies, unless
    /// [`Self::timeout`] and [`Self::when_unavailable`] say otherwise. A capacity or a lease
    /// the module would refuse is refused here, before any request.
    pub fn new<F, Fut>(
        rl: Rl<C>,
        name: impl Into<String>,
        capacity: u64,
        lease: Duration,
        key: F,
    ) -> Result<ConcurrencyLimitLayer<C>, Error>
    where
        F: Fn(&Request<Body>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<String>> + Send + 'static,
    {
        if !(1..=MAX_SEMAPHORE_CAPACITY).contains(&capacity) {
            return Err(Error::InvalidRequest(format!(
                "capacity {capacity} is not in the range [1, {MAX_SEMAPHORE_CAPACITY}]"
            )));
        }
        let lease_us = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
        if lease.is_zero() || lease_us > MAX_PERIOD_US {
            return Err(Error::InvalidRequest(format!(
                "lease {lease:?} is not in the range (0, {MAX_PERIOD_TEXT}]"
            )));
        }
        duration_arg(lease, "lease")?;
        Ok(ConcurrencyLimitLayer {
            limit: Arc::new(Limit {
                rl,
                name: name.into(),
                capacity,
                lease,
                key: Arc::new(move |request| Box::pin(key(request))),
                timeout: Duration::from_millis(50),
                unavailable: WhenUnavailable::Deny,
                metrics: Arc::default(),
            }),
        })
    }

    /// The deadline of each `RL.ACQUIRE`.
    pub fn timeout(mut self, timeout: Duration) -> ConcurrencyLimitLayer<C> {
        Arc::make_mut(&mut self.limit).timeout = timeout;
        self
    }

    pub fn when_unavailable(mut self, mode: WhenUnavailable) -> ConcurrencyLimitLayer<C> {
        Arc::make_mut(&mut self.limit).unavailable = mode;
        self
    }

    /// Counts decisions (route and rule are both the limit's name) and store calls here.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> ConcurrencyLimitLayer<C> {
        super::report_mode(&self.limit.rl, &metrics);
        Arc::make_mut(&mut self.limit).metrics = metrics;
        self
    }
}

impl<S, C: RlConnection + 'static> Layer<S> for ConcurrencyLimitLayer<C> {
    type Service = ConcurrencyLimit<S, C>;

    fn layer(&self, inner: S) -> ConcurrencyLimit<S, C> {
        ConcurrencyLimit {
            inner,
            limit: Arc::clone(&self.limit),
        }
    }
}

/// The middleware service; `Clone` when the inner service is, sharing one limit.
pub struct ConcurrencyLimit<S, C> {
    inner: S,
    limit: Arc<Limit<C>>,
}

impl<S: Clone, C> Clone for ConcurrencyLimit<S, C> {
    fn clone(&self) -> Self {
        ConcurrencyLimit {
            inner: self.inner.clone(),
            limit: Arc::clone(&self.limit),
        }
    }
}

impl<S, C> Service<Request<Body>> for ConcurrencyLimit<S, C>
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
        let limit = Arc::clone(&self.limit);
        Box::pin(async move {
            let Some(key) = (limit.key)(&request).await else {
                return inner.call(request).await;
            };
            let (verdict, leases) = limit.decide(key).await;
            if verdict.status.is_some() {
                return Ok(answer(&verdict));
            }
            request.extensions_mut().insert(verdict.clone());
            let mut response = inner.call(request).await?;
            set_headers(response.headers_mut(), &verdict);
            Ok(match leases {
                Some(leases) => guard(response, leases),
                None => response,
            })
        })
    }
}

impl<C: RlConnection + 'static> Limit<C> {
    fn spec(&self) -> HeaderRule {
        HeaderRule {
            name: self.name.clone(),
            limit: self.capacity,
            period: Duration::ZERO,
            capacity: self.capacity,
            semaphore: true,
        }
    }

    fn count(&self, outcome: Outcome) {
        self.metrics.record(Event::Decision {
            route: &self.name,
            rule: &self.name,
            outcome,
        });
    }

    async fn decide(&self, key: String) -> (Verdict, Option<Leases<C>>) {
        let started = Instant::now();
        // Chosen here, so that a slot whose reply is lost can still be released.
        let holder = format!("{:016x}", fastrand::u64(..)).into_bytes();
        let acquire =
            Acquire::new(key.as_bytes(), self.capacity, self.lease).holder(holder.clone());
        let asked = tokio::time::timeout(self.timeout, self.rl.acquire(&acquire)).await;
        let result = match &asked {
            Ok(Ok(_)) => CallResult::Ok,
            Err(_) => CallResult::Timeout,
            Ok(Err(_)) => CallResult::Error,
        };
        self.metrics.record(Event::StoreCall {
            result,
            latency: started.elapsed(),
        });
        let mut verdict = Verdict {
            kind: VerdictKind::Admit,
            outcome: Some(Outcome::Admit),
            status: None,
            headers: Vec::new(),
            problem: None,
            route: Some(self.name.clone()),
            plan: None,
            policy_version: 0,
            background: Vec::new(),
            log: Vec::new(),
        };
        let slot = |key: String, holder: Vec<u8>| {
            let lease = Holdings::slot(key.into_bytes(), holder, self.lease);
            Leases::new(self.rl.clone(), lease, super::now())
        };
        let lease = match asked {
            Ok(Ok(lease)) => lease,
            Ok(Err(Error::Refused(_) | Error::Unexpected(_) | Error::InvalidRequest(_))) => {
                // The module refused the call: a bug in the deployment, never the posture.
                self.count(Outcome::Error);
                verdict.kind = VerdictKind::Error;
                verdict.outcome = Some(Outcome::Error);
                verdict.status = Some(500);
                verdict.problem = Some(problem::store_refused(""));
                return (verdict, None);
            }
            Ok(Err(Error::Unavailable(_))) | Err(_) => {
                // The acquisition may have reached the server after all: give its slot back
                // (dropping these leases releases it) rather than hold it for a whole lease.
                drop(slot(key, holder));
                verdict.kind = VerdictKind::Unavailable;
                if self.unavailable == WhenUnavailable::Allow {
                    self.count(Outcome::OpenAdmit);
                    verdict.outcome = Some(Outcome::OpenAdmit);
                    return (verdict, None);
                }
                self.count(Outcome::UnavailableDeny);
                verdict.outcome = Some(Outcome::UnavailableDeny);
                verdict.status = Some(503);
                verdict.problem = Some(problem::limiter_unavailable());
                // The store is asked again by the next request: there is nothing to wait for.
                verdict.headers = vec![(RETRY_AFTER, "1".to_string())];
                return (verdict, None);
            }
        };
        let outcome = HeaderOutcome {
            remaining: self.capacity.saturating_sub(lease.in_flight),
            reset_after_ms: 0,
            retry_after_ms: (!lease.acquired).then_some(lease.retry_after_ms),
        };
        verdict.headers = headers::render(&[(self.spec(), outcome)], false);
        if !lease.acquired {
            self.count(Outcome::Refuse);
            verdict.kind = VerdictKind::Refuse;
            verdict.outcome = Some(Outcome::Refuse);
            verdict.status = Some(429);
            verdict.problem = Some(problem::too_many_requests(&[self.name.as_str()]));
            let wait = headers::retry_after_seconds(lease.retry_after_ms, 0.0, 0.0).max(1);
            verdict.headers.push((RETRY_AFTER, wait.to_string()));
            return (verdict, None);
        }
        self.count(Outcome::Admit);
        (verdict, Some(slot(key, holder)))
    }
}
