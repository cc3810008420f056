//! `policy check`'s second table: each capacity (section 14), its limit, wait and sharing,
//! and the routes that draw on it with their class.

use rl_engine::capacity::{CapacitySpec, LimitSpec};
use rl_engine::Policy;

use super::numbers::{duration, printable};
use super::table::{Align, Table};

/// The table, or `None` for a policy without capacities.
pub(crate) fn table(policy: &Policy) -> Option<String> {
    if policy.capacities.is_empty() {
        return None;
    }
    let mut table = Table::new(vec![
        ("capacity", Align::Left),
        ("limit", Align::Left),
        ("wait", Align::Left),
        ("fair", Align::Left),
        ("drawn on by", Align::Left),
    ]);
    for (name, spec) in &policy.capacities {
        let routes = drawn_by(policy, name);
        table.push(vec![
            printable(name),
            limit(spec),
            if spec.max_wait.is_zero() {
                "-".to_string()
            } else {
                duration(spec.max_wait)
            },
            if spec.fair { "tenant" } else { "-" }.to_string(),
            if routes.is_empty() {
                "(no route)".to_string()
            } else {
                routes.join(", ")
            },
        ]);
    }
    Some(table.render())
}

/// Each route drawing on `capacity`, with its class: `POST /checkout (critical)`.
pub(crate) fn drawn_by(policy: &Policy, capacity: &str) -> Vec<String> {
    policy
        .routes
        .iter()
        .filter_map(|r| {
            let on = r.capacity.as_ref().filter(|c| &*c.name == capacity)?;
            Some(format!("{} ({})", printable(r.name()), on.priority.name()))
        })
        .collect()
}

fn limit(spec: &CapacitySpec) -> String {
    match spec.limit {
        LimitSpec::Fixed(n) => format!("fixed {n}"),
        LimitSpec::Adaptive { min, max, initial } => {
            format!("adaptive {min}..{max} from {initial}")
        }
    }
}
