//! `rl-gateway policy check` and `policy diff` through the library's API: the tables, the
//! warnings, the cuts and the refusal, with the documents loaded at the vectors' instant.

use rl_engine::{Instant, Policy};
use rl_gateway::policy_cmd::{self, Cut, Measure, Ratio, Subject};
use serde_json::{json, Value};

/// 2026-01-01T00:00:00Z, the instant every policy vector is loaded at.
const NOW: Instant = Instant::from_micros(1_767_225_600_000_000);

/// Plans with an empty one, an active override of a tenant and one of a user (that lowers),
/// an expired one, a semaphore, a shadow rule, a grant rule and a rule nothing uses.
fn small() -> Value {
    json!({
      "version": 1,
      "identity": {"user": "x-user", "tenant": "x-tenant"},
      "rules": {
        "tenant": {"key": "{t:${tenant}}:tenant", "limit": 1000, "period": "1m"},
        "write":  {"key": "{t:${tenant}}:write:${user}", "limit": 5, "period": "1s", "burst": 10},
        "jobs":   {"key": "{t:${tenant}}:jobs", "concurrency": 4, "lease": "30s"},
        "search": {"key": "search:${user}", "limit": 10, "period": "1s", "shadow": true},
        "global": {"key": "global", "limit": 40000, "period": "1s", "grant": {"want": 100}},
        "legacy": {"key": "legacy:${ip}", "limit": 1, "period": "1s"}
      },
      "plans": {
        "default": "free",
        "tenants": {"atlas": "pro"},
        "limits": {
          "free":  {"tenant": {"limit": 100}},
          "pro":   {"tenant": {"limit": 10000, "burst": 20000}, "jobs": {"concurrency": 16}},
          "trial": {}
        }
      },
      "overrides": [
        {"tenant": "atlas", "rule": "write", "limit": 50, "owner": "ops@example.com",
         "reason": "migration", "expires": "2026-01-15T00:00:00Z"},
        {"tenant": "birch", "user": "ada", "rule": "tenant", "limit": 50,
         "owner": "ops@example.com", "reason": "abuse", "expires": "2026-02-01T12:30:00Z"},
        {"tenant": "cedar", "rule": "tenant", "limit": 9, "owner": "ops@example.com",
         "reason": "trial", "expires": "2025-12-01T00:00:00Z"}
      ],
      "routes": [
        {"method": "POST", "path": "/orders", "rules": ["tenant", "write"]},
        {"method": "POST", "path": "/jobs",   "rules": ["jobs", "tenant"]},
        {"method": "GET",  "path": "/search", "rules": ["search", "global"]}
      ],
      "default": {"rules": ["tenant"]}
    })
}

/// `small()` as text, after an edit.
fn edited(edit: impl FnOnce(&mut Value)) -> String {
    let mut doc = small();
    edit(&mut doc);
    doc.to_string()
}

/// The diff of `small()` and its edit.
fn diff_small(edit: impl FnOnce(&mut Value)) -> policy_cmd::Diff {
    policy_cmd::diff(&small().to_string(), &edited(edit), NOW).unwrap()
}

fn cut_texts(diff: &policy_cmd::Diff) -> Vec<String> {
    diff.cuts().iter().map(ToString::to_string).collect()
}

fn plan(name: &str) -> Subject {
    Subject::Plan(name.to_string())
}

fn tenant(name: &str) -> Subject {
    Subject::Tenant {
        tenant: name.to_string(),
        user: None,
    }
}

fn n(value: u128) -> Ratio {
    Ratio::integer(value)
}

fn cut(rule: &str, subject: Subject, measure: Measure, old: Ratio, new: Ratio) -> Cut {
    Cut {
        rule: rule.to_string(),
        subject,
        measure,
        old,
        new,
    }
}

