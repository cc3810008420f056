//! What a key of type `rllimiter` points to: 16 bytes for an idle gcra key, the same plus its
//! reservations for a gcra key with a few, a boxed [`Limiter`] otherwise.
//!
//! A gcra key without reservations is a rule and a TAT. The rule is interned (`rules`) and the
//! TAT fits 96 bits for any rule whose limit is below about 4 * 10^13 per period (ticks are
//! microseconds times the limit), so such a key is one 16-byte [`Compact`] instead of a 64-byte
//! limiter. A gcra key whose reservations are still few (one small array) is a [`Reserved`]: the
//! `Compact` and the reservations in one allocation, instead of a limiter and a second
//! allocation. Redis keeps one opaque pointer per value and never reads through it, so the
//! pointer says which form it is: a `Compact` has its lowest bit set, a `Reserved` the next one
//! (all three are 8-byte aligned). Commands still see a [`Limiter`]: [`Held`] unpacks it, and
//! [`Held::commit`], the write path's last step, packs it back.

use std::ffi::c_void;
use std::mem;
use std::ops::{Deref, DerefMut};

use redis_module::raw;

use super::rules::{self, RuleRef};
use super::LIMITER_TYPE;
use crate::core::entries::allocated;
use crate::core::error::Error;
use crate::core::limiter::{Limiter, State};
use crate::core::reservations::Reservations;
use crate::core::rule::{Algo, Rule};

/// The bits of the pointer Redis keeps that mark a [`Compact`] and a [`Reserved`]; only
/// [`tag`] and [`tag_reserved`] set them and only [`untag`] reads them.
const COMPACT: usize = 1;
const RESERVED: usize = 2;
const TAGS: usize = COMPACT | RESERVED;

/// The pointer Redis keeps for a compact value.
fn tag(compact: Compact) -> *mut c_void {
    Box::into_raw(Box::new(compact))
        .map_addr(|a| a | COMPACT)
        .cast()
}

/// The pointer Redis keeps for a compact value with reservations.
fn tag_reserved(reserved: Reserved) -> *mut c_void {
    Box::into_raw(Box::new(reserved))
        .map_addr(|a| a | RESERVED)
        .cast()
}

/// What a pointer made by [`into_raw`] (or [`tag`], [`tag_reserved`]) points to.
enum Raw {
    Compact(*mut Compact),
    Reserved(*mut Reserved),
    Full(*mut Limiter),
}

fn untag(raw: *mut c_void) -> Raw {
    let untagged = raw.map_addr(|a| a & !TAGS);
    match raw.addr() & TAGS {
        COMPACT => Raw::Compact(untagged.cast()),
        RESERVED => Raw::Reserved(untagged.cast()),
        _ => Raw::Full(raw.cast()),
    }
}

/// A gcra TAT in 96 bits and the id of its rule.
#[derive(Debug, Clone)]
pub struct Compact {
    rule: RuleRef,
    tat_high: u32,
    tat_low: u64,
}

const _: () = assert!(
    mem::size_of::<Compact>() == 16
        && mem::align_of::<Compact>() > TAGS
        && mem::align_of::<Reserved>() > TAGS
        && mem::align_of::<Limiter>() > TAGS
);

impl Compact {
    /// `limiter` as a `Compact`, if it is one.
    fn pack(limiter: &Limiter) -> Option<Compact> {
        if limiter.reservations().is_some() {
            return None;
        }
        let tat = packable_tat(limiter)?;
        Some(Compact::new(rules::intern(*limiter.rule())?, tat))
    }

    fn new(rule: RuleRef, tat: u128) -> Compact {
        let mut compact = Compact {
            rule,
            tat_high: 0,
            tat_low: 0,
        };
        compact.set_tat(tat);
        compact
    }

    fn tat(&self) -> i128 {
        (i128::from(self.tat_high) << 64) | i128::from(self.tat_low)
    }

    fn set_tat(&mut self, tat: u128) {
        self.tat_high = (tat >> 64) as u32;
        self.tat_low = tat as u64;
    }

    fn unpack(&self) -> Result<(Limiter, Rule), Error> {
        let rule = self.rule.rule()?;
        Ok((Limiter::gcra_at(rule, self.tat()), rule))
    }
}

/// The TAT of a gcra limiter whose TAT fits a [`Compact`] (whatever its reservations).
fn packable_tat(limiter: &Limiter) -> Option<u128> {
    match limiter.state() {
        State::Gcra(g) => u128::try_from(g.tat.get()).ok().filter(|t| t >> 96 == 0),
        _ => None,
    }
}

