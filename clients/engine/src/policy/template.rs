//! Key templates: `${user}`, `${tenant}`, `${ip}`, `${route}`, `${plan}`, `${header.NAME}`
//! and `${path.NAME}` rendered for one request.

use std::fmt::Write as _;

use crate::identity::{Headers, IdentityHash};

// ---- Key templates ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    User,
    Tenant,
    Ip,
    Route,
    Plan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
    /// `${header.NAME}`: the first value of that request header (the name in lower case).
    Header(String),
    /// `${path.NAME}`: the path segment the route's `{NAME}` captured.
    Path(String),
}

/// A key with `${user}`, `${tenant}`, `${ip}`, `${route}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
    parts: Vec<Part>,
}

/// What a request contributes to its keys, as the bytes received (identities are bytes: a
/// value that is not UTF-8 is an identity of its own); a missing or empty part renders as
/// `anonymous`.
#[derive(Clone, Copy, Default)]
pub struct RequestIdentity<'a> {
    pub user: Option<&'a [u8]>,
    pub tenant: Option<&'a [u8]>,
    pub ip: Option<&'a [u8]>,
    pub route: Option<&'a [u8]>,
    pub plan: Option<&'a [u8]>,
    /// The request's headers, for `${header.NAME}`.
    pub headers: Option<&'a dyn Headers>,
    /// The route's captures, for `${path.NAME}`.
    pub path: &'a [(&'a str, &'a str)],
    /// `identity.hash`: identities (not the route's or plan's names) are rendered hashed.
    pub hash: Option<&'a IdentityHash>,
}

pub const ANONYMOUS: &str = "anonymous";

impl KeyTemplate {
    pub fn parse(source: &str) -> Result<KeyTemplate, String> {
        if source.is_empty() {
            return Err("a key must not be empty".into());
        }
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(start) = rest.find("${") {
            let (text, after) = rest.split_at(start);
            if !text.is_empty() {
                parts.push(Part::Text(text.to_string()));
            }
            let (name, tail) = after
                .get(2..)
                .and_then(|a| a.split_once('}'))
                .ok_or_else(|| format!("unclosed '${{' in '{source}'"))?;
            if let Some(header) = name.strip_prefix("header.") {
                // A header name is an HTTP token; matched without case, as HTTP does.
                let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
                if header.is_empty() || !header.bytes().all(token) {
                    return Err(format!(
                        "'${{{name}}}' does not name a header (letters, digits and -)"
                    ));
                }
                parts.push(Part::Header(header.to_ascii_lowercase()));
                rest = tail;
                continue;
            }
            if let Some(capture) = name.strip_prefix("path.") {
                if capture.is_empty()
                    || !capture
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(format!(
                        "'${{{name}}}' does not name a capture (letters, digits and _)"
                    ));
                }
                parts.push(Part::Path(capture.to_string()));
                rest = tail;
                continue;
            }
            parts.push(Part::Var(match name {
                "user" => Var::User,
                "tenant" => Var::Tenant,
                "ip" => Var::Ip,
                "route" => Var::Route,
                "plan" => Var::Plan,
                _ => {
                    return Err(format!(
                        "unknown variable '${{{name}}}' (known: user, tenant, ip, route, plan, header.NAME, path.NAME)"
                    ))
                }
            }));
            rest = tail;
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(KeyTemplate {
            source: source.to_string(),
            parts,
        })
    }

    /// Whether the template takes this variable.
    pub fn uses(&self, var: Var) -> bool {
        self.parts.contains(&Part::Var(var))
    }

    /// The captures the template takes (`${path.NAME}`).
    pub fn captures(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Path(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The headers the template takes (`${header.NAME}`), names in lower case.
    pub fn headers(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Header(name) => Some(name.as_str()),
            _ => None,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The template text of the key's hash tag: what lies between the first literal `{` and the
    /// next literal `}`, as Redis Cluster reads a rendered key. Rendered values never contain
    /// braces (see [`KeyTemplate::render`]), so equal tag templates always land in one slot.
    pub fn hash_tag(&self) -> Option<String> {
        let mut tag: Option<String> = None;
        for part in &self.parts {
            match (part, tag.as_mut()) {
                (Part::Text(t), None) => {
                    if let Some((_, inside)) = t.split_once('{') {
                        if let Some((tag, _)) = inside.split_once('}') {
                            return (!tag.is_empty()).then(|| tag.to_string());
                        }
                        tag = Some(inside.to_string());
                    }
                }
                (Part::Text(t), Some(acc)) => {
                    if let Some((end, _)) = t.split_once('}') {
                        acc.push_str(end);
                        return (!acc.is_empty()).then(|| acc.clone());
                    }
                    acc.push_str(t);
                }
                (Part::Header(name), Some(acc)) => {
                    let _ = write!(acc, "${{header.{name}}}");
                }
                (Part::Path(name), Some(acc)) => {
                    let _ = write!(acc, "${{path.{name}}}");
                }
                (Part::Var(v), Some(acc)) => {
                    acc.push_str(match v {
                        Var::User => "${user}",
                        Var::Tenant => "${tenant}",
                        Var::Ip => "${ip}",
                        Var::Route => "${route}",
                        Var::Plan => "${plan}",
                    });
                }
                (Part::Var(_) | Part::Header(_) | Part::Path(_), None) => {}
            }
        }
        None
    }

    /// Renders the key for a request. Values are percent-escaped for `%`, `{` and `}`, and
    /// for each byte that is not part of valid UTF-8, so a caller-chosen header can neither
    /// move its key to another slot (breaking `RL.MULTI`) nor collide with another identity's
    /// key: the escaping is injective, since a `%` of the value is always escaped itself.
    pub fn render(&self, id: &RequestIdentity<'_>) -> String {
        let mut out = String::with_capacity(self.source.len().saturating_add(16));
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(_) | Part::Header(_) | Part::Path(_) => {
                    let value = match part {
                        Part::Var(Var::User) => id.user,
                        Part::Var(Var::Tenant) => id.tenant,
                        Part::Var(Var::Ip) => id.ip,
                        Part::Var(Var::Route) => id.route,
                        Part::Var(Var::Plan) => id.plan,
                        Part::Header(name) => id.headers.and_then(|h| h.first(name)),
                        Part::Path(name) => id
                            .path
                            .iter()
                            .find(|(n, _)| n == name)
                            .map(|(_, v)| v.as_bytes()),
                        Part::Text(_) => None,
                    }
                    .filter(|s| !s.is_empty());
                    let identity = !matches!(part, Part::Var(Var::Route | Var::Plan));
                    match (value, id.hash) {
                        (Some(value), Some(hash)) if identity => {
                            hash.write(value, &mut out);
                            continue;
                        }
                        _ => {}
                    }
                    let value = value.unwrap_or(ANONYMOUS.as_bytes());
                    for chunk in value.utf8_chunks() {
                        for c in chunk.valid().chars() {
                            match c {
                                '%' => out.push_str("%25"),
                                '{' => out.push_str("%7B"),
                                '}' => out.push_str("%7D"),
                                c => out.push(c),
                            }
                        }
                        for b in chunk.invalid() {
                            let _ = write!(out, "%{b:02X}");
                        }
                    }
                }
            }
        }
        out
    }
}
