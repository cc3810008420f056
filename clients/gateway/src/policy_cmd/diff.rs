//! `policy diff`: both documents in one table, an old and a new line where they differ, and
//! the cuts, the enforced limits that fall by more than half.
//!
//! What a change means is read the way a caller meets it, by resolving the same subject in
//! both documents with the engine's precedence:
//! - a plan removed: its callers land on the new document's default plan, so its row compares
//!   the old plan's numbers with the default's (and a plan added, the old default's with it);
//! - an override removed or expired: its tenant (or user) falls back to the tenant's override
//!   or plan in the new document, which the row shows and compares;
//! - a tenant moved to another plan (`plans.tenants`): a row of its own for each rule where
//!   the move does what neither plan's row shows (from old A to new B);
//! - a rule removed: no request is held to it any more, a rise (it is shown, never a cut); a
//!   rule added limits what nothing limited, and is shown as added. A rule renamed is both.
//! - a shadow rule, or one no route uses, refuses nothing: its numbers are compared and marked,
//!   but only a limit enforced in both documents can be cut; a rule that turns from shadow to
//!   enforced is marked `now enforced` (which its `expect_refusals` is there to vet);
//! - a rule turned from a rate into a semaphore (or back) is marked, not compared.

use std::fmt;

use super::check::{legend, warning_lines, warnings};
use super::doc::{cell_texts, Doc, CELL_COLUMNS};
use super::numbers::{printable, Cell, Measure, Subject};
use super::ratio::Ratio;
use super::table::{Align, Table};

/// An enforced limit that falls by more than half from the old document to the new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub rule: String,
    /// Whose limit: every caller, a plan's, or a tenant's (an override, or a move of plan).
    pub subject: Subject,
    pub measure: Measure,
    pub old: Ratio,
    pub new: Ratio,
}

impl fmt::Display for Cut {
    /// `rule 'tenant', plan free: requests per hour 6,000 -> 100 (/60)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rule '{}', {}: {} {} -> {}",
            printable(&self.rule),
            self.subject,
            self.measure,
            self.old,
            self.new
        )?;
        match self.old.factor(&self.new) {
            Some(by) => write!(f, " (/{by})"),
            None => Ok(()),
        }
    }
}

/// What `policy diff` reports of two valid documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    head: Vec<String>,
    table: String,
    /// Whether either document has plans (for the legend).
    plans: bool,
    changed: usize,
    cuts: Vec<Cut>,
    warnings: Vec<String>,
}

impl Diff {
    pub(crate) fn of(old: &Doc, new: &Doc) -> Diff {
        let mut columns = vec![
            ("rule", Align::Left),
            ("applies to", Align::Left),
            ("doc", Align::Left),
        ];
        columns.extend(CELL_COLUMNS);
        columns.push(("change", Align::Left));
        let mut table = Table::new(columns);
        let mut cuts = Vec::new();
        let mut changed = 0usize;
        let mut names: Vec<&String> = old.policy.rules.keys().collect();
        names.extend(new.policy.rules.keys());
        names.sort_unstable();
        names.dedup();
        for name in names {
            for subject in subjects(old, new, name) {
                let (o, n) = (old.cell(name, &subject), new.cell(name, &subject));
                let label = [printable(name), subject.to_string()];
                if o == n {
                    let mut row = label.to_vec();
                    row.push("both".into());
                    row.extend(cell_texts(o.as_ref()));
                    table.push(row);
                    continue;
                }
                changed = changed.saturating_add(1);
                let (change, row_cuts) = compare(name, &subject, o.as_ref(), n.as_ref());
                cuts.extend(row_cuts);
                let (o_texts, n_texts) = (cell_texts(o.as_ref()), cell_texts(n.as_ref()));
                // A rule added or removed is said in the change column; a star on each of its
                // dashes would say nothing more.
                let both = o.is_some() && n.is_some();
                let marked = o_texts.iter().zip(&n_texts).map(|(a, b)| {
                    if a == b || !both {
                        b.clone()
                    } else {
                        format!("*{b}")
                    }
                });
                let mut row = label.to_vec();
                row.push("old".into());
                row.extend(o_texts.iter().cloned());
                table.push(row);
                let mut row = vec![String::new(), String::new(), "new".into()];
                row.extend(marked);
                row.push(change);
                table.push(row);
            }
        }
        let mut warnings_new = Vec::new();
        if new.policy.version <= old.policy.version {
            warnings_new.push(format!(
                "version: the new version {} is not higher than the old {}: a gateway running the old refuses it",
                new.policy.version, old.policy.version
            ));
        }
        warnings_new.extend(warnings(new));
        Diff {
            head: head(old, new),
            table: table.render(),
            plans: old.policy.plans.is_some() || new.policy.plans.is_some(),
            changed,
            cuts,
            warnings: warnings_new,
        }
    }

