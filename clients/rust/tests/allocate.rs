//! `Rl::allocate` (`RL.ALLOCATE`, the home store of a limit shared across regions) against real
//! servers: one with the module and one without it (script mode), over RESP2 and RESP3, with the
//! same answers from both.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use common::Server;
use redis::aio::MultiplexedConnection;
use redis_rl_client::{Allotment, Error, Mode, Rl};
use rl_core::allocate::Terms;

const TERMS: Terms = Terms {
    limit: 10_000,
    reserve: 1_000,
    regions: 3,
    lease_ms: 10_000,
};

async fn client(server: &Server, resp3: bool) -> Rl<MultiplexedConnection> {
    let proto = if resp3 { "?protocol=resp3" } else { "" };
    let conn = redis::Client::open(format!("redis://127.0.0.1:{}/{proto}", server.port))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Rl::new(conn)
}

fn allotment(allocation: u64, region_demand: u64, total_demand: u64) -> Allotment {
    Allotment {
        allocation,
        lease_ms: 10_000,
        region_demand,
        total_demand,
    }
}

/// The core's worked example, two rounds of three regions, then a refusal and a demand above
/// what the command takes.
async fn worked_example(rl: &Rl<MultiplexedConnection>, key: &[u8]) {
    let round = [
        ("eu", 6_000, 150, allotment(8_700, 6_000, 6_000)),
        ("us", 3_000, 150, allotment(1_150, 3_000, 9_000)),
        ("ap", 0, 150, allotment(150, 0, 9_000)),
        ("eu", 6_000, 8_700, allotment(5_850, 6_000, 9_000)),
        // eu is counted at what it held until it says it holds its smaller grant.
        ("us", 3_000, 1_150, allotment(1_150, 3_000, 9_000)),
        ("eu", 6_000, 5_850, allotment(5_850, 6_000, 9_000)),
        ("us", 3_000, 1_150, allotment(3_000, 3_000, 9_000)),
    ];
    for (region, demand, held, want) in round {
        let got = rl
            .allocate(key, &TERMS, region, "gw-1", demand, held)
            .await
            .unwrap();
        assert_eq!(got, want, "{region} {demand} {held}");
    }
    let bad = Terms {
        reserve: 10_000,
        ..TERMS
    };
    match rl.allocate(key, &bad, "eu", "gw-1", 1, 1).await {
        Err(Error::Refused(text)) => assert_eq!(text, "ERR RESERVE must be in the range [0, 9999]"),
        other => panic!("{other:?}"),
    }
    match rl.allocate(key, &TERMS, "e/u", "gw-1", 1, 1).await {
        Err(Error::Refused(text)) => assert!(text.starts_with("ERR region must be"), "{text}"),
        other => panic!("{other:?}"),
    }
    let huge = rl
        .allocate(key, &TERMS, "ap", "gw-2", 5_000_000_000_000, 150)
        .await
        .unwrap();
    // Nearly all the demand: ap's target is most of the pool, capped by eu's 5,850 and us's
    // 3,000.
    assert_eq!(huge, allotment(1_150, 1_000_000_000_000, 1_000_000_009_000));
}

#[tokio::test]
async fn allocate_in_module_and_script_mode_over_resp2_and_resp3() {
    let module = Server::start();
    let plain = Server::start_plain(&[]);
    for resp3 in [false, true] {
        let key = format!("{{t:atlas}}:alloc:{resp3}");
        let rl = client(&module, resp3).await;
        worked_example(&rl, key.as_bytes()).await;
        let expected = if common::script_mode() {
            Mode::Script
        } else {
            Mode::Module
        };
        assert_eq!(rl.mode(), Some(expected));
        let rl = client(&plain, resp3).await;
        worked_example(&rl, key.as_bytes()).await;
        assert_eq!(rl.mode(), Some(Mode::Script));
    }
    // Both homes keep the same records (but for the instants they were seen).
    for server in [&module, &plain] {
        let fields: Vec<(String, String)> = common::cmd("HGETALL")
            .arg("{t:atlas}:alloc:true")
            .query(&mut server.conn())
            .unwrap();
        let mut got: Vec<(String, String, String)> = fields
            .into_iter()
            .map(|(f, v)| {
                let n: Vec<&str> = v.split(' ').collect();
                (f, n[0].to_string(), format!("{} {}", n[2], n[3]))
            })
            .collect();
        got.sort();
        let want = [
            ("ap gw-1", "0", "150 150"),
            ("ap gw-2", "1000000000000", "1150 150"),
            ("eu gw-1", "6000", "5850 5850"),
            ("us gw-1", "3000", "3000 1150"),
        ];
        assert_eq!(
            got,
            want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        );
    }
}
