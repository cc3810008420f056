//! `policy check`: the document validated as a gateway validates it, then every rule's
//! effective numbers, and what is legal but suspicious.

use rl_engine::policy::Override;

use super::doc::{cell_texts, Doc, CELL_COLUMNS};
use super::numbers::{printable, Source, Subject};
use super::table::{Align, Table};

/// What `policy check` reports of a valid document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    summary: Vec<String>,
    table: String,
    /// The capacities and who draws on them, when the policy has any.
    capacities: Option<String>,
    /// Whether the document has plans (the legend then says how to read a plan's row).
    plans: bool,
    warnings: Vec<String>,
}

impl Report {
    pub(crate) fn of(doc: &Doc) -> Report {
        let mut columns = vec![("rule", Align::Left), ("applies to", Align::Left)];
        columns.extend(CELL_COLUMNS);
        let mut table = Table::new(columns);
        for name in doc.policy.rules.keys() {
            for subject in doc.subjects(name) {
                let mut row = vec![printable(name), subject.to_string()];
                row.extend(cell_texts(doc.cell(name, &subject).as_ref()));
                table.push(row);
            }
        }
        Report {
            summary: doc.summary(),
            table: table.render(),
            capacities: super::capacities::table(&doc.policy),
            plans: doc.policy.plans.is_some(),
            warnings: warnings(doc),
        }
    }

    /// The whole report as printed: the summary, the table, a legend, then each warning on
    /// a line of its own, prefixed `warning: `.
    pub fn render(&self) -> String {
        let mut text = self.summary.join("\n");
        text.push_str("\n\n");
        text.push_str(&self.table);
        text.push('\n');
        text.push_str(legend(self.plans));
        if let Some(capacities) = &self.capacities {
            text.push('\n');
            text.push_str(capacities);
        }
        text.push_str(&warning_lines(&self.warnings));
        text
    }

    /// The warnings alone (also at the end of `render`): the engine's own first, as a gateway
    /// logs them at load, then this command's.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Under every table: what its columns count.
pub(crate) fn legend(plans: bool) -> &'static str {
    if plans {
        "Rates and capacity count units; a request takes `cost` of them. A plan's row reads \
`rule` where the plan leaves the rule as written.\n"
    } else {
        "Rates and capacity count units; a request takes `cost` of them.\n"
    }
}

/// Each warning on a line of its own, after a blank line.
pub(crate) fn warning_lines(warnings: &[String]) -> String {
    let mut text = String::new();
    if !warnings.is_empty() {
        text.push('\n');
    }
    for w in warnings {
        text.push_str("warning: ");
        text.push_str(w);
        text.push('\n');
    }
    text
}

/// What is legal but suspicious, in the order an operator fixes things: the engine's load
/// warnings, rules that limit nothing, plans that change nothing, overrides that lower.
pub(crate) fn warnings(doc: &Doc) -> Vec<String> {
    let p = &doc.policy;
    let mut out = p.warnings.clone();
    for name in p.rules.keys() {
        if !doc.uses(name) {
            out.push(format!(
                "rules.{}: no route uses it, nor the default: it limits nothing",
                printable(name)
            ));
        }
    }
    if let Some(plans) = &p.plans {
        for (i, plan) in plans.names().iter().enumerate() {
            if p.rules.keys().all(|rule| plans.rule(i, rule).is_none()) {
                out.push(format!(
                    "plans.limits.{}: names no rule: its callers get every rule as written",
                    printable(plan)
                ));
            }
        }
    }
    for name in p.capacities.keys() {
        if super::capacities::drawn_by(p, name).is_empty() {
            out.push(format!(
                "capacity.{}: no route draws on it: it protects nothing",
                printable(name)
            ));
        }
    }
    for (i, o) in p.overrides.iter().enumerate() {
        if let Some(text) = lowers(doc, o) {
            out.push(format!("overrides[{i}]: {text}"));
        }
    }
    out
}

/// An active override whose numbers are below what its callers would get without it (often
/// an override written as if it added to the plan: it replaces the rule's own numbers).
fn lowers(doc: &Doc, o: &Override) -> Option<String> {
    if !o.active(doc.now) {
        return None;
    }
    let with = doc.cell(
        &o.rule,
        &Subject::Tenant {
            tenant: o.tenant.clone(),
            user: o.user.clone(),
        },
    )?;
    // Without it: a user's override falls back to the tenant's, a tenant's to its plan.
    let without = match &o.user {
        Some(_) => doc.cell(
            &o.rule,
            &Subject::Tenant {
                tenant: o.tenant.clone(),
                user: None,
            },
        ),
        None => doc.cell(&o.rule, &doc.plan_of(&o.tenant)),
    }?;
    let lowered: Vec<String> = with
        .limit
        .measures()
        .iter()
        .filter_map(|&m| {
            let (now, before) = (with.limit.measure(m)?, without.limit.measure(m)?);
            (now < before).then(|| format!("{m} {before} -> {now}"))
        })
        .collect();
    if lowered.is_empty() {
        return None;
    }
    let who = match &o.user {
        Some(u) => format!("tenant '{}' user '{}'", printable(&o.tenant), printable(u)),
        None => format!("tenant '{}'", printable(&o.tenant)),
    };
    let below = match &without.source {
        Source::Rule => "the rule as written".to_string(),
        Source::Plan(plan) => format!("plan {}", printable(plan)),
        Source::Override(_) => "the tenant's override".to_string(),
    };
    Some(format!(
        "lowers rule '{}' for {who} below what {below} gives: {} (an override replaces the rule's own numbers, not its plan's)",
        printable(&o.rule),
        lowered.join(", ")
    ))
}
