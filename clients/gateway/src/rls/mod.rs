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
//! - The store calls of a request have one deadline (`store_timeout`, 50 ms by default); when
//!   the store cannot answer by then, `on_store_error` answers: `deny` is the gRPC status
//!   `UNAVAILABLE` (never `UNKNOWN`), `allow` is `OK`, `fallback` decides in this process on
//!   the engine's in-memory store. A call cut by the deadline may still reach the store and be
//!   applied when it catches up: at most that request's cost, spent late.
//! - Decisions are counted in the engine's metrics under the route `rls:<domain>`, by the
//!   limit's `name` or, without one, its descriptor path.

mod config;
mod decide;
mod plan;
mod reply;
mod tree;

use std::sync::{Arc, Mutex, RwLock};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_rl_client::engine::memory::MemoryStore;
use redis_rl_client::engine::metrics::{Event, Metrics};
use redis_rl_client::{Rl, RlConnection};
use tonic::{Code, Request, Response, Status};

pub use config::{Config, OnStoreError, DEFAULT_STORE_TIMEOUT};

/// The fallback store's budget: what it forgets past it is only what an outage decided.
const FALLBACK_BYTES: usize = 32 << 20;

/// The service: a configuration (replaced whole by [`Rls::reload`]), the store client, the
/// metrics, and the in-memory store of `on_store_error: fallback`.
pub struct Rls<C: RlConnection + 'static> {
    config: RwLock<Arc<Config>>,
    rl: Rl<C>,
    metrics: Arc<Metrics>,
    cluster: bool,
    local: Mutex<MemoryStore>,
}

impl<C: RlConnection + 'static> Rls<C> {
    /// `cluster`: the store is a Redis Cluster, so a request is decided per hash slot.
    pub fn new(config: Config, rl: Rl<C>, metrics: Arc<Metrics>, cluster: bool) -> Arc<Rls<C>> {
        posture(&metrics, &config);
        Arc::new(Rls {
            config: RwLock::new(Arc::new(config)),
            rl,
            metrics,
            cluster,
            local: Mutex::new(MemoryStore::with_budget(FALLBACK_BYTES)),
        })
    }

    /// Replaces the configuration; requests already being decided finish on the old one.
    pub fn reload(&self, config: Config) {
        posture(&self.metrics, &config);
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
                let unavailable = status.code() == Code::Unavailable;
                if unavailable {
                    tracing::debug!(domain = %config.domain, "{}", status.message());
                } else {
                    tracing::warn!(domain = %config.domain, "{}", status.message());
                }
                reply::failed(&config, &plan, unavailable, &self.metrics);
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
