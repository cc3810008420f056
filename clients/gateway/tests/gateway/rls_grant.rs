//! `grant` on a descriptor's limit: a hot descriptor is spent from chunks leased from the
//! store, so a request costs a store call only when its chunk runs out, and what is admitted
//! never passes what the store granted. Against a real Redis with the module, asked over gRPC
//! by several clients at once.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{command_calls, script_mode, Server};
use crate::rls_support::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis::Connection;

const LIMIT: u64 = 2000;
const WANT: u64 = 200;

/// Fixed windows of a day (the reference's semantics), so that a run inside one window has
/// one exact bound; a run across midnight has two windows' worth. `tenant` is never refused
/// in these tests; `capped` is, after 2,000 a day.
const HOT: &str = r#"
domain: hot
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 1000000
      grant:
        want: 200
        ttl: 10s
  - key: capped
    rate_limit:
      unit: day
      requests_per_unit: 2000
      grant:
        want: 200
        ttl: 10s
"#;

/// Every store call the gateways made: in script mode each is one `EVALSHA`.
fn store_calls(c: &mut Connection) -> i64 {
    if script_mode() {
        command_calls(c, "rl.grant")
    } else {
        ["rl.grant", "rl.admit", "rl.multi"]
            .iter()
            .map(|name| command_calls(c, name))
            .sum()
    }
}

fn day() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400
}

/// `requests` asked by `clients` tasks at once about `key=value`; how many were admitted.
async fn hammer<C: redis_rl_client::RlConnection + 'static>(
    service: &Service<C>,
    (key, value): (&'static str, &'static str),
    clients: usize,
    requests: usize,
) -> u64 {
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let mut client = service.client.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..requests / clients {
                let r = client
                    .should_rate_limit(request("hot", &[&[(key, value)]], 1))
                    .await
                    .unwrap()
                    .into_inner();
                match overall(&r) {
                    Code::Ok => admitted += 1,
                    Code::OverLimit => {}
                    other => panic!("{other:?}"),
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_descriptor_costs_a_store_call_per_chunk() {
    let server = Server::start();
    let mut c = server.conn();
    let mut s = serve(HOT, store(server.port).await).await;
    let before = store_calls(&mut c);

    // A chunk-spent descriptor is OK with its limit; what the store holds is not known here.
    let r = s.ok(request("hot", &[&[("tenant", "acme")]], 1)).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(
        limit_of(&r.statuses[0]),
        Some((1_000_000, "DAY", "tenant".to_string()))
    );
    // That one, and 4 clients at once asking 2,500 times each.
    let requests = 1 + 10_000;
    let admitted = 1 + hammer(&s, ("tenant", "acme"), 4, 10_000).await;
    assert_eq!(admitted, requests as u64);
    let calls = store_calls(&mut c) - before;
    println!("{admitted} admitted of {requests} requests with {calls} store calls");
    // One `RL.GRANT` per 200 requests begun, and nothing else: 0.5 %.
    assert_eq!(calls, (requests as u64).div_ceil(WANT) as i64);
    assert!(calls * 100 <= requests as i64);
    let text = s.metrics.render();
    let refills = r#"rl_gateway_grant_refills_total{rule="tenant"} "#;
    let line = text.lines().find(|l| l.starts_with(refills)).unwrap();
    assert_eq!(line, format!("{refills}{calls}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_admitted_is_what_the_store_granted() {
    let server = Server::start();
    let mut c = server.conn();
    let one = serve(HOT, store(server.port).await).await;
    let first = day();
    let before = store_calls(&mut c);
    let admitted = hammer(&one, ("capped", "one"), 4, 10_000).await;
    let calls = store_calls(&mut c) - before;
    println!("{admitted} admitted of 10000 requests with {calls} store calls");
    // Every chunk is spent from the store's count, and spent in full, since the requests kept
    // coming while each chunk lived; refusals come from the negative cache.
    if day() == first {
        assert_eq!(admitted, LIMIT, "{calls} calls");
    } else {
        assert!(admitted <= 2 * LIMIT, "{admitted}");
    }

    // Two gateways on one key: each spends only what the store granted it; a chunk one leased
    // and did not spend lapses with its ttl, so at most one chunk per gateway goes unspent.
    let a = serve(HOT, store(server.port).await).await;
    let b = serve(HOT, store(server.port).await).await;
    let first = day();
    let (x, y) = tokio::join!(
        hammer(&a, ("capped", "shared"), 2, 3000),
        hammer(&b, ("capped", "shared"), 2, 3000)
    );
    let windows = day() - first + 1;
    assert!(x + y <= LIMIT * windows, "{x} + {y}");
    assert!(x + y >= LIMIT - 2 * WANT, "{x} + {y}");
}
