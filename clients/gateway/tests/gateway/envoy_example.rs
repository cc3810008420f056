//! The shipped Envoy configuration and its rate limit configuration (`examples/`), checked
//! against each other, and the rate limit face of the real binary asked over gRPC what Envoy
//! asks for that configuration's route: one descriptor `("user", x-user)` in domain `api`.
//! (No Envoy build installs on this machine, so Envoy itself is not run.)

use std::path::Path;

use crate::support::Gateway;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_norway::Value;

fn example(name: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    std::fs::read_to_string(file).unwrap()
}

/// The value at a path of keys and list indices, as the YAML gives it.
fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, step| match step.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[*step],
    })
}

#[test]
fn the_envoy_configuration_points_at_the_service_and_its_domain() {
    let envoy: Value = serde_norway::from_str(&example("envoy.yaml")).unwrap();
    let limits: Value = serde_norway::from_str(&example("ratelimit.yaml")).unwrap();
    let hcm = at(
        &envoy,
        &[
            "static_resources",
            "listeners",
            "0",
            "filter_chains",
            "0",
            "filters",
            "0",
            "typed_config",
        ],
    );
    let filter = at(hcm, &["http_filters", "0", "typed_config"]);
    assert_eq!(filter["domain"], limits["domain"]);
    assert_eq!(filter["failure_mode_deny"], Value::Bool(true));
    let cluster = at(
        filter,
        &[
            "rate_limit_service",
            "grpc_service",
            "envoy_grpc",
            "cluster_name",
        ],
    );
    let clusters = at(&envoy, &["static_resources", "clusters"])
        .as_sequence()
        .unwrap();
    let rls = clusters.iter().find(|c| &c["name"] == cluster).unwrap();
    let address = at(
        rls,
        &[
            "load_assignment",
            "endpoints",
            "0",
            "lb_endpoints",
            "0",
            "endpoint",
            "address",
            "socket_address",
        ],
    );
    assert_eq!(address["port_value"], Value::from(8081));
    assert!(
        !at(rls, &["typed_extension_protocol_options"]).is_null(),
        "gRPC needs HTTP/2"
    );
    // The route action's descriptor key is the one the limits name.
    let action = at(
        hcm,
        &[
            "route_config",
            "virtual_hosts",
            "0",
            "routes",
            "0",
            "route",
            "rate_limits",
            "0",
            "actions",
            "0",
            "request_headers",
        ],
    );
    assert_eq!(
        action["descriptor_key"],
        at(&limits, &["descriptors", "0", "key"]).clone()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_limits_what_the_envoy_route_sends() {
    let dir = std::env::temp_dir().join(format!("rl-gateway-envoy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ratelimit.yaml");
    std::fs::write(&config, example("ratelimit.yaml")).unwrap();
    let gw = Gateway::start(&[
        "--store",
        "memory://",
        "--grpc",
        "127.0.0.1:0",
        "--rls-config",
        config.to_str().unwrap(),
    ]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", gw.faces["grpc"]))
        .await
        .unwrap();
    let ask = || crate::rls_support::request("api", &[&[("user", "ann")]], 0);
    for left in (0..100).rev() {
        let answer = client.should_rate_limit(ask()).await.unwrap().into_inner();
        assert_eq!(crate::rls_support::codes(&answer), [(Code::Ok, left)]);
    }
    let refused = client.should_rate_limit(ask()).await.unwrap().into_inner();
    assert_eq!(crate::rls_support::overall(&refused), Code::OverLimit);
    let other = crate::rls_support::request("api", &[&[("user", "bob")]], 0);
    let answer = client.should_rate_limit(other).await.unwrap().into_inner();
    assert_eq!(crate::rls_support::overall(&answer), Code::Ok);
}
