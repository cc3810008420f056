//! Routes (`clients/CONTRACT.md` section 8.3): methods, path templates and the tree that
//! matches a request to the most specific route.
//!
//! A template is a list of segments: a literal, a `{name}` capture of one non-empty segment, or
//! a final `*` that takes whatever remains. A request's path is normalized first (matrix
//! parameters, dot segments and repeated slashes removed), so `/static/../login`, `//login` and
//! `/login;x=1` are `/login` and cannot skip `/login`'s rules. The tree is searched from the left, a literal before a capture before
//! `*`: the first route found is the most specific one, and each node is visited at most once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;

use smallvec::SmallVec;

/// The longest template, in segments: deeper than any real API, and a bound on the tree.
pub const MAX_SEGMENTS: usize = 32;

/// The methods a route answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Methods {
    /// `"*"`: every method.
    Any,
    /// Upper-case names.
    Some(Vec<String>),
}

impl Methods {
    pub fn allows(&self, method: &str) -> bool {
        match self {
            Methods::Any => true,
            Methods::Some(names) => names.iter().any(|m| m.eq_ignore_ascii_case(method)),
        }
    }

    fn overlaps(&self, other: &Methods) -> bool {
        match (self, other) {
            (Methods::Some(a), Methods::Some(b)) => a.iter().any(|m| b.contains(m)),
            _ => true,
        }
    }

    /// As in a route's default name: `GET`, `GET,HEAD`, `*`.
    pub fn text(&self) -> String {
        match self {
            Methods::Any => "*".to_string(),
            Methods::Some(names) => names.join(","),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    /// `{name}`: one non-empty segment, available to keys as `${path.name}`.
    Capture(String),
}

/// A route's path as written, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    segments: Vec<Segment>,
    /// Ends in `*`: zero or more segments more.
    rest: bool,
    /// Ends in `/` (it matters only with `strict_slash`).
    trailing: bool,
}

impl PathTemplate {
    /// `/*`: every path.
    pub fn any() -> PathTemplate {
        PathTemplate {
            segments: Vec::new(),
            rest: true,
            trailing: false,
        }
    }

    pub fn parse(text: &str) -> Result<PathTemplate, String> {
        let Some(body) = text.strip_prefix('/') else {
            return Err("must start with '/'".into());
        };
        if text.contains(['?', '#']) {
            return Err("a route's path has no query string or fragment".into());
        }
        let mut template = PathTemplate {
            segments: Vec::new(),
            rest: false,
            trailing: false,
        };
        if body.is_empty() {
            return Ok(template);
        }
        let pieces: Vec<&str> = body.split('/').collect();
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.iter().copied().enumerate() {
            if template.rest {
                return Err("'*' must be the last segment".into());
            }
            match piece {
                "" if i == last => template.trailing = true,
                "" => return Err("a path has no empty segment ('//')".into()),
                "." | ".." => {
                    return Err(format!(
                        "a path has no dot segment ('{piece}'): requests are matched after theirs are removed"
                    ))
                }
                "*" => template.rest = true,
                _ => {
                    let segment = match piece.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                        Some(name) => {
                            capture_name(name)?;
                            if template.captures().any(|c| c == name) {
                                return Err(format!("capture '{{{name}}}' appears twice"));
                            }
                            Segment::Capture(name.to_string())
                        }
                        None if piece.contains(['{', '}', '*']) => {
                            return Err(format!(
                                "a capture is a whole segment ('{{name}}') and '*' a whole last segment (got '{piece}')"
                            ))
                        }
                        None => Segment::Literal(piece.to_string()),
                    };
                    template.segments.push(segment);
                }
            }
        }
        if template.segments.len() > MAX_SEGMENTS {
            return Err(format!("a path has at most {MAX_SEGMENTS} segments"));
        }
        Ok(template)
    }

    /// The names of the template's captures, in order.
    pub fn captures(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Capture(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// What two templates must differ in to match different requests: literals (folded when
    /// paths match without case), capture positions, `*`, and the trailing slash when it counts.
    fn shape(&self, case_sensitive: bool, strict_slash: bool) -> Vec<Option<String>> {
        let mut shape: Vec<Option<String>> = self
            .segments
            .iter()
            .map(|s| match s {
                Segment::Literal(l) if case_sensitive => Some(l.clone()),
                Segment::Literal(l) => Some(l.to_ascii_lowercase()),
                Segment::Capture(_) => None,
            })
            .collect();
        // Markers no segment can be: a literal never contains '/'.
        if self.rest {
            shape.push(Some("/*".into()));
        } else if self.trailing && strict_slash {
            shape.push(Some("/".into()));
        }
        shape
    }
}

fn capture_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a capture needs a name ('{}')".into());
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!(
            "a capture's name is letters, digits and '_' (got '{{{name}}}')"
        ));
    }
    Ok(())
}

