//! Typed requests, one per command, each built into the exact arguments of `commands.md`.
//!
//! Bounds are the module's to check (its errors name the argument), so a request only refuses
//! here what cannot be written on the wire at all: a duration the module's units cannot express.

use std::time::Duration;

use rl_core::protocol::{command, token};
use rl_core::rule::Algo;

use super::{Args, Error};

/// `RL.ADMIT key limit period [BURST] [COST] [ALGO] [DRYRUN] [RESERVE id [KEEP]] [DEADLINE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admit {
    pub key: Vec<u8>,
    pub limit: u64,
    pub period: Duration,
    pub burst: Option<u64>,
    pub cost: Option<u64>,
    pub algo: Option<Algo>,
    pub dry_run: bool,
    /// `RESERVE id`, and `KEEP` when given (the module's default is `1h`).
    pub reserve: Option<(Vec<u8>, Option<Duration>)>,
    /// `DEADLINE`: Unix milliseconds after which the server must not run the call (it then
    /// changes nothing and answers `DEADLINE ...`).
    pub deadline_ms: Option<u64>,
}

impl Admit {
    pub fn new(key: impl Into<Vec<u8>>, limit: u64, period: Duration) -> Admit {
        Admit {
            key: key.into(),
            limit,
            period,
            burst: None,
            cost: None,
            algo: None,
            dry_run: false,
            reserve: None,
            deadline_ms: None,
        }
    }

    pub fn burst(mut self, capacity: u64) -> Admit {
        self.burst = Some(capacity);
        self
    }

    pub fn cost(mut self, units: u64) -> Admit {
        self.cost = Some(units);
        self
    }

    pub fn algo(mut self, algo: Algo) -> Admit {
        self.algo = Some(algo);
        self
    }

    pub fn dry_run(mut self) -> Admit {
        self.dry_run = true;
        self
    }

    pub fn reserve(mut self, id: impl Into<Vec<u8>>, keep: Option<Duration>) -> Admit {
        self.reserve = Some((id.into(), keep));
        self
    }

    /// Past `unix_ms` by the server's clock, the call changes nothing (commands.md, DEADLINE).
    pub fn deadline(mut self, unix_ms: u64) -> Admit {
        self.deadline_ms = Some(unix_ms);
        self
    }

    pub fn args(&self) -> Result<Args, Error> {
        let mut cmd = Args::new(command::ADMIT);
        cmd.arg(&self.key)
            .arg(self.limit)
            .arg(DurationArg::of(self.period, "period")?);
        rule_options(&mut cmd, self.burst, self.cost, self.algo);
        if self.dry_run {
            cmd.arg(token::DRYRUN);
        }
        if let Some((id, keep)) = &self.reserve {
            cmd.arg(token::RESERVE).arg(id);
            if let Some(keep) = keep {
                cmd.arg(token::KEEP).arg(DurationArg::of(*keep, "KEEP")?);
            }
        }
        deadline_arg(&mut cmd, self.deadline_ms);
        Ok(cmd)
    }
}

/// One `RULE` clause of `RL.MULTI`, with the key it applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiRule {
    /// Reported back in the reply (`denied_by`, `rules`), and the rule's name in headers.
    pub name: String,
    pub key: Vec<u8>,
    pub algo: Option<Algo>,
    pub limit: u64,
    pub period: Duration,
    pub burst: Option<u64>,
    pub cost: Option<u64>,
}

impl MultiRule {
    pub fn new(
        name: impl Into<String>,
        key: impl Into<Vec<u8>>,
        limit: u64,
        period: Duration,
    ) -> MultiRule {
        MultiRule {
            name: name.into(),
            key: key.into(),
            algo: None,
            limit,
            period,
            burst: None,
            cost: None,
        }
    }

    pub fn burst(mut self, capacity: u64) -> MultiRule {
        self.burst = Some(capacity);
        self
    }

    pub fn cost(mut self, units: u64) -> MultiRule {
        self.cost = Some(units);
        self
    }

