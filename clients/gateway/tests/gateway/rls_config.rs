//! The rate limit service's configuration file: every example of the reference service's
//! README loads unchanged, YAML 1.1 booleans read as its parser reads them, and each mistake
//! is refused with a message naming the file, the field and what is wrong.

use std::time::Duration;

use rl_gateway::rls::{Config, OnStoreError, DEFAULT_STORE_TIMEOUT};

/// The README's examples 1, 8 and 9 (the others are served in `rls_reference.rs`), unchanged.
const README: [&str; 3] = [
    r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"#,
    r#"
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#,
    r#"
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#,
];

#[test]
fn the_reference_readme_examples_load() {
    for yaml in README {
        let config = Config::parse(yaml).unwrap();
        assert!(!config.domain().is_empty());
        assert_eq!(config.on_store_error(), OnStoreError::Deny);
        assert_eq!(config.store_timeout(), DEFAULT_STORE_TIMEOUT);
    }
}

#[test]
fn extensions_and_yaml_1_1_booleans() {
    let config = Config::parse(
        r#"
domain: d
on_store_error: fallback
store_timeout: 20ms
response_headers: yes
descriptors:
  - key: k
    shadow_mode: on
    rate_limit:
      unit: Hour
      requests_per_unit: 5
      unit_multiplier: 2
      algorithm: bucket
      burst: 50
  - key: u
    rate_limit:
      unlimited: yes
  - key: 42
    value: 1.50
    rate_limit:
      unit: DAY
      requests_per_unit: 0
"#,
    )
    .unwrap();
    assert_eq!(config.on_store_error(), OnStoreError::Fallback);
    assert_eq!(config.store_timeout(), Duration::from_millis(20));
}

/// `yaml` must be refused with a message containing each of `parts`.
fn refused(yaml: &str, parts: &[&str]) {
    let e = Config::parse(yaml)
        .err()
        .unwrap_or_else(|| panic!("accepted:\n{yaml}"));
    for part in parts {
        assert!(e.contains(part), "'{part}' not in: {e}");
    }
}

fn one(rate_limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n{rate_limit}")
}

#[test]
fn mistakes_are_refused_naming_the_field() {
    // Misspelled keys, at any depth, as the reference service refuses them.
    refused(
        "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: second\n",
        &["descriptors[0]", "unknown field `ratelimit`"],
    );
    refused(
        &one("      unit: second\n      requestsperunit: 5\n"),
        &[
            "descriptors[0].rate_limit",
            "unknown field `requestsperunit`",
            "line 6",
        ],
    );
    refused("domian: d\n", &["unknown field `domian`"]);
    refused(
        &one("      unit: foo\n      requests_per_unit: 5\n"),
        &[
            "descriptors[0].rate_limit.unit",
            "invalid rate limit unit 'foo'",
        ],
    );
    refused(
        &one("      unit: week\n      requests_per_unit: 5\n"),
        &["'week'"],
    );
    refused(
        &one("      requests_per_unit: 5\n"),
        &["rate_limit.unit", "invalid rate limit unit ''"],
    );
    refused(
        &one("      unit: second\n"),
        &["rate_limit.requests_per_unit", "required"],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: -1\n"),
        &["requests_per_unit"],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 4294967296\n"),
        &["requests_per_unit", "more than 4294967295"],
    );
    refused(
        &one("      unlimited: true\n      unit: second\n"),
        &[
            "rate_limit.unit",
            "should not specify rate limit unit when unlimited",
        ],
    );
    refused(
        &one("      unlimited: true\n      burst: 3\n"),
        &["rate_limit.burst"],
    );
    refused(&one("      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: a\n"), &[
        "rate_limit.replaces[0]",
        "replaces should not contain name of same descriptor",
    ]);
    refused(
        &one("      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name:\n"),
        &[
            "rate_limit.replaces[0]",
            "should not have an empty replaces entry",
        ],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 1\n      unit_multiplier: 0\n"),
        &["rate_limit.unit_multiplier"],
    );
    // The extensions.
    refused(
        &one("      unit: second\n      requests_per_unit: 5\n      algorithm: leaky\n"),
        &["rate_limit.algorithm", "'leaky'"],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 5\n      burst: 10\n"),
        &["rate_limit.burst", "only gcra and bucket take a burst"],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 10001\n      algorithm: log\n"),
        &[
            "rate_limit.requests_per_unit",
            "at most 10000 with algorithm log",
        ],
    );
    refused(&one("      unit: day\n      requests_per_unit: 1\n      algorithm: gcra\n      burst: 4000\n"), &[
        "rate_limit.burst",
        "3650d",
    ]);
    refused(
        &one("      unit: second\n      requests_per_unit: 5\n      grant:\n        ttl: 1s\n"),
        &["rate_limit.grant.want", "is required"],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 5\n      grant:\n        want: 0\n"),
        &["rate_limit.grant.want", "must be in the range [1, "],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 5\n      grant:\n        want: 5\n        ttl: 2d\n"),
        &["rate_limit.grant.ttl", "must be between 1ms and 1d"],
    );
    refused(
        &one("      unit: second\n      requests_per_unit: 5\n      grant:\n        want: 5\n        ttl: 10\n"),
        &["rate_limit.grant.ttl", "needs a unit"],
    );
    refused(
        &one("      unlimited: true\n      grant:\n        want: 5\n"),
        &["rate_limit.grant", "an unlimited descriptor has no rate"],
    );
    refused(
        "domain: d\non_store_error: open\n",
        &["on_store_error", "deny, allow or fallback"],
    );
    refused(
        "domain: d\nstore_timeout: 50\n",
        &["store_timeout", "needs a unit"],
    );
    refused("domain: d\nstore_timeout: 0ms\n", &["store_timeout"]);
    // The tree.
    refused(
        "descriptors: []\n",
        &["domain", "config file cannot have empty domain"],
    );
    refused(
        "domain: d\ndescriptors:\n  - value: v\n",
        &["descriptors[0]", "descriptor has empty key"],
    );
    refused(
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: v\n      - key: b\n        value: v\n",
        &["descriptors[0].descriptors[1]", "duplicate descriptor composite key 'a.b_v'"],
    );
    refused("domain: d\ndescriptors:\n  - a\n", &["descriptors[0]"]);
    refused(
        "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
        &["shadow_mode", "boolean"],
    );
    refused("domain: [d\n", &["line 1"]);
}

#[test]
fn loading_names_the_file() {
    let dir = std::env::temp_dir().join(format!("rls-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n",
    )
    .unwrap();
    let e = Config::load(&file).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{}: descriptors[0].rate_limit.unit",
            file.display()
        )),
        "{e}"
    );
    let e = Config::load(&dir.join("missing.yaml")).unwrap_err();
    assert!(e.contains("missing.yaml: cannot read"), "{e}");
    std::fs::write(&file, "domain: d\n").unwrap();
    assert_eq!(Config::load(&file).unwrap().domain(), "d");
    let _ = std::fs::remove_dir_all(&dir);
}
