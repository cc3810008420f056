// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::net::IpAddr;
use std::time::Duration;

use std::sync::Arc;

use rl_core::rule::Algo;
use rl_engine::policy::{OnStoreError, Policy, PolicyError, RequestIdentity, Routed, RuleKind};
use rl_engine::{Engine, Options};
use serde_json::{json, Value};

/// The example policy of clients/CONTRACT.md section 2.
fn example() -> Value {
    json!({
      "version": 7, "default": {"rules": []},
      "identity": {"user": "x-user", "tenant": "x-tenant", "trusted_proxies": ["10.0.0.0/8", "::1"]},
      "rules": {
        "read":    {"key": "{t:${tenant}}:read:${user}", "algo": "bucket", "limit": 2, "period": "1s", "burst": 20},
        "tenant":  {"key": "{t:${tenant}}:tenant", "limit": 1000, "period": "1m", "public": false},
        "global":  {"key": "global:catalog", "limit": 40000, "period": "1s", "grant": {"want": 100, "ttl": "250ms"}},
        "anon":    {"key": "anon:${ip}", "algo": "window", "limit": 20, "period": "10s"},
        "write":   {"key": "{t:${tenant}}:write:${user}", "limit": 5, "period": "1s", "burst": 10},
        "export":  {"key": "{t:${tenant}}:export", "limit": 100, "period": "1m", "cost": 10, "settle": true},
        "inflight":{"key": "{t:${tenant}}:inflight", "concurrency": 3, "lease": "60s"},
        "search":  {"key": "{t:${tenant}}:search:${user}", "limit": 10, "period": "1s", "cost": 2, "shadow": false}
      },
      "routes": [
        {"method": "GET",  "path": "/catalog",        "rules": ["read", "tenant", "global"],
         "on_store_error": {"mode": "fallback", "limit": 10, "period": "1s", "burst": 10}},
        {"method": "POST", "path": "/checkout",       "rules": ["write", "tenant"], "on_store_error": {"mode": "deny"}},
        {"method": "POST", "path": "/login",          "rules": ["anon"],             "on_store_error": {"mode": "deny"}},
        {"method": "POST", "path": "/reports/export", "rules": ["inflight", "export"], "on_store_error": {"mode": "deny"}},
        {"method": "POST", "path": "/search",         "rules": ["search"],
         "on_store_error": {"mode": "fallback", "limit": 3, "period": "1s", "burst": 3}}
      ],
      "negative_cache": {"max": "250ms", "entries": 100000},
      "store": {"timeout": "50ms", "breaker": {"failures": 5, "open": "1s"}, "ramp": "10s"},
      "retry_after_jitter": 0.2
    })
}

fn parse(v: &Value) -> Result<Policy, PolicyError> {
    Policy::from_json(&v.to_string())
}

/// The refusal's field path and message, asserting it is an `Invalid`.
fn refusal(v: &Value) -> (String, String) {
    match parse(v) {
        Err(PolicyError::Invalid { path, message }) => (path, message),
        other => panic!("expected an invalid policy, got {other:?}"),
    }
}

/// The policy with the field at `pointer` set (added when absent).
fn with(mut v: Value, pointer: &str, value: Value) -> Value {
    let (parent, last) = pointer.rsplit_once('/').expect("a JSON pointer");
    match v.pointer_mut(parent).expect("pointer into the example") {
        Value::Object(map) => {
            map.insert(last.to_string(), value);
        }
        Value::Array(items) => items[last.parse::<usize>().unwrap()] = value,
        _ => panic!("{parent} is not a container"),
    }
    v
}

