//! The rate limit service against a real Redis with the module, asked over gRPC: the cost,
//! all or nothing, `requests_per_unit: 0`, the algorithms, descriptor overrides, the headers,
//! the metrics and the requests it refuses to answer. Limits are per hour or per day, so that
//! no count starts over in the middle of a test.

use crate::common::cluster::Cluster;
use crate::common::{command_calls, script_mode, Server};
use crate::rls_support::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_routing::get_slot;

const LIMITS: &str = r#"
domain: shop
response_headers: true
# Generous: these tests are about decisions, and a loaded machine must not turn one into a
# posture.
store_timeout: 2s
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: route
    value: checkout
    rate_limit:
      name: checkout
      unit: hour
      requests_per_unit: 1
  - key: route
    value: blocked
    rate_limit:
      unit: day
      requests_per_unit: 0
  - key: burst
    rate_limit:
      unit: hour
      requests_per_unit: 1
      algorithm: gcra
      burst: 3
  - key: sliding
    rate_limit:
      unit: day
      requests_per_unit: 2
      algorithm: sliding
  - key: log
    rate_limit:
      unit: day
      requests_per_unit: 2
      algorithm: log
  - key: path
    value: /api/*
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: shared
    value: /api/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 2
"#;

async fn shop() -> (Server, Service<redis_rl_client::gateway::connect::Store>) {
    let server = Server::start();
    let s = serve(LIMITS, store(server.port).await).await;
    (server, s)
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_zero_means_one() {
    let (_server, mut s) = shop().await;
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 4)).await),
        [(Code::Ok, 6)]
    );
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 0)).await),
        [(Code::Ok, 5)]
    );
    // A descriptor's own hits_addend wins over the request's.
    let mut own = request("shop", &[t], 1);
    if let Some(d) = own.descriptors.first_mut() {
        d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 5 });
    }
    assert_eq!(codes(&s.ok(own).await), [(Code::Ok, 0)]);
    let r = s.ok(request("shop", &[t], 1)).await;
    assert_eq!(
        (overall(&r), codes(&r)),
        (Code::OverLimit, vec![(Code::OverLimit, 0)])
    );
    // A cost above the capacity could never pass: refused, and the tenant is not spent.
    let other: &[(&str, &str)] = &[("tenant", "borealis")];
    let r = s.ok(request("shop", &[other], 11)).await;
    assert_eq!(codes(&r), [(Code::OverLimit, 0)]);
    assert_eq!(
        codes(&s.ok(request("shop", &[other], 1)).await),
        [(Code::Ok, 9)]
    );
}

#[tokio::test]
async fn a_descriptor_hits_addend_of_zero_only_asks() {
    let (_server, mut s) = shop().await;
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let asking = |s: &str| {
        let mut r = request(s, &[t], 1);
        if let Some(d) = r.descriptors.first_mut() {
            d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
        }
        r
    };
    // Asked, nothing spent: the tenant holds its 10 however often it is asked.
    for _ in 0..3 {
        assert_eq!(codes(&s.ok(asking("shop")).await), [(Code::Ok, 10)]);
    }
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 10)).await),
        [(Code::Ok, 0)]
    );
    // Spent to the limit: asking says over, as a request of one unit would be.
    let r = s.ok(asking("shop")).await;
    assert_eq!(
        (overall(&r), codes(&r)),
        (Code::OverLimit, vec![(Code::OverLimit, 0)])
    );
}

#[tokio::test]
async fn a_descriptor_value_over_256_bytes_is_an_invalid_argument() {
    let (server, mut s) = shop().await;
    let long = "a".repeat(257);
    let t: &[(&str, &str)] = &[("tenant", &long)];
    let e = s.ask(request("shop", &[t], 1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("descriptors[0].entries[0].value"),
        "{e:?}"
    );
    // Nothing reached the store: no key was written for it.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // 256 bytes is an identity like any other.
    let fits = "a".repeat(256);
    let t: &[(&str, &str)] = &[("tenant", &fits)];
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 1)).await),
        [(Code::Ok, 9)]
    );
}

#[tokio::test]
async fn a_refusal_spends_on_no_descriptor() {
    let (_server, mut s) = shop().await;
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let checkout: &[(&str, &str)] = &[("route", "checkout")];
    let r = s.ok(request("shop", &[t, checkout], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 9), (Code::Ok, 0)]);
    let r = s.ok(request("shop", &[t, checkout], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // The tenant would have passed, and still holds its 9: nothing was spent.
    assert_eq!(codes(&r), [(Code::Ok, 9), (Code::OverLimit, 0)]);
    // The refusing descriptor first: the tenant after it is still told apart exactly.
    let r = s.ok(request("shop", &[checkout, t], 1)).await;
    assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::Ok, 9)]);
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 9)).await),
        [(Code::Ok, 0)]
    );
    // Both over: both are reported over.
    let r = s.ok(request("shop", &[checkout, t], 1)).await;
    assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::OverLimit, 0)]);
}

#[tokio::test]
async fn zero_requests_per_unit_always_refuses_and_spends_nothing() {
    let (_server, mut s) = shop().await;
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let blocked: &[(&str, &str)] = &[("route", "blocked")];
    for _ in 0..3 {
        let r = s.ok(request("shop", &[t, blocked], 1)).await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(codes(&r), [(Code::Ok, 10), (Code::OverLimit, 0)]);
        let limit = r.statuses.get(1).and_then(limit_of);
        assert_eq!(limit, Some((0, "DAY", "route_blocked".into())));
    }
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 1)).await),
        [(Code::Ok, 9)]
    );
}

/// The module's decisions the server ran: in script mode each is one `EVALSHA`.
fn store_calls(c: &mut redis::Connection) -> i64 {
    if script_mode() {
        command_calls(c, "rl.admit")
    } else {
        ["rl.admit", "rl.multi", "rl.grant"]
            .iter()
            .map(|name| command_calls(c, name))
            .sum()
    }
}

/// A request refused before any store call (a descriptor no request passes, or one the
/// negative cache holds refused) is one decision of the engine: its other descriptors are asked
/// without spending, one store call, so each status says what its key holds, and counted as
/// what they are (no admission of a refused request).
#[tokio::test]
async fn refused_before_any_call_the_others_are_only_asked_in_one_decision() {
    let (server, mut s) = shop().await;
    let mut c = server.conn();
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let blocked: &[(&str, &str)] = &[("route", "blocked")];
    let checkout: &[(&str, &str)] = &[("route", "checkout")];
    let admitted = |s: &Service<_>| {
        let text = s.metrics.render();
        let line = r#"rl_gateway_decisions_total{route="rls:shop",rule="tenant",outcome="admit"} "#;
        text.lines()
            .find_map(|l| l.strip_prefix(line))
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };

    let before = store_calls(&mut c);
    let r = s.ok(request("shop", &[t, blocked], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 10), (Code::OverLimit, 0)]);
    assert_eq!(store_calls(&mut c) - before, 1, "one ask of the tenant");
    assert_eq!(admitted(&s), 0, "a refused request admitted nothing");

    // Admitted, then refused by the store, then refused from the negative cache.
    s.ok(request("shop", &[t, checkout], 1)).await;
    let r = s.ok(request("shop", &[t, checkout], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 9), (Code::OverLimit, 0)]);
    let before = store_calls(&mut c);
    let r = s.ok(request("shop", &[t, checkout], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 9), (Code::OverLimit, 0)]);
    assert_eq!(store_calls(&mut c) - before, 1, "one ask of the tenant");
    let text = s.metrics.render();
    let cached =
        r#"rl_gateway_decisions_total{route="rls:shop",rule="checkout",outcome="refuse_cached"} 1"#;
    assert!(text.contains(cached), "{cached} not in\n{text}");
    assert_eq!(
        admitted(&s),
        1,
        "only the first request admitted the tenant"
    );
    // Nothing was spent: the tenant still holds 9.
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 9)).await),
        [(Code::Ok, 0)]
    );
}

#[tokio::test]
async fn the_same_descriptor_twice_costs_twice() {
    let (_server, mut s) = shop().await;
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let r = s.ok(request("shop", &[t, t], 3)).await;
    assert_eq!(codes(&r), [(Code::Ok, 4), (Code::Ok, 4)]);
    let r = s.ok(request("shop", &[t, t], 3)).await;
    assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::OverLimit, 0)]);
}

#[tokio::test]
async fn algorithms_and_burst() {
    let (_server, mut s) = shop().await;
    // gcra with a burst of 3 at 1 an hour: 3 at once, then refused.
    let b: &[(&str, &str)] = &[("burst", "u1")];
    for left in [2, 1, 0] {
        assert_eq!(
            codes(&s.ok(request("shop", &[b], 1)).await),
            [(Code::Ok, left)]
        );
    }
    assert_eq!(
        codes(&s.ok(request("shop", &[b], 1)).await),
        [(Code::OverLimit, 0)]
    );
    for key in ["sliding", "log"] {
        let d: &[(&str, &str)] = &[(key, "u1")];
        assert_eq!(
            codes(&s.ok(request("shop", &[d], 2)).await),
            [(Code::Ok, 0)]
        );
        assert_eq!(
            codes(&s.ok(request("shop", &[d], 1)).await),
            [(Code::OverLimit, 0)]
        );
    }
}

#[tokio::test]
async fn wildcards_count_each_value_apart_unless_shared() {
    let (_server, mut s) = shop().await;
    let a: &[(&str, &str)] = &[("path", "/api/a")];
    let b: &[(&str, &str)] = &[("path", "/api/b")];
    assert_eq!(
        codes(&s.ok(request("shop", &[a], 2)).await),
        [(Code::Ok, 0)]
    );
    assert_eq!(
        codes(&s.ok(request("shop", &[b], 1)).await),
        [(Code::Ok, 1)]
    );
    let none: &[(&str, &str)] = &[("path", "/web/a")];
    let r = s.ok(request("shop", &[none], 1)).await;
    assert_eq!(r.statuses.first().and_then(limit_of), None);
    let a: &[(&str, &str)] = &[("shared", "/api/a")];
    let b: &[(&str, &str)] = &[("shared", "/api/b")];
    assert_eq!(
        codes(&s.ok(request("shop", &[a], 2)).await),
        [(Code::Ok, 0)]
    );
    assert_eq!(
        codes(&s.ok(request("shop", &[b], 1)).await),
        [(Code::OverLimit, 0)]
    );
}

#[tokio::test]
async fn a_descriptor_may_carry_its_own_limit() {
    let (_server, mut s) = shop().await;
    let mut r = request("shop", &[&[("anything", "x")]], 1);
    if let Some(d) = r.descriptors.first_mut() {
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: RateLimitUnit::Day as i32,
        });
    }
    assert_eq!(codes(&s.ok(r.clone()).await), [(Code::Ok, 1)]);
    assert_eq!(codes(&s.ok(r.clone()).await), [(Code::Ok, 0)]);
    let last = s.ok(r.clone()).await;
    assert_eq!(codes(&last), [(Code::OverLimit, 0)]);
    assert_eq!(
        last.statuses.first().and_then(limit_of),
        Some((2, "DAY", "override".into()))
    );
    if let Some(d) = r.descriptors.first_mut() {
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: RateLimitUnit::Year as i32,
        });
    }
    let e = s.ask(r).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("descriptors[0].limit.unit"),
        "{}",
        e.message()
    );
}

#[tokio::test]
async fn statuses_carry_the_limit_and_the_reset() {
    let (_server, mut s) = shop().await;
    let r = s
        .ok(request(
            "shop",
            &[&[("tenant", "atlas")], &[("nothing", "x")]],
            1,
        ))
        .await;
    let tenant = r.statuses.first().unwrap();
    assert_eq!(limit_of(tenant), Some((10, "HOUR", "tenant".into())));
    let reset = tenant.duration_until_reset.unwrap();
    assert!(
        (1..=3600).contains(&reset.seconds) || reset.nanos > 0,
        "{reset:?}"
    );
    // A descriptor that matches nothing is OK, with no limit.
    let free = r.statuses.get(1).unwrap();
    assert_eq!((code(free), limit_of(free)), (Code::Ok, None));
    // So is every descriptor of a domain the file does not have.
    let r = s.ok(request("other", &[&[("tenant", "atlas")]], 1)).await;
    assert_eq!(
        (overall(&r), limit_of(r.statuses.first().unwrap())),
        (Code::Ok, None)
    );
}

#[tokio::test]
async fn the_ratelimit_headers_when_asked_for() {
    let (_server, mut s) = shop().await;
    let r = s
        .ok(request(
            "shop",
            &[&[("tenant", "atlas")], &[("burst", "u1")]],
            1,
        ))
        .await;
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers,
        [
            (
                "RateLimit-Policy".to_string(),
                "\"tenant\";q=10;w=3600, \"burst\";q=1;w=3600;rl-burst=3".to_string()
            ),
            (
                "RateLimit".to_string(),
                format!(
                    "\"tenant\";r=9;t={}, \"burst\";r=2;t=3600",
                    r.statuses[0].duration_until_reset.unwrap().seconds
                        + i64::from(r.statuses[0].duration_until_reset.unwrap().nanos > 0)
                )
            ),
        ]
    );
}

#[tokio::test]
async fn decisions_show_in_the_metrics() {
    let (_server, mut s) = shop().await;
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let checkout: &[(&str, &str)] = &[("route", "checkout")];
    s.ok(request("shop", &[t, checkout], 1)).await;
    s.ok(request("shop", &[t, checkout], 1)).await;
    let text = s.metrics.render();
    for line in [
        r#"rl_gateway_decisions_total{route="rls:shop",rule="tenant",outcome="admit"} 1"#,
        r#"rl_gateway_decisions_total{route="rls:shop",rule="checkout",outcome="admit"} 1"#,
        r#"rl_gateway_decisions_total{route="rls:shop",rule="checkout",outcome="refuse"} 1"#,
        r#"rl_gateway_route_mode{route="rls:shop",mode="deny"} 1"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[tokio::test]
async fn requests_it_cannot_answer_are_invalid_arguments() {
    let (_server, mut s) = shop().await;
    let cases = [
        (
            request("", &[&[("tenant", "a")]], 1),
            "domain must not be empty",
        ),
        (request("shop", &[], 1), "descriptor list must not be empty"),
        (
            request("shop", &vec![&[("tenant", "a")][..]; 65], 1),
            "at most 64 per request",
        ),
    ];
    for (r, message) in cases {
        let e = s.ask(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains(message), "{}", e.message());
    }
    let mut refund = request("shop", &[&[("tenant", "a")]], 1);
    if let Some(d) = refund.descriptors.first_mut() {
        d.is_negative_hits = true;
    }
    let e = s.ask(refund).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("is_negative_hits"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_each_hash_slot_decides_its_descriptors_all_or_nothing() {
    let cluster = Cluster::start();
    let nodes: Vec<String> = (0..3)
        .map(|i| format!("redis://127.0.0.1:{}/", cluster.port(i)))
        .collect();
    let conn = ClusterClientBuilder::new(nodes)
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let mut s = serve_on(LIMITS, redis_rl_client::Rl::new(conn), true).await;
    // Two keys in different slots: each slot decides alone, so the tenant's slot spends
    // even when the user's refuses.
    let t: &[(&str, &str)] = &[("tenant", "atlas")];
    let u: &[(&str, &str)] = &[("user", "17")];
    assert_ne!(
        get_slot(b"rls:shop:tenant=atlas#window"),
        get_slot(b"rls:shop:user=17#window")
    );
    assert_eq!(
        codes(&s.ok(request("shop", &[t, u], 1)).await),
        [(Code::Ok, 9), (Code::Ok, 0)]
    );
    let r = s.ok(request("shop", &[t, u], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(codes(&r), [(Code::Ok, 8), (Code::OverLimit, 0)]);
    // Values with one hash tag put their keys in one slot: all or nothing again.
    let t: &[(&str, &str)] = &[("tenant", "{acme}")];
    let u: &[(&str, &str)] = &[("user", "{acme}17")];
    assert_eq!(
        codes(&s.ok(request("shop", &[t, u], 1)).await),
        [(Code::Ok, 9), (Code::Ok, 0)]
    );
    let r = s.ok(request("shop", &[t, u], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 9), (Code::OverLimit, 0)]);
    assert_eq!(
        codes(&s.ok(request("shop", &[t], 1)).await),
        [(Code::Ok, 8)]
    );
}
