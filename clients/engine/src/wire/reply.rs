//! Replies parsed from a [`Reply`]: a RESP2 array in the documented order or a RESP3 map with
//! the documented names, into the same typed record.

use super::{Error, Reply as Value};
use rl_core::protocol::{command, field};
use rl_core::rule::Algo;
use smallvec::SmallVec;

/// `RL.ADMIT`'s decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_after_ms: u64,
    pub capacity: u64,
}

/// One rule of an `RL.MULTI` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOutcome {
    pub name: String,
    pub remaining: u64,
    pub reset_after_ms: u64,
}

/// `RL.MULTI`'s decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiDecision {
    pub allowed: bool,
    pub denied_by: Option<String>,
    pub retry_after_ms: u64,
    pub rules: Vec<RuleOutcome>,
}

/// `RL.GRANT`'s reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantReply {
    pub granted: u64,
    pub remaining: u64,
    pub valid_ms: u64,
    pub retry_after_ms: u64,
}

/// `RL.ACQUIRE`'s reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub acquired: bool,
    /// As given or generated; `None` when refused without an `ID`.
    pub holder: Option<Vec<u8>>,
    pub in_flight: u64,
    pub retry_after_ms: u64,
}

/// `RL.SETTLE`'s reply when there was something to settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Positive: debited; negative: credited.
    pub delta: i64,
    pub remaining: u64,
}

/// `RL.INFO`'s record. The fields every algorithm has are plain; the others are `Some` for the
/// algorithms that report them (see `commands.md`). Fields a newer module adds are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub algo: Algo,
    pub limit: u64,
    pub period_ms: u64,
    pub capacity: u64,
    pub remaining: u64,
    pub reset_after_ms: u64,
    /// -1 when the key has no expiry.
    pub ttl_ms: i64,
    pub tat_us: Option<u64>,
    pub tokens: Option<i64>,
    pub updated_us: Option<u64>,
    pub window_start_ms: Option<u64>,
    pub count: Option<u64>,
    pub previous: Option<u64>,
    pub current: Option<u64>,
    pub entries: Option<u64>,
    pub logged_units: Option<u64>,
    pub in_flight: Option<u64>,
    pub next_expiry_ms: Option<u64>,
    pub reservations: Option<u64>,
    pub debt: Option<u64>,
}

/// A reply record: RESP2 values in the documented order, or a RESP3 map, read by field name.
struct Record<'a> {
    what: &'static str,
    fields: Fields<'a>,
}

/// A record's fields: a RESP2 array is read in place, by the position of a name in its order
/// (no list built for each record of every reply); pairs (a map, `RL.INFO`'s flat list) are
/// collected.
enum Fields<'a> {
    Ordered(&'static [&'static str], &'a [Value]),
    Pairs(Vec<(&'a [u8], &'a Value)>),
}

