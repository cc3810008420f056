//! Routing under arbitrary request paths: whatever a caller sends, matching neither panics nor
//! lets a spelling of a path reach another route than the path it normalizes to.

use proptest::prelude::*;
use rl_engine::policy::{decode_unreserved, KeyTemplate, NormalPath, PathTemplate, Policy, Routed};
use rl_engine::Instant;

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "rules": {"r": {"key": "k:${path.id}", "limit": 1, "period": "1s"},
            "s": {"key": "s", "limit": 1, "period": "1s"}},
  "routes": [
    {"method": "GET", "path": "/users/{id}", "rules": ["r"]},
    {"method": "GET", "path": "/users/me", "rules": ["s"]},
    {"method": "GET", "path": "/users/{id}/orders/*", "rules": ["r"]},
    {"method": "*", "path": "/static/*", "rules": ["s"]},
    {"method": ["PUT", "PATCH"], "path": "/a/b/c", "rules": ["s"]},
    {"method": "GET", "path": "/", "rules": ["s"]}
  ]
}"#;

fn policy() -> Policy {
    Policy::from_json_at(POLICY, Instant::from_micros(1_767_225_600_000_000)).expect("policy")
}

/// The route's name and captures, or what else the path is.
fn route_of(policy: &Policy, method: &str, path: &str) -> String {
    match policy.route(method, path, false) {
        Routed::Route {
            route, captures, ..
        } => format!("{} {captures:?}", route.name()),
        Routed::Unmatched => "unmatched".into(),
        Routed::AboveRoot => "above the root".into(),
    }
}

/// Paths made of the pieces that matter to matching: the routes' literals, dot segments,
/// empty segments, a query, and arbitrary text.
fn paths() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("users".to_string()),
        Just("me".to_string()),
        Just("orders".to_string()),
        Just("static".to_string()),
        Just("a".to_string()),
        Just("b".to_string()),
        Just("c".to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just(String::new()),
        Just("?q=/..".to_string()),
        "[^/]{0,6}",
    ];
    prop::collection::vec(piece, 0..10).prop_map(|pieces| format!("/{}", pieces.join("/")))
}

proptest! {
    #[test]
    fn a_path_routes_as_its_normal_form_does(path in paths(), any in "\\PC{0,40}") {
        let policy = policy();
        for method in ["GET", "HEAD", "PUT", "DELETE"] {
            // Arbitrary text never panics.
            let _ = route_of(&policy, method, &any);
            match NormalPath::of(&path) {
                None => prop_assert_eq!(route_of(&policy, method, &path), "above the root"),
                Some(normal) => {
                    let text = normal.text();
                    // Normalizing is idempotent, and the normal form is what is routed.
                    let again = NormalPath::of(&text).map(|n| n.text());
                    prop_assert_eq!(again.as_deref(), Some(text.as_str()));
                    prop_assert_eq!(
                        route_of(&policy, method, &path),
                        route_of(&policy, method, &text)
                    );
                }
            }
        }
    }
}

proptest! {
    // What a policy author writes is parsed too: no text makes a template parser panic, and a
    // template it accepts names each capture once.
    #[test]
    fn templates_parse_or_refuse_any_text(text in "[/{}*a-z.?${}]{0,24}|\\PC{0,24}") {
        if let Ok(t) = PathTemplate::parse(&text) {
            let names: Vec<&str> = t.captures().collect();
            let mut unique = names.clone();
            unique.sort_unstable();
            unique.dedup();
            prop_assert_eq!(names.len(), unique.len());
        }
        let _ = KeyTemplate::parse(&text);
    }
}

#[test]
fn spellings_of_one_path_reach_one_route() {
    let policy = policy();
    let me = route_of(&policy, "GET", "/users/me");
    assert_eq!(me, "GET /users/me []");
    for spelling in [
        "//users/me",
        "/users/./me",
        "/users/x/../me",
        "/users/me/",
        "/users/me?x",
    ] {
        assert_eq!(route_of(&policy, "GET", spelling), me, "{spelling}");
    }
    assert_eq!(
        route_of(&policy, "GET", "/users/7/orders/1/2"),
        r#"GET /users/{id}/orders/* [("id", "7")]"#
    );
    assert_eq!(route_of(&policy, "PATCH", "/a/b/c"), "PUT,PATCH /a/b/c []");
    assert_eq!(route_of(&policy, "GET", "/a/b/c"), "unmatched");
    assert_eq!(route_of(&policy, "POST", "/static/x/.."), "* /static/* []");
    assert_eq!(route_of(&policy, "GET", "/.."), "above the root");
    assert_eq!(route_of(&policy, "HEAD", "/"), "GET / []");
}

#[test]
fn escaped_unreserved_characters_are_decoded_and_nothing_else() {
    for (raw, form) in [
        ("/checkout", "/checkout"),
        ("/%63heckout", "/checkout"),
        ("/check%6Fut", "/checkout"),
        ("/%2e%2e/admin", "/../admin"),
        ("/a%2Fb", "/a%2Fb"),
        ("/a%2fb", "/a%2Fb"),
        ("/%7e%2D%5f", "/~-_"),
        ("/caf%C3%A9", "/caf%C3%A9"),
        ("/é%41", "/éA"),
        ("/100%", "/100%25"),
        ("/%zz", "/%25zz"),
        ("/%%36%33heckout", "/%2563heckout"),
        ("/%4", "/%254"),
    ] {
        assert_eq!(decode_unreserved(raw), form, "{raw}");
    }
}

proptest! {
    /// Decoding is a fixed point: what is matched and forwarded decodes to itself, so a backend
    /// that decodes once more than the gateway finds no other route in it.
    #[test]
    fn the_decoded_form_decodes_to_itself(raw in "[a-z/%0-9A-F.~_-]{0,24}") {
        let once = decode_unreserved(&raw).into_owned();
        prop_assert_eq!(decode_unreserved(&once).into_owned(), once);
    }
}
