//! The reference service's README examples (envoyproxy/ratelimit), as data and unchanged,
//! served against a real Redis with the module, and asked by a gRPC client built from Envoy's
//! API types: each behaves as that README documents. Limits per second are checked only where
//! the answer cannot depend on where a second begins.

use crate::common::Server;
use crate::rls_support::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use rl_gateway::rls::Config;

/// README, "Example 2", unchanged.
const EXAMPLE_2: &str = r#"
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"#;

const EXAMPLE_3: &str = r#"
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
"#;

const EXAMPLE_4_FIRST: &str = r#"
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
"#;

const EXAMPLE_4_SECOND: &str = r#"
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
"#;

const EXAMPLE_5: &str = r#"
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#;

const EXAMPLE_7: &str = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"#;

#[tokio::test]
async fn example_2_marketing_messages_per_number_and_day() {
    let server = Server::start();
    let mut s = serve(EXAMPLE_2, store(server.port).await).await;
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let number: &[(&str, &str)] = &[("to_number", "2061111111")];
    // The README's complete request: both descriptors at once, 5 and 100 a day.
    for sent in 1..=5u32 {
        let r = s.ok(request("messaging", &[marketing, number], 1)).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(codes(&r), [(Code::Ok, 5 - sent), (Code::Ok, 100 - sent)]);
    }
    let r = s.ok(request("messaging", &[marketing, number], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // The refusal spent on neither: the number still has its 95.
    assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::Ok, 95)]);
    let day = Some((5, "DAY", "message_type_marketing.to_number".to_string()));
    assert_eq!(r.statuses.first().and_then(limit_of), day);
    // Each number has its own 5 a day, and its own 100.
    let other: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2062222222")];
    let r = s.ok(request("messaging", &[other], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 4)]);
    let r = s.ok(request("messaging", &[number], 1)).await;
    assert_eq!(codes(&r), [(Code::Ok, 94)]);
}

#[tokio::test]
async fn examples_3_to_7_matching_unlimited_and_replaces() {
    let server = Server::start();
    let mut s = serve(EXAMPLE_3, store(server.port).await).await;

    // Example 3: key and value before key alone; 0 a second refuses every request.
    let banned = s
        .ok(request(
            "edge_proxy_per_ip",
            &[&[("remote_address", "50.0.0.5")]],
            1,
        ))
        .await;
    assert_eq!(overall(&banned), Code::OverLimit);
    assert_eq!(codes(&banned), [(Code::OverLimit, 0)]);
    let other = s
        .ok(request(
            "edge_proxy_per_ip",
            &[&[("remote_address", "50.0.0.1")]],
            1,
        ))
        .await;
    assert_eq!(overall(&other), Code::Ok);
    let first = other.statuses.first().and_then(limit_of);
    assert_eq!(first, Some((10, "SECOND", "remote_address".into())));

    // Example 4: a request matches descriptors at its own depth only.
    let two_tuples = request(
        "example4",
        &[&[("key", "value"), ("subkey", "subvalue")]],
        1,
    );
    s.rls.reload(Config::parse(EXAMPLE_4_FIRST).unwrap());
    let r = s.ok(two_tuples.clone()).await;
    assert_eq!(codes(&r), [(Code::Ok, 0)]);
    assert_eq!(r.statuses.first().and_then(limit_of), None);
    s.rls.reload(Config::parse(EXAMPLE_4_SECOND).unwrap());
    let r = s.ok(two_tuples).await;
    let limit = r.statuses.first().and_then(limit_of);
    assert_eq!(limit, Some((300, "SECOND", "key_value.subkey".into())));

    // Example 5: unlimited is OK with the largest remainder, and never reaches the store.
    s.rls.reload(Config::parse(EXAMPLE_5).unwrap());
    let r = s
        .ok(request(
            "internal",
            &[&[("ldap", "x")], &[("azure", "y")]],
            1,
        ))
        .await;
    assert_eq!(codes(&r), [(Code::Ok, u32::MAX), (Code::Ok, 99)]);
    assert_eq!(r.statuses.first().and_then(limit_of), None);
    let azure = Some((100, "MINUTE", "azure".to_string()));
    assert_eq!(r.statuses.get(1).and_then(limit_of), azure);

    // Example 7: matched together, the replacing limit applies and the replaced one is left
    // alone; matched apart, each applies.
    s.rls.reload(Config::parse(EXAMPLE_7).unwrap());
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    let r = s.ok(request("example7", &[one, two], 1)).await;
    assert_eq!(r.statuses.first().and_then(limit_of), None);
    let replacing = Some((10, "SECOND", "key_2_value_2.user_bkthomps".to_string()));
    assert_eq!(r.statuses.get(1).and_then(limit_of), replacing);
    let r = s.ok(request("example7", &[one], 1)).await;
    let specific = Some((5, "SECOND", "specific_limit".to_string()));
    assert_eq!(r.statuses.first().and_then(limit_of), specific);
}

#[tokio::test]
async fn example_6_shadow_mode_never_refuses_but_counts() {
    // Example 6 with `unit: hour` instead of `second`, so that the count cannot start over
    // in the middle of the test; `shadow_mode` is exactly as in the README.
    let yaml = r#"
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: hour
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: hour
"#;
    let server = Server::start();
    let mut s = serve(yaml, store(server.port).await).await;
    let a: &[(&str, &str)] = &[("service", "auth-service"), ("user", "user-a")];
    let b: &[(&str, &str)] = &[("service", "auth-service"), ("user", "user-b")];
    let r = s.ok(request("example6", &[a], 10)).await;
    assert_eq!(codes(&r), [(Code::Ok, 0)]);
    let r = s.ok(request("example6", &[a], 1)).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(codes(&r), [(Code::Ok, 0)]);
    let r = s.ok(request("example6", &[b], 20)).await;
    assert_eq!(codes(&r), [(Code::Ok, 0)]);
    let r = s.ok(request("example6", &[a, b], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(codes(&r), [(Code::Ok, 0), (Code::OverLimit, 0)]);
    let metrics = s.metrics.render();
    let shadow = r#"route="rls:example6",rule="service.user_user-a",outcome="shadow_refuse"} 2"#;
    assert!(metrics.contains(shadow), "{metrics}");
}
