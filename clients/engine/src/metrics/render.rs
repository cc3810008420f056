//! The Prometheus text exposition of [`Metrics`]: one function per group of families, in the
//! order they are rendered. Each family's lines follow its own header.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::text::{escape, header, seconds, single};
use super::{Metrics, Tables, BUCKETS_US};
use crate::breaker::BreakerState;
use crate::time::Instant;
use crate::wire::Mode;

impl Metrics {
    /// The Prometheus text exposition (format 0.0.4) of everything recorded, overrides counted
    /// active or expired by the system clock.
    pub fn render(&self) -> String {
        self.render_at(Instant::wall())
    }

    /// The same, with overrides counted active or expired at `now`.
    pub fn render_at(&self, now: Instant) -> String {
        let t = self.tables();
        let mut out = String::new();
        decisions(&mut out, &t);
        store_calls(&mut out, &t);
        grant_refills(&mut out, &t);
        self.breaker_state(&mut out);
        single(
            &mut out,
            ("rl_gateway_policy_version", "gauge"),
            "Version of the policy in force.",
            self.policy_version.load(Ordering::Relaxed),
        );
        route_modes(&mut out, &t);
        self.counters(&mut out, now);
        self.overrides_by_rule(&mut out, now);
        self.shadow_rules(&mut out);
        // Each family's lines follow its own header: the plans', overrides' and shadows'
        // families come before this one, never inside it.
        self.store_mode(&mut out);
        self.capacities.render(&mut out);
        self.allocations.render(&mut out, now);
        out
    }

    fn breaker_state(&self, out: &mut String) {
        header(
            out,
            "rl_gateway_breaker_state",
            "gauge",
            "1 for the store breaker's current state, 0 for the others.",
        );
        let current = *self.breaker.lock().unwrap_or_else(|p| p.into_inner());
        for state in BreakerState::ALL {
            let _ = writeln!(
                out,
                "rl_gateway_breaker_state{{state=\"{}\"}} {}",
                state.name(),
                u8::from(state == current)
            );
        }
    }

    /// The single counters and the policy's age, each shown when its value means something.
    fn counters(&self, out: &mut String, now: Instant) {
        // Always shown: a rise is a route renamed or removed, and 0 is what an alert compares.
        single(
            out,
            ("rl_gateway_unmatched_total", "counter"),
            "Requests no route matched, decided by the policy's default.",
            self.unmatched.load(Ordering::Relaxed),
        );
        let published = self.published_at_us.load(Ordering::Relaxed);
        if published > 0 {
            single(
                out,
                ("rl_gateway_policy_age_seconds", "gauge"),
                "Seconds since the snapshot in force was published.",
                seconds(now.as_micros().saturating_sub(published)),
            );
        }
        // Shown by a gateway following a store, from its start: 0 is what an alert compares.
        let rejected = self.policy_rejected.load(Ordering::Relaxed);
        if published > 0 || rejected > 0 {
            single(
                out,
                ("rl_gateway_policy_rejected_total", "counter"),
                "Published snapshots refused, each distinct document once.",
                rejected,
            );
        }
        // Always shown: records are the evidence of a refusal, and their loss must be visible.
        single(
            out,
            ("rl_gateway_decision_records_dropped_total", "counter"),
            "Decision records not written, past the bound of records a second.",
            self.records_dropped.load(Ordering::Relaxed),
        );
        if self.plans.load(Ordering::Relaxed) {
            single(
                out,
                ("rl_gateway_unknown_plan_total", "counter"),
                "Requests whose plan header named no plan of the policy (ignored).",
                self.unknown_plan.load(Ordering::Relaxed),
            );
        }
    }

    fn overrides_by_rule(&self, out: &mut String, now: Instant) {
        let overrides = self.overrides.lock().unwrap_or_else(|p| p.into_inner());
        if overrides.is_empty() {
            return;
        }
        header(
            out,
            "rl_gateway_overrides",
            "gauge",
            "Overrides of the policy in force, by rule, active or expired.",
        );
        let mut by_rule: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for (rule, expires) in overrides.iter() {
            let n = by_rule.entry(rule).or_default();
            if now < *expires {
                n.0 += 1;
            } else {
                n.1 += 1;
            }
        }
        for (rule, (active, expired)) in by_rule {
            let rule = escape(rule);
            let _ = writeln!(
                out,
                "rl_gateway_overrides{{rule=\"{rule}\",state=\"active\"}} {active}"
            );
            let _ = writeln!(
                out,
                "rl_gateway_overrides{{rule=\"{rule}\",state=\"expired\"}} {expired}"
            );
        }
    }