/// The path in the form routes match and a proxy forwards (RFC 3986 section 6.2.2): an escaped
/// unreserved character (a letter, a digit, `-`, `.`, `_`, `~`) decoded, as most backends decode
/// before they route, so `/%63heckout` is `/checkout` and `/%2e%2e/admin` climbs as `/../admin`
/// would; any other escape kept, in upper case (`%2F` is not a separator); and a `%` that starts
/// no escape written `%25`, so a backend that decodes what it receives once finds what was
/// matched (`/%%36%33heckout` cannot become `/%63heckout`, then `/checkout`). A path without a
/// `%` is borrowed as it is.
pub fn decode_unreserved(path: &str) -> Cow<'_, str> {
    if !path.contains('%') {
        return Cow::Borrowed(path);
    }
    let bytes = path.as_bytes();
    let hex = |i: usize| -> Option<u8> {
        let digits = bytes.get(i.checked_add(1)?..i.checked_add(3)?)?;
        u8::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b != b'%' {
            // The run up to the next '%', copied whole (multi-byte characters stay whole).
            let end = bytes
                .get(i..)
                .and_then(|rest| rest.iter().position(|&c| c == b'%'))
                .map_or(bytes.len(), |p| p.saturating_add(i));
            out.push_str(path.get(i..end).unwrap_or_default());
            i = end;
            continue;
        }
        match hex(i) {
            Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') => {
                out.push(char::from(c));
                i = i.saturating_add(3);
            }
            Some(c) => {
                let _ = write!(out, "%{c:02X}");
                i = i.saturating_add(3);
            }
            None => {
                out.push_str("%25");
                i = i.saturating_add(1);
            }
        }
    }
    Cow::Owned(out)
}

/// Why a request's path is answered 400 before any route is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// It climbs above the root (`/..`, `/..;x`).
    AboveRoot,
    /// A segment holds an encoded `/`, `\` or NUL (`%2F`, `%5C`, `%00`): backends disagree on
    /// whether it separates segments (or ends the path), so no one route can be said to be its.
    EncodedSeparator,
}

/// A request path without its query, matrix parameters, dot segments and empty segments.
pub struct NormalPath<'a> {
    /// Held inline up to `SEGMENTS`: a path is split for every request, and most are short.
    pub segments: SmallVec<[&'a str; SEGMENTS]>,
    pub trailing: bool,
}

/// The segments of a path held without an allocation of their own.
const SEGMENTS: usize = 8;

impl<'a> NormalPath<'a> {
    /// Each segment loses its matrix parameters (what follows its first `;`), as Tomcat, Jetty
    /// and Spring route: `/login;x=1` is `/login`, and `..;x` climbs as `..` does, so
    /// `/login/..;/login` is `/login` too. An encoded separator is looked for in what remains
    /// of each segment, in any case, so this holds for a path [`decode_unreserved`] has not
    /// seen as well.
    pub fn of(path: &'a str) -> Result<NormalPath<'a>, PathError> {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let mut segments = SmallVec::new();
        let mut trailing = false;
        for piece in path.split('/') {
            let piece = piece.split(';').next().unwrap_or_default();
            if encoded_separator(piece) {
                return Err(PathError::EncodedSeparator);
            }
            trailing = matches!(piece, "" | "." | "..");
            match piece {
                "" | "." => {}
                ".." => {
                    segments.pop().ok_or(PathError::AboveRoot)?;
                }
                _ => segments.push(piece),
            }
        }
        let trailing = trailing && !segments.is_empty();
        Ok(NormalPath { segments, trailing })
    }

    /// The path as matched: what a proxy forwards.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(self.segments.iter().map(|s| s.len() + 1).sum());
        for s in &self.segments {
            out.push('/');
            out.push_str(s);
        }
        if out.is_empty() || self.trailing {
            out.push('/');
        }
        out
    }
}