#[test]
fn the_contract_example_loads_with_every_field_typed() {
    let p = parse(&example()).expect("the example is valid");
    assert_eq!(p.version, 7);
    assert_eq!(p.identity.user.as_deref(), Some("x-user"));
    assert!(p.identity.trusts("10.1.2.3".parse::<IpAddr>().unwrap()));
    assert!(p.identity.trusts("::1".parse::<IpAddr>().unwrap()));
    assert!(!p.identity.trusts("11.0.0.1".parse::<IpAddr>().unwrap()));
    assert!(!p.identity.trusts("::2".parse::<IpAddr>().unwrap()));

    let read = &p.rules["read"];
    let RuleKind::Rate(r) = &read.kind else {
        panic!("read is a rate")
    };
    assert_eq!(
        (r.algo, r.rule.limit(), r.rule.period_us(), r.rule.burst()),
        (Algo::Bucket, 2, 1_000_000, 20)
    );
    assert_eq!(
        (r.cost, r.settle, r.grant, read.public, read.shadow),
        (1, false, None, true, false)
    );
    assert!(!p.rules["tenant"].public);
    let RuleKind::Rate(g) = &p.rules["global"].kind else {
        panic!("global is a rate")
    };
    assert_eq!(g.algo, Algo::Gcra);
    assert_eq!(
        g.grant.map(|g| (g.want, g.ttl)),
        Some((100, Duration::from_millis(250)))
    );
    let RuleKind::Semaphore(s) = &p.rules["inflight"].kind else {
        panic!("inflight is a semaphore")
    };
    assert_eq!((s.concurrency, s.lease), (3, Duration::from_secs(60)));

    let route = |method: &str, path: &str| match p.route(method, path, false) {
        Routed::Route { route, .. } => Some(Arc::clone(route)),
        _ => None,
    };
    let catalog = route("get", "/catalog").expect("route");
    assert_eq!(catalog.name(), "GET /catalog");
    let names: Vec<&str> = catalog.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["read", "tenant", "global"]);
    let OnStoreError::Fallback(fb) = catalog.on_store_error else {
        panic!("fallback")
    };
    assert_eq!(
        (fb.limit(), fb.period_us(), fb.burst()),
        (10, 1_000_000, 10)
    );
    assert_eq!(
        route("POST", "/checkout").map(|r| r.on_store_error),
        Some(OnStoreError::Deny)
    );
    assert!(route("GET", "/checkout").is_none());

    assert_eq!(p.negative_cache.max, Duration::from_millis(250));
    assert_eq!(p.negative_cache.entries, 100_000);
    assert_eq!(p.store.timeout, Duration::from_millis(50));
    assert_eq!(
        (p.store.breaker_failures, p.store.breaker_open),
        (5, Duration::from_secs(1))
    );
    assert_eq!(p.store.ramp, Duration::from_secs(10));
    assert_eq!(p.retry_after_jitter, 0.2);
}

#[test]
fn omitted_sections_take_documented_defaults() {
    let p = parse(
        &json!({"version": 1, "default": {"rules": []}, "rules": {"r": {"key": "k", "limit": 1, "period": "1s"}},
        "routes": [{"method": "GET", "path": "/", "rules": ["r"]}]}),
    )
    .expect("minimal policy");
    assert_eq!(p.routes[0].on_store_error, OnStoreError::Deny);
    assert_eq!(p.negative_cache.max, Duration::from_millis(250));
    assert_eq!(p.store.timeout, Duration::from_millis(50));
    assert_eq!(p.store.ramp, Duration::from_secs(10));
    assert_eq!(p.retry_after_jitter, 0.0);
    assert!(p.identity.user.is_none());
}