/// The change column of the table's `new` line for a rule and subject.
fn change_of(render: &str, rule: &str, subject: &str) -> String {
    let lines: Vec<&str> = render.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(rule) && l.contains(subject) && l.contains(" old "))
        .unwrap_or_else(|| panic!("no old line for {rule} {subject} in\n{render}"));
    let new = lines[at + 1];
    assert!(new.contains(" new "), "{new}");
    let header = lines.iter().find(|l| l.starts_with("rule")).unwrap();
    let column = header.find("change").unwrap();
    new.get(column..).unwrap_or("").to_string()
}

const SMALL_TABLE: &str = "\
policy version 1: 6 rules, 3 routes and the default, 3 plans, 2 of 3 overrides active
plans: free (default), pro (tenants atlas), trial

rule    applies to             algo       per second  per minute     per hour  capacity  cost  numbers from                         notes
------  ---------------------  ---------  ----------  ----------  -----------  --------  ----  -----------------------------------  ------------
global  plan free              gcra           40,000   2,400,000  144,000,000    40,000     1  rule                                 grant 100/1s
global  plan pro               gcra           40,000   2,400,000  144,000,000    40,000     1  rule                                 grant 100/1s
global  plan trial             gcra           40,000   2,400,000  144,000,000    40,000     1  rule                                 grant 100/1s
jobs    plan free              semaphore           -           -            -         4     -  rule                                 lease 30s
jobs    plan pro               semaphore           -           -            -        16     -  plan pro                             lease 30s
jobs    plan trial             semaphore           -           -            -         4     -  rule                                 lease 30s
legacy  plan free              gcra                1          60        3,600         1     1  rule                                 unused
legacy  plan pro               gcra                1          60        3,600         1     1  rule                                 unused
legacy  plan trial             gcra                1          60        3,600         1     1  rule                                 unused
search  plan free              gcra               10         600       36,000        10     1  rule                                 shadow
search  plan pro               gcra               10         600       36,000        10     1  rule                                 shadow
search  plan trial             gcra               10         600       36,000        10     1  rule                                 shadow
tenant  plan free              gcra           ~1.667         100        6,000       100     1  plan free
tenant  plan pro               gcra           ~166.7      10,000      600,000    20,000     1  plan pro
tenant  plan trial             gcra           ~16.67       1,000       60,000     1,000     1  rule
tenant  tenant birch user ada  gcra          ~0.8333          50        3,000        50     1  override until 2026-02-01T12:30:00Z
write   plan free              gcra                5         300       18,000        10     1  rule
write   plan pro               gcra                5         300       18,000        10     1  rule
write   plan trial             gcra                5         300       18,000        10     1  rule
write   tenant atlas           gcra               50       3,000      180,000        10     1  override until 2026-01-15T00:00:00Z

Rates and capacity count units; a request takes `cost` of them. A plan's row reads `rule` where the plan leaves the rule as written.

warning: overrides[2]: expired at 2025-12-01T00:00:00Z (tenant 'cedar', rule 'tenant'): loaded inactive
warning: rules.legacy: no route uses it, nor the default: it limits nothing
warning: plans.limits.trial: names no rule: its callers get every rule as written
warning: overrides[1]: lowers rule 'tenant' for tenant 'birch' user 'ada' below what plan free gives: requests per hour 6,000 -> 3,000, requests at once 100 -> 50 (an override replaces the rule's own numbers, not its plan's)
";

#[test]
fn check_tabulates_every_plan_and_active_override() {
    let report = policy_cmd::check(&small().to_string(), NOW).unwrap();
    assert_eq!(report.render(), SMALL_TABLE);
}

