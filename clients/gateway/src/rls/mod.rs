//! Envoy's rate limit service v3 (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! CONTRACT.md section 10), on the configuration file of the reference service
//! (envoyproxy/ratelimit), read unchanged and with its semantics ([`Config`]).
//!
//! - A request's descriptors are decided all or nothing by one `RL.MULTI` on one server: when
//!   one is over its limit, none is spent. On a cluster, the keys of one request live in
//!   several hash slots and `RL.MULTI` cannot span them, so each slot's descriptors are decided
//!   all or nothing by their own `RL.MULTI`, and a refusal in one slot does not undo the
//!   spending of another (give descriptors a hash tag, `{...}` in a value, to keep them
//!   together).
//! - Limits count on fixed windows of one unit by default (the reference's semantics); the
//!   extensions `algorithm` and `burst` choose another of the module's algorithms.
//! - The face translates; the engine decides (`redis_rl_client::Gateway::check`, one call per
//!   request), as it decides an HTTP route's rules: a descriptor no request can pass
//!   (`requests_per_unit: 0`, or a cost above its capacity) and one the negative cache holds
//!   over its limit are refused without a store call of their own, the request's other
//!   descriptors then only asked (one `DRYRUN` step) so that each status says what its key
//!   holds; the breaker stops calling a store that keeps failing (and ramps back), and decision
//!   records say why a request was refused.
//! - The store calls of a request have one deadline (`store_timeout`, 10 ms by default, under
//!   the 20 ms Envoy's filter waits); when the store cannot answer by then, or the breaker is
//!   open, `on_store_error` answers: `deny` is the gRPC status `UNAVAILABLE` (never `UNKNOWN`),
//!   `allow` is `OK`, `fallback` decides each descriptor on a local limiter of its own rate.
//! - Decisions are counted in the engine's metrics under the route `rls:<domain>`, by the
//!   limit's `name` or, without one, its descriptor path (a request's own `limit` override:
//!   `override`).

mod config;
mod decide;
mod plan;
mod reply;
mod tree;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Gateway, Rl, RlConnection};
use rl_engine::metrics::{Event, Metrics};
use rl_engine::policy::{self as engine_policy, Policy, StoreSpec};
use tonic::{Code, Request, Response, Status};

pub use config::{Config, OnStoreError, DEFAULT_STORE_TIMEOUT};

/// The service: a configuration (replaced whole by [`Rls::reload`]), and the engine's gateway
/// that decides its checks.
pub struct Rls<C: RlConnection + 'static> {
    config: RwLock<Arc<Config>>,
    gateway: Gateway<C>,
    metrics: Arc<Metrics>,
    /// The version of the engine's policy: each reload puts a higher one in force.
    version: AtomicU64,
}

/// The engine's policy for a configuration: its posture and its store deadline.
fn policy_of(config: &Config, version: u64) -> Policy {
    let posture = match config.on_store_error {
        OnStoreError::Deny => engine_policy::OnStoreError::Deny,
        OnStoreError::Allow => engine_policy::OnStoreError::Allow,
        OnStoreError::Fallback => engine_policy::OnStoreError::FallbackEach,
    };
    let store = StoreSpec {
        timeout: config.store_timeout,
        ..StoreSpec::default()
    };
    Policy::for_checks(version, &config.route, posture, store)
}

impl<C: RlConnection + 'static> Rls<C> {
    /// `cluster`: the store is a Redis Cluster, so a request is decided per hash slot.
    pub fn new(config: Config, rl: Rl<C>, metrics: Arc<Metrics>, cluster: bool) -> Arc<Rls<C>> {
        posture(&metrics, &config);
        let policy = PolicyStore::snapshot(policy_of(&config, 1));
        let gateway = Gateway::new(rl, policy, Arc::clone(&metrics));
        let gateway = if cluster {
            gateway.with_cluster()
        } else {
            gateway
        };
        Arc::new(Rls {
            config: RwLock::new(Arc::new(config)),
            gateway,
            metrics,
            version: AtomicU64::new(1),
        })
    }

    /// Replaces the configuration; requests already being decided finish on the old one.
    pub fn reload(&self, config: Config) {
        posture(&self.metrics, &config);
        let version = self
            .version
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        // Versions only grow here, so the engine cannot refuse this one as stale.
        let _ = self.gateway.engine().reload(policy_of(&config, version));
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    fn current(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Serves gRPC (HTTP/2, no TLS) on `listener` until `shutdown` completes, then lets the
    /// calls in flight finish.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .serve_with_incoming_shutdown(
                RateLimitServiceServer::from_arc(self),
                incoming,
                shutdown,
            )
            .await
            .map_err(|e| format!("the rate limit service stopped: {e}"))
    }

    async fn should(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let config = self.current();
        let plan = plan::plan(&config, request)?;
        match self.decide(&config, &plan).await {
            Ok(verdicts) => Ok(reply::answer(&config, &plan, &verdicts, &self.metrics)),
            Err(status) => {
                if status.code() == Code::Unavailable {
                    tracing::debug!(domain = %config.domain, "{}", status.message());
                } else {
                    tracing::warn!(domain = %config.domain, "{}", status.message());
                }
                Err(status)
            }
        }
    }
}

/// The posture of the configuration's route, shown in the metrics.
fn posture(metrics: &Metrics, config: &Config) {
    metrics.record(Event::RouteMode {
        route: &config.route,
        mode: config.on_store_error.name(),
    });
}

#[tonic::async_trait]
impl<C: RlConnection + 'static> RateLimitService for Rls<C> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.should(request.get_ref()).await.map(Response::new)
    }
}
