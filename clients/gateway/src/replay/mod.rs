//! `rl-gateway policy replay FILE --log LOG` (`clients/CONTRACT.md` section 11): the engine on
//! its in-memory store over an access log, on the log's own clock, and what the policy would
//! have refused: by route, rule and plan, the tenants refused most, and for shadow rules the
//! share they would have refused against the share they declare.
//!
//! The log is JSON lines: `ts` (RFC 3339, or epoch milliseconds), `method`, `path` (a query is
//! cut off), and optionally `ip` (the address the request came from: the engine resolves the
//! caller through `X-Forwarded-For` when it is one of the policy's trusted proxies, as a live
//! gateway would) and `headers` (a name to a string, or to a list for a repeated header).
//! Other fields are ignored, blank lines skipped.
//!
//! Choices where the log cannot say what a live gateway knew:
//! - The clock never goes back: a line earlier than one before it (the loggers of several
//!   workers interleave) is decided at the latest instant before it, and counted with its
//!   number. A gateway's clock is monotonic, and the limiters' state only moves forward.
//! - A request ends as soon as it is decided, with a 2xx: a `settle` rule's estimate stands
//!   and a semaphore's slot is released at once (the log says nothing of how long it ran).
//! - A malformed line (not JSON, a field missing or of the wrong type, a bad `ts` or `ip`, more
//!   than [`MAX_LINE`] bytes) is counted, and the first [`FIRST_LINES`] are reported by
//!   number with the reason; it is never fatal.
//!
//! The policy is loaded as a gateway would load it now (an override running more than 90 days
//! from today is refused); an override applies or has lapsed by each line's instant.
//!
//! Memory does not grow with the log: one line is held at a time, the store is bounded as
//! `--store memory://` is (its evictions are reported), the engine's tables as a gateway's,
//! the counters by the policy, and the tenants to 10,000 (`tenants.rs` says how).

// The log and the policy are anyone's: no line may wrap a count (the workspace's lints keep it
// from panicking the replay).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

mod line;
mod render;
mod report;
mod tenants;

pub use report::{Outcomes, Refusals, Report, ShadowRatio, FIRST_LINES};
pub use tenants::TenantRefusals;

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::sync::Arc;

use rl_engine::memory::MemoryStore;
use rl_engine::{
    Answer, Call, Engine, Headers, Instant, Options, Policy, Request, Step, Verdict, VerdictKind,
};

use line::Line;

/// The longest line read, in bytes: a longer one is malformed, and skipped without being held.
pub const MAX_LINE: usize = 1 << 20;

/// Replays a log under a policy. `Err`: the policy's own message (as a gateway gives it), or
/// the log could not be read.
pub fn replay(policy_text: &str, mut log: impl BufRead) -> Result<Report, String> {
    let mut replay = Replay::new(policy_text)?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        let read = read_line(&mut log, &mut buf).map_err(|e| {
            format!(
                "cannot read the log after line {}: {e}",
                replay.report.lines
            )
        })?;
        match read {
            Read::End => return Ok(replay.finish()),
            Read::TooLong => replay.too_long(),
            Read::Line => {
                replay.feed(&buf);
            }
        }
    }
}

/// What one line was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    Blank,
    Malformed,
    /// Decided: the status the gateway would have answered itself (429 a refusal), `None`
    /// when the request would have gone on.
    Decided(Option<u16>),
}

/// A replay in progress, fed one line at a time.
pub struct Replay {
    engine: Engine,
    store: MemoryStore,
    report: Report,
    /// Each route's shadow rules, as indices into the report's list.
    shadows: HashMap<String, Vec<usize>>,
}

impl Replay {
    pub fn new(policy_text: &str) -> Result<Replay, String> {
        let policy = Policy::from_json(policy_text).map_err(|e| e.to_string())?;
        let mut report = Report {
            version: policy.version,
            warnings: policy.warnings.clone(),
            tenant_header: policy.identity.tenant.clone(),
            ..Report::default()
        };
        let shadow_rules = policy.rules.values().filter(|r| r.shadow);
        report.shadows = shadow_rules
            .map(|r| ShadowRatio {
                rule: r.name.clone(),
                evaluated: 0,
                refused: 0,
                expect: r.expect_refusals,
                alarm_line: None,
            })
            .collect();
        let routes = policy.routes.iter().chain(std::iter::once(&policy.default));
        let shadows = routes
            .map(|route| {
                let of_route = route
                    .rules
                    .iter()
                    .filter(|r| r.shadow)
                    .filter_map(|r| report.shadows.iter().position(|s| s.rule == r.name))
                    .collect();
                (route.name().to_string(), of_route)
            })
            .collect();
        let options = Options {
            // Every refusal is read from its decision record: none sampled out, none dropped
            // for the bound a live gateway keeps on its log.
            log_sample: 0.0,
            log_per_second: u64::MAX,
            ..Options::default()
        };
        Ok(Replay {
            engine: Engine::new(policy, Arc::default(), options),
            store: MemoryStore::new(),
            report,
            shadows,
        })
    }

