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
use rl_engine::engine::Check;
use rl_engine::metrics::Metrics;
use rl_engine::policy::{OnStoreError, Policy, RuleSpec, StoreSpec};
use tower_layer::Layer;
use tower_service::Service;

use super::layer::{answer, guard, set_headers, take_ready};
use super::{Gateway, PolicyStore};
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

/// What the layer was built with; the engine's gateway is made again from it by each builder.
#[derive(Clone)]
struct Settings<C> {
    rl: Rl<C>,
    name: String,
    rule: Arc<RuleSpec>,
    key: KeyFn,
    timeout: Duration,
    unavailable: WhenUnavailable,
    metrics: Arc<Metrics>,
}

/// The limit: a translator into the engine, which decides one semaphore check per request
/// (its breaker, its posture, its records) as it decides a policy's semaphore rules.
struct Limit<C: RlConnection + 'static> {
    settings: Settings<C>,
    gateway: Gateway<C>,
}

impl<C: RlConnection + 'static> Limit<C> {
    fn new(settings: Settings<C>) -> Limit<C> {
        let posture = match settings.unavailable {
            WhenUnavailable::Deny => OnStoreError::Deny,
            WhenUnavailable::Allow => OnStoreError::Allow,
        };
        let store = StoreSpec {
            timeout: settings.timeout,
            ..StoreSpec::default()
        };
        let policy = Policy::for_checks(0, &settings.name, posture, store);
        let gateway = Gateway::new(
            settings.rl.clone(),
            PolicyStore::snapshot(policy),
            Arc::clone(&settings.metrics),
        );
        Limit { settings, gateway }
    }
}

/// Wraps services with the concurrency limit. Cloning shares it.
pub struct ConcurrencyLimitLayer<C: RlConnection + 'static> {
    limit: Arc<Limit<C>>,
}

impl<C: RlConnection + 'static> Clone for ConcurrencyLimitLayer<C> {
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
        let name = name.into();
        let rule = RuleSpec::semaphore(&name, capacity, lease).map_err(Error::InvalidRequest)?;
        Ok(ConcurrencyLimitLayer {
            limit: Arc::new(Limit::new(Settings {
                rl,
                name,
                rule: Arc::new(rule),
                key: Arc::new(move |request| Box::pin(key(request))),
                timeout: Duration::from_millis(50),
                unavailable: WhenUnavailable::Deny,
                metrics: Arc::default(),
            })),
        })
    }

    fn with(self, change: impl FnOnce(&mut Settings<C>)) -> ConcurrencyLimitLayer<C> {
        let mut settings = self.limit.settings.clone();
        change(&mut settings);
        ConcurrencyLimitLayer {
            limit: Arc::new(Limit::new(settings)),
        }
    }

    /// The deadline of each `RL.ACQUIRE`.
    pub fn timeout(self, timeout: Duration) -> ConcurrencyLimitLayer<C> {
        self.with(|s| s.timeout = timeout)
    }

    pub fn when_unavailable(self, mode: WhenUnavailable) -> ConcurrencyLimitLayer<C> {
        self.with(|s| s.unavailable = mode)
    }

    /// Counts decisions (route and rule are both the limit's name) and store calls here.
    pub fn metrics(self, metrics: Arc<Metrics>) -> ConcurrencyLimitLayer<C> {
        self.with(|s| s.metrics = metrics)
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
pub struct ConcurrencyLimit<S, C: RlConnection + 'static> {
    inner: S,
    limit: Arc<Limit<C>>,
}

impl<S: Clone, C: RlConnection + 'static> Clone for ConcurrencyLimit<S, C> {
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
            let Some(key) = (limit.settings.key)(&request).await else {
                return inner.call(request).await;
            };
            let check = Check::new(Arc::clone(&limit.settings.rule), key, 1);
            let (verdict, leases) = limit.gateway.check(&limit.settings.name, vec![check]).await;
            if verdict.status.is_some() {
                return Ok(answer(&verdict));
            }
            request.extensions_mut().insert(verdict.clone());
            let mut response = inner.call(request).await?;
            set_headers(response.headers_mut(), &verdict);
            Ok(guard(response, leases))
        })
    }
}