/// A gcra key with a few reservations: its [`Compact`] and the reservations, in one allocation.
#[derive(Debug, Clone)]
pub struct Reserved {
    compact: Compact,
    reservations: Reservations,
}

impl Reserved {
    /// `limiter` as a `Reserved`, or back when it is not one (no reservations, too many for
    /// the small array, another algorithm, a TAT beyond 96 bits, or no room to intern its rule).
    fn pack(mut limiter: Limiter) -> Result<Reserved, Limiter> {
        let few = limiter.reservations().is_some_and(Reservations::is_few);
        let Some(tat) = packable_tat(&limiter).filter(|_| few) else {
            return Err(limiter);
        };
        let Some(rule) = rules::intern(*limiter.rule()) else {
            return Err(limiter);
        };
        let Some(reservations) = limiter.take_reservations() else {
            return Err(limiter);
        };
        Ok(Reserved {
            compact: Compact::new(rule, tat),
            reservations,
        })
    }

    fn unpack(&self) -> Result<(Limiter, Rule), Error> {
        let (limiter, rule) = self.compact.unpack()?;
        Ok((limiter.with_reservations(self.reservations.clone())?, rule))
    }
}

/// A value, seen through the pointer Redis keeps.
pub enum Stored<'a> {
    Compact(&'a mut Compact),
    Reserved(&'a mut Reserved),
    Full(&'a mut Limiter),
}

/// The pointer Redis keeps for `limiter`, in its smallest form.
pub fn into_raw(limiter: Limiter) -> *mut c_void {
    if let Some(compact) = Compact::pack(&limiter) {
        return tag(compact);
    }
    match Reserved::pack(limiter) {
        Ok(reserved) => tag_reserved(reserved),
        Err(limiter) => Box::into_raw(Box::new(limiter)).cast(),
    }
}

/// The value behind `raw`.
///
/// # Safety
/// `raw` comes from [`into_raw`], is not freed, and nothing else borrows it for `'a`.
pub unsafe fn from_raw<'a>(raw: *mut c_void) -> Stored<'a> {
    match untag(raw) {
        Raw::Compact(compact) => Stored::Compact(&mut *compact),
        Raw::Reserved(reserved) => Stored::Reserved(&mut *reserved),
        Raw::Full(limiter) => Stored::Full(&mut *limiter),
    }
}

/// Frees the value behind `raw` and says which algorithm it held.
///
/// # Safety
/// `raw` comes from [`into_raw`] and is not used again.
pub unsafe fn free_raw(raw: *mut c_void) -> Algo {
    match untag(raw) {
        Raw::Compact(compact) => {
            drop(Box::from_raw(compact));
            Algo::Gcra
        }
        Raw::Reserved(reserved) => {
            drop(Box::from_raw(reserved));
            Algo::Gcra
        }
        Raw::Full(limiter) => Box::from_raw(limiter).algo(),
    }
}

impl<'a> Stored<'a> {
    pub fn algo(&self) -> Algo {
        match self {
            Stored::Compact(_) | Stored::Reserved(_) => Algo::Gcra,
            Stored::Full(limiter) => limiter.algo(),
        }
    }

    /// Runs `f` on the limiter this value holds.
    pub fn with<T>(&self, f: impl FnOnce(&Limiter) -> T) -> Result<T, Error> {
        match self {
            Stored::Compact(c) => Ok(f(&c.unpack()?.0)),
            Stored::Reserved(r) => Ok(f(&r.unpack()?.0)),
            Stored::Full(limiter) => Ok(f(limiter)),
        }
    }

    /// A new pointer holding a copy of this value.
    pub fn copy_raw(&self) -> *mut c_void {
        match self {
            Stored::Compact(c) => tag((*c).clone()),
            Stored::Reserved(r) => tag_reserved((*r).clone()),
            Stored::Full(limiter) => Box::into_raw(Box::new((*limiter).clone())).cast(),
        }
    }

    /// Bytes this value holds (`MEMORY USAGE`); the interned rule is shared, so not counted.
    pub fn bytes(&self) -> usize {
        match self {
            Stored::Compact(_) => mem::size_of::<Compact>(),
            Stored::Reserved(r) => {
                allocated(mem::size_of::<Reserved>()) + r.reservations.heap_bytes()
            }
            Stored::Full(limiter) => mem::size_of::<Limiter>() + limiter.heap_bytes(),
        }
    }

    /// The limiter of the open `key` this value belongs to, to read or change; changes are
    /// kept by [`Held::commit`], which repacks the value when its shape changed.
    pub fn hold(self, key: *mut raw::RedisModuleKey) -> Result<Held<'a>, Error> {
        Ok(match self {
            Stored::Compact(compact) => {
                let (limiter, rule) = compact.unpack()?;
                Held::Unpacked {
                    key,
                    compact,
                    limiter,
                    rule,
                }
            }
            Stored::Reserved(reserved) => {
                let (limiter, rule) = reserved.unpack()?;
                Held::Reserved {
                    key,
                    reserved,
                    limiter,
                    rule,
                }
            }
            Stored::Full(limiter) => Held::Boxed { key, limiter },
        })
    }
}

/// A limiter borrowed from an open key's value.
pub enum Held<'a> {
    Boxed {
        key: *mut raw::RedisModuleKey,
        limiter: &'a mut Limiter,
    },
    /// Unpacked from `compact`, whose rule was `rule`; packed back by `commit`.
    Unpacked {
        key: *mut raw::RedisModuleKey,
        compact: &'a mut Compact,
        limiter: Limiter,
        rule: Rule,
    },
    /// Unpacked from `reserved` (its reservations copied), whose rule was `rule`; packed back
    /// by `commit`.
    Reserved {
        key: *mut raw::RedisModuleKey,
        reserved: &'a mut Reserved,
        limiter: Limiter,
        rule: Rule,
    },
}