/// Whether a segment holds `%2F`, `%5C` or `%00`, in any case.
fn encoded_separator(segment: &str) -> bool {
    segment.as_bytes().windows(3).any(|w| match w {
        [b'%', b'2', c] => c.eq_ignore_ascii_case(&b'f'),
        [b'%', b'5', c] => c.eq_ignore_ascii_case(&b'c'),
        [b'%', b'0', b'0'] => true,
        _ => false,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Leaf {
    methods: Methods,
    trailing: bool,
    route: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    /// Literal children by their text as written (folded when paths match without case).
    exact: HashMap<String, usize>,
    /// Literal children by their lower-case text, for a request routed without case.
    folded: HashMap<String, Vec<usize>>,
    capture: Option<usize>,
    /// Routes whose template ends here.
    ends: Vec<Leaf>,
    /// Routes whose template ends here with `*`.
    rest: Vec<Leaf>,
}

/// Every route's template in one tree, searched per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    nodes: Vec<Node>,
    case_sensitive: bool,
    strict_slash: bool,
    /// Each route's shape and methods, to refuse a route that matches another's requests.
    shapes: HashMap<Vec<Option<String>>, Vec<(Methods, usize)>>,
}

impl Router {
    pub fn new(case_sensitive: bool, strict_slash: bool) -> Router {
        Router {
            nodes: vec![Node::default()],
            case_sensitive,
            strict_slash,
            shapes: HashMap::new(),
        }
    }

    /// Adds route `route`; refuses it, naming the earlier route, when one of the same shape
    /// answers one of its methods (one request would match both).
    pub fn insert(
        &mut self,
        template: &PathTemplate,
        methods: &Methods,
        route: usize,
    ) -> Result<(), usize> {
        let shape = template.shape(self.case_sensitive, self.strict_slash);
        let same = self.shapes.entry(shape).or_default();
        if let Some((_, first)) = same.iter().find(|(m, _)| m.overlaps(methods)) {
            return Err(*first);
        }
        same.push((methods.clone(), route));
        let mut at = 0;
        for segment in &template.segments {
            at = match segment {
                Segment::Literal(text) => self.literal(at, text),
                Segment::Capture(_) => match self.nodes.get(at).and_then(|n| n.capture) {
                    Some(child) => child,
                    None => {
                        let child = self.push();
                        if let Some(node) = self.nodes.get_mut(at) {
                            node.capture = Some(child);
                        }
                        child
                    }
                },
            };
        }
        let leaf = Leaf {
            methods: methods.clone(),
            trailing: template.trailing,
            route,
        };
        if let Some(node) = self.nodes.get_mut(at) {
            if template.rest {
                node.rest.push(leaf);
            } else {
                node.ends.push(leaf);
            }
        }
        Ok(())
    }

    fn push(&mut self) -> usize {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }

    fn literal(&mut self, at: usize, text: &str) -> usize {
        let key = if self.case_sensitive {
            text.to_string()
        } else {
            text.to_ascii_lowercase()
        };
        if let Some(child) = self.nodes.get(at).and_then(|n| n.exact.get(&key)) {
            return *child;
        }
        let child = self.push();
        if let Some(node) = self.nodes.get_mut(at) {
            node.folded
                .entry(text.to_ascii_lowercase())
                .or_default()
                .push(child);
            node.exact.insert(key, child);
        }
        child
    }

    /// The most specific route for the method and normalized path: compared segment by
    /// segment from the left, a literal beats a capture and a capture beats `*`.
    pub fn find(&self, method: &str, path: &NormalPath<'_>, any_case: bool) -> Option<usize> {
        let fold = any_case || !self.case_sensitive;
        self.search(0, &path.segments, method, path.trailing, fold)
    }

    fn search(
        &self,
        at: usize,
        segments: &[&str],
        method: &str,
        trailing: bool,
        fold: bool,
    ) -> Option<usize> {
        let node = self.nodes.get(at)?;
        let allowed = |leaves: &[Leaf], exact: bool| {
            leaves
                .iter()
                .find(|l| {
                    l.methods.allows(method)
                        && (!exact || !self.strict_slash || l.trailing == trailing)
                })
                .map(|l| l.route)
        };
        match segments.split_first() {
            None => {
                if let Some(route) = allowed(&node.ends, true) {
                    return Some(route);
                }
            }
            Some((segment, rest)) => {
                let found = if fold {
                    let lower = segment.to_ascii_lowercase();
                    node.folded.get(&lower).and_then(|children| {
                        children
                            .iter()
                            .find_map(|c| self.search(*c, rest, method, trailing, fold))
                    })
                } else {
                    node.exact
                        .get(*segment)
                        .and_then(|c| self.search(*c, rest, method, trailing, fold))
                };
                let found = found.or_else(|| {
                    node.capture
                        .and_then(|c| self.search(c, rest, method, trailing, fold))
                });
                if found.is_some() {
                    return found;
                }
            }
        }
        allowed(&node.rest, false)
    }
}

/// The captures of a matched template, names with the request's segments.
pub fn captures<'p, 'r>(
    template: &'p PathTemplate,
    path: &NormalPath<'r>,
) -> Vec<(&'p str, &'r str)> {
    template
        .segments
        .iter()
        .zip(&path.segments)
        .filter_map(|(s, value)| match s {
            Segment::Capture(name) => Some((name.as_str(), *value)),
            Segment::Literal(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routes: &[(&str, &str)]) -> Router {
        let mut r = Router::new(true, false);
        for (i, (m, p)) in routes.iter().enumerate() {
            let methods = if *m == "*" {
                Methods::Any
            } else {
                Methods::Some(vec![m.to_string()])
            };
            r.insert(&PathTemplate::parse(p).unwrap(), &methods, i)
                .unwrap();
        }
        r
    }

    fn find(r: &Router, method: &str, path: &str) -> Option<usize> {
        r.find(method, &NormalPath::of(path).unwrap(), false)
    }

    #[test]
    fn the_most_specific_route_wins_from_the_left() {
        let r = router(&[
            ("GET", "/users/*"),
            ("GET", "/users/{id}"),
            ("GET", "/users/me"),
            ("GET", "/users/{id}/orders"),
            ("*", "/*"),
        ]);
        assert_eq!(find(&r, "GET", "/users/me"), Some(2));
        assert_eq!(find(&r, "GET", "/users/7"), Some(1));
        assert_eq!(find(&r, "GET", "/users/7/orders"), Some(3));
        // `me` is a literal, but `/users/me/orders` only exists as `{id}/orders`.
        assert_eq!(find(&r, "GET", "/users/me/orders"), Some(3));
        assert_eq!(find(&r, "GET", "/users/7/x"), Some(0));
        // A final `*` takes zero segments too.
        assert_eq!(find(&r, "GET", "/users"), Some(0));
        assert_eq!(find(&r, "GET", "/orders"), Some(4));
        assert_eq!(find(&r, "POST", "/users/7"), Some(4));
        assert_eq!(find(&r, "GET", "/"), Some(4));
    }

    #[test]
    fn paths_are_normalized_before_matching() {
        let r = router(&[("GET", "/login")]);
        for path in [
            "/login",
            "//login",
            "/static/../login",
            "/./login",
            "/login/",
            "/login?x=1",
        ] {
            assert_eq!(find(&r, "GET", path), Some(0), "{path}");
        }
        assert!(NormalPath::of("/../login").is_err());
        assert!(NormalPath::of("/a/../../login").is_err());
        assert_eq!(NormalPath::of("/a/b/..").unwrap().text(), "/a/");
        assert_eq!(NormalPath::of("").unwrap().text(), "/");
    }

    #[test]
    fn templates_refuse_what_they_cannot_mean() {
        let bad = [
            ("users", "must start with '/'"),
            ("/a/*/b", "'*' must be the last segment"),
            ("/a/{}", "a capture needs a name ('{}')"),
            ("/a/{id}/{id}", "capture '{id}' appears twice"),
            ("/a/x{id}", "a capture is a whole segment"),
            ("/a//b", "a path has no empty segment ('//')"),
            ("/a/../b", "a path has no dot segment ('..')"),
            ("/a?b", "a route's path has no query string"),
        ];
        for (path, want) in bad {
            let err = PathTemplate::parse(path).unwrap_err();
            assert!(err.starts_with(want), "{path}: {err}");
        }
    }

    #[test]
    fn a_route_of_the_same_shape_and_method_is_refused() {
        let mut r = Router::new(true, false);
        let get = Methods::Some(vec!["GET".into()]);
        let post = Methods::Some(vec!["POST".into()]);
        r.insert(&PathTemplate::parse("/u/{id}").unwrap(), &get, 0)
            .unwrap();
        r.insert(&PathTemplate::parse("/u/{name}").unwrap(), &post, 1)
            .unwrap();
        let other = PathTemplate::parse("/u/{uid}").unwrap();
        assert_eq!(r.insert(&other, &Methods::Any, 2), Err(0));
        // The trailing slash is the same route unless it is strict.
        assert_eq!(
            r.insert(&PathTemplate::parse("/u/{x}/").unwrap(), &get, 3),
            Err(0)
        );
    }
}
