//! `RL.ACQUIRE`, `RL.RELEASE` and `RL.RENEW` on a limiter that holds a semaphore.
//!
//! Built on the limiter: the lease arithmetic is `semaphore`'s, which knows nothing of the
//! limiter holding it; this only finds the semaphore in the key's state and records the rule.

use crate::error::Error;
use crate::limiter::Limiter;
use crate::rule::{Algo, Rule};
use crate::semaphore::{Acquire, Semaphore};
use crate::state::State;

impl Limiter {
    fn semaphore(&mut self) -> Result<&mut Semaphore, Error> {
        let stored = self.algo().name();
        match &mut self.state {
            State::Semaphore(s) => Ok(s),
            _ => Err(Error::AlgoMismatch {
                stored,
                asked: Algo::Semaphore.name(),
            }),
        }
    }

    /// `RL.ACQUIRE`: a slot of `rule.limit()` for `rule.period_us()`. Changes nothing when
    /// refused or `dry`.
    pub fn acquire(
        &mut self,
        rule: Rule,
        holder: Option<&[u8]>,
        now_us: u64,
        dry: bool,
    ) -> Result<Acquire, Error> {
        let s = self.semaphore()?;
        let a = s.acquire(rule.limit(), rule.period_us(), holder, now_us, dry);
        if a.acquired && !dry {
            self.rule = rule;
        }
        Ok(a)
    }

    /// The semaphore's next generated-id sequence number (0 for other algorithms).
    pub fn next_lease_id(&self) -> u64 {
        match &self.state {
            State::Semaphore(s) => s.next_id(),
            _ => 0,
        }
    }

    /// Replays a semaphore write (see `Semaphore::apply`) under `rule`.
    pub fn apply_lease(
        &mut self,
        rule: Rule,
        holder: &[u8],
        expiry_us: u64,
        now_us: u64,
        next_id: u64,
    ) -> Result<(), Error> {
        self.semaphore()?
            .apply(holder, expiry_us, now_us, next_id)?;
        self.rule = rule;
        Ok(())
    }

    /// `RL.RELEASE`: true when `holder` held a slot, which is now free.
    pub fn release(&mut self, holder: &[u8], now_us: u64) -> Result<bool, Error> {
        Ok(self.semaphore()?.release(holder, now_us))
    }

    /// `RL.RENEW`: true when `holder`'s live lease now lasts `lease_us` from now.
    pub fn renew(&mut self, holder: &[u8], lease_us: u64, now_us: u64) -> Result<bool, Error> {
        Ok(self.semaphore()?.renew(holder, lease_us, now_us))
    }
}
