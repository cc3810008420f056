//! The HTTP fields a decision feeds (`clients/CONTRACT.md` section 5): `RateLimit-Policy` and
//! `RateLimit` (draft-ietf-httpapi-ratelimit-headers structured fields), the older
//! `X-RateLimit-*` on request, and `Retry-After`. Pure: no I/O, no clock, no randomness of its own.

use std::fmt::Write as _;
use std::time::Duration;

/// What a rule is, for `RateLimit-Policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRule {
    pub name: String,
    /// For a semaphore: its capacity.
    pub limit: u64,
    /// Unused for a semaphore.
    pub period: Duration,
    pub capacity: u64,
    pub semaphore: bool,
}

/// What a rule decided, for `RateLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderOutcome {
    pub remaining: u64,
    pub reset_after_ms: u64,
    /// `Some` when this rule refused.
    pub retry_after_ms: Option<u64>,
}

impl HeaderOutcome {
    /// A refusal known only by its wait (the negative cache's, a chunk's): nothing remains
    /// until then.
    pub fn refused(wait_ms: u64) -> HeaderOutcome {
        HeaderOutcome {
            remaining: 0,
            reset_after_ms: wait_ms,
            retry_after_ms: Some(wait_ms),
        }
    }

    /// What `RL.ADMIT` replied.
    pub fn of(d: &crate::wire::reply::Decision) -> HeaderOutcome {
        HeaderOutcome {
            remaining: d.remaining,
            reset_after_ms: d.reset_after_ms,
            retry_after_ms: (!d.allowed).then_some(d.retry_after_ms),
        }
    }
}

pub const POLICY: &str = "RateLimit-Policy";
pub const RATELIMIT: &str = "RateLimit";
pub const LEGACY_LIMIT: &str = "X-RateLimit-Limit";
pub const LEGACY_REMAINING: &str = "X-RateLimit-Remaining";
pub const LEGACY_RESET: &str = "X-RateLimit-Reset";

/// One `RateLimit-Policy` item. A rate's quota is per whole seconds: a sub-second (or
/// fractional) period is scaled to the fewest whole seconds holding a whole quota (5 per
/// 250ms is `q=20;w=1`, 3 per 700ms is `q=30;w=7`), since `w` is an integer in the draft.
/// `rl-burst` appears when the capacity differs from the quota shown.
pub fn policy_item(rule: &HeaderRule) -> String {
    Prepared::new(rule).policy
}

/// One `RateLimit` item: `t` is the wait until the rule is full again, or until a retry would
/// be admitted when it refused, in seconds rounded up.
pub fn ratelimit_item(rule: &HeaderRule, outcome: &HeaderOutcome) -> String {
    let mut item = String::new();
    write_ratelimit_item(&mut item, &Prepared::new(rule), outcome);
    item
}

/// What a rule puts in the headers of every decision, written once: the engine prepares it
/// when the policy is loaded, since a refusal from the negative cache renders headers on every
/// request and nothing here changes between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Its `RateLimit-Policy` item, which begins with its name as a structured-field string,
    /// the beginning of its `RateLimit` item too (one allocation for both: a policy of 10,000
    /// overrides holds 10,000 of these).
    policy: String,
    name_len: usize,
    /// For `X-RateLimit-Limit`.
    limit: u64,
}

impl Prepared {
    pub fn new(rule: &HeaderRule) -> Prepared {
        let mut policy = String::with_capacity(rule.name.len().saturating_add(24));
        write_sf_string(&mut policy, &rule.name);
        let name_len = policy.len();
        if rule.semaphore {
            let _ = write!(policy, ";q={};qu=\"concurrent-requests\"", rule.capacity);
        } else {
            let (q, w) = whole_second_quota(rule.limit, rule.period);
            let _ = write!(policy, ";q={q};w={w}");
            if u128::from(rule.capacity) != q {
                let _ = write!(policy, ";rl-burst={}", rule.capacity);
            }
        }
        Prepared {
            policy,
            name_len,
            limit: rule.limit,
        }
    }

    fn name(&self) -> &str {
        self.policy.get(..self.name_len).unwrap_or_default()
    }
}