#[test]
fn check_warns_of_what_is_legal_but_suspicious() {
    let report = policy_cmd::check(&small().to_string(), NOW).unwrap();
    assert_eq!(
        report.warnings(),
        [
            // The engine's own, exactly as a gateway logs it at load.
            "overrides[2]: expired at 2025-12-01T00:00:00Z (tenant 'cedar', rule 'tenant'): loaded inactive",
            "rules.legacy: no route uses it, nor the default: it limits nothing",
            "plans.limits.trial: names no rule: its callers get every rule as written",
            "overrides[1]: lowers rule 'tenant' for tenant 'birch' user 'ada' below what plan free gives: requests per hour 6,000 -> 3,000, requests at once 100 -> 50 (an override replaces the rule's own numbers, not its plan's)",
        ]
    );
    // Without plans, an override is measured against the rule as written; one that raises
    // is no warning, and neither is an override once it has expired.
    let doc = edited(|d| {
        d.as_object_mut().unwrap().remove("plans");
        d["overrides"][0]["limit"] = json!(2);
        d["overrides"][1]["limit"] = json!(5000);
        d["rules"]["legacy"]["key"] = json!("{t:${tenant}}:legacy");
        d["routes"][0]["rules"] = json!(["tenant", "write", "legacy"]);
    });
    let report = policy_cmd::check(&doc, NOW).unwrap();
    assert_eq!(
        report.warnings(),
        [
            "overrides[2]: expired at 2025-12-01T00:00:00Z (tenant 'cedar', rule 'tenant'): loaded inactive",
            "overrides[0]: lowers rule 'write' for tenant 'atlas' below what the rule as written gives: requests per hour 18,000 -> 7,200 (an override replaces the rule's own numbers, not its plan's)",
        ]
    );
    assert!(report.render().contains(
        "write   tenant atlas           gcra                2         120        7,200        10     1  override until 2026-01-15T00:00:00Z\n"
    ));
    let later = Instant::from_micros(NOW.as_micros() + 15 * 86_400_000_000);
    let report = policy_cmd::check(&doc, later).unwrap();
    assert_eq!(
        report.warnings(),
        [
            "overrides[0]: expired at 2026-01-15T00:00:00Z (tenant 'atlas', rule 'write'): loaded inactive",
            "overrides[2]: expired at 2025-12-01T00:00:00Z (tenant 'cedar', rule 'tenant'): loaded inactive",
        ]
    );
    assert!(!report.render().contains("tenant atlas"));
}

#[test]
fn check_refuses_with_the_engine_message() {
    let cases = [
        (
            edited(|d| d["rules"]["tenant"]["period"] = json!("60")),
            "invalid policy: rules.tenant.period: needs a unit: add ms, s, m, h or d (for example 10s)",
        ),
        (
            edited(|d| d["overrides"][0]["expires"] = json!("2026-06-01T00:00:00Z")),
            "invalid policy: overrides[0].expires: 2026-06-01T00:00:00Z is more than 90 days after the policy is loaded: an override longer than 90 days is a plan",
        ),
        (
            edited(|d| d["plans"]["limits"]["free"]["tenant"]["concurrency"] = json!(3)),
            "invalid policy: plans.limits.free.tenant.concurrency: rule 'tenant' is a rate rule: it takes limit, period, burst and cost",
        ),
        (
            "{\"version\": 1,".to_string(),
            "invalid policy: EOF while parsing a value at line 1 column 14",
        ),
    ];
    for (doc, message) in cases {
        assert_eq!(policy_cmd::check(&doc, NOW).unwrap_err(), message);
        let engine = Policy::from_json_at(&doc, NOW).unwrap_err().to_string();
        assert_eq!(engine, message);
    }
}

/// Every document of `clients/vectors/policies`: refused with its stated message, or tabulated.
#[test]
fn check_agrees_with_every_policy_vector() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/policies");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (name, value) in file["env"].as_object().into_iter().flatten() {
            std::env::set_var(name, value.as_str().unwrap());
        }
        for case in file["policies"].as_array().unwrap() {
            let doc = match case["text"].as_str() {
                Some(t) => t.to_string(),
                None => case["policy"].to_string(),
            };
            let got = policy_cmd::check(&doc, NOW);
            match case["error"].as_str() {
                Some(message) => {
                    assert_eq!(got.unwrap_err(), message, "{path:?}: {}", case["name"])
                }
                None => {
                    let report = got.unwrap_or_else(|e| panic!("{path:?} {}: {e}", case["name"]));
                    assert!(report.render().contains("\nrule "), "{}", case["name"]);
                }
            }
            seen += 1;
        }
    }
    assert!(seen > 100, "{seen} vectors");
}