impl Deref for Held<'_> {
    type Target = Limiter;

    fn deref(&self) -> &Limiter {
        match self {
            Held::Boxed { limiter, .. } => limiter,
            Held::Unpacked { limiter, .. } | Held::Reserved { limiter, .. } => limiter,
        }
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Limiter {
        match self {
            Held::Boxed { limiter, .. } => limiter,
            Held::Unpacked { limiter, .. } | Held::Reserved { limiter, .. } => limiter,
        }
    }
}

impl Held<'_> {
    /// Writes a changed limiter back to the key, in its smallest form: the write step of every
    /// change (dropping a `Held` without it keeps the value as it was, which is what a refusal
    /// or a dry run wants; a boxed limiter is changed in place either way).
    pub fn commit(self) {
        match self {
            Held::Unpacked {
                key,
                compact,
                limiter,
                rule,
            } => {
                if limiter.reservations().is_none() {
                    if let Some(tat) = packable_tat(&limiter) {
                        // The common case: same rule, new TAT, written in place.
                        if *limiter.rule() == rule {
                            compact.set_tat(tat);
                            return;
                        }
                        if let Some(new_rule) = rules::intern(*limiter.rule()) {
                            compact.rule = new_rule;
                            compact.set_tat(tat);
                            return;
                        }
                    }
                }
                replace(key, into_raw(limiter));
            }
            Held::Reserved {
                key,
                reserved,
                mut limiter,
                rule,
            } => {
                // Same rule, still a few reservations: written back in place.
                let few = limiter.reservations().is_some_and(Reservations::is_few);
                let tat = packable_tat(&limiter).filter(|_| few && *limiter.rule() == rule);
                if let Some(tat) = tat {
                    // `few` says they are there to take.
                    if let Some(reservations) = limiter.take_reservations() {
                        reserved.compact.set_tat(tat);
                        reserved.reservations = reservations;
                        return;
                    }
                }
                replace(key, into_raw(limiter));
            }
            // A boxed gcra limiter whose reservations went, or are few again, packs now.
            Held::Boxed { key, limiter } => {
                if let Some(compact) = Compact::pack(limiter) {
                    replace(key, tag(compact));
                    return;
                }
                let few = limiter.reservations().is_some_and(Reservations::is_few);
                if few && packable_tat(limiter).is_some() {
                    // The boxed value is freed by `replace`: what it leaves behind is unused.
                    let placeholder = Limiter::gcra_at(*limiter.rule(), 0);
                    let owned = mem::replace(limiter, placeholder);
                    replace(key, into_raw(owned));
                }
            }
        }
    }
}