fn write_ratelimit_item(out: &mut String, rule: &Prepared, outcome: &HeaderOutcome) {
    out.push_str(rule.name());
    out.push_str(";r=");
    push_decimal(out, outcome.remaining);
    out.push_str(";t=");
    push_decimal(out, reset_seconds(outcome));
}

fn push_decimal(out: &mut String, n: u64) {
    out.push_str(crate::wire::decimal_digits(n, &mut [0; 20]));
}

/// Every header for the rules of one decision, in rule order (the caller leaves out rules
/// that must not be shown). `legacy` adds `X-RateLimit-*` for the most constraining rule: a
/// refusing one with the longest wait, otherwise the one with the fewest units left.
pub fn render(rules: &[(HeaderRule, HeaderOutcome)], legacy: bool) -> Vec<(&'static str, String)> {
    let prepared: Vec<Prepared> = rules.iter().map(|(r, _)| Prepared::new(r)).collect();
    render_prepared(prepared.iter().zip(rules.iter().map(|(_, o)| o)), legacy)
}

/// `render` for rules prepared beforehand, in the order given.
pub fn render_prepared<'a>(
    rules: impl Iterator<Item = (&'a Prepared, &'a HeaderOutcome)> + Clone,
    legacy: bool,
) -> Vec<(&'static str, String)> {
    let (count, policy_len) = rules.clone().fold((0usize, 0usize), |(n, len), (r, _)| {
        (n + 1, len.saturating_add(r.policy.len()))
    });
    if count == 0 {
        return Vec::new();
    }
    let mut policy = String::with_capacity(policy_len.saturating_add(2 * (count - 1)));
    let mut ratelimit = String::with_capacity(32 * count);
    for (i, (rule, outcome)) in rules.clone().enumerate() {
        if i > 0 {
            policy.push_str(", ");
            ratelimit.push_str(", ");
        }
        policy.push_str(&rule.policy);
        write_ratelimit_item(&mut ratelimit, rule, outcome);
    }
    let mut out = vec![(POLICY, policy), (RATELIMIT, ratelimit)];
    if legacy {
        let tightest = rules.min_by_key(|(_, o)| match o.retry_after_ms {
            Some(ms) => (0, u64::MAX - ms),
            None => (1, o.remaining),
        });
        if let Some((rule, outcome)) = tightest {
            out.push((LEGACY_LIMIT, rule.limit.to_string()));
            out.push((LEGACY_REMAINING, outcome.remaining.to_string()));
            out.push((LEGACY_RESET, reset_seconds(outcome).to_string()));
        }
    }
    out
}

/// `Retry-After` in whole seconds: the longest refusing wait plus an upward jitter of at most
/// `jitter_fraction` of it, rounded up, so it is never earlier than the true wait and
/// refused callers do not all come back in the same second. `rand` is uniform in [0, 1).
pub fn retry_after_seconds(max_retry_ms: u64, jitter_fraction: f64, rand: f64) -> u64 {
    let share = jitter_fraction.max(0.0) * rand.clamp(0.0, 1.0);
    // NaN fails every comparison, so it adds nothing; the float-to-int cast saturates.
    let extra = if share > 0.0 {
        (max_retry_ms as f64 * share).floor() as u64
    } else {
        0
    };
    max_retry_ms.saturating_add(extra).div_ceil(1000)
}

fn reset_seconds(outcome: &HeaderOutcome) -> u64 {
    outcome
        .retry_after_ms
        .unwrap_or(outcome.reset_after_ms)
        .div_ceil(1000)
}