#[test]
fn check_reads_the_northstar_policy() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../rust/northstar.policy.json");
    let report = policy_cmd::check(&std::fs::read_to_string(path).unwrap(), NOW).unwrap();
    let render = report.render();
    for line in [
        "plans: enterprise (tenants globex), free (tenants initech), standard (default)",
        "tenant    plan enterprise  gcra           ~166.7      10,000      600,000    10,000     1  plan enterprise",
        "tenant    plan standard    gcra           ~16.67       1,000       60,000     1,000     1  rule",
        "inflight  plan enterprise  semaphore           -           -            -         8     -  plan enterprise  lease 1m",
        "export    plan free        gcra          ~0.3333          20        1,200        20    10  plan free        settle",
    ] {
        assert!(render.contains(line), "{line}\nnot in\n{render}");
    }
    assert_eq!(
        report.warnings(),
        ["plans.limits.standard: names no rule: its callers get every rule as written"]
    );
}

#[test]
fn diff_flags_a_per_second_rule_turned_per_minute_as_a_cut() {
    // `write` was 5 per second; somebody meant "per minute" for the unit and kept the number.
    let new = edited(|d| {
        d["version"] = json!(2);
        d["rules"]["write"]["period"] = json!("1m");
    });
    let diff = policy_cmd::diff(&small().to_string(), &new, NOW).unwrap();
    assert_eq!(
        diff.cuts(),
        [
            cut("write", plan("free"), Measure::Rate, n(18_000), n(300)),
            cut("write", plan("pro"), Measure::Rate, n(18_000), n(300)),
            cut("write", plan("trial"), Measure::Rate, n(18_000), n(300)),
            // The override keeps the rule's period: 50 per minute now.
            cut(
                "write",
                tenant("atlas"),
                Measure::Rate,
                n(180_000),
                n(3_000)
            ),
        ]
    );
    assert_eq!(
        diff.refusal().unwrap(),
        "\
refusing: 4 effective limits fall by more than half:
  rule 'write', plan free: requests per hour 18,000 -> 300 (/60)
  rule 'write', plan pro: requests per hour 18,000 -> 300 (/60)
  rule 'write', plan trial: requests per hour 18,000 -> 300 (/60)
  rule 'write', tenant atlas: requests per hour 180,000 -> 3,000 (/60)
Check each number's unit in the table (per second, per minute, per hour); if the cuts are meant, run again with --approve-cuts.
"
    );
    assert_eq!(
        change_of(&diff.render(), "write", "plan free"),
        "CUT rate /60"
    );
}

#[test]
fn diff_reads_a_per_minute_rule_turned_per_second_as_a_rise() {
    // The reverse: a rise of 60 times, marked, and no cut (rates compare per hour).
    let old = edited(|d| d["rules"]["write"]["period"] = json!("1m"));
    let new = edited(|d| d["version"] = json!(2));
    let diff = policy_cmd::diff(&old, &new, NOW).unwrap();
    assert_eq!(diff.cuts(), []);
    assert_eq!(diff.refusal(), None);
    let render = diff.render();
    assert_eq!(change_of(&render, "write", "plan free"), "rate x60");
    assert!(
        render.contains("*5        *300      *18,000        10     1  rule"),
        "{render}"
    );
    assert!(render.ends_with("\n4 rows changed, 0 cuts\n"), "{render}");
}

#[test]
fn diff_cuts_only_what_falls_by_more_than_half() {
    let diff = diff_small(|d| d["plans"]["limits"]["free"]["tenant"]["limit"] = json!(50));
    assert_eq!(diff.cuts(), []);
    let render = diff.render();
    assert_eq!(
        change_of(&render, "tenant", "plan free"),
        "rate /2, capacity /2"
    );
    let diff = diff_small(|d| d["plans"]["limits"]["free"]["tenant"]["limit"] = json!(49));
    assert_eq!(
        diff.cuts(),
        [
            cut("tenant", plan("free"), Measure::Rate, n(6_000), n(2_940)),
            cut("tenant", plan("free"), Measure::Capacity, n(100), n(49)),
        ]
    );
    let render = diff.render();
    let change = "CUT rate /~2.041, CUT capacity /~2.041";
    assert_eq!(change_of(&render, "tenant", "plan free"), change);
}

