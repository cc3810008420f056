//! What the rate limit service's tests share: the service on a loopback port in front of a
//! store, a gRPC client built from Envoy's API types, and requests and statuses made short.

#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_rl_client::gateway::connect::Store;
use redis_rl_client::{Rl, RlConnection};
use rl_engine::metrics::Metrics;
use rl_gateway::rls::{Config, Rls};
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// A running service; dropping it stops it.
pub struct Service<C: RlConnection + 'static> {
    pub rls: Arc<Rls<C>>,
    pub metrics: Arc<Metrics>,
    pub client: RateLimitServiceClient<Channel>,
    _stop: oneshot::Sender<()>,
}

/// Serves `yaml` on 127.0.0.1 in front of `rl`, one server.
/// These tests pin what is decided, not how fast: on a loaded machine a store call of the
/// default 10 ms deadline may be cut, or its timer fire late enough that the gateway sheds the
/// request as its own overload. A configuration that does not set `store_timeout` gets 1 s;
/// the tests of the deadline set theirs.
pub fn generous(yaml: &str) -> String {
    if yaml.contains("store_timeout:") {
        yaml.to_string()
    } else {
        format!("store_timeout: 1s\n{}", yaml.trim_start_matches('\n'))
    }
}

pub async fn serve<C: RlConnection + 'static>(yaml: &str, rl: Rl<C>) -> Service<C> {
    serve_on(yaml, rl, false).await
}

/// The same, `cluster` saying whether `rl` is a Redis Cluster.
pub async fn serve_on<C: RlConnection + 'static>(
    yaml: &str,
    rl: Rl<C>,
    cluster: bool,
) -> Service<C> {
    let metrics = Arc::new(Metrics::default());
    let rls = Rls::new(
        Config::parse(&generous(yaml)).unwrap(),
        rl,
        Arc::clone(&metrics),
        cluster,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(Arc::clone(&rls).serve(listener, async {
        let _ = stopped.await;
    }));
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    Service {
        rls,
        metrics,
        client,
        _stop: stop,
    }
}

/// The gateway's connection to the Redis server on `port`, as `rl-gateway` makes it: it
/// connects in the background, and fails every call at once until it has.
pub fn connecting(port: u16) -> Rl<Store> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    Rl::new(Store::connect(client))
}

/// The same, once connected.
pub async fn store(port: u16) -> Rl<Store> {
    let rl = connecting(port);
    for _ in 0..500 {
        if rl.detect_mode().await.is_ok() {
            return rl;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the store on port {port} never answered");
}

/// A request: `descriptors` as lists of `(key, value)`, with `hits_addend`.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .map(|entries| descriptor(entries))
            .collect(),
        hits_addend: hits,
    }
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

impl<C: RlConnection + 'static> Service<C> {
    pub async fn ask(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(request)
            .await
            .map(|r| r.into_inner())
    }

    /// The answer to a request that must succeed.
    pub async fn ok(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.ask(request).await.unwrap()
    }
}

/// `(code, limit_remaining)` of each status, for assertions on values.
pub fn codes(r: &RateLimitResponse) -> Vec<(Code, u32)> {
    r.statuses
        .iter()
        .map(|s| (code(s), s.limit_remaining))
        .collect()
}

pub fn code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).unwrap()
}

pub fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).unwrap()
}

/// `(requests_per_unit, unit name, name)` of a status's `current_limit`.
pub fn limit_of(s: &DescriptorStatus) -> Option<(u32, &'static str, String)> {
    s.current_limit.as_ref().map(|l| {
        let unit = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit::try_from(l.unit).unwrap();
        (l.requests_per_unit, unit.as_str_name(), l.name.clone())
    })
}
