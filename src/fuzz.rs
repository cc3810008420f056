// Compiled only under #[cfg(test)] (see lib.rs), so this test code may unwrap.
//! Property tests that feed arbitrary bytes to everything that parses user input or stored
//! payloads: each must answer `Ok` or a clean `Err`, never panic (a panic would abort Redis).

use proptest::prelude::*;

use crate::core::allocate::Reporter;
use crate::core::request::admit::parse_admit;
use crate::core::request::allocate::parse_allocate;
use crate::core::request::grant::parse_grant;
use crate::core::request::lease::{parse_acquire, parse_leaseset, parse_release, parse_renew};
use crate::core::request::multi::parse_multi;
use crate::core::request::settle::parse_settle;
use crate::core::request::throttle::parse_throttle;
use crate::core::throttle::from_redis_cell;
use crate::state::codec::{decode, encode};

/// Words that steer the parsers into their interesting branches, mixed with random bytes.
fn word() -> impl Strategy<Value = Vec<u8>> {
    let known = prop::sample::select(vec![
        "BURST",
        "COST",
        "ALGO",
        "DRYRUN",
        "RESERVE",
        "KEEP",
        "WANT",
        "TTL",
        "RULE",
        "ID",
        "REGIONS",
        "LEASE",
        "eu",
        "gcra",
        "bucket",
        "window",
        "sliding",
        "log",
        "1",
        "0",
        "-1",
        "2",
        "20",
        "1s",
        "10ms",
        "3650d",
        "3651d",
        "1000000000000000",
        "9223372036854775807",
        "18446744073709551616",
        "",
    ])
    .prop_map(|s| s.as_bytes().to_vec());
    prop_oneof![known, prop::collection::vec(any::<u8>(), 0..12)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn command_parsers_never_panic(args in prop::collection::vec(word(), 0..14)) {
        let _ = parse_admit(&args);
        let _ = parse_grant(&args);
        let _ = parse_throttle(&args);
        let _ = parse_acquire(&args);
        let _ = parse_renew(&args);
        let _ = parse_release(&args);
        let _ = parse_leaseset(&args);
        let _ = parse_settle(&args);
        let _ = parse_multi(&args);
        let _ = parse_allocate(&args);
        if let [field, value, ..] = args.as_slice() {
            let _ = Reporter::decode(field, value);
        }
        if let Some(first) = args.first() {
            let _ = from_redis_cell(first, crate::core::rule::Rule::new(
                crate::core::rule::Algo::Gcra, 1, 1_000_000, None).unwrap());
        }
    }

    #[test]
    fn the_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&bytes, None);
        let _ = decode(&bytes, Some(1_764_000_000_000_000));
    }

    /// Damaged versions of real payloads: decoding either fails or yields a value that
    /// re-encodes to the same bytes (a canonical, valid state).
    #[test]
    fn damaged_payloads_decode_to_valid_states_or_not_at_all(
        algo in 0usize..6,
        at in 0usize..64,
        byte in any::<u8>(),
    ) {
        let payload = sample_payload(algo);
        let mut damaged = payload.clone();
        if let Some(b) = damaged.get_mut(at % payload.len().max(1)) {
            *b = byte;
        }
        if let Ok(limiter) = decode(&damaged, Some(1_764_000_000_000_000)) {
            let again = encode(&limiter);
            prop_assert_eq!(again.as_bytes(), &damaged[..]);
        }
    }
}

fn sample_payload(which: usize) -> Vec<u8> {
    use crate::core::ask::Ask;
    use crate::core::limiter::Limiter;
    use crate::core::rule::{Algo, Rule};
    let algo = Algo::ALL[which % Algo::ALL.len()];
    let burst = matches!(algo, Algo::Gcra | Algo::Bucket).then_some(9);
    let rule = Rule::new(algo, 5, 2_000_000, burst).unwrap();
    let mut l = Limiter::new(algo, rule);
    let now = 1_764_000_000_000_000;
    match algo {
        Algo::Semaphore => {
            l.acquire(rule, Some(b"h1"), now, false).unwrap();
            l.acquire(rule, None, now + 5, false).unwrap();
        }
        Algo::Gcra | Algo::Bucket => {
            l.reserve_ask(Ask::new(algo, rule, 3), b"r1", 60_000_000, now)
                .unwrap();
            l.settle(b"r1", 5, now + 10).unwrap();
        }
        _ => {
            l.admit(algo, rule, 2, now, false).unwrap();
            l.admit(algo, rule, 1, now + 7, false).unwrap();
        }
    }
    encode(&l).as_bytes().to_vec()
}