/// Makes `new` the value of `key` and frees the old one, keeping the key's expiry. Nothing may
/// use the old value afterwards.
fn replace(key: *mut raw::RedisModuleKey, new: *mut c_void) {
    let mut old = std::ptr::null_mut();
    // SAFETY: `key` is open for writing and holds a value of our type (it was just read);
    // `new` comes from `into_raw`'s two forms, and the old pointer, handed back, is ours.
    unsafe {
        let ours = *LIMITER_TYPE.raw_type.borrow();
        let replaced = raw::RedisModule_ModuleTypeReplaceValue
            .is_some_and(|f| f(key, ours, new, &mut old) == raw::REDISMODULE_OK as i32);
        if replaced {
            free_raw(old);
        } else {
            // Not expected on any supported server; the new value must not leak.
            free_raw(new);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ask::Ask;
    use crate::core::gcra::Gcra;
    use crate::core::limiter::Wide;

    fn rule(limit: u64, burst: u64) -> Rule {
        Rule::new(Algo::Gcra, limit, 1_000_000, Some(burst)).unwrap()
    }

    const NOW: u64 = 1_764_000_000_000_000;

    #[derive(Debug, PartialEq)]
    enum Form {
        Compact,
        Reserved,
        Full,
    }

    /// Round-trips through the raw pointer (and a copy), and tells the form it was kept in.
    fn through_raw(l: &Limiter) -> (Limiter, Form) {
        let raw = into_raw(l.clone());
        // SAFETY: just created, freed below.
        unsafe {
            let v = from_raw(raw);
            let form = match v {
                Stored::Compact(_) => Form::Compact,
                Stored::Reserved(_) => Form::Reserved,
                Stored::Full(_) => Form::Full,
            };
            let out = v.with(Clone::clone).unwrap();
            let heap = l.reservations().map_or(0, Reservations::heap_bytes);
            let bytes = match form {
                Form::Compact => 16,
                Form::Reserved => allocated(mem::size_of::<Reserved>()) + heap,
                Form::Full => mem::size_of::<Limiter>() + l.heap_bytes(),
            };
            assert_eq!(v.bytes(), bytes);
            let copy = v.copy_raw();
            assert_eq!(from_raw(copy).with(Clone::clone).unwrap(), out);
            assert_eq!(free_raw(copy), l.algo());
            assert_eq!(free_raw(raw), l.algo());
            (out, form)
        }
    }

    #[test]
    fn gcra_keys_pack_with_few_reservations_or_none_and_all_round_trip() {
        let r = rule(1_000_000, 1_000_000);
        let mut gcra = Limiter::new(Algo::Gcra, r);
        gcra.admit(Algo::Gcra, r, 7, NOW, false).unwrap();
        assert_eq!(through_raw(&gcra), (gcra.clone(), Form::Compact));
        let mut bucket = Limiter::new(Algo::Bucket, r);
        bucket.admit(Algo::Bucket, r, 7, NOW, false).unwrap();
        assert_eq!(through_raw(&bucket), (bucket.clone(), Form::Full));
        let mut reserved = gcra.clone();
        reserved
            .reserve_ask(Ask::new(Algo::Gcra, r, 1), b"id", 60_000_000, NOW)
            .unwrap();
        assert_eq!(through_raw(&reserved), (reserved.clone(), Form::Reserved));
        // One reservation in one allocation of the smallest class that holds it.
        assert!(allocated(mem::size_of::<Reserved>()) <= 112);
        // Beyond the small array, the trees stay in a boxed limiter.
        let mut many = reserved.clone();
        for i in 0..crate::core::entries::FEW {
            let id = format!("id-{i}");
            many.reserve_ask(Ask::new(Algo::Gcra, r, 1), id.as_bytes(), 60_000_000, NOW)
                .unwrap();
        }
        assert_eq!(through_raw(&many), (many.clone(), Form::Full));
        let mut reserved_bucket = bucket.clone();
        reserved_bucket
            .reserve_ask(Ask::new(Algo::Bucket, r, 1), b"id", 60_000_000, NOW)
            .unwrap();
        assert_eq!(
            through_raw(&reserved_bucket),
            (reserved_bucket.clone(), Form::Full)
        );
    }

    #[test]
    fn a_tat_beyond_96_bits_stays_boxed() {
        let r = rule(1_000_000_000_000_000, 1_000_000_000_000_000);
        let big = Limiter::from_parts(
            r,
            State::Gcra(Gcra {
                tat: Wide::new(1 << 100),
            }),
        )
        .unwrap();
        assert_eq!(through_raw(&big), (big.clone(), Form::Full));
        let edge = Limiter::gcra_at(r, (1 << 96) - 1);
        assert_eq!(through_raw(&edge), (edge.clone(), Form::Compact));
    }
}