#[test]
fn diff_reads_cost_and_capacity_in_requests() {
    // The same units at three times the cost: a third of the requests, per hour and at once.
    let diff = diff_small(|d| d["rules"]["write"]["cost"] = json!(3));
    let third = Ratio::new(18_000, 3).unwrap();
    assert_eq!(
        diff.cuts().get(..2).unwrap(),
        [
            cut("write", plan("free"), Measure::Rate, n(18_000), third),
            cut("write", plan("free"), Measure::Capacity, n(10), n(3)),
        ]
    );
    let render = diff.render();
    let change = "CUT rate /3, CUT capacity /~3.333";
    assert_eq!(change_of(&render, "write", "plan free"), change);
    // A burst that falls below half is a cut even where the rate holds.
    let diff = diff_small(|d| d["rules"]["write"]["burst"] = json!(4));
    assert_eq!(diff.cuts().len(), 4);
    assert!(diff
        .cuts()
        .iter()
        .all(|c| c.measure == Measure::Capacity && c.old == n(10) && c.new == n(4)));
}

#[test]
fn diff_reads_a_removed_rule_as_a_rise() {
    let without = |d: &mut Value| {
        d["rules"].as_object_mut().unwrap().remove("write");
        d["routes"][0]["rules"] = json!(["tenant"]);
        d["overrides"].as_array_mut().unwrap().remove(0);
    };
    let diff = diff_small(without);
    assert_eq!(diff.cuts(), []);
    let render = diff.render();
    let change = "rule removed: limits nothing";
    assert_eq!(change_of(&render, "write", "plan pro"), change);
    let dashes =
        "new   -                   -           -            -         -     -  no such rule";
    assert!(render.contains(dashes), "{render}");
    // And an added one is shown as such.
    let diff = policy_cmd::diff(&edited(without), &small().to_string(), NOW).unwrap();
    assert_eq!(diff.cuts(), []);
    let render = diff.render();
    assert_eq!(change_of(&render, "write", "tenant atlas"), "rule added");
}

#[test]
fn diff_sends_a_removed_plans_callers_to_the_default() {
    // `pro` goes: its callers (atlas among them) land on `free`, the default.
    let diff = diff_small(|d| {
        d["plans"]["limits"].as_object_mut().unwrap().remove("pro");
        d["plans"]["tenants"] = json!({});
    });
    assert_eq!(
        cut_texts(&diff),
        [
            "rule 'jobs', plan pro: requests in flight 16 -> 4 (/4)",
            "rule 'tenant', plan pro: requests per hour 600,000 -> 6,000 (/100)",
            "rule 'tenant', plan pro: requests at once 20,000 -> 100 (/200)",
        ]
    );
    let render = diff.render();
    assert!(render.contains("*plan free"), "{render}");
    assert!(
        render.contains("    plans: free (default), trial\n"),
        "{render}"
    );
}

#[test]
fn diff_follows_a_tenant_moved_to_another_plan() {
    let diff = diff_small(|d| d["plans"]["tenants"]["atlas"] = json!("trial"));
    assert_eq!(
        cut_texts(&diff),
        [
            "rule 'jobs', tenant atlas: requests in flight 16 -> 4 (/4)",
            "rule 'tenant', tenant atlas: requests per hour 600,000 -> 60,000 (/10)",
            "rule 'tenant', tenant atlas: requests at once 20,000 -> 1,000 (/20)",
        ]
    );
    assert_eq!(diff.cuts().first().unwrap().subject, tenant("atlas"));
    // Rules both plans leave as written get no row of the tenant's.
    assert!(!diff.render().contains("global  tenant atlas"));
}

