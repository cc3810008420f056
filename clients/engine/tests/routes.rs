//! Routing under arbitrary request paths: whatever a caller sends, matching neither panics nor
//! lets a spelling of a path reach another route than the path it normalizes to.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use proptest::prelude::*;
use rl_engine::policy::{
    decode_unreserved, KeyTemplate, NormalPath, PathError, PathTemplate, Policy, Routed,
};
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
        Routed::BadPath(PathError::AboveRoot) => "above the root".into(),
        Routed::BadPath(PathError::EncodedSeparator) => "encoded separator".into(),
    }
}

/// The pieces of a path that matter to matching: the routes' literals, dot segments, empty
/// segments, a query, matrix parameters, encoded separators, and arbitrary text.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
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
        Just("me;x=1".to_string()),
        Just("..;".to_string()),
        Just(";a=b".to_string()),
        Just("a%2Fb".to_string()),
        Just("%5c".to_string()),
        Just("%00".to_string()),
        "[^/]{0,6}",
    ]
}

fn paths() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..10).prop_map(|pieces| format!("/{}", pieces.join("/")))
}

proptest! {
    #[test]
    fn a_path_routes_as_its_normal_form_does(path in paths(), any in "\\PC{0,40}") {
        let policy = policy();
        for method in ["GET", "HEAD", "PUT", "DELETE"] {
            // Arbitrary text never panics.
            let _ = route_of(&policy, method, &any);
            match NormalPath::of(&path) {
                Err(PathError::AboveRoot) => {
                    prop_assert_eq!(route_of(&policy, method, &path), "above the root")
                }
                Err(PathError::EncodedSeparator) => {
                    prop_assert_eq!(route_of(&policy, method, &path), "encoded separator")
                }
                Ok(normal) => {
                    let text = normal.text();
                    // Normalizing is idempotent, and the normal form is what is routed: no
                    // matrix parameter and no encoded separator is left in it.
                    let again = NormalPath::of(&text).map(|n| n.text());
                    prop_assert_eq!(again.as_deref(), Ok(text.as_str()));
                    prop_assert!(!text.contains(';'), "{}", text);
                    prop_assert!(!text.to_ascii_uppercase().contains("%2F"), "{}", text);
                    prop_assert!(!text.to_ascii_uppercase().contains("%5C"), "{}", text);
                    prop_assert!(!text.contains("%00"), "{}", text);
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
    /// A matrix parameter added to any segment changes nothing: not the route, not the
    /// captures, not a refusal.
    #[test]
    fn a_matrix_parameter_changes_no_route(
        pieces in prop::collection::vec(piece(), 1..10),
        at in any::<prop::sample::Index>(),
        param in "[a-zA-Z0-9=%.,_-]{0,8}",
    ) {
        let policy = policy();
        let plain = format!("/{}", pieces.join("/"));
        let mut with = pieces.clone();
        if let Some(piece) = with.get_mut(at.index(pieces.len())) {
            piece.push(';');
            piece.push_str(&param);
        }
        let with = format!("/{}", with.join("/"));
        for method in ["GET", "PUT"] {
            prop_assert_eq!(
                route_of(&policy, method, &plain),
                route_of(&policy, method, &with),
                "{} and {}", plain, with
            );
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

#[test]
fn matrix_parameters_are_removed_from_each_segment_before_matching() {
    let policy = policy();
    let me = route_of(&policy, "GET", "/users/me");
    // As Tomcat, Jetty and Spring route them: what follows a segment's first ';' is no part of
    // the segment, so none of these escapes `/users/me`'s rules.
    for spelling in [
        "/users/me;x=1",
        "/users;a=b/me",
        "/users/me;",
        "/users/x/..;/me",
        "/users/x/..;x=1/me",
        "/users/.;x/me",
        "/;x/users/me",
        "/users/me;x=%2F",
        "/users/me;x=1?y=2",
    ] {
        assert_eq!(route_of(&policy, "GET", spelling), me, "{spelling}");
    }
    assert_eq!(
        route_of(&policy, "GET", "/users/7;jsessionid=abc"),
        r#"GET /users/{id} [("id", "7")]"#
    );
    assert_eq!(route_of(&policy, "GET", "/..;/users/me"), "above the root");
    // An escaped ';' is a character of the segment, as those servers decode it after.
    assert_eq!(
        route_of(&policy, "GET", "/users/me%3Bx"),
        r#"GET /users/{id} [("id", "me%3Bx")]"#
    );
}

#[test]
fn an_encoded_slash_backslash_or_nul_in_a_segment_is_refused() {
    let policy = policy();
    for escape in ["%2F", "%2f", "%5C", "%5c", "%00"] {
        for path in [
            format!("/users/me{escape}"),
            format!("/users/a{escape}b"),
            format!("/users/7/orders/{escape}"),
            format!("/static/{escape}x"),
            format!("/{escape}"),
        ] {
            assert_eq!(
                route_of(&policy, "GET", &decode_unreserved(&path)),
                "encoded separator",
                "{path}"
            );
            assert_eq!(
                route_of(&policy, "GET", &path),
                "encoded separator",
                "{path}"
            );
        }
    }
    // A '%' that starts no escape is %25: `%252F` is the text "%2F" once decoded, no separator.
    assert_eq!(
        route_of(&policy, "GET", &decode_unreserved("/users/a%252Fb")),
        r#"GET /users/{id} [("id", "a%252Fb")]"#
    );
    // In the query, or in a matrix parameter (removed), it is no part of the path.
    assert_eq!(
        route_of(&policy, "GET", "/users/me?next=%2F"),
        "GET /users/me []"
    );
    assert_eq!(
        route_of(&policy, "GET", "/users/me;p=%2F"),
        "GET /users/me []"
    );
}
