//! `RL.SETTLE key id actual [FORGET]`: settles a reservation with the actual cost.

use super::reply::{int, Value};
use super::write::{update, Effect};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::protocol::field;
use crate::core::request::settle::parse_settle;
use crate::core::reservations::Settlement;
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = settle(call);
    stats::SETTLE.count(result.as_ref().ok().map(Option::is_some));
    match result? {
        None => call.reply().value(Value::Null),
        Some(s) => {
            let reply = call.reply();
            let [delta, remaining] = field::SETTLE;
            let record = reply.record(2);
            record.field(delta, Value::Int(s.delta));
            record.field(remaining, Value::Int(int(s.remaining)));
        }
    }
    Ok(())
}

fn settle(call: &Call<'_>) -> Result<Option<Settlement>, CmdError> {
    let settle = parse_settle(call.args.get(2..).unwrap_or_default())?;
    let (id, actual) = (settle.id, settle.actual);
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let settled = update(call, &mut key, 1, None, |l| {
        Ok(match l.settle_then(id, actual, now, settle.forget) {
            Some((s, changed)) => (
                Some(s),
                changed.then_some(Effect::Reservation { id, now_us: now }),
            ),
            None => (None, None),
        })
    })?;
    Ok(settled.flatten())
}