/// `limit` per `period` as `(q, w)` with `w` whole seconds.
fn whole_second_quota(limit: u64, period: Duration) -> (u128, u128) {
    let ms = period.as_millis().max(1);
    if ms.is_multiple_of(1000) {
        return (u128::from(limit), ms / 1000);
    }
    let units_ms = u128::from(limit) * 1000;
    let w = ms / gcd(units_ms, ms);
    (units_ms * w / ms, w)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A structured-field string: printable ASCII only, `"` and `\` escaped; anything else
/// becomes `_` (names come from the policy, and a header must stay parseable).
fn write_sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(name: &str, limit: u64, period_ms: u64, capacity: u64) -> HeaderRule {
        HeaderRule {
            name: name.into(),
            limit,
            period: Duration::from_millis(period_ms),
            capacity,
            semaphore: false,
        }
    }

    #[test]
    fn policy_items() {
        assert_eq!(
            policy_item(&rate("user", 2, 1000, 20)),
            "\"user\";q=2;w=1;rl-burst=20"
        );
        assert_eq!(
            policy_item(&rate("tenant", 1000, 60_000, 1000)),
            "\"tenant\";q=1000;w=60"
        );
        assert_eq!(
            policy_item(&rate("fast", 5, 250, 5)),
            "\"fast\";q=20;w=1;rl-burst=5"
        );
        assert_eq!(policy_item(&rate("odd", 3, 700, 30)), "\"odd\";q=30;w=7");
        assert_eq!(
            policy_item(&rate("a\"b\\é", 1, 1000, 1)),
            "\"a\\\"b\\\\_\";q=1;w=1"
        );
        let sem = HeaderRule {
            name: "inflight".into(),
            limit: 3,
            period: Duration::from_secs(60),
            capacity: 3,
            semaphore: true,
        };
        assert_eq!(
            policy_item(&sem),
            "\"inflight\";q=3;qu=\"concurrent-requests\""
        );
    }

    #[test]
    fn ratelimit_rounds_up_and_uses_the_retry_when_refused() {
        let r = rate("user", 2, 1000, 20);
        let admitted = HeaderOutcome {
            remaining: 19,
            reset_after_ms: 500,
            retry_after_ms: None,
        };
        assert_eq!(ratelimit_item(&r, &admitted), "\"user\";r=19;t=1");
        let refused = HeaderOutcome {
            remaining: 0,
            reset_after_ms: 10_000,
            retry_after_ms: Some(1001),
        };
        assert_eq!(ratelimit_item(&r, &refused), "\"user\";r=0;t=2");
    }

    #[test]
    fn render_joins_rules_and_picks_the_tightest_for_legacy() {
        let rules = vec![
            (
                rate("user", 2, 1000, 20),
                HeaderOutcome {
                    remaining: 19,
                    reset_after_ms: 1000,
                    retry_after_ms: None,
                },
            ),
            (
                rate("tenant", 1000, 60_000, 1000),
                HeaderOutcome {
                    remaining: 0,
                    reset_after_ms: 60_000,
                    retry_after_ms: Some(60),
                },
            ),
        ];
        let h = render(&rules, true);
        assert_eq!(
            h,
            vec![
                (
                    POLICY,
                    "\"user\";q=2;w=1;rl-burst=20, \"tenant\";q=1000;w=60".to_string()
                ),
                (
                    RATELIMIT,
                    "\"user\";r=19;t=1, \"tenant\";r=0;t=1".to_string()
                ),
                (LEGACY_LIMIT, "1000".to_string()),
                (LEGACY_REMAINING, "0".to_string()),
                (LEGACY_RESET, "1".to_string()),
            ]
        );
        assert_eq!(render(&rules, false).len(), 2);
        assert!(render(&[], true).is_empty());
    }

    #[test]
    fn retry_after_is_never_early_and_jitters_up_to_the_fraction() {
        assert_eq!(retry_after_seconds(500, 0.2, 0.0), 1);
        assert_eq!(retry_after_seconds(1000, 0.2, 0.0), 1);
        assert_eq!(retry_after_seconds(1001, 0.0, 0.99), 2);
        assert_eq!(retry_after_seconds(10_000, 0.2, 0.5), 11);
        assert_eq!(retry_after_seconds(10_000, 0.2, 0.999_999), 12);
        assert_eq!(retry_after_seconds(0, 0.2, 0.5), 0);
        for rand in [0.0, 0.25, 0.5, 0.75, 0.999] {
            for ms in [1, 999, 1000, 1001, 59_999, 3_600_000] {
                let s = retry_after_seconds(ms, 0.2, rand);
                assert!(s * 1000 >= ms, "{ms} ms gave {s} s");
                assert!(s * 1000 < ms + ms / 5 + 1000, "{ms} ms gave {s} s");
            }
        }
        assert_eq!(retry_after_seconds(2000, f64::NAN, 0.5), 2);
        assert_eq!(retry_after_seconds(2000, -1.0, 0.5), 2);
        assert_eq!(
            retry_after_seconds(u64::MAX, 1.0, 0.9),
            u64::MAX.div_ceil(1000)
        );
    }
}