    /// Decides one line of the log (without its newline).
    pub fn feed(&mut self, bytes: &[u8]) -> Fed {
        self.report.lines = self.report.lines.saturating_add(1);
        let number = self.report.lines;
        let text = bytes.trim_ascii();
        if text.is_empty() {
            return Fed::Blank;
        }
        let line = match Line::parse(text) {
            Ok(line) => line,
            Err(why) => {
                self.report.malformed_line(number, why);
                return Fed::Malformed;
            }
        };
        let now = Instant::from_micros(self.report.clock(number, line.at_us));
        let request = Request {
            method: &line.method,
            path: line.route_path(),
            headers: &line.headers,
            peer: line.ip,
            caller: None,
            // As rl-gateway's proxy: the framework routes paths with their case.
            case_insensitive: false,
        };
        let verdict = self.decide(&request, now);
        // Only a refusal's tenant is counted.
        let tenant = self
            .report
            .tenant_header
            .as_deref()
            .filter(|_| verdict.kind == VerdictKind::Refuse)
            .and_then(|name| line.headers.first(name))
            .filter(|v| !v.is_empty())
            .and_then(|v| std::str::from_utf8(v).ok());
        let shadows = verdict
            .route
            .as_deref()
            .and_then(|route| self.shadows.get(route))
            .map(Vec::as_slice)
            .unwrap_or_default();
        self.report.decided(number, &verdict, shadows, tenant);
        Fed::Decided(verdict.status)
    }

    /// Drives the engine to its verdict, the store answering every call at once, then ends
    /// the request (a 2xx at the same instant).
    fn decide(&mut self, request: &Request<'_>, now: Instant) -> Verdict {
        let (mut pending, mut step) = self.engine.begin(request, now);
        let mut at = now;
        // Ends: each phase asks each rule once, and a wait moves the clock on towards the
        // request's deadline, past which the engine stops waiting.
        loop {
            match step {
                Step::Done(verdict) => {
                    self.send(&verdict.background, at);
                    let ended = pending.holdings().finish(Some(200), None);
                    self.send(&ended, at);
                    return verdict;
                }
                Step::Calls { calls, .. } => {
                    let answers = calls
                        .iter()
                        .map(|c| Answer::Reply(self.store.call(&c.args.to_vecs(), at.as_micros())))
                        .collect();
                    step = self.engine.resume(&mut pending, answers, at);
                }
                // Another request's refill in flight: none is, one line at a time, unless a
                // refill was lost; the engine then waits at most its stale bound.
                Step::Wait { until } => {
                    at = at.max(until);
                    step = self.engine.resume(&mut pending, Vec::new(), at);
                }
            }
        }
    }

    fn send(&mut self, calls: &[Call], at: Instant) {
        for call in calls {
            self.store.call(&call.args.to_vecs(), at.as_micros());
        }
    }

    /// A line longer than [`MAX_LINE`], skipped unread.
    fn too_long(&mut self) {
        self.report.lines = self.report.lines.saturating_add(1);
        let why = format!("longer than {MAX_LINE} bytes");
        self.report.malformed_line(self.report.lines, why);
    }

    /// The report of every line fed.
    pub fn finish(mut self) -> Report {
        self.report.evicted = self.store.evicted();
        self.report
    }
}

enum Read {
    Line,
    TooLong,
    End,
}

/// The next line into `buf` (without its newline), or past [`MAX_LINE`] bytes the rest of it
/// skipped without being held.
fn read_line(log: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<Read> {
    buf.clear();
    let mut too_long = false;
    let mut read_any = false;
    loop {
        let available = match log.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (read_any, too_long) {
                (false, _) => Read::End,
                (true, true) => Read::TooLong,
                (true, false) => Read::Line,
            });
        }
        read_any = true;
        let newline = available.iter().position(|b| *b == b'\n');
        let part = match newline {
            Some(at) => available.get(..at).unwrap_or_default(),
            None => available,
        };
        if !too_long {
            if buf.len().saturating_add(part.len()) > MAX_LINE {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = match newline {
            Some(at) => at.saturating_add(1),
            None => available.len(),
        };
        log.consume(used);
        if newline.is_some() {
            return Ok(if too_long { Read::TooLong } else { Read::Line });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_whole_and_a_long_one_skipped() {
        let long = "x".repeat(MAX_LINE + 1);
        let text = format!("one\n\n{long}\ntwo\r\nthree");
        // A reader of 7 bytes at a time: lines span many reads.
        let mut log = io::BufReader::with_capacity(7, text.as_bytes());
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            match read_line(&mut log, &mut buf).unwrap() {
                Read::End => break,
                Read::TooLong => got.push("(too long)".to_string()),
                Read::Line => got.push(String::from_utf8(buf.clone()).unwrap()),
            }
        }
        assert_eq!(got, ["one", "", "(too long)", "two\r", "three"]);
    }
}
