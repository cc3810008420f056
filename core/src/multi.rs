//! `RL.MULTI`'s decision: several limiters, one rule each, all or nothing.
//!
//! One pass decides every rule without changing anything; only if all admit, and the call is not
//! a dry run, is each admission spent (applied as decided, not decided again). So a refusal changes no limiter, and an admission leaves each
//! limiter exactly as `RL.ADMIT` with that rule alone would.

use smallvec::SmallVec;

use crate::error::Error;
use crate::limiter::{Admission, Limiter};
use crate::rate::Decision;
use crate::request::multi::MultiRule;

/// Decides `rules` on `limiters` (one each, in the same order; `Limiter::new` for an absent key)
/// at `now_us`. Returns whether every rule admitted, and each rule's decision: when refused or
/// `dry`, what `RL.ADMIT ... DRYRUN` replies for it; otherwise what spending it replied.
pub fn decide(
    limiters: &mut [&mut Limiter],
    rules: &[MultiRule<'_>],
    now_us: u64,
    dry: bool,
) -> Result<(bool, SmallVec<[Decision; 8]>), Error> {
    if limiters.len() != rules.len() {
        return Err(Error::RuleCount {
            keys: limiters.len(),
            rules: rules.len(),
        });
    }
    let mut admissions: SmallVec<[Admission; 8]> = SmallVec::new();
    for (limiter, r) in limiters.iter().zip(rules) {
        admissions.push(limiter.decide_ask(r.ask(), now_us)?);
    }
    let allowed = admissions.iter().all(|a| a.decision.allowed);
    if !allowed || dry {
        return Ok((allowed, admissions.iter().map(|a| a.decision).collect()));
    }
    let decisions = limiters
        .iter_mut()
        .zip(admissions)
        .map(|(limiter, a)| limiter.spend(a))
        .collect();
    Ok((true, decisions))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::rule::{Algo, Family, Rule};

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    fn rule(
        name: &'static str,
        algo: Algo,
        limit: u64,
        burst: Option<u64>,
        cost: u64,
    ) -> MultiRule<'static> {
        MultiRule {
            name: name.as_bytes(),
            algo,
            rule: Rule::new(algo, limit, S, burst).unwrap(),
            cost,
        }
    }

    /// A user's bucket of 20 refilled at 2 per second, and a tenant's window of 3 per second.
    fn user_and_tenant() -> ([MultiRule<'static>; 2], [Limiter; 2]) {
        let rules = [
            rule("user", Algo::Bucket, 2, Some(20), 1),
            rule("tenant", Algo::Window, 3, None, 1),
        ];
        let limiters = [
            Limiter::new(rules[0].algo, rules[0].rule),
            Limiter::new(rules[1].algo, rules[1].rule),
        ];
        (rules, limiters)
    }

    #[test]
    fn admits_while_every_rule_admits_and_a_refusal_spends_nothing() {
        let (rules, [mut user, mut tenant]) = user_and_tenant();
        for i in 0..3 {
            let (allowed, d) = decide(&mut [&mut user, &mut tenant], &rules, T0, false).unwrap();
            assert!(allowed, "call {i}");
            assert_eq!((d[0].remaining, d[1].remaining), (19 - i, 2 - i));
        }
        let before = (user.clone(), tenant.clone());
        let (allowed, d) = decide(&mut [&mut user, &mut tenant], &rules, T0, false).unwrap();
        assert!(!allowed);
        assert!(d[0].allowed && !d[1].allowed);
        assert_eq!((d[0].remaining, d[1].retry_after_ms()), (16, 1000));
        assert_eq!((user, tenant), before, "the user's bucket was not spent");
    }

    #[test]
    fn a_dry_run_changes_nothing_and_replies_what_a_real_call_would() {
        let (rules, [mut user, mut tenant]) = user_and_tenant();
        let before = (user.clone(), tenant.clone());
        let dry = decide(&mut [&mut user, &mut tenant], &rules, T0, true).unwrap();
        assert_eq!((user.clone(), tenant.clone()), before);
        let real = decide(&mut [&mut user, &mut tenant], &rules, T0, false).unwrap();
        assert_eq!(dry, real);
    }

    #[test]
    fn a_key_of_another_algorithm_is_an_error_that_spends_nothing() {
        let (rules, [mut user, _]) = user_and_tenant();
        let mut log = Limiter::new(Algo::Log, Rule::new(Algo::Log, 3, S, None).unwrap());
        let before = user.clone();
        let e = decide(&mut [&mut user, &mut log], &rules, T0, false).unwrap_err();
        assert!(matches!(e, Error::AlgoMismatch { .. }));
        assert_eq!(user, before);
        let e = decide(&mut [&mut user], &rules, T0, false).unwrap_err();
        assert_eq!(e, Error::RuleCount { keys: 1, rules: 2 });
    }

    /// A rule for `algo` (never the semaphore) and a history of spending on its limiter.
    fn limiter_and_rule() -> impl Strategy<Value = (MultiRule<'static>, Limiter)> {
        (
            0usize..5,
            1u64..6,
            prop_oneof![Just(S), Just(10 * S)],
            1u64..4,
            prop::collection::vec((0u64..3 * S, 1u64..4), 0..8),
        )
            .prop_map(|(algo, limit, period, cost, history)| {
                let algo = Algo::ALL[algo];
                let burst = (algo.family() == Family::Rate).then_some(limit + 1);
                let rule = Rule::new(algo, limit, period, burst).unwrap();
                let cost = cost.min(rule.burst());
                let mut limiter = Limiter::new(algo, rule);
                let mut now = T0;
                for (dt, spend) in history {
                    now += dt;
                    limiter
                        .admit(algo, rule, spend.min(rule.burst()), now, false)
                        .unwrap();
                }
                let r = MultiRule {
                    name: b"r",
                    algo,
                    rule,
                    cost,
                };
                (r, limiter)
            })
    }

    proptest! {
        /// A refusal (or a dry run) changes no limiter; an admission leaves each limiter and
        /// reply exactly as spending its rule alone would.
        #[test]
        fn all_or_nothing_equals_each_rule_alone(
            pairs in prop::collection::vec(limiter_and_rule(), 1..5),
            later in 0u64..30 * S,
            dry in any::<bool>(),
        ) {
            let now = T0 + later;
            let rules: Vec<MultiRule<'static>> = pairs.iter().map(|(r, _)| r.clone()).collect();
            let before: Vec<Limiter> = pairs.iter().map(|(_, l)| l.clone()).collect();
            let mut after = before.clone();
            let mut refs: Vec<&mut Limiter> = after.iter_mut().collect();
            let (allowed, decisions) = decide(&mut refs, &rules, now, dry).unwrap();
            let mut alone = before.clone();
            let each: Vec<Decision> = alone
                .iter_mut()
                .zip(&rules)
                .map(|(l, r)| l.admit(r.algo, r.rule, r.cost, now, true).unwrap())
                .collect();
            prop_assert_eq!(allowed, each.iter().all(|d| d.allowed));
            if !allowed || dry {
                prop_assert_eq!(&after, &before);
                prop_assert_eq!(decisions.as_slice(), each.as_slice());
            } else {
                let spent: Vec<Decision> = alone
                    .iter_mut()
                    .zip(&rules)
                    .map(|(l, r)| l.admit(r.algo, r.rule, r.cost, now, false).unwrap())
                    .collect();
                prop_assert_eq!(decisions.as_slice(), spent.as_slice());
                prop_assert_eq!(&after, &alone);
            }
        }
    }
}