    pub fn algo(mut self, algo: Algo) -> MultiRule {
        self.algo = Some(algo);
        self
    }
}

/// `RL.MULTI numkeys key ... RULE ... [DRYRUN] [DEADLINE]`: all or nothing over several keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Multi {
    pub rules: Vec<MultiRule>,
    pub dry_run: bool,
    /// `DEADLINE`: Unix milliseconds after which the server must not run the call (it then
    /// changes nothing and answers `DEADLINE ...`).
    pub deadline_ms: Option<u64>,
}

impl Multi {
    pub fn new(rules: Vec<MultiRule>) -> Multi {
        Multi {
            rules,
            dry_run: false,
            deadline_ms: None,
        }
    }

    pub fn dry_run(mut self) -> Multi {
        self.dry_run = true;
        self
    }

    /// Past `unix_ms` by the server's clock, the call changes nothing (commands.md, DEADLINE).
    pub fn deadline(mut self, unix_ms: u64) -> Multi {
        self.deadline_ms = Some(unix_ms);
        self
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.rules.iter().map(|r| r.key.as_slice())
    }

    pub fn args(&self) -> Result<Args, Error> {
        let mut cmd = Args::new(command::MULTI);
        cmd.arg(self.rules.len());
        for rule in &self.rules {
            cmd.arg(&rule.key);
        }
        for rule in &self.rules {
            let clause = Clause {
                name: RuleName(&rule.name, None),
                limit: rule.limit,
                period: rule.period,
                burst: rule.burst,
                cost: rule.cost,
                algo: rule.algo,
            };
            clause.write(&mut cmd)?;
        }
        if self.dry_run {
            cmd.arg(token::DRYRUN);
        }
        deadline_arg(&mut cmd, self.deadline_ms);
        Ok(cmd)
    }
}

/// One `RULE` clause of `RL.MULTI` from borrowed parts: the engine writes its calls' clauses
/// straight from its rules, where a [`MultiRule`] would own a copy of each name and key.
pub(crate) struct Clause<'a> {
    pub(crate) name: RuleName<'a>,
    pub(crate) limit: u64,
    pub(crate) period: Duration,
    pub(crate) burst: Option<u64>,
    pub(crate) cost: Option<u64>,
    pub(crate) algo: Option<Algo>,
}

impl Clause<'_> {
    pub(crate) fn write(&self, cmd: &mut Args) -> Result<(), Error> {
        cmd.arg(token::RULE)
            .arg(self.name)
            .arg(self.limit)
            .arg(DurationArg::of(self.period, "period")?);
        rule_options(cmd, self.burst, self.cost, self.algo);
        Ok(())
    }
}

/// A rule's name in an `RL.MULTI`, with `#i` after it when given: names are unique in one
/// call, and keyed checks may repeat a rule on other keys (the `i`th check is `name#i`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleName<'a>(pub(crate) &'a str, pub(crate) Option<usize>);

impl RuleName<'_> {
    /// Whether `text` is this name as written in the call (and so in its reply).
    pub(crate) fn is(&self, text: &str) -> bool {
        match self.1 {
            None => self.0 == text,
            Some(i) => text
                .strip_prefix(self.0)
                .and_then(|rest| rest.strip_prefix('#'))
                .is_some_and(|digits| is_decimal(digits, i)),
        }
    }
}

/// Whether `digits` is `n` written in decimal, as [`super::ToArg`] writes it (no sign, no
/// leading zero).
fn is_decimal(digits: &str, n: usize) -> bool {
    let canonical = digits == "0" || !digits.starts_with('0');
    canonical && digits.bytes().all(|b| b.is_ascii_digit()) && digits.parse() == Ok(n)
}

impl super::ToArg for RuleName<'_> {
    fn write_arg(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0.as_bytes());
        if let Some(i) = self.1 {
            out.push(b'#');
            super::decimal(u64::try_from(i).unwrap_or(u64::MAX), out);
        }
    }
}

