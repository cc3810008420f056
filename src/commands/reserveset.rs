//! `RL.RESERVESET key payload now_us id expires_us estimate remaining reset_after_us
//! [delta settled]`: replays one reservation change made on a primary (a `RESERVE` or an
//! `RL.SETTLE`): the key's rate state becomes the payload's and reservation `id` becomes the one
//! given, in O(log n) in the reservations the key keeps. Validated like any command.

use super::write::{update, Effect};
use super::{Call, CmdError, Key};
use crate::core::error::Error;
use crate::core::request::reserveset::parse_reserveset;
use crate::core::rule::MAX_CLOCK_SKEW_US;
use crate::replicate;
use crate::state::codec;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let set = parse_reserveset(call.args.get(2..).unwrap_or_default())?;
    let clock = crate::clock::for_foreign_state(call.ctx);
    if let Some(clock) = clock {
        if set.now_us > clock.saturating_add(MAX_CLOCK_SKEW_US) {
            return Err(Error::AheadOfClock("now_us").into());
        }
    }
    let to = codec::decode(set.payload, clock)?;
    let fresh = Some((to.algo(), *to.rule()));
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    update(call, &mut key, 1, fresh, |l| {
        l.replay_reservation(to, set.id, set.reservation, set.now_us)?;
        Ok(((), Some(Effect::Replay)))
    })?;
    replicate::verbatim(call.ctx);
    call.reply().ok();
    Ok(())
}