#[test]
fn diff_falls_back_from_a_removed_override() {
    let diff = diff_small(|d| {
        d["overrides"].as_array_mut().unwrap().remove(0);
    });
    assert_eq!(
        cut_texts(&diff),
        ["rule 'write', tenant atlas: requests per hour 180,000 -> 18,000 (/10)"]
    );
    let render = diff.render();
    assert_eq!(change_of(&render, "write", "tenant atlas"), "CUT rate /10");
}

#[test]
fn diff_never_cuts_what_refuses_nothing() {
    // A shadow rule's numbers are compared and marked, but it refuses nothing.
    let diff = diff_small(|d| d["rules"]["search"]["period"] = json!("1m"));
    assert_eq!(diff.cuts(), []);
    assert_eq!(change_of(&diff.render(), "search", "plan free"), "rate /60");
    // Its promotion is marked, not a cut: its expect_refusals is there for that.
    let diff = diff_small(|d| d["rules"]["search"]["shadow"] = json!(false));
    assert_eq!(diff.cuts(), []);
    let render = diff.render();
    assert_eq!(change_of(&render, "search", "plan free"), "now enforced");
    // Nor is a rule no route uses.
    let diff = diff_small(|d| d["rules"]["legacy"]["period"] = json!("1h"));
    assert_eq!(diff.cuts(), []);
}

#[test]
fn diff_cuts_a_semaphore_by_its_concurrency() {
    let diff = diff_small(|d| d["rules"]["jobs"]["concurrency"] = json!(1));
    assert_eq!(
        diff.cuts(),
        [
            cut("jobs", plan("free"), Measure::Concurrency, n(4), n(1)),
            cut("jobs", plan("trial"), Measure::Concurrency, n(4), n(1)),
        ]
    );
    // A semaphore turned into a rate is another kind of limit: marked, not compared.
    let diff = diff_small(|d| {
        d["rules"]["jobs"] = json!({"key": "{t:${tenant}}:jobs", "limit": 1, "period": "1s"});
        d["plans"]["limits"]["pro"]
            .as_object_mut()
            .unwrap()
            .remove("jobs");
    });
    assert_eq!(diff.cuts(), []);
    let render = diff.render();
    let change = "kind changed: not compared";
    assert_eq!(change_of(&render, "jobs", "plan free"), change);
    // A lease alone is no limit: marked, with its numbers unchanged.
    let diff = diff_small(|d| d["rules"]["jobs"]["lease"] = json!("1m"));
    let render = diff.render();
    assert!(render.contains("*lease 1m"), "{render}");
    assert_eq!(change_of(&render, "jobs", "plan pro"), "numbers unchanged");
}

#[test]
fn diff_names_the_invalid_document() {
    let bad = edited(|d| d["rules"]["tenant"]["period"] = json!("60"));
    let message =
        "invalid policy: rules.tenant.period: needs a unit: add ms, s, m, h or d (for example 10s)";
    assert_eq!(
        policy_cmd::diff(&bad, &small().to_string(), NOW).unwrap_err(),
        format!("old: {message}")
    );
    assert_eq!(
        policy_cmd::diff(&small().to_string(), &bad, NOW).unwrap_err(),
        format!("new: {message}")
    );
}

#[test]
fn diff_warns_when_the_version_does_not_rise() {
    let diff = policy_cmd::diff(&small().to_string(), &small().to_string(), NOW).unwrap();
    assert_eq!(
        diff.warnings().first().map(String::as_str),
        Some("version: the new version 1 is not higher than the old 1: a gateway running the old refuses it")
    );
    assert_eq!(diff.cuts(), []);
    assert!(diff.render().ends_with("\n0 rows changed, 0 cuts\n"));
}

