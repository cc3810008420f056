//! Plans and overrides (`clients/CONTRACT.md` sections 8.1 and 8.2): the numbers a rule takes
//! for one caller. Each plan's and each override's numbers are merged into a whole rule at load
//! and validated as the rule itself is (a plan's rule is a rule the module accepts), so a
//! request only picks one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

// The tenant maps hash a caller's header once or twice per request, with foldhash rather than
// SipHash: their keys come from the policy alone, so a caller chooses only what is looked up,
// never what is stored, and has no collisions to pile up.
use foldhash::fast::RandomState;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::rule::RawRule;
use super::{invalid, PolicyError, RuleKind, RuleSpec};
use crate::time::{parse_rfc3339, Instant};

/// How long after the policy's load an override may expire: one that runs longer is a plan.
pub const MAX_OVERRIDE: Duration = Duration::from_secs(90 * 86_400);

/// The numbers a plan or an override gives one rule; the others stay the rule's own.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNumbers {
    limit: Option<u64>,
    period: Option<String>,
    burst: Option<u64>,
    cost: Option<u64>,
    concurrency: Option<u64>,
    lease: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlans {
    default: String,
    #[serde(default)]
    tenants: BTreeMap<String, String>,
    limits: BTreeMap<String, RawPlanLimits>,
}

/// One plan's entry in `plans.limits`: the rules it changes by name, and its `weight` in a
/// capacity's fair share (section 14).
pub(super) struct RawPlanLimits {
    weight: Option<u64>,
    rules: BTreeMap<String, RawNumbers>,
}

/// The largest fair-share weight: a plan a thousand times another's is already all of it.
pub const MAX_WEIGHT: u64 = 1000;

impl<'de> Deserialize<'de> for RawPlanLimits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = RawPlanLimits;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of rule names to their numbers, and the plan's weight")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPlanLimits, A::Error> {
                let mut out = RawPlanLimits {
                    weight: None,
                    rules: BTreeMap::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "weight" {
                        out.weight = Some(map.next_value()?);
                    } else {
                        let numbers = map.next_value()?;
                        out.rules.insert(key, numbers);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Entries)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOverride {
    tenant: String,
    user: Option<String>,
    rule: String,
    owner: String,
    reason: String,
    expires: String,
    limit: Option<u64>,
    period: Option<String>,
    burst: Option<u64>,
    cost: Option<u64>,
    concurrency: Option<u64>,
    lease: Option<String>,
}

/// The plans of a policy: which plan a caller is on, and the rules each plan changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plans {
    /// Plan names, in name order; a plan is its index here. Shared, so that a request's
    /// verdict names its plan without a copy.
    names: Vec<Arc<str>>,
    default: usize,
    tenants: HashMap<Vec<u8>, usize, RandomState>,
    /// For each plan, the rules it changes, whole: a few per plan, so a scan of short names
    /// is cheaper than hashing one per rule of every request.
    rules: Vec<Vec<Arc<RuleSpec>>>,
    /// For each plan, its weight in a capacity's fair share.
    weights: Vec<u32>,
}

/// How a caller's plan was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub plan: usize,
    /// The plan header named no plan of the policy (it was ignored).
    pub unknown: bool,
}

impl Plans {
    /// The caller's plan: the plan header's when it names a plan, else the tenant's, else the
    /// default.
    pub fn resolve(&self, header: Option<&[u8]>, tenant: Option<&[u8]>) -> Resolved {
        let named = header.map(|h| self.names.iter().position(|n| n.as_bytes() == h));
        let plan = named
            .flatten()
            .or_else(|| self.tenants.get(tenant?).copied())
            .unwrap_or(self.default);
        Resolved {
            plan,
            unknown: matches!(named, Some(None)),
        }
    }

    pub fn name(&self, plan: usize) -> Option<&Arc<str>> {
        self.names.get(plan)
    }

    pub fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// The plan's weight in a capacity's fair share: 1 unless the plan says otherwise.
    pub fn weight(&self, plan: usize) -> u32 {
        self.weights.get(plan).copied().unwrap_or(1)
    }

    /// The rule as the plan gives it, when the plan changes it.
    pub fn rule(&self, plan: usize, rule: &str) -> Option<&Arc<RuleSpec>> {
        self.rules.get(plan)?.iter().find(|r| r.name == rule)
    }
}

/// One override: a rule's numbers for one tenant (or one of its users) until `expires`.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub tenant: String,
    pub user: Option<String>,
    pub rule: String,
    pub spec: Arc<RuleSpec>,
    pub owner: String,
    pub reason: String,
    pub expires: Instant,
}

