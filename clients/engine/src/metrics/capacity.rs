//! The capacities' families (section 14): each one's limit, in-flight requests by class,
//! learned no-load latency, and sheds by class, read from the capacities themselves when the
//! text is rendered (they change with every request, not with events).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use super::text::{escape, header, seconds};
use crate::capacity::{Capacity, CapacityStats, Priority};

/// The capacities of the policy in force, by name, as the engine last registered them.
#[derive(Default)]
pub(super) struct Registered(Mutex<Vec<(String, Arc<Capacity>)>>);

impl Registered {
    pub(super) fn set(&self, capacities: Vec<(String, Arc<Capacity>)>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = capacities;
    }

    pub(super) fn render(&self, out: &mut String) {
        let stats: Vec<(String, CapacityStats)> = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, c)| (escape(name), c.stats()))
            .collect();
        if stats.is_empty() {
            return;
        }
        header(
            out,
            "rl_gateway_capacity_limit",
            "gauge",
            "The in-flight limit each capacity admits to now (learned when adaptive).",
        );
        for (name, s) in &stats {
            let _ = writeln!(
                out,
                "rl_gateway_capacity_limit{{capacity=\"{name}\"}} {}",
                s.limit
            );
        }
        header(
            out,
            "rl_gateway_capacity_in_flight",
            "gauge",
            "Requests admitted by each capacity and not yet ended, by class.",
        );
        for (name, s) in &stats {
            for p in Priority::ALL {
                let _ = writeln!(
                    out,
                    "rl_gateway_capacity_in_flight{{capacity=\"{name}\",class=\"{}\"}} {}",
                    p.name(),
                    s.in_flight_by_priority.get(p)
                );
            }
        }
        header(
            out,
            "rl_gateway_capacity_no_load_latency_seconds",
            "gauge",
            "The backend's latency without queueing, as each adaptive capacity has learned it.",
        );
        for (name, s) in &stats {
            if let Some(no_load) = s.no_load {
                let us = u64::try_from(no_load.as_micros()).unwrap_or(u64::MAX);
                let _ = writeln!(
                    out,
                    "rl_gateway_capacity_no_load_latency_seconds{{capacity=\"{name}\"}} {}",
                    seconds(us)
                );
            }
        }
        header(
            out,
            "rl_gateway_capacity_shed_total",
            "counter",
            "Requests each capacity shed (503), by class.",
        );
        for (name, s) in &stats {
            for p in Priority::ALL {
                let _ = writeln!(
                    out,
                    "rl_gateway_capacity_shed_total{{capacity=\"{name}\",class=\"{}\"}} {}",
                    p.name(),
                    s.shed.get(p)
                );
            }
        }
    }
}