/// `RL.GRANT key limit period [BURST] [ALGO] WANT n [TTL] [DEADLINE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub key: Vec<u8>,
    pub limit: u64,
    pub period: Duration,
    pub burst: Option<u64>,
    pub algo: Option<Algo>,
    pub want: u64,
    /// The module's default is `1s`.
    pub ttl: Option<Duration>,
    /// `DEADLINE`: Unix milliseconds after which the server must not run the call (it then
    /// changes nothing and answers `DEADLINE ...`).
    pub deadline_ms: Option<u64>,
}

impl Grant {
    pub fn new(key: impl Into<Vec<u8>>, limit: u64, period: Duration, want: u64) -> Grant {
        Grant {
            key: key.into(),
            limit,
            period,
            burst: None,
            algo: None,
            want,
            ttl: None,
            deadline_ms: None,
        }
    }

    pub fn burst(mut self, capacity: u64) -> Grant {
        self.burst = Some(capacity);
        self
    }

    pub fn algo(mut self, algo: Algo) -> Grant {
        self.algo = Some(algo);
        self
    }

    pub fn ttl(mut self, ttl: Duration) -> Grant {
        self.ttl = Some(ttl);
        self
    }

    /// Past `unix_ms` by the server's clock, the call changes nothing (commands.md, DEADLINE).
    pub fn deadline(mut self, unix_ms: u64) -> Grant {
        self.deadline_ms = Some(unix_ms);
        self
    }

    pub fn args(&self) -> Result<Args, Error> {
        let mut cmd = Args::new(command::GRANT);
        cmd.arg(&self.key)
            .arg(self.limit)
            .arg(DurationArg::of(self.period, "period")?);
        rule_options(&mut cmd, self.burst, None, self.algo);
        cmd.arg(token::WANT).arg(self.want);
        if let Some(ttl) = self.ttl {
            cmd.arg(token::TTL).arg(DurationArg::of(ttl, "TTL")?);
        }
        deadline_arg(&mut cmd, self.deadline_ms);
        Ok(cmd)
    }
}

/// `RL.ACQUIRE key capacity lease [ID holder] [DEADLINE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire {
    pub key: Vec<u8>,
    pub capacity: u64,
    pub lease: Duration,
    /// Pass one whenever a reply may be lost: a retry with it renews instead of taking a
    /// second slot, while a generated holder is known only from the reply.
    pub holder: Option<Vec<u8>>,
    /// `DEADLINE`: Unix milliseconds after which the server must not run the call (it then
    /// changes nothing and answers `DEADLINE ...`).
    pub deadline_ms: Option<u64>,
}

impl Acquire {
    pub fn new(key: impl Into<Vec<u8>>, capacity: u64, lease: Duration) -> Acquire {
        Acquire {
            key: key.into(),
            capacity,
            lease,
            holder: None,
            deadline_ms: None,
        }
    }

    pub fn holder(mut self, holder: impl Into<Vec<u8>>) -> Acquire {
        self.holder = Some(holder.into());
        self
    }

    /// Past `unix_ms` by the server's clock, the call changes nothing (commands.md, DEADLINE).
    pub fn deadline(mut self, unix_ms: u64) -> Acquire {
        self.deadline_ms = Some(unix_ms);
        self
    }

    pub fn args(&self) -> Result<Args, Error> {
        let mut cmd = Args::new(command::ACQUIRE);
        cmd.arg(&self.key)
            .arg(self.capacity)
            .arg(DurationArg::of(self.lease, "lease")?);
        if let Some(holder) = &self.holder {
            cmd.arg(token::ID).arg(holder);
        }
        deadline_arg(&mut cmd, self.deadline_ms);
        Ok(cmd)
    }
}

pub fn release(key: &[u8], holder: &[u8]) -> Args {
    let mut cmd = Args::new(command::RELEASE);
    cmd.arg(key).arg(holder);
    cmd
}

pub fn renew(key: &[u8], holder: &[u8], lease: Duration) -> Result<Args, Error> {
    let mut cmd = Args::new(command::RENEW);
    cmd.arg(key)
        .arg(holder)
        .arg(DurationArg::of(lease, "lease")?);
    Ok(cmd)
}