#[test]
fn each_invalid_policy_names_its_field() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            with(example(), "/routes/1/rules/1", json!("nope")),
            "routes[1].rules[1]",
            "unknown rule 'nope'",
        ),
        (
            with(example(), "/rules/read/period", json!("1")),
            "rules.read.period",
            "needs a unit",
        ),
        (
            with(example(), "/rules/read/period", json!("1w")),
            "rules.read.period",
            "followed by ms, s, m, h or d",
        ),
        (
            with(example(), "/rules/inflight/limit", json!(5)),
            "rules.inflight.limit",
            "takes no rate field or grant",
        ),
        (
            with(example(), "/rules/inflight/grant", json!({"want": 1})),
            "rules.inflight.grant",
            "takes no rate field or grant",
        ),
        (
            with(example(), "/rules/inflight/lease", json!("60")),
            "rules.inflight.lease",
            "needs a unit",
        ),
        (
            with(example(), "/rules/read/algo", json!("leaky")),
            "rules.read.algo",
            "got 'leaky'",
        ),
        (
            with(example(), "/rules/read/limit", json!(0)),
            "rules.read.limit",
            "range [1, 1000000000000000]",
        ),
        (
            with(example(), "/rules/anon/burst", json!(5)),
            "rules.anon.burst",
            "not allowed with ALGO window",
        ),
        (
            with(example(), "/rules/export/cost", json!(1000)),
            "rules.export.cost",
            "exceeds the capacity 100",
        ),
        (
            with(example(), "/rules/anon/settle", json!(true)),
            "rules.anon.settle",
            "gcra or bucket",
        ),
        (
            with(example(), "/rules/read/key", json!("r:${who}")),
            "rules.read.key",
            "unknown variable '${who}'",
        ),
        (
            with(example(), "/rules/global/grant/ttl", json!("2d")),
            "rules.global.grant.ttl",
            "between 1ms and 1d",
        ),
        (
            with(example(), "/retry_after_jitter", json!(1.5)),
            "retry_after_jitter",
            "must be in [0, 1]",
        ),
        (
            with(example(), "/retry_after_jitter", json!(-0.1)),
            "retry_after_jitter",
            "must be in [0, 1]",
        ),
        (
            with(example(), "/routes/0/on_store_error/mode", json!("maybe")),
            "routes[0].on_store_error.mode",
            "got 'maybe'",
        ),
        (
            with(
                example(),
                "/routes/1/on_store_error",
                json!({"mode": "deny", "limit": 3}),
            ),
            "routes[1].on_store_error.limit",
            "only a fallback",
        ),
        (
            with(
                example(),
                "/routes/4/on_store_error",
                json!({"mode": "fallback", "limit": 3}),
            ),
            "routes[4].on_store_error.period",
            "needs a period",
        ),
        (
            with(example(), "/routes/4/on_store_error/burst", json!(1)),
            "routes[4].on_store_error.burst",
            "costs 2, more than the fallback's capacity 1",
        ),
        (
            with(example(), "/routes/2/path", json!("/checkout")),
            "routes[2]",
            "tenant",
        ),
        (
            with(example(), "/store/timeout", json!("50")),
            "store.timeout",
            "needs a unit",
        ),
        (
            with(example(), "/store/breaker/failures", json!(0)),
            "store.breaker.failures",
            "at least 1",
        ),
        (
            with(example(), "/negative_cache/entries", json!(0)),
            "negative_cache.entries",
            "at least 1",
        ),
        (
            with(
                example(),
                "/identity/trusted_proxies/0",
                json!("10.0.0.0/33"),
            ),
            "identity.trusted_proxies[0]",
            "not an IP address",
        ),
    ];
    for (policy, path, needle) in cases {
        let (got_path, message) = refusal(&policy);
        if path == "routes[2]" {
            // A duplicate: POST /checkout twice.
            let policy = with(example(), "/routes/2/path", json!("/checkout"));
            let (p, m) = refusal(&policy);
            assert_eq!(p, "routes[2]");
            assert_eq!(m, "duplicate route POST /checkout (also routes[1])");
            continue;
        }
        assert_eq!(got_path, path, "{message}");
        assert!(
            message.contains(needle),
            "{path}: {message:?} lacks {needle:?}"
        );
    }
}

#[test]
fn unknown_fields_and_wrong_types_are_refused_with_their_path() {
    let mut p = example();
    p["rules"]["read"]["limt"] = json!(3);
    let (path, message) = refusal(&p);
    assert!(path.starts_with("rules.read"), "{path}");
    assert!(message.contains("unknown field `limt`"), "{message}");

    let mut p = example();
    p["store"]["breakr"] = json!({});
    let (path, message) = refusal(&p);
    assert!(path.starts_with("store"), "{path}");
    assert!(message.contains("unknown field `breakr`"), "{message}");

    let (path, message) = refusal(&with(example(), "/rules/read/limit", json!(-1)));
    assert_eq!(path, "rules.read.limit");
    assert!(message.contains("invalid value"), "{message}");

    let mut p = example();
    p.as_object_mut().unwrap().remove("version");
    let (_, message) = refusal(&p);
    assert!(message.contains("missing field `version`"), "{message}");
}