impl<'a> Record<'a> {
    /// `names` is the RESP2 order.
    fn new(
        value: &'a Value,
        names: &'static [&'static str],
        what: &'static str,
    ) -> Result<Self, Error> {
        let fields = match value {
            Value::Array(items) if items.len() == names.len() => Fields::Ordered(names, items),
            Value::Map(pairs) => Fields::Pairs(
                pairs
                    .iter()
                    .map(|(k, v)| Ok((text_bytes(k, what)?, v)))
                    .collect::<Result<_, Error>>()?,
            ),
            other => return Err(unexpected(what, other)),
        };
        Ok(Record { what, fields })
    }

    /// A flat `name, value, ...` array (RESP2 `RL.INFO`) or a map.
    fn pairs(value: &'a Value, what: &'static str) -> Result<Self, Error> {
        let fields = match value {
            Value::Array(items) if items.len() % 2 == 0 => items
                .chunks_exact(2)
                .map(|pair| match pair {
                    [k, v] => Ok((text_bytes(k, what)?, v)),
                    _ => Err(unexpected(what, value)),
                })
                .collect::<Result<_, Error>>()?,
            Value::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| Ok((text_bytes(k, what)?, v)))
                .collect::<Result<_, Error>>()?,
            other => return Err(unexpected(what, other)),
        };
        Ok(Record {
            what,
            fields: Fields::Pairs(fields),
        })
    }

    fn find(&self, name: &str) -> Option<&'a Value> {
        match &self.fields {
            Fields::Ordered(names, items) => {
                let at = names.iter().position(|n| *n == name)?;
                items.get(at)
            }
            Fields::Pairs(fields) => fields
                .iter()
                .find(|(k, _)| *k == name.as_bytes())
                .map(|(_, v)| *v),
        }
    }

    fn get(&self, name: &str) -> Result<&'a Value, Error> {
        self.find(name)
            .ok_or_else(|| Error::Unexpected(format!("{}: no field {name}", self.what)))
    }

    fn int(&self, name: &str) -> Result<i64, Error> {
        match self.get(name)? {
            Value::Int(n) => Ok(*n),
            other => Err(unexpected(self.what, other)),
        }
    }

    fn uint(&self, name: &str) -> Result<u64, Error> {
        let n = self.int(name)?;
        u64::try_from(n).map_err(|_| Error::Unexpected(format!("{}: {name} is {n}", self.what)))
    }

    fn flag(&self, name: &str) -> Result<bool, Error> {
        match self.uint(name)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(Error::Unexpected(format!("{}: {name} is {n}", self.what))),
        }
    }

    fn opt_uint(&self, name: &str) -> Result<Option<u64>, Error> {
        self.find(name).map(|_| self.uint(name)).transpose()
    }
}

fn text_bytes<'a>(v: &'a Value, what: &'static str) -> Result<&'a [u8], Error> {
    match v {
        Value::Bulk(b) => Ok(b),
        Value::Status(s) => Ok(s.as_bytes()),
        other => Err(unexpected(what, other)),
    }
}

fn text_str<'a>(v: &'a Value, what: &'static str) -> Result<&'a str, Error> {
    std::str::from_utf8(text_bytes(v, what)?)
        .map_err(|_| Error::Unexpected(format!("{what}: a name that is not UTF-8")))
}

fn unexpected(what: &str, v: &Value) -> Error {
    Error::Unexpected(format!("{what}: {v:?}"))
}

/// A server error inside a value (RESP3 may carry one) is the error it names.
fn no_error(v: &Value) -> Result<(), Error> {
    match v {
        Value::Error(e) => Err(Error::from_server(e)),
        _ => Ok(()),
    }
}

/// Whether `v` is the module's refusal of a reservation on a key that keeps as many as it may
/// (its text as the module and the script write it).
pub fn reservations_full(v: &Value) -> bool {
    matches!(v, Value::Error(text) if *text == rl_core::error::Error::TooManyReservations.to_string())
}

pub fn decision(v: &Value) -> Result<Decision, Error> {
    no_error(v)?;
    let r = Record::new(v, &field::ADMIT, command::ADMIT)?;
    let [allowed, remaining, retry_after, reset_after, capacity] = field::ADMIT;
    Ok(Decision {
        allowed: r.flag(allowed)?,
        remaining: r.uint(remaining)?,
        retry_after_ms: r.uint(retry_after)?,
        reset_after_ms: r.uint(reset_after)?,
        capacity: r.uint(capacity)?,
    })
}

pub fn multi_decision(v: &Value) -> Result<MultiDecision, Error> {
    let view = multi_view(v)?;
    let rules = view
        .rules
        .iter()
        .map(|r| RuleOutcome {
            name: r.name.to_owned(),
            remaining: r.remaining,
            reset_after_ms: r.reset_after_ms,
        })
        .collect();
    Ok(MultiDecision {
        allowed: view.allowed,
        denied_by: view.denied_by.map(str::to_owned),
        retry_after_ms: view.retry_after_ms,
        rules,
    })
}