const TINY_OLD: &str = r#"{"version": 3,
 "identity": {"user": "x-user", "tenant": "x-tenant"},
 "rules": {
   "tenant": {"key": "{t:${tenant}}:tenant", "limit": 1000, "period": "1m"},
   "write":  {"key": "{t:${tenant}}:write:${user}", "limit": 5, "period": "1s", "burst": 10},
   "jobs":   {"key": "{t:${tenant}}:jobs", "concurrency": 4, "lease": "30s"}
 },
 "plans": {"default": "free", "tenants": {"atlas": "pro"},
   "limits": {"free": {"tenant": {"limit": 100}},
              "pro":  {"tenant": {"limit": 10000}, "jobs": {"concurrency": 16}}}},
 "overrides": [{"tenant": "atlas", "rule": "write", "limit": 50, "owner": "ops@example.com",
                "reason": "migration", "expires": "2026-01-15T00:00:00Z"}],
 "routes": [{"method": "POST", "path": "/orders", "rules": ["tenant", "write"]},
            {"method": "POST", "path": "/jobs", "rules": ["jobs", "tenant"]}],
 "default": {"rules": []}}"#;

const TINY_DIFF: &str = "\
old policy version 3: 3 rules, 2 routes and the default, 2 plans, 1 of 1 override active
    plans: free (default), pro (tenants atlas)
new policy version 4: 3 rules, 2 routes and the default, 2 plans, 1 of 1 override active
    plans: free (default), pro (tenants atlas)

rule    applies to    doc   algo       per second  per minute  per hour  capacity  cost  numbers from                         notes      change
------  ------------  ----  ---------  ----------  ----------  --------  --------  ----  -----------------------------------  ---------  --------------------
jobs    plan free     both  semaphore           -           -         -         4     -  rule                                 lease 30s
jobs    plan pro      old   semaphore           -           -         -        16     -  plan pro                             lease 30s
                      new   semaphore           -           -         -        *8     -  plan pro                             lease 30s  concurrency /2
tenant  plan free     old   gcra           ~1.667         100     6,000       100     1  plan free
                      new   gcra          *~3.333        *200   *12,000      *200     1  plan free                                       rate x2, capacity x2
tenant  plan pro      both  gcra           ~166.7      10,000   600,000    10,000     1  plan pro
write   plan free     old   gcra                5         300    18,000        10     1  rule
                      new   gcra        *~0.08333          *5      *300        10     1  rule                                            CUT rate /60
write   plan pro      old   gcra                5         300    18,000        10     1  rule
                      new   gcra        *~0.08333          *5      *300        10     1  rule                                            CUT rate /60
write   tenant atlas  old   gcra               50       3,000   180,000        10     1  override until 2026-01-15T00:00:00Z
                      new   gcra         *~0.8333         *50    *3,000        10     1  override until 2026-01-15T00:00:00Z             CUT rate /60

Rates and capacity count units; a request takes `cost` of them. A plan's row reads `rule` where the plan leaves the rule as written.
* marks a cell that changed. CUT: an enforced limit falls by more than half, rates read in requests per hour (units / cost), capacity in requests at once.

5 rows changed, 3 cuts
";

#[test]
fn diff_tabulates_both_documents_side_by_side() {
    // The per-second `write` moved to per minute (a cut), `free` doubled (a rise), `pro`'s
    // jobs halved exactly (marked, not a cut).
    let mut new: Value = serde_json::from_str(TINY_OLD).unwrap();
    new["version"] = json!(4);
    new["rules"]["write"]["period"] = json!("1m");
    new["plans"]["limits"]["free"]["tenant"]["limit"] = json!(200);
    new["plans"]["limits"]["pro"]["jobs"]["concurrency"] = json!(8);
    let diff = policy_cmd::diff(TINY_OLD, &new.to_string(), NOW).unwrap();
    assert_eq!(diff.render(), TINY_DIFF);
    assert_eq!(diff.warnings(), [] as [String; 0]);
    assert_eq!(diff.cuts().len(), 3);
    assert_eq!(
        diff.cuts()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "rule 'write', plan free: requests per hour 18,000 -> 300 (/60)",
            "rule 'write', plan pro: requests per hour 18,000 -> 300 (/60)",
            "rule 'write', tenant atlas: requests per hour 180,000 -> 3,000 (/60)",
        ]
    );
}
