//! `RL.RESERVESET`'s request, parsed from the arguments after the key: one reservation change
//! made on a primary, as replicas and the AOF receive it.

use crate::error::Error;
use crate::parse::{parse_id, parse_u64};
use crate::protocol::command;
use crate::reservations::{Reservation, Settlement};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveSet<'a> {
    /// The key's rate state as the primary wrote it, encoded without reservations.
    pub payload: &'a [u8],
    /// The primary's clock when it made the change (µs): reservations forgotten by then go.
    pub now_us: u64,
    pub id: &'a [u8],
    pub reservation: Reservation,
}

/// Parses `payload now_us id expires_us estimate remaining reset_after_us [delta settled]`
/// (after the key); the last two are the settlement, when there is one.
pub fn parse_reserveset<A: AsRef<[u8]>>(args: &[A]) -> Result<ReserveSet<'_>, Error> {
    let (payload, now, id, numbers, settlement) = match args {
        [p, now, id, e, est, rem, reset] => (p, now, id, [e, est, rem, reset], None),
        [p, now, id, e, est, rem, reset, delta, settled] => {
            (p, now, id, [e, est, rem, reset], Some((delta, settled)))
        }
        _ => return Err(Error::Arity(command::RESERVESET)),
    };
    let number = |b: &A, name| parse_u64(b.as_ref(), name);
    let [expires, estimate, remaining, reset] = numbers;
    let settled = match settlement {
        None => None,
        Some((delta, settled)) => Some(Settlement {
            delta: parse_i64(delta.as_ref(), "delta")?,
            remaining: number(settled, "settled")?,
        }),
    };
    Ok(ReserveSet {
        payload: payload.as_ref(),
        now_us: number(now, "now_us")?,
        id: parse_id(id.as_ref(), "id")?,
        reservation: Reservation {
            expires_us: number(expires, "expires_us")?,
            estimate: number(estimate, "estimate")?,
            remaining: number(remaining, "remaining")?,
            reset_after_us: number(reset, "reset_after_us")?,
            settled,
        },
    })
}

/// A decimal `i64`, with an optional leading `-`.
fn parse_i64(bytes: &[u8], arg: &'static str) -> Result<i64, Error> {
    match bytes.strip_prefix(b"-") {
        Some(digits) => {
            let v = parse_u64(digits, arg)?;
            // parse_u64 caps at i64::MAX, whose negation fits.
            Ok(-(v as i64))
        }
        None => Ok(parse_u64(bytes, arg)? as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        let args =
            |l: &'static str| -> Vec<&'static [u8]> { l.split(' ').map(str::as_bytes).collect() };
        let plain = args("P 100 req-1 3700 10 90 5000 -4 94");
        let set = parse_reserveset(&plain).unwrap();
        assert_eq!(
            (set.payload, set.now_us, set.id),
            (&b"P"[..], 100, &b"req-1"[..])
        );
        let r = set.reservation;
        assert_eq!(
            (r.expires_us, r.estimate, r.remaining, r.reset_after_us),
            (3700, 10, 90, 5000)
        );
        assert_eq!(
            r.settled,
            Some(Settlement {
                delta: -4,
                remaining: 94
            })
        );
        let unsettled = args("P 100 req-1 3700 10 90 5000");
        assert_eq!(
            parse_reserveset(&unsettled).unwrap().reservation.settled,
            None
        );
        let e = |l| parse_reserveset(&args(l)).unwrap_err().to_string();
        assert_eq!(
            e("P 100 req-1 3700 10 90"),
            "ERR wrong number of arguments for 'RL.RESERVESET' command"
        );
        assert_eq!(
            e("P 100 req-1 3700 10 90 5000 x 1"),
            "ERR delta must be an integer"
        );
        assert_eq!(
            e("P 100 req-1 3700 10 90 5000 -- 1"),
            "ERR delta must be an integer"
        );
    }
}