/// `RL.MULTI`'s decision read in place: what the engine reads of every admission, without a
/// copy of each rule's name ([`multi_decision`] owns them), its rules held inline up to 4.
pub(crate) struct MultiView<'a> {
    pub(crate) allowed: bool,
    pub(crate) denied_by: Option<&'a str>,
    pub(crate) retry_after_ms: u64,
    pub(crate) rules: SmallVec<[RuleView<'a>; 4]>,
}

/// One rule of a [`MultiView`].
pub(crate) struct RuleView<'a> {
    pub(crate) name: &'a str,
    pub(crate) remaining: u64,
    pub(crate) reset_after_ms: u64,
}

fn rule_view(rule: &Value) -> Result<RuleView<'_>, Error> {
    const WHAT: &str = command::MULTI;
    let [name, remaining, reset_after] = field::MULTI_RULE;
    let r = Record::new(rule, &field::MULTI_RULE, WHAT)?;
    Ok(RuleView {
        name: text_str(r.get(name)?, WHAT)?,
        remaining: r.uint(remaining)?,
        reset_after_ms: r.uint(reset_after)?,
    })
}

/// See [`MultiView`]; fails as [`multi_decision`] does, on the first field it cannot read.
pub(crate) fn multi_view(v: &Value) -> Result<MultiView<'_>, Error> {
    no_error(v)?;
    const WHAT: &str = command::MULTI;
    let r = Record::new(v, &field::MULTI, WHAT)?;
    let [allowed, denied_by, retry_after, rules] = field::MULTI;
    let denied_by = match r.get(denied_by)? {
        Value::Nil => None,
        name => Some(text_str(name, WHAT)?),
    };
    let Value::Array(rules) = r.get(rules)? else {
        return Err(unexpected(WHAT, v));
    };
    // Every rule read now, so that a reply is taken whole or refused whole.
    let rules = rules.iter().map(rule_view).collect::<Result<_, Error>>()?;
    Ok(MultiView {
        allowed: r.flag(allowed)?,
        denied_by,
        retry_after_ms: r.uint(retry_after)?,
        rules,
    })
}

pub fn grant(v: &Value) -> Result<GrantReply, Error> {
    no_error(v)?;
    let r = Record::new(v, &field::GRANT, command::GRANT)?;
    let [granted, remaining, valid, retry_after] = field::GRANT;
    Ok(GrantReply {
        granted: r.uint(granted)?,
        remaining: r.uint(remaining)?,
        valid_ms: r.uint(valid)?,
        retry_after_ms: r.uint(retry_after)?,
    })
}

pub fn lease(v: &Value) -> Result<Lease, Error> {
    no_error(v)?;
    const WHAT: &str = command::ACQUIRE;
    let r = Record::new(v, &field::ACQUIRE, WHAT)?;
    let [acquired, holder, in_flight, retry_after] = field::ACQUIRE;
    let holder = match r.get(holder)? {
        Value::Nil => None,
        h => Some(text_bytes(h, WHAT)?.to_vec()),
    };
    Ok(Lease {
        acquired: r.flag(acquired)?,
        holder,
        in_flight: r.uint(in_flight)?,
        retry_after_ms: r.uint(retry_after)?,
    })
}

/// `RL.RELEASE` and `RL.RENEW`: 1 done, 0 not held.
pub fn held(v: &Value, what: &'static str) -> Result<bool, Error> {
    no_error(v)?;
    match v {
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        other => Err(unexpected(what, other)),
    }
}

pub fn settlement(v: &Value) -> Result<Option<Settlement>, Error> {
    no_error(v)?;
    if *v == Value::Nil {
        return Ok(None);
    }
    let r = Record::new(v, &field::SETTLE, command::SETTLE)?;
    let [delta, remaining] = field::SETTLE;
    Ok(Some(Settlement {
        delta: r.int(delta)?,
        remaining: r.uint(remaining)?,
    }))
}