pub fn settle(key: &[u8], id: &[u8], actual: u64) -> Args {
    let mut cmd = Args::new(command::SETTLE);
    cmd.arg(key).arg(id).arg(actual);
    cmd
}

/// `RL.SETTLE key id actual FORGET`: settles, then forgets the reservation, so the same id
/// reserves anew.
pub fn settle_and_forget(key: &[u8], id: &[u8], actual: u64) -> Args {
    let mut cmd = settle(key, id, actual);
    cmd.arg(token::FORGET);
    cmd
}

pub fn info(key: &[u8]) -> Args {
    let mut cmd = Args::new(command::INFO);
    cmd.arg(key);
    cmd
}

/// `DEADLINE unix-ms`, last, when given.
fn deadline_arg(cmd: &mut Args, deadline_ms: Option<u64>) {
    if let Some(ms) = deadline_ms {
        cmd.arg(token::DEADLINE).arg(ms);
    }
}

fn rule_options(cmd: &mut Args, burst: Option<u64>, cost: Option<u64>, algo: Option<Algo>) {
    if let Some(burst) = burst {
        cmd.arg(token::BURST).arg(burst);
    }
    if let Some(cost) = cost {
        cmd.arg(token::COST).arg(cost);
    }
    if let Some(algo) = algo {
        cmd.arg(token::ALGO).arg(algo.name());
    }
}

/// The largest unit that states `d` exactly: `1500ms`, not `1.5s`; `60s` as `1m`. The module's
/// finest unit is the millisecond, so a finer duration is refused here rather than rounded:
/// rounding a period silently changes the rate it means. Zero is sent as `0ms`, for the module
/// to refuse with its own message.
pub fn duration_arg(d: Duration, arg: &str) -> Result<String, Error> {
    let DurationArg(n, unit) = DurationArg::of(d, arg)?;
    Ok(format!("{n}{unit}"))
}

/// A duration as the module reads it, a number and its unit, written straight onto a call's
/// bytes: formatting it into a `String` first took an allocation per duration of every call.
pub(crate) struct DurationArg(u128, &'static str);

impl DurationArg {
    /// See [`duration_arg`].
    pub(crate) fn of(d: Duration, arg: &str) -> Result<DurationArg, Error> {
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::InvalidRequest(format!(
                "{arg} {d:?} is not a whole number of milliseconds, the module's finest unit"
            )));
        }
        let ms = d.as_millis();
        const UNITS: [(u128, &str); 4] = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1_000, "s"),
        ];
        if ms > 0 {
            for (scale, unit) in UNITS {
                if ms.is_multiple_of(scale) {
                    return Ok(DurationArg(ms / scale, unit));
                }
            }
        }
        Ok(DurationArg(ms, "ms"))
    }
}

impl super::ToArg for DurationArg {
    fn write_arg(&self, out: &mut Vec<u8>) {
        match u64::try_from(self.0) {
            Ok(n) => super::decimal(n, out),
            // Past u64 milliseconds (585 million years), which the module refuses anyway.
            Err(_) => out.extend_from_slice(self.0.to_string().as_bytes()),
        }
        out.extend_from_slice(self.1.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &Args) -> Vec<String> {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn durations_take_the_largest_exact_unit() {
        let ms = Duration::from_millis;
        for (d, text) in [
            (ms(250), "250ms"),
            (ms(1000), "1s"),
            (ms(1500), "1500ms"),
            (ms(60_000), "1m"),
            (ms(90_000), "90s"),
            (ms(3_600_000), "1h"),
            (ms(86_400_000 * 3650), "3650d"),
            (ms(0), "0ms"),
        ] {
            assert_eq!(duration_arg(d, "period").unwrap(), text);
            // Written straight into a call, the same text.
            let mut args = Args::new("X");
            args.arg(DurationArg::of(d, "period").unwrap());
            assert_eq!(args.get(1), Some(text.as_bytes()));
        }
        let e = duration_arg(Duration::from_micros(10), "period").unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(ref m) if m.starts_with("period 10µs")));
        assert!(duration_arg(Duration::from_micros(1_000_500), "TTL").is_err());
    }