    /// The whole diff as printed: both summaries, the table, a legend, the new document's
    /// warnings (prefixed `warning: `), and a count of changes and cuts.
    pub fn render(&self) -> String {
        let mut text = self.head.join("\n");
        text.push_str("\n\n");
        text.push_str(&self.table);
        text.push('\n');
        text.push_str(legend(self.plans));
        text.push_str(DIFF_LEGEND);
        text.push_str(&warning_lines(&self.warnings));
        let rows = |n: usize| if n == 1 { "row" } else { "rows" };
        let cuts = |n: usize| if n == 1 { "cut" } else { "cuts" };
        text.push_str(&format!(
            "\n{} {} changed, {} {}\n",
            self.changed,
            rows(self.changed),
            self.cuts.len(),
            cuts(self.cuts.len())
        ));
        text
    }

    /// The effective limits that fall by more than half, in table order.
    pub fn cuts(&self) -> &[Cut] {
        &self.cuts
    }

    /// The new document's warnings, as `check` gives them, after a version not above the old.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// What `policy diff` prints (to stderr) when it refuses, exiting non-zero: `None` when
    /// there is no cut. `--approve-cuts` skips the refusal.
    pub fn refusal(&self) -> Option<String> {
        let n = self.cuts.len();
        if n == 0 {
            return None;
        }
        let (limits, falls) = if n == 1 {
            ("limit", "falls")
        } else {
            ("limits", "fall")
        };
        let mut text = format!("refusing: {n} effective {limits} {falls} by more than half:\n");
        for cut in &self.cuts {
            text.push_str(&format!("  {cut}\n"));
        }
        text.push_str(
            "Check each number's unit in the table (per second, per minute, per hour); \
if the cuts are meant, run again with --approve-cuts.\n",
        );
        Some(text)
    }
}

/// Each document's summary, the first line prefixed `old` or `new`.
fn head(old: &Doc, new: &Doc) -> Vec<String> {
    let mut head = Vec::new();
    for (which, doc) in [("old", old), ("new", new)] {
        for (i, line) in doc.summary().into_iter().enumerate() {
            head.push(if i == 0 {
                format!("{which} {line}")
            } else {
                format!("    {line}")
            });
        }
    }
    head
}

const DIFF_LEGEND: &str = "* marks a cell that changed. CUT: an enforced limit falls by more \
than half, rates read in requests per hour (units / cost), capacity in requests at once.\n";

/// The subjects of a rule in either document, then the tenants the two documents put on
/// different plans, where the move shows what neither plan's row does.
fn subjects(old: &Doc, new: &Doc, rule: &str) -> Vec<Subject> {
    let mut list = old.subjects(rule);
    for s in new.subjects(rule) {
        if !list.contains(&s) {
            list.push(s);
        }
    }
    let mut tenants: Vec<&String> = old.tenants.iter().chain(&new.tenants).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let limit = |doc: &Doc, subject: &Subject| doc.cell(rule, subject).map(|c| c.limit);
    for tenant in tenants {
        let subject = Subject::Tenant {
            tenant: tenant.clone(),
            user: None,
        };
        let (was, is) = (old.plan_of(tenant), new.plan_of(tenant));
        // A tenant moved from plan A to plan B goes from old A to new B; the plans' rows show
        // old A to new A and old B to new B, so its own row is news only when it differs
        // from both.
        if was != is
            && !list.contains(&subject)
            && limit(new, &subject) != limit(new, &was)
            && limit(old, &subject) != limit(old, &is)
        {
            list.push(subject);
        }
    }
    list
}

/// The change column of a row that differs, and its cuts.
fn compare(
    rule: &str,
    subject: &Subject,
    old: Option<&Cell>,
    new: Option<&Cell>,
) -> (String, Vec<Cut>) {
    let (old, new) = match (old, new) {
        (Some(o), Some(n)) => (o, n),
        (None, _) => return ("rule added".into(), Vec::new()),
        (_, None) => return ("rule removed: limits nothing".into(), Vec::new()),
    };
    if old.limit.measures() != new.limit.measures() {
        return ("kind changed: not compared".into(), Vec::new());
    }
    let enforced = old.enforced() && new.enforced();
    let mut parts = Vec::new();
    let mut cuts = Vec::new();
    for &measure in old.limit.measures() {
        let (Some(o), Some(n)) = (old.limit.measure(measure), new.limit.measure(measure)) else {
            continue;
        };
        if o == n {
            continue;
        }
        let name = match measure {
            Measure::Rate => "rate",
            Measure::Capacity => "capacity",
            Measure::Concurrency => "concurrency",
        };
        let by = if n > o {
            n.factor(&o).map(|f| format!(" x{f}"))
        } else {
            o.factor(&n).map(|f| format!(" /{f}"))
        }
        .unwrap_or_default();
        if enforced && n.below_half_of(&o) {
            parts.push(format!("CUT {name}{by}"));
            cuts.push(Cut {
                rule: rule.to_string(),
                subject: subject.clone(),
                measure,
                old: o,
                new: n,
            });
        } else {
            parts.push(format!("{name}{by}"));
        }
    }
    match (old.enforced(), new.enforced()) {
        (true, false) => parts.push("no longer enforced".into()),
        (false, true) => parts.push("now enforced".into()),
        _ => {}
    }
    if parts.is_empty() {
        // Only the algorithm, a lease, a grant or where the numbers come from moved: the
        // starred cells say which.
        parts.push("numbers unchanged".into());
    }
    (parts.join(", "), cuts)
}
