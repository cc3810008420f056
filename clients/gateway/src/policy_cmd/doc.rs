//! One policy document loaded as a gateway loads it, and the rows the tables show of it.

use rl_engine::{Instant, Policy};

use super::numbers::{self, printable, Cell, Limit, Subject, HOUR_US, MINUTE_US, SECOND_US};
use super::ratio::Ratio;
use super::table::Align;

/// A validated document, with what the tables need beside the engine's `Policy`.
pub(crate) struct Doc {
    pub policy: Policy,
    /// The instant it is read at: overrides are active or expired by it.
    pub now: Instant,
    /// Rules some route or the default takes, sorted.
    used: Vec<String>,
    /// The tenants `plans.tenants` names, sorted. The engine keeps the map for lookups
    /// only, so the names are read from the document (already validated by then).
    pub tenants: Vec<String>,
}

impl Doc {
    /// Loads `text` at `now` with the engine's validation: its message, unchanged, on refusal.
    pub(crate) fn load(text: &str, now: Instant) -> Result<Doc, String> {
        let policy = Policy::from_json_at(text, now).map_err(|e| e.to_string())?;
        let used = numbers::used_rules(&policy);
        let doc = serde_json::from_str::<serde_json::Value>(text).ok();
        let mut tenants: Vec<String> = doc
            .as_ref()
            .and_then(|v| v.get("plans")?.get("tenants")?.as_object())
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default();
        tenants.sort_unstable();
        Ok(Doc {
            policy,
            now,
            used,
            tenants,
        })
    }

    /// Whether some route or the default takes the rule.
    pub(crate) fn uses(&self, rule: &str) -> bool {
        self.used.binary_search_by(|u| u.as_str().cmp(rule)).is_ok()
    }

    /// The subjects `check` shows for a rule: each plan (or every caller, without plans), then
    /// each active override of the rule, in document order.
    pub(crate) fn subjects(&self, rule: &str) -> Vec<Subject> {
        let mut subjects: Vec<Subject> = match &self.policy.plans {
            Some(plans) => plans
                .names()
                .iter()
                .map(|n| Subject::Plan(n.to_string()))
                .collect(),
            None => vec![Subject::All],
        };
        subjects.extend(
            self.policy
                .overrides
                .iter()
                .filter(|o| o.rule == rule && o.active(self.now))
                .map(|o| Subject::Tenant {
                    tenant: o.tenant.clone(),
                    user: o.user.clone(),
                }),
        );
        subjects
    }

    /// The rule's numbers for the subject, or `None` when the document has no such rule.
    pub(crate) fn cell(&self, rule: &str, subject: &Subject) -> Option<Cell> {
        let spec = self.policy.rules.get(rule)?;
        Some(numbers::resolve(
            &self.policy,
            spec,
            subject,
            !self.uses(rule),
            self.now,
        ))
    }

    /// The plan the document puts a tenant on, as a subject (every caller, without plans).
    pub(crate) fn plan_of(&self, tenant: &str) -> Subject {
        match &self.policy.plans {
            Some(plans) => {
                let plan = plans.resolve(None, Some(tenant.as_bytes())).plan;
                Subject::Plan(
                    plans
                        .name(plan)
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                )
            }
            None => Subject::All,
        }
    }

    /// `policy version 7: 9 rules, 7 routes and the default, 3 plans, 1 of 2 overrides active`
    /// and, with plans, who is on which.
    pub(crate) fn summary(&self) -> Vec<String> {
        let p = &self.policy;
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let overrides = match p.overrides.iter().count() {
            0 => "no overrides".to_string(),
            n => format!(
                "{} of {} active",
                p.overrides.iter().filter(|o| o.active(self.now)).count(),
                count(n, "override", "overrides")
            ),
        };
        let plans = match p.plans.as_ref().map_or(0, |x| x.names().len()) {
            0 => "no plans".to_string(),
            n => count(n, "plan", "plans"),
        };
        let mut lines = vec![format!(
            "policy version {}: {}, {} and the default, {plans}, {overrides}",
            p.version,
            count(p.rules.len(), "rule", "rules"),
            count(p.routes.len(), "route", "routes"),
        )];
        if let Some(plans) = &p.plans {
            let default = plans.resolve(None, None).plan;
            let described: Vec<String> = plans
                .names()
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let tenants: Vec<String> = self
                        .tenants
                        .iter()
                        .filter(|t| plans.resolve(None, Some(t.as_bytes())).plan == i)
                        .map(|t| printable(t))
                        .collect();
                    let mut about = Vec::new();
                    if i == default {
                        about.push("default".to_string());
                    }
                    if !tenants.is_empty() {
                        about.push(format!("tenants {}", tenants.join(" ")));
                    }
                    if about.is_empty() {
                        printable(name)
                    } else {
                        format!("{} ({})", printable(name), about.join("; "))
                    }
                })
                .collect();
            lines.push(format!("plans: {}", described.join(", ")));
        }
        lines
    }
}

/// The columns every table shows of a cell, after the rule and the subject.
pub(crate) const CELL_COLUMNS: [(&str, Align); 8] = [
    ("algo", Align::Left),
    ("per second", Align::Right),
    ("per minute", Align::Right),
    ("per hour", Align::Right),
    ("capacity", Align::Right),
    ("cost", Align::Right),
    ("numbers from", Align::Left),
    ("notes", Align::Left),
];

/// A cell as the text of `CELL_COLUMNS`; `None` (no such rule in that document) as dashes.
pub(crate) fn cell_texts(cell: Option<&Cell>) -> Vec<String> {
    let Some(cell) = cell else {
        let mut texts = vec!["-".to_string(); 6];
        texts.extend(["no such rule".to_string(), String::new()]);
        return texts;
    };
    let count = |n: u64| Ratio::integer(n.into()).to_string();
    let per = |unit: u64| {
        cell.limit
            .units_per(unit)
            .map_or_else(|| "-".to_string(), |r| r.to_string())
    };
    let (algo, capacity, cost) = match cell.limit {
        Limit::Rate {
            algo, burst, cost, ..
        } => (algo, count(burst), count(cost)),
        Limit::Semaphore { concurrency, .. } => ("semaphore", count(concurrency), "-".into()),
    };
    vec![
        algo.to_string(),
        per(SECOND_US),
        per(MINUTE_US),
        per(HOUR_US),
        capacity,
        cost,
        cell.source.to_string(),
        cell.notes(),
    ]
}