#[test]
fn store_rules_of_one_route_must_share_a_hash_tag() {
    // read and tenant share {t:${tenant}}; a global rule without a grant would go in the
    // same RL.MULTI with no tag.
    let p = with(
        example(),
        "/rules/global",
        json!({"key": "global:catalog", "limit": 40000, "period": "1s"}),
    );
    let (path, message) = refusal(&p);
    assert_eq!(path, "routes[0].rules");
    assert!(message.contains("'read' and 'global'"), "{message}");

    // Same tag text, different spelling of the rest: fine.
    let p = with(example(), "/rules/tenant/key", json!("x{t:${tenant}}y"));
    assert!(parse(&p).is_ok());
    // A tag that differs textually is refused even if it might render equal.
    let p = with(example(), "/rules/tenant/key", json!("{t:${user}}:tenant"));
    assert_eq!(refusal(&p).0, "routes[0].rules");
    // Shadow rules are evaluated apart, so they need no shared tag.
    let mut p = with(
        example(),
        "/rules/global",
        json!({"key": "g", "limit": 5, "period": "1s", "shadow": true}),
    );
    assert!(parse(&p).is_ok());
    p["rules"]["tenant"]["key"] = json!("{t:${tenant}}:read:${user}");
    assert!(refusal(&p).1.contains("the same key"));
}

#[test]
fn hash_tags_are_read_as_redis_reads_them() {
    use rl_engine::policy::KeyTemplate;
    let tag = |s: &str| KeyTemplate::parse(s).unwrap().hash_tag();
    assert_eq!(
        tag("{t:${tenant}}:read:${user}"),
        Some("t:${tenant}".into())
    );
    assert_eq!(tag("a{b}c{d}"), Some("b".into()));
    assert_eq!(tag("global:catalog"), None);
    assert_eq!(tag("{}x{y}"), None);
    assert_eq!(tag("${user}{x"), None);
    assert_eq!(tag("k{${user}}"), Some("${user}".into()));
}

#[test]
fn keys_render_identity_and_anonymous_and_cannot_escape_their_tag() {
    use rl_engine::policy::KeyTemplate;
    let t = KeyTemplate::parse("{t:${tenant}}:read:${user}:${ip}:${route}").unwrap();
    let id = RequestIdentity {
        user: Some(b"17"),
        tenant: Some(b"atlas"),
        ip: Some(b"10.0.0.1"),
        route: Some(b"GET /catalog"),
        plan: Some(b"free"),
        headers: None,
        path: &[],
        hash: None,
    };
    assert_eq!(t.render(&id), "{t:atlas}:read:17:10.0.0.1:GET /catalog");
    let by_plan = KeyTemplate::parse("{t:${tenant}}:${plan}").unwrap();
    assert_eq!(by_plan.render(&id), "{t:atlas}:free");
    // `${header.NAME}`: the first value of the header, matched without case, escaped as the
    // other identities; absent or empty, anonymous.
    let by_key = KeyTemplate::parse("{k:${header.X-Api-Key}}:${header.x-client}").unwrap();
    assert_eq!(by_key.hash_tag(), Some("k:${header.x-api-key}".into()));
    let headers = vec![
        ("x-api-key", "k{1}"),
        ("X-API-KEY", "second"),
        ("x-client", ""),
    ];
    let with = RequestIdentity {
        headers: Some(&headers),
        ..id
    };
    assert_eq!(by_key.render(&with), "{k:k%7B1%7D}:anonymous");
    assert_eq!(by_key.render(&id), "{k:anonymous}:anonymous");
    for bad in ["${header.}", "${header.a b}", "${header.é}"] {
        assert!(KeyTemplate::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        t.render(&RequestIdentity::default()),
        "{t:anonymous}:read:anonymous:anonymous:anonymous"
    );
    let sneaky = RequestIdentity {
        tenant: Some(b"a}b{%"),
        user: Some(b""),
        ..id
    };
    assert_eq!(
        t.render(&sneaky),
        "{t:a%7Db%7B%25}:read:anonymous:10.0.0.1:GET /catalog"
    );
    // Identities are bytes: UTF-8 stays as it is, other bytes are escaped, and neither can
    // pass for the other (Latin-1 'é' is not '%E9' written out, nor anonymous).
    let user = |u: &'static [u8]| {
        t.render(&RequestIdentity {
            user: Some(u),
            ..id
        })
    };
    assert_eq!(
        user("é".as_bytes()),
        "{t:atlas}:read:é:10.0.0.1:GET /catalog"
    );
    assert_eq!(
        user("用户".as_bytes()),
        "{t:atlas}:read:用户:10.0.0.1:GET /catalog"
    );
    assert_eq!(user(b"\xe9"), "{t:atlas}:read:%E9:10.0.0.1:GET /catalog");
    assert_eq!(user(b"%E9"), "{t:atlas}:read:%25E9:10.0.0.1:GET /catalog");
    assert!(KeyTemplate::parse("k:${user").is_err());
    assert!(KeyTemplate::parse("").is_err());
}

