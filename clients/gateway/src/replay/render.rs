//! The report as text for a person: a summary, then the refusals by route, rule and plan, the
//! tenants refused most and the shadow rules, each a table with aligned columns.

use std::fmt::Write as _;

use rl_engine::time::format_rfc3339;
use rl_engine::Instant;

use super::report::{Report, FIRST_LINES};
use super::tenants::CAP;

impl Report {
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.summary(&mut out);
        self.refusal_table(&mut out);
        self.tenant_table(&mut out);
        self.shadow_table(&mut out);
        out
    }

    fn summary(&self, out: &mut String) {
        let span = match self.span_us {
            Some((first, last)) => format!(
                ", {} to {}",
                format_rfc3339(Instant::from_micros(first)),
                format_rfc3339(Instant::from_micros(last))
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "policy version {}: {} lines{span}",
            self.version, self.lines
        );
        for warning in &self.warnings {
            let _ = writeln!(out, "  warning: {warning}");
        }
        let o = &self.outcomes;
        let requests = self.requests();
        let share = if requests == 0 {
            0.0
        } else {
            o.refused as f64 * 100.0 / requests as f64
        };
        let mut parts = vec![
            format!("{} admitted", o.admitted),
            format!("{} refused ({share:.1} %)", o.refused),
        ];
        let others = [
            (o.exempt, "exempt"),
            (o.passed, "passed unmatched (the default has no rules)"),
            (o.rejected, "rejected as sent (400, 414, 431)"),
            (o.error, "refused by the module (500: the policy's bug)"),
        ];
        for (n, what) in others {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        let _ = writeln!(out, "  {requests} requests: {}", parts.join(", "));
        if self.unmatched > 0 {
            let _ = writeln!(out, "  {} matched no route", self.unmatched);
        }
        if o.posture == 0 {
            let _ = writeln!(out, "  postures: none (the in-memory store always answers)");
        } else {
            let _ = writeln!(out, "  postures: {}", o.posture);
        }
        if self.malformed > 0 {
            let _ = writeln!(
                out,
                "  {}{}:",
                count(self.malformed, "malformed line"),
                first(self.malformed)
            );
            for (line, why) in &self.first_malformed {
                let _ = writeln!(out, "    line {line}: {why}");
            }
        }
        if self.out_of_order > 0 {
            let numbers: Vec<String> = self.first_out_of_order.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                "  {} out of order, decided at the latest instant before them (at most {} back){}: {}",
                count(self.out_of_order, "line"),
                seconds(self.most_back_us),
                first(self.out_of_order),
                numbers.join(", ")
            );
        }
        if self.evicted > 0 {
            let _ = writeln!(
                out,
                "  {} evicted to stay within the store's memory: their debits were forgotten, so refusals may be under-counted",
                count(self.evicted, "store key")
            );
        }
    }

    fn refusal_table(&self, out: &mut String) {
        let rows: Vec<Vec<String>> = self
            .refusals_by()
            .into_iter()
            .map(|r| {
                let plan = if r.plan.is_empty() {
                    "-".into()
                } else {
                    r.plan
                };
                vec![r.route, r.rule, plan, r.reason, r.requests.to_string()]
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(out, "\nrefused by route, rule and plan");
        table(
            out,
            &["route", "rule", "plan", "reason", "requests"],
            &rows,
            &[4],
        );
    }

    fn tenant_table(&self, out: &mut String) {
        if self.outcomes.refused == 0 {
            return;
        }
        let Some(header) = &self.tenant_header else {
            let _ = writeln!(out, "\ntenants: the policy names no tenant header");
            return;
        };
        let top = self.tenants();
        let exact = self.tenants.exact();
        let note = if exact {
            format!("; {} refused", count(self.tenants.len() as u64, "tenant"))
        } else {
            format!(
                "; more than {CAP} tenants were refused, so a count is a range: at least, at most"
            )
        };
        let _ = writeln!(out, "\ntenants refused most (header {header}{note})");
        let rows: Vec<Vec<String>> = top
            .into_iter()
            .map(|t| {
                let n = if t.uncertainty == 0 {
                    t.refusals.to_string()
                } else {
                    format!(
                        "{} to {}",
                        t.refusals,
                        t.refusals.saturating_add(t.uncertainty)
                    )
                };
                // A tenant is any string a caller sent: shown escaped, on one line.
                vec![t.tenant.escape_debug().to_string(), n]
            })
            .collect();
        if !rows.is_empty() {
            table(out, &["tenant", "refusals"], &rows, &[1]);
        }
        if self.refused_without_tenant > 0 {
            let _ = writeln!(
                out,
                "  {} named no tenant",
                count(self.refused_without_tenant, "refused request")
            );
        }
    }

    fn shadow_table(&self, out: &mut String) {
        if self.shadows.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nshadow rules (alarm: over ten times the expected share, after 1000 evaluations)"
        );
        let rows: Vec<Vec<String>> = self
            .shadows
            .iter()
            .map(|s| {
                let ratio = s.ratio().map_or("-".into(), |r| format!("{r:.4}"));
                let expect = s.expect.map_or("-".into(), |e| e.to_string());
                let alarm = match (s.expect, s.alarm_line) {
                    (None, _) => "-".to_string(),
                    (Some(_), Some(line)) => format!("raised at line {line}"),
                    (Some(_), None) => "no".to_string(),
                };
                vec![
                    s.rule.clone(),
                    s.evaluated.to_string(),
                    s.refused.to_string(),
                    ratio,
                    expect,
                    alarm,
                ]
            })
            .collect();
        table(
            out,
            &[
                "rule",
                "evaluated",
                "would refuse",
                "ratio",
                "expected",
                "alarm",
            ],
            &rows,
            &[1, 2, 3, 4],
        );
    }
}

/// `1 line`, `2 lines`.
fn count(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `" (the first 10)"` when more were counted than kept by number.
fn first(count: u64) -> String {
    if count > FIRST_LINES as u64 {
        format!(" (the first {FIRST_LINES})")
    } else {
        String::new()
    }
}

/// Columns padded to their widest cell, those in `right` aligned right (numbers).
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>], right: &[usize]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            let _ = if right.contains(&i) {
                write!(line, "  {cell:>w$}")
            } else {
                write!(line, "  {cell:<w$}")
            };
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// Microseconds as seconds, to the millisecond.
fn seconds(us: u64) -> String {
    format!("{}.{:03} s", us / 1_000_000, us % 1_000_000 / 1000)
}