impl Override {
    pub fn active(&self, now: Instant) -> bool {
        now < self.expires
    }
}

/// The overrides of a policy, found by tenant.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overrides {
    list: Vec<Override>,
    by_tenant: HashMap<Vec<u8>, Vec<usize>, RandomState>,
}

impl Overrides {
    /// The overrides of one tenant, looked up once per request.
    pub fn of(&self, tenant: Option<&[u8]>) -> TenantOverrides<'_> {
        TenantOverrides {
            list: &self.list,
            ids: tenant
                .and_then(|t| self.by_tenant.get(t))
                .map_or(&[], Vec::as_slice),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Override> {
        self.list.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// One tenant's overrides (none when it has none).
#[derive(Clone, Copy)]
pub struct TenantOverrides<'a> {
    list: &'a [Override],
    ids: &'a [usize],
}

impl<'a> TenantOverrides<'a> {
    /// The override in force for the caller's rule at `now`: its user's, else the tenant's.
    pub fn find(&self, user: Option<&[u8]>, rule: &str, now: Instant) -> Option<&'a Override> {
        let mut tenant_wide = None;
        for o in self.ids.iter().filter_map(|&i| self.list.get(i)) {
            if o.rule != rule || !o.active(now) {
                continue;
            }
            match o.user.as_deref() {
                None => tenant_wide = Some(o),
                Some(u) if Some(u.as_bytes()) == user => return Some(o),
                Some(_) => {}
            }
        }
        tenant_wide
    }
}

impl RawNumbers {
    fn given(&self) -> [(&'static str, bool); 6] {
        [
            ("limit", self.limit.is_some()),
            ("period", self.period.is_some()),
            ("burst", self.burst.is_some()),
            ("cost", self.cost.is_some()),
            ("concurrency", self.concurrency.is_some()),
            ("lease", self.lease.is_some()),
        ]
    }

    /// The rule with these numbers in place of its own, validated as a rule (`path` names
    /// where the numbers are written, for the messages).
    fn apply(self, base: &RawRule, spec: &RuleSpec, path: &str) -> Result<RuleSpec, PolicyError> {
        let semaphore = matches!(spec.kind, RuleKind::Semaphore(_));
        let other_kind = |field: &str| {
            if semaphore {
                !matches!(field, "concurrency" | "lease")
            } else {
                matches!(field, "concurrency" | "lease")
            }
        };
        if let Some((field, _)) = self
            .given()
            .into_iter()
            .find(|&(f, given)| given && other_kind(f))
        {
            let kind = if semaphore {
                "a semaphore rule: it takes concurrency and lease"
            } else {
                "a rate rule: it takes limit, period, burst and cost"
            };
            return Err(invalid(
                format!("{path}.{field}"),
                format!("rule '{}' is {kind}", spec.name),
            ));
        }
        let mut raw = base.clone();
        raw.limit = self.limit.or(raw.limit);
        raw.period = self.period.or(raw.period);
        raw.burst = self.burst.or(raw.burst);
        raw.cost = self.cost.or(raw.cost);
        raw.concurrency = self.concurrency.or(raw.concurrency);
        raw.lease = self.lease.or(raw.lease);
        // Its numbers change; how the regions share them does not.
        raw.validate(path, &spec.name).map(|merged| RuleSpec {
            global: spec.global,
            ..merged
        })
    }
}

/// The rule named `name` at `path`, with its document as written.
fn rule_named<'a>(
    name: &str,
    path: String,
    raw_rules: &'a BTreeMap<String, RawRule>,
    rules: &'a BTreeMap<String, Arc<RuleSpec>>,
) -> Result<(&'a RawRule, &'a RuleSpec), PolicyError> {
    match (raw_rules.get(name), rules.get(name)) {
        (Some(raw), Some(spec)) => Ok((raw, spec)),
        _ => Err(invalid(path, format!("unknown rule '{name}'"))),
    }
}

impl RawPlans {
    pub(super) fn validate(
        self,
        raw_rules: &BTreeMap<String, RawRule>,
        rules: &BTreeMap<String, Arc<RuleSpec>>,
    ) -> Result<Plans, PolicyError> {
        if self.limits.is_empty() {
            return Err(invalid("plans.limits", "names no plan"));
        }
        let names: Vec<Arc<str>> = self.limits.keys().map(|n| Arc::from(n.as_str())).collect();
        let known = names.join(", ");
        let plan = |path: String, name: &str| {
            names
                .iter()
                .position(|n| &**n == name)
                .ok_or_else(|| invalid(path, format!("unknown plan '{name}' (plans: {known})")))
        };
        let default = plan("plans.default".into(), &self.default)?;
        let mut tenants =
            HashMap::with_capacity_and_hasher(self.tenants.len(), RandomState::default());
        for (tenant, name) in &self.tenants {
            let id = plan(format!("plans.tenants.{tenant}"), name)?;
            tenants.insert(tenant.as_bytes().to_vec(), id);
        }
        let mut per_plan = Vec::with_capacity(names.len());
        let mut weights = Vec::with_capacity(names.len());
        for (plan_name, limits) in self.limits {
            let weight = limits.weight.unwrap_or(1);
            weights.push(
                u32::try_from(weight)
                    .ok()
                    .filter(|w| (1..=MAX_WEIGHT).contains(&u64::from(*w)))
                    .ok_or_else(|| {
                        invalid(
                            format!("plans.limits.{plan_name}.weight"),
                            format!("must be in the range [1, {MAX_WEIGHT}]"),
                        )
                    })?,
            );
            let numbers = limits.rules;
            let mut changed = Vec::with_capacity(numbers.len());
            for (rule, n) in numbers {
                let path = format!("plans.limits.{plan_name}.{rule}");
                let (raw, spec) = rule_named(&rule, path.clone(), raw_rules, rules)?;
                let merged = n.apply(raw, spec, &path)?;
                changed.push(Arc::new(merged));
            }
            per_plan.push(changed);
        }
        Ok(Plans {
            names,
            default,
            tenants,
            rules: per_plan,
            weights,
        })
    }
}

/// Validates the overrides, loaded at `loaded`: the expired ones load inactive, each with a
/// warning pushed to `warnings`.
pub(super) fn validate_overrides(
    raw: Vec<RawOverride>,
    raw_rules: &BTreeMap<String, RawRule>,
    rules: &BTreeMap<String, Arc<RuleSpec>>,
    loaded: Instant,
    warnings: &mut Vec<String>,
) -> Result<Overrides, PolicyError> {
    let mut out = Overrides::default();
    let mut seen: HashMap<(String, Option<String>, String), usize> = HashMap::new();
    for (i, o) in raw.into_iter().enumerate() {
        let path = format!("overrides[{i}]");
        let at = |field: &str| format!("{path}.{field}");
        for (field, value) in [
            ("tenant", Some(&o.tenant)),
            ("user", o.user.as_ref()),
            ("owner", Some(&o.owner)),
            ("reason", Some(&o.reason)),
        ] {
            if value.is_some_and(|v| v.trim().is_empty()) {
                return Err(invalid(at(field), "must not be empty"));
            }
        }
        let expires = parse_rfc3339(&o.expires).ok_or_else(|| {
            invalid(
                at("expires"),
                format!(
                    "'{}' is not an RFC 3339 instant (for example 2026-12-07T00:00:00Z)",
                    o.expires
                ),
            )
        })?;
        if expires > loaded.saturating_add(MAX_OVERRIDE) {
            return Err(invalid(
                at("expires"),
                format!(
                    "{} is more than 90 days after the policy is loaded: an override longer than 90 days is a plan",
                    o.expires
                ),
            ));
        }
        let target = (o.tenant.clone(), o.user.clone(), o.rule.clone());
        if let Some(first) = seen.insert(target, i) {
            return Err(invalid(
                path,
                format!("the same tenant, user and rule as overrides[{first}]"),
            ));
        }
        let (raw_rule, spec) = rule_named(&o.rule, at("rule"), raw_rules, rules)?;
        let numbers = RawNumbers {
            limit: o.limit,
            period: o.period,
            burst: o.burst,
            cost: o.cost,
            concurrency: o.concurrency,
            lease: o.lease,
        };
        if !numbers.given().iter().any(|&(_, given)| given) {
            return Err(invalid(
                path,
                "an override gives at least one number: limit, period, burst, cost, concurrency or lease",
            ));
        }
        let spec = numbers.apply(raw_rule, spec, &path)?;
        if expires <= loaded {
            warnings.push(format!(
                "{path}: expired at {} (tenant '{}', rule '{}'): loaded inactive",
                o.expires, o.tenant, o.rule
            ));
        }
        out.by_tenant
            .entry(o.tenant.as_bytes().to_vec())
            .or_default()
            .push(out.list.len());
        out.list.push(Override {
            tenant: o.tenant,
            user: o.user,
            rule: o.rule,
            spec: Arc::new(spec),
            owner: o.owner,
            reason: o.reason,
            expires,
        });
    }
    Ok(out)
}