    #[test]
    fn admit_writes_every_option() {
        let cmd = Admit::new("u:1", 2, Duration::from_secs(1))
            .burst(20)
            .cost(3)
            .algo(Algo::Bucket)
            .dry_run()
            .reserve("exp-1", Some(Duration::from_secs(600)))
            .deadline(1_767_225_601_050)
            .args()
            .unwrap();
        assert_eq!(
            words(&cmd).join(" "),
            "RL.ADMIT u:1 2 1s BURST 20 COST 3 ALGO bucket DRYRUN RESERVE exp-1 KEEP 10m DEADLINE 1767225601050"
        );
        let plain = Admit::new("u:1", 2, Duration::from_millis(250))
            .args()
            .unwrap();
        assert_eq!(words(&plain).join(" "), "RL.ADMIT u:1 2 250ms");
    }

    #[test]
    fn multi_lists_keys_then_clauses() {
        let cmd = Multi::new(vec![
            MultiRule::new("user", "{t}:u", 2, Duration::from_secs(1)).burst(20),
            MultiRule::new("tenant", "{t}", 1000, Duration::from_secs(60))
                .cost(2)
                .algo(Algo::Window),
        ])
        .dry_run()
        .deadline(7)
        .args()
        .unwrap();
        assert_eq!(
            words(&cmd).join(" "),
            "RL.MULTI 2 {t}:u {t} RULE user 2 1s BURST 20 RULE tenant 1000 1m COST 2 ALGO window DRYRUN DEADLINE 7"
        );
    }

    #[test]
    fn a_repeated_rule_is_named_with_its_index() {
        let mut args = Args::new("X");
        args.arg(RuleName("user", None))
            .arg(RuleName("user", Some(12)));
        assert_eq!(words(&args).join(" "), "X user user#12");
        assert!(RuleName("user", None).is("user"));
        assert!(!RuleName("user", None).is("user#12"));
        assert!(RuleName("user", Some(12)).is("user#12"));
        for other in ["user", "user#012", "user#+12", "user#1", "user12", "use#12"] {
            assert!(!RuleName("user", Some(12)).is(other), "{other}");
        }
        assert!(RuleName("a#1", Some(0)).is("a#1#0"));
    }

    #[test]
    fn grant_acquire_and_the_rest() {
        let g = Grant::new("g", 40000, Duration::from_secs(1), 100)
            .burst(10000)
            .ttl(Duration::from_millis(250));
        assert_eq!(
            words(&g.args().unwrap()).join(" "),
            "RL.GRANT g 40000 1s BURST 10000 WANT 100 TTL 250ms"
        );
        let a = Acquire::new("s", 3, Duration::from_secs(60)).holder("job-1");
        assert_eq!(
            words(&a.args().unwrap()).join(" "),
            "RL.ACQUIRE s 3 1m ID job-1"
        );
        assert_eq!(
            words(&g.deadline(9).args().unwrap()).join(" "),
            "RL.GRANT g 40000 1s BURST 10000 WANT 100 TTL 250ms DEADLINE 9"
        );
        assert_eq!(
            words(&a.deadline(9).args().unwrap()).join(" "),
            "RL.ACQUIRE s 3 1m ID job-1 DEADLINE 9"
        );
        assert_eq!(words(&release(b"s", b"h")).join(" "), "RL.RELEASE s h");
        assert_eq!(
            words(&renew(b"s", b"h", Duration::from_secs(300)).unwrap()).join(" "),
            "RL.RENEW s h 5m"
        );
        assert_eq!(words(&settle(b"k", b"i", 0)).join(" "), "RL.SETTLE k i 0");
        assert_eq!(words(&info(b"k")).join(" "), "RL.INFO k");
    }
}