#[test]
fn reload_refuses_versions_not_higher_and_keeps_the_snapshot_on_error() {
    let engine = Engine::new(
        Policy::from_json(&example().to_string()).unwrap(),
        Arc::default(),
        Options::default(),
    );
    let reload = |text: &str| Policy::from_json(text).and_then(|p| engine.reload(p));
    assert_eq!(engine.policy().version, 7);

    let err = reload(&with(example(), "/version", json!(7)).to_string()).unwrap_err();
    assert_eq!(
        err,
        PolicyError::Stale {
            current: 7,
            offered: 7
        }
    );
    assert_eq!(
        err.to_string(),
        "policy version 7 is not higher than the version in force, 7"
    );
    assert_eq!(
        reload(&with(example(), "/version", json!(6)).to_string()),
        Err(PolicyError::Stale {
            current: 7,
            offered: 6
        })
    );

    let broken = with(
        with(example(), "/version", json!(9)),
        "/rules/read/period",
        json!("1"),
    );
    let err = reload(&broken.to_string()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid policy: rules.read.period: "),
        "{err}"
    );
    assert_eq!(engine.policy().version, 7);

    assert!(matches!(
        reload("{not json"),
        Err(PolicyError::Invalid { .. })
    ));
    assert_eq!(engine.policy().version, 7);

    let held = engine.policy();
    assert_eq!(
        reload(&with(example(), "/version", json!(8)).to_string())
            .unwrap()
            .version,
        8
    );
    assert_eq!(engine.policy().version, 8);
    // A request that started on 7 keeps evaluating against 7.
    assert_eq!(held.version, 7);
}

/// The escaping of identities in keys loses nothing: the rendered value decodes to the bytes
/// given, whatever mix of UTF-8, escaped characters and invalid bytes they are.
mod key_escaping {
    use proptest::prelude::*;
    use rl_engine::policy::{KeyTemplate, RequestIdentity};

    fn decode(rendered: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut bytes = rendered.bytes();
        while let Some(b) = bytes.next() {
            if b == b'%' {
                let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                out.push(u8::from_str_radix(&hex, 16).unwrap());
            } else {
                out.push(b);
            }
        }
        out
    }

    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<char>().prop_map(|c| c.to_string().into_bytes()),
            any::<u8>().prop_map(|b| vec![b]),
            prop::sample::select(vec!["%", "{", "}", "%7B", "é"])
                .prop_map(|s| s.as_bytes().to_vec()),
        ]
    }

    proptest! {
        #[test]
        fn rendered_identities_decode_to_their_bytes(pieces in prop::collection::vec(piece(), 1..24)) {
            let user: Vec<u8> = pieces.concat();
            let t = KeyTemplate::parse("k:${user}").unwrap();
            let id = RequestIdentity { user: Some(&user), ..RequestIdentity::default() };
            let rendered = t.render(&id);
            let value = rendered.strip_prefix("k:").unwrap();
            prop_assert!(!value.contains(['{', '}']), "a brace in {:?}", value);
            prop_assert_eq!(decode(value), user);
        }
    }
}
