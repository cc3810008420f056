//! A route as written (section 8.3), and its validation.

use std::collections::BTreeMap;
use std::sync::Arc;

use rl_core::rule::{check_cost, Algo, Rule, MAX_PERIOD_TEXT, MAX_PERIOD_US};
use serde::Deserialize;

use super::capacity::route_capacity;
use super::field::{core_message, duration};
use super::{invalid, Methods, OnStoreError, PathTemplate, PolicyError, Route, RuleKind, RuleSpec};
use crate::capacity::CapacitySpec;

/// The longest route name: a metrics label, not a document.
const MAX_NAME: usize = 128;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    /// A name, `"*"`, or a list of names.
    method: serde_json::Value,
    path: String,
    rules: Vec<String>,
    on_store_error: Option<RawOnStoreError>,
    name: Option<String>,
    capacity: Option<String>,
    priority: Option<String>,
}

/// The route for the requests no route matches (section 8.4): rules and a posture only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefault {
    rules: Vec<String>,
    on_store_error: Option<RawOnStoreError>,
}

/// What a policy without `default` is told: the line that keeps its old behaviour.
pub(super) const MISSING_DEFAULT: &str = "a policy needs a default route for the requests no route matches; add \"default\": {\"rules\": []} to let them pass unlimited as before (counted as unmatched), or give it rules";

impl RawDefault {
    pub(super) fn validate(
        self,
        rules: &BTreeMap<String, Arc<RuleSpec>>,
    ) -> Result<Route, PolicyError> {
        let raw = RawRoute {
            method: serde_json::Value::from("*"),
            path: "/*".into(),
            rules: self.rules,
            on_store_error: self.on_store_error,
            name: Some(DEFAULT_NAME.into()),
            capacity: None,
            priority: None,
        };
        Ok(raw
            .validate("default", rules, &BTreeMap::new())?
            .into_default())
    }
}

/// The default route's name in metrics, logs and `${route}`.
pub const DEFAULT_NAME: &str = "default";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnStoreError {
    mode: String,
    limit: Option<u64>,
    period: Option<String>,
    burst: Option<u64>,
}

/// `"GET"`, `"*"` or `["GET", "POST"]`; names are HTTP tokens of letters, matched without case.
fn methods(path: &str, value: &serde_json::Value) -> Result<Methods, PolicyError> {
    let name = |v: &serde_json::Value| -> Result<String, PolicyError> {
        match v.as_str() {
            Some(m) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic()) => {
                Ok(m.to_ascii_uppercase())
            }
            _ => Err(invalid(
                path,
                "must be an HTTP method such as GET, \"*\" or a list of methods",
            )),
        }
    };
    match value {
        serde_json::Value::String(m) if m == "*" => Ok(Methods::Any),
        serde_json::Value::Array(list) if !list.is_empty() => {
            let mut names: Vec<String> = Vec::with_capacity(list.len());
            for (i, v) in list.iter().enumerate() {
                let m = name(v).map_err(|_| {
                    invalid(format!("{path}[{i}]"), "must be an HTTP method such as GET")
                })?;
                if names.contains(&m) {
                    return Err(invalid(format!("{path}[{i}]"), format!("{m} given twice")));
                }
                names.push(m);
            }
            Ok(Methods::Some(names))
        }
        other => Ok(Methods::Some(vec![name(other)?])),
    }
}