pub fn key_info(v: &Value) -> Result<Option<KeyInfo>, Error> {
    no_error(v)?;
    const WHAT: &str = "RL.INFO";
    if *v == Value::Nil {
        return Ok(None);
    }
    let r = Record::pairs(v, WHAT)?;
    let algo = text_bytes(r.get("algo")?, WHAT)?;
    let algo = Algo::ALL
        .into_iter()
        .find(|a| a.name().as_bytes() == algo)
        .ok_or_else(|| {
            Error::Unexpected(format!("{WHAT}: algo {}", String::from_utf8_lossy(algo)))
        })?;
    Ok(Some(KeyInfo {
        algo,
        limit: r.uint("limit")?,
        period_ms: r.uint("period_ms")?,
        capacity: r.uint("capacity")?,
        remaining: r.uint("remaining")?,
        reset_after_ms: r.uint("reset_after_ms")?,
        ttl_ms: r.int("ttl_ms")?,
        tat_us: r.opt_uint("tat_us")?,
        tokens: r.find("tokens").map(|_| r.int("tokens")).transpose()?,
        updated_us: r.opt_uint("updated_us")?,
        window_start_ms: r.opt_uint("window_start_ms")?,
        count: r.opt_uint("count")?,
        previous: r.opt_uint("previous")?,
        current: r.opt_uint("current")?,
        entries: r.opt_uint("entries")?,
        logged_units: r.opt_uint("logged_units")?,
        in_flight: r.opt_uint("in_flight")?,
        next_expiry_ms: r.opt_uint("next_expiry_ms")?,
        reservations: r.opt_uint("reservations")?,
        debt: r.opt_uint("debt")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn a_full_reservation_table_is_told_apart_in_module_and_script_mode() {
        let text = rl_core::error::Error::TooManyReservations.to_string();
        // The script (servers without the module) refuses with the module's very text.
        let script = include_str!("../../../scripts/rl.lua");
        assert!(script.contains(&format!("R.fail('{text}')")), "{text}");
        assert!(reservations_full(&Value::Error(text)));
        assert!(!reservations_full(&Value::Error("ERR syntax error".into())));
        assert!(!reservations_full(&bulk("ERR the key keeps")));
    }

    #[test]
    fn admit_from_resp2_and_resp3_alike() {
        let want = Decision {
            allowed: true,
            remaining: 19,
            retry_after_ms: 0,
            reset_after_ms: 500,
            capacity: 20,
        };
        let resp2 = Value::Array([1, 19, 0, 500, 20].map(Value::Int).to_vec());
        assert_eq!(decision(&resp2).unwrap(), want);
        // A map in another order still reads by name.
        let resp3 = Value::Map(vec![
            (bulk("capacity"), Value::Int(20)),
            (bulk("allowed"), Value::Int(1)),
            (bulk("remaining"), Value::Int(19)),
            (bulk("retry_after_ms"), Value::Int(0)),
            (bulk("reset_after_ms"), Value::Int(500)),
        ]);
        assert_eq!(decision(&resp3).unwrap(), want);
    }

    #[test]
    fn wrong_shapes_are_unexpected_not_decisions() {
        for v in [
            Value::Array([1, 19, 0, 500].map(Value::Int).to_vec()),
            Value::Array([2, 19, 0, 500, 20].map(Value::Int).to_vec()),
            Value::Array([1, -1, 0, 500, 20].map(Value::Int).to_vec()),
            Value::Status("OK".into()),
            Value::Map(vec![(bulk("allowed"), Value::Int(1))]),
        ] {
            assert!(matches!(decision(&v), Err(Error::Unexpected(_))), "{v:?}");
        }
    }

    #[test]
    fn errors_are_told_apart() {
        for refused in [
            "ERR period needs a unit",
            "WRONGTYPE Operation",
            "CROSSSLOT Keys",
        ] {
            assert!(matches!(Error::from_server(refused), Error::Refused(ref t) if t == refused));
        }
        for unavailable in [
            "LOADING Redis is loading",
            "BUSY script",
            "NOSCRIPT No",
            "OOM x",
        ] {
            assert!(
                Error::from_server(unavailable).is_unavailable(),
                "{unavailable}"
            );
        }
        let e = decision(&Value::Error("ERR COST 11 exceeds the capacity 10".into())).unwrap_err();
        assert!(matches!(e, Error::Refused(_)));
    }
}
