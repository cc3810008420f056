//! Metrics events for the application's hook.

use std::sync::Mutex;

use napi_derive::napi;
use rl_engine::metrics::{Event, MetricsHook};

/// A metrics event, as the application's hook receives it.
#[napi(object)]
pub struct EventOut {
    /// `decision`, `store_call`, `grant_refill`, `breaker_state`, `policy_version`,
    /// `route_mode`, `store_mode`, `unknown_plan` (a plan header naming no plan), `unmatched` (a
    /// request no route matched), `decision_records_dropped` (`count` records past the bound),
    /// `policy_rejected` or `capacity_shed` (a `route`'s request shed by `capacity`, of `class`).
    pub r#type: String,
    pub route: Option<String>,
    pub rule: Option<String>,
    pub outcome: Option<String>,
    pub result: Option<String>,
    pub seconds: Option<f64>,
    pub state: Option<String>,
    pub version: Option<f64>,
    pub mode: Option<String>,
    pub count: Option<f64>,
    pub capacity: Option<String>,
    pub class: Option<String>,
}

/// Events kept until the driver hands them to the hook: the engine records them inside
/// `begin` and `resume`, where JavaScript cannot be called back.
#[derive(Default)]
pub(crate) struct Queue(pub(crate) Mutex<Vec<EventOut>>);

impl MetricsHook for Queue {
    fn event(&self, event: &Event<'_>) {
        let mut e = EventOut {
            r#type: String::new(),
            route: None,
            rule: None,
            outcome: None,
            result: None,
            seconds: None,
            state: None,
            version: None,
            mode: None,
            count: None,
            capacity: None,
            class: None,
        };
        let kind = match *event {
            Event::Decision {
                route,
                rule,
                outcome,
            } => {
                e.route = Some(route.to_string());
                e.rule = Some(rule.to_string());
                e.outcome = Some(outcome.name().to_string());
                "decision"
            }
            Event::StoreCall { result, latency } => {
                e.result = Some(result.name().to_string());
                e.seconds = Some(latency.as_secs_f64());
                "store_call"
            }
            Event::GrantRefill { rule } => {
                e.rule = Some(rule.to_string());
                "grant_refill"
            }
            Event::Breaker(state) => {
                e.state = Some(state.name().to_string());
                "breaker_state"
            }
            Event::PolicyVersion(v) => {
                e.version = Some(v as f64);
                "policy_version"
            }
            Event::RouteMode { route, mode } => {
                e.route = Some(route.to_string());
                e.mode = Some(mode.to_string());
                "route_mode"
            }
            Event::StoreMode(mode) => {
                e.mode = Some(mode.name().to_string());
                "store_mode"
            }
            Event::UnknownPlan => "unknown_plan",
            Event::Unmatched => "unmatched",
            Event::RecordsDropped(n) => {
                e.count = Some(n as f64);
                "decision_records_dropped"
            }
            Event::PolicyRejected => "policy_rejected",
            Event::CapacityShed {
                route,
                capacity,
                class,
            } => {
                e.route = Some(route.to_string());
                e.capacity = Some(capacity.to_string());
                e.class = Some(class.to_string());
                "capacity_shed"
            }
        };
        e.r#type = kind.to_string();
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    }
}