impl RawRoute {
    pub(super) fn validate(
        self,
        path: &str,
        rules: &BTreeMap<String, Arc<RuleSpec>>,
        capacities: &BTreeMap<String, CapacitySpec>,
    ) -> Result<Route, PolicyError> {
        let capacity = route_capacity(path, self.capacity, self.priority, capacities)?;
        let methods = methods(&format!("{path}.method"), &self.method)?;
        let template = PathTemplate::parse(&self.path)
            .map_err(|message| invalid(format!("{path}.path"), message))?;
        if let Some(name) = &self.name {
            if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
                return Err(invalid(
                    format!("{path}.name"),
                    format!("must be 1 to {MAX_NAME} printable characters"),
                ));
            }
        }
        if self.rules.is_empty() && self.on_store_error.is_some() {
            return Err(invalid(
                format!("{path}.on_store_error"),
                "an exempt route (no rules) makes no store call, so it has no posture",
            ));
        }
        let mut specs: Vec<Arc<RuleSpec>> = Vec::with_capacity(self.rules.len());
        for (i, name) in self.rules.iter().enumerate() {
            let spec = rules.get(name).ok_or_else(|| {
                invalid(
                    format!("{path}.rules[{i}]"),
                    format!("unknown rule '{name}'"),
                )
            })?;
            if specs.iter().any(|s| s.name == *name) {
                return Err(invalid(
                    format!("{path}.rules[{i}]"),
                    format!("rule '{name}' given twice"),
                ));
            }
            if let Some(capture) = spec
                .key
                .captures()
                .find(|c| !template.captures().any(|t| t == *c))
            {
                return Err(invalid(
                    format!("{path}.rules[{i}]"),
                    format!(
                        "rule '{name}' keys by '${{path.{capture}}}', which this route's path does not capture"
                    ),
                ));
            }
            specs.push(Arc::clone(spec));
        }
        let multi: Vec<&RuleSpec> = specs
            .iter()
            .map(AsRef::as_ref)
            .filter(|s| s.in_multi())
            .collect();
        // Every pair: one hash tag for all, and no key twice (RL.MULTI refuses a repeated key).
        let pairs = multi
            .iter()
            .enumerate()
            .flat_map(|(i, a)| multi.iter().skip(i + 1).map(move |b| (*a, *b)));
        for (first, other) in pairs {
            let (a, b) = (first.key.hash_tag(), other.key.hash_tag());
            if a.is_none() || a != b {
                return Err(invalid(
                    format!("{path}.rules"),
                    format!(
                        "rules '{}' and '{}' go in one RL.MULTI, so their keys must share a hash tag (a '{{...}}' part written the same in both)",
                        first.name, other.name
                    ),
                ));
            }
            if first.key == other.key {
                return Err(invalid(
                    format!("{path}.rules"),
                    format!(
                        "rules '{}' and '{}' have the same key",
                        first.name, other.name
                    ),
                ));
            }
        }
        let at = |field: &str| format!("{path}.on_store_error.{field}");
        let on_store_error = match self.on_store_error {
            None => OnStoreError::Deny,
            Some(raw) => match raw.mode.as_str() {
                "deny" | "allow" => {
                    if let Some(field) = [
                        ("limit", raw.limit.is_some()),
                        ("period", raw.period.is_some()),
                        ("burst", raw.burst.is_some()),
                    ]
                    .iter()
                    .find_map(|(f, given)| given.then_some(*f))
                    {
                        return Err(invalid(
                            at(field),
                            "only a fallback takes a limit, period or burst",
                        ));
                    }
                    if raw.mode == "deny" {
                        OnStoreError::Deny
                    } else {
                        OnStoreError::Allow
                    }
                }
                "fallback" => {
                    let limit = raw
                        .limit
                        .ok_or_else(|| invalid(at("limit"), "a fallback needs a limit"))?;
                    let period_text = raw
                        .period
                        .ok_or_else(|| invalid(at("period"), "a fallback needs a period"))?;
                    let period =
                        duration(&at("period"), &period_text, MAX_PERIOD_US, MAX_PERIOD_TEXT)?;
                    let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
                    let rule = Rule::new(Algo::Gcra, limit, period_us, raw.burst).map_err(|e| {
                        let field = match &e {
                            rl_core::error::Error::OutOfRange { arg: "limit", .. } => "limit",
                            _ => "burst",
                        };
                        invalid(at(field), core_message(&e))
                    })?;
                    // The fallback counts the route's first rule's cost: one it could never admit
                    // would turn an outage into refusing every request.
                    if let Some(RuleKind::Rate(r)) = specs.first().map(|s| &s.kind) {
                        if check_cost(r.cost, &rule).is_err() {
                            // The capacity is the burst when given, else the limit: name that one.
                            let field = if raw.burst.is_some() {
                                "burst"
                            } else {
                                "limit"
                            };
                            return Err(invalid(
                                at(field),
                                format!(
                                    "the route's first rule costs {}, more than the fallback's capacity {}",
                                    r.cost,
                                    rule.burst()
                                ),
                            ));
                        }
                    }
                    OnStoreError::Fallback(rule)
                }
                other => {
                    return Err(invalid(
                        at("mode"),
                        format!("must be deny, fallback or allow (got '{other}')"),
                    ))
                }
            },
        };
        Ok(Route {
            capacity,
            ..Route::new(
                methods,
                self.path,
                template,
                self.name,
                specs,
                on_store_error,
            )
        })
    }
}
