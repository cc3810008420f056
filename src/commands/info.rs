//! `RL.INFO key`: explains a key, so that "why was I refused?" has an answer at the prompt.

use super::reply::{int, Value};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::error::Error;
use crate::core::limiter::State;
use crate::core::protocol::command;
use crate::core::rate;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    if call.args.len() != 2 {
        return Err(Error::Arity(command::INFO).into());
    }
    let mut key = Key::open_read(call.ctx, call.raw_arg(1))?;
    let ttl = key.ttl_ms();
    let Some(mut limiter) = key.limiter()? else {
        call.reply().value(Value::Null);
        return Ok(());
    };
    let now = clock::now_us();
    let rule = *limiter.rule();
    let algo = limiter.algo();
    let peek = limiter.peek(now);
    let mut fields: Vec<(&str, Value<'_>)> = vec![
        ("algo", Value::Bytes(algo.name().as_bytes())),
        ("limit", Value::Int(int(rule.limit()))),
        ("period_ms", Value::Int(int(rule.period_us() / 1000))),
        ("capacity", Value::Int(int(rule.burst()))),
        ("remaining", Value::Int(int(peek.remaining))),
        ("reset_after_ms", Value::Int(int(peek.reset_after_ms()))),
    ];
    let signed = |v: i128| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
    match limiter.state() {
        State::Gcra(g) => {
            let tat_us = rate::ticks_to_us(&rule, g.tat.get());
            fields.push(("tat_us", Value::Int(int(tat_us))));
        }
        State::Bucket(b) => {
            let token = rate::token(&rule);
            fields.push(("tokens", signed(b.level.get().div_euclid(token))));
            fields.push(("updated_us", Value::Int(int(b.updated_us))));
        }
        State::Window(w) => {
            fields.push(("window_start_ms", Value::Int(int(w.start_us / 1000))));
            fields.push(("count", Value::Int(int(w.count))));
        }
        State::Sliding(s) => {
            // As of now: the windows roll forward as time passes.
            let s = s.rolled(&rule, now.max(s.start_us));
            fields.push(("window_start_ms", Value::Int(int(s.start_us / 1000))));
            fields.push(("previous", Value::Int(int(s.previous))));
            fields.push(("current", Value::Int(int(s.current))));
        }
        State::Log(log) => {
            let (entries, units) = log.live_at(&rule, now);
            fields.push(("entries", Value::Int(int(entries as u64))));
            fields.push(("logged_units", Value::Int(int(units))));
        }
        State::Semaphore(s) => {
            fields.push(("in_flight", Value::Int(int(s.in_flight(now)))));
            let next = s.leases().map(|(_, e)| e).find(|&e| e > now);
            let next = next.map_or(0, |e| (e - now).div_ceil(1000));
            fields.push(("next_expiry_ms", Value::Int(int(next))));
        }
    }
    if let Some(r) = limiter.reservations() {
        fields.push(("reservations", Value::Int(int(r.live(now) as u64))));
    }
    if let State::Gcra(_) | State::Bucket(_) = limiter.state() {
        fields.push(("debt", Value::Int(int(limiter.debt(now)))));
    }
    fields.push(("ttl_ms", ttl.map_or(Value::Int(-1), |t| Value::Int(int(t)))));
    let reply = call.reply();
    let map = reply.map(fields.len());
    for (name, v) in fields {
        map.field(name, v);
    }
    Ok(())
}
