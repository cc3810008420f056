//! `RL.ALLOCATE`: a region's allocation of a global rule's limit, asked of the home store
//! (`commands.md`, RL.ALLOCATE). Built and read here, sent by [`crate::Rl::allocate`] in the
//! mode the home runs (the module, or the script on a server without it).

use rl_core::allocate::{Terms, MAX_DEMAND};
use rl_core::protocol::{command, field, token};
use rl_engine::wire::{Args, Reply};

use crate::error::Error;

pub use rl_core::allocate::Allotment;

/// `RL.ALLOCATE key limit region reporter demand held RESERVE r REGIONS n LEASE <ms>ms`. A
/// demand above what the command takes (10^12 units per period) is reported as that: it is a
/// measurement, and only its share of the total matters. Every other bound is the server's to
/// refuse, with its own message.
pub fn args(
    key: &[u8],
    terms: &Terms,
    region: &str,
    reporter: &str,
    demand: u64,
    held: u64,
) -> Args {
    let mut args = Args::new(command::ALLOCATE);
    args.arg(key)
        .arg(terms.limit)
        .arg(region)
        .arg(reporter)
        .arg(demand.min(MAX_DEMAND))
        .arg(held)
        .arg(token::RESERVE)
        .arg(terms.reserve)
        .arg(token::REGIONS)
        .arg(terms.regions)
        .arg(token::LEASE)
        .arg(format!("{}ms", terms.lease_ms).as_str());
    args
}

/// The reply as the module sends it in RESP2 and the script in either protocol (an array in
/// the order of `field::ALLOCATE`), or as the module sends it in RESP3 (a map of those names).
pub fn allotment(reply: &Reply) -> Result<Allotment, Error> {
    let unexpected = || Error::Unexpected(format!("{}: {reply:?}", command::ALLOCATE));
    let uint = |v: &Reply| match v {
        Reply::Int(n) => u64::try_from(*n).map_err(|_| unexpected()),
        _ => Err(unexpected()),
    };
    let mut values = [0u64; 4];
    match reply {
        Reply::Error(e) => return Err(Error::from_server(e)),
        Reply::Array(items) if items.len() == values.len() => {
            for (slot, item) in values.iter_mut().zip(items) {
                *slot = uint(item)?;
            }
        }
        Reply::Map(pairs) if pairs.len() == values.len() => {
            for (slot, name) in values.iter_mut().zip(field::ALLOCATE) {
                let value = pairs
                    .iter()
                    .find(|(k, _)| {
                        matches!(k, Reply::Bulk(b) if b == name.as_bytes())
                            || matches!(k, Reply::Status(s) if s == name)
                    })
                    .map(|(_, v)| v)
                    .ok_or_else(unexpected)?;
                *slot = uint(value)?;
            }
        }
        _ => return Err(unexpected()),
    }
    let [allocation, lease_ms, region_demand, total_demand] = values;
    Ok(Allotment {
        allocation,
        lease_ms,
        region_demand,
        total_demand,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERMS: Terms = Terms {
        limit: 10_000,
        reserve: 1_000,
        regions: 3,
        lease_ms: 2_000,
    };

    #[test]
    fn the_command_carries_every_term_and_a_bounded_demand() {
        let a = args(
            b"{t:atlas}:alloc",
            &TERMS,
            "eu",
            "gw-1",
            2_000_000_000_000,
            150,
        );
        let words: Vec<String> = a
            .iter()
            .map(|w| String::from_utf8(w.to_vec()).unwrap())
            .collect();
        assert_eq!(
            words.join(" "),
            "RL.ALLOCATE {t:atlas}:alloc 10000 eu gw-1 1000000000000 150 RESERVE 1000 \
             REGIONS 3 LEASE 2000ms"
        );
    }

    #[test]
    fn arrays_and_maps_alike() {
        let want = Allotment {
            allocation: 8_700,
            lease_ms: 10_000,
            region_demand: 6_000,
            total_demand: 6_000,
        };
        let ints = [8_700, 10_000, 6_000, 6_000];
        let array = Reply::Array(ints.iter().map(|n| Reply::Int(*n)).collect());
        assert_eq!(allotment(&array).unwrap(), want);
        let map = Reply::Map(
            field::ALLOCATE
                .iter()
                .zip(ints)
                .rev()
                .map(|(k, v)| (Reply::Bulk(k.as_bytes().to_vec()), Reply::Int(v)))
                .collect(),
        );
        assert_eq!(allotment(&map).unwrap(), want);
        assert!(allotment(&Reply::Array(vec![Reply::Int(1)])).is_err());
        assert!(allotment(&Reply::Array(vec![Reply::Int(-1); 4])).is_err());
        assert!(matches!(
            allotment(&Reply::Error(
                "ERR RESERVE must be in the range [0, 9]".into()
            )),
            Err(Error::Refused(_))
        ));
    }
}