    fn shadow_rules(&self, out: &mut String) {
        let shadows = self.shadows.lock().unwrap_or_else(|p| p.into_inner());
        if shadows.is_empty() {
            return;
        }
        header(
            out,
            "rl_gateway_shadow_refusal_ratio",
            "gauge",
            "Share of a shadow rule's evaluations that would have refused, under the policy in force (after 1000).",
        );
        for (rule, watch) in shadows.iter() {
            if let Some(ratio) = watch.ratio() {
                let _ = writeln!(
                    out,
                    "rl_gateway_shadow_refusal_ratio{{rule=\"{}\"}} {ratio}",
                    escape(rule)
                );
            }
        }
        header(
            out,
            "rl_gateway_shadow_alarm",
            "gauge",
            "1 while a shadow rule refuses more than ten times the share it declares.",
        );
        for (rule, watch) in shadows.iter() {
            let _ = writeln!(
                out,
                "rl_gateway_shadow_alarm{{rule=\"{}\"}} {}",
                escape(rule),
                u8::from(watch.alarm)
            );
        }
    }

    fn store_mode(&self, out: &mut String) {
        header(
            out,
            "rl_gateway_store_mode",
            "gauge",
            "1 for the store's implementation of the commands (module or script), 0 for the other.",
        );
        let store_mode = *self.store_mode.lock().unwrap_or_else(|p| p.into_inner());
        // Nothing is claimed before the first store call has detected the mode.
        if let Some(current) = store_mode {
            for mode in Mode::ALL {
                let _ = writeln!(
                    out,
                    "rl_gateway_store_mode{{mode=\"{}\"}} {}",
                    mode.name(),
                    u8::from(mode == current)
                );
            }
        }
    }
}

fn decisions(out: &mut String, t: &Tables) {
    header(
        out,
        "rl_gateway_decisions_total",
        "counter",
        "Rule decisions by route, rule and outcome.",
    );
    let series = t.decisions.iter().flat_map(|(route, rules)| {
        rules.iter().flat_map(move |(rule, outcomes)| {
            outcomes
                .iter()
                .map(move |(outcome, n)| (route, rule, outcome, n))
        })
    });
    for (route, rule, outcome, n) in series {
        let _ = writeln!(
            out,
            "rl_gateway_decisions_total{{route=\"{}\",rule=\"{}\",outcome=\"{}\"}} {n}",
            escape(route),
            escape(rule),
            outcome.name()
        );
    }
}

fn store_calls(out: &mut String, t: &Tables) {
    let name = "rl_gateway_store_call_duration_seconds";
    header(
        out,
        name,
        "histogram",
        "Store call latency, deadline included.",
    );
    for (result, h) in &t.latency {
        let result = result.name();
        for (bound, n) in BUCKETS_US.iter().zip(h.buckets.iter()) {
            let _ = writeln!(
                out,
                "{name}_bucket{{result=\"{result}\",le=\"{}\"}} {n}",
                seconds(*bound)
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{result=\"{result}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "{name}_sum{{result=\"{result}\"}} {}",
            seconds(h.sum_us)
        );
        let _ = writeln!(out, "{name}_count{{result=\"{result}\"}} {}", h.count);
    }
}

fn grant_refills(out: &mut String, t: &Tables) {
    header(
        out,
        "rl_gateway_grant_refills_total",
        "counter",
        "RL.GRANT calls refilling a rule's local chunk.",
    );
    for (rule, n) in &t.grant_refills {
        let _ = writeln!(
            out,
            "rl_gateway_grant_refills_total{{rule=\"{}\"}} {n}",
            escape(rule)
        );
    }
}

fn route_modes(out: &mut String, t: &Tables) {
    header(
        out,
        "rl_gateway_route_mode",
        "gauge",
        "1 for each route's posture when the store cannot answer.",
    );
    for (route, mode) in &t.modes {
        let _ = writeln!(
            out,
            "rl_gateway_route_mode{{route=\"{}\",mode=\"{mode}\"}} 1",
            escape(route)
        );
    }
}
