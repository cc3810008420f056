//! The configuration file: envoyproxy/ratelimit's YAML format, read with its semantics, plus
//! this gateway's extensions (`algorithm`, `burst` and `grant` in `rate_limit`;
//! `on_store_error`, `store_timeout` and `response_headers` at the top level). Every error names the file (when
//! there is one), the field's path and what is wrong with it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use redis_rl_client::Algo;
use rl_core::parse::parse_duration;
use rl_core::request::grant::{DEFAULT_TTL_US, MAX_TTL_US};
use rl_core::rule::{Rule, MAX_COUNT};
use rl_engine::policy::GrantSpec;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::tree::{Level, Limit, Match, Node, Rate};

/// A larger file is refused before parsing: a configuration is a document, not a data set.
const MAX_FILE_BYTES: u64 = 16 << 20;
/// Descriptors nest at most this deep (a request's descriptor has as many entries).
const MAX_DEPTH: usize = 16;
/// Descriptors in one file, at every level together: the tree is held in memory.
const MAX_DESCRIPTORS: usize = 100_000;
/// The default deadline of the store calls of one request (`store_timeout`), as the gateway
/// policy's `store.timeout`. Envoy gives the whole call 20 ms by default (the filter's
/// `timeout`) and then applies its own `failure_mode_deny`: 10 ms leaves the posture's answer
/// (`on_store_error`) time to arrive before Envoy stops waiting for it.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(10);
/// The longest `store_timeout`: past that, requests are held by a store that is not coming.
const MAX_STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// What to answer when the store cannot (down, too slow, failing over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// The gRPC status `UNAVAILABLE` (Envoy applies its `failure_mode_deny`).
    Deny,
    /// `OK`: the request passes.
    Allow,
    /// Decided in this process, on the engine's in-memory store, with the same limits.
    Fallback,
}

impl OnStoreError {
    pub fn name(self) -> &'static str {
        match self {
            OnStoreError::Deny => "deny",
            OnStoreError::Allow => "allow",
            OnStoreError::Fallback => "fallback",
        }
    }
}

/// A validated configuration: one domain and its descriptor tree.
#[derive(Debug)]
pub struct Config {
    pub(crate) domain: String,
    /// `rls:<domain>`: the route of this configuration's decisions in the metrics.
    pub(crate) route: String,
    pub(crate) root: Level,
    pub(crate) on_store_error: OnStoreError,
    pub(crate) store_timeout: Duration,
    pub(crate) response_headers: bool,
}

impl Config {
    /// Reads and validates `path`; an error names the file and the field.
    pub fn load(path: &Path) -> Result<Config, String> {
        let name = path.display();
        let size = std::fs::metadata(path)
            .map_err(|e| format!("{name}: cannot read: {e}"))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "{name}: {size} bytes, more than the {MAX_FILE_BYTES} a configuration may have"
            ));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
        Config::parse(&text).map_err(|e| format!("{name}: {e}"))
    }

    /// Validates a configuration's text; an error names the field.
    pub fn parse(yaml: &str) -> Result<Config, String> {
        let raw: RawRoot = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        raw.validate()
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    pub fn on_store_error(&self) -> OnStoreError {
        self.on_store_error
    }

    pub fn store_timeout(&self) -> Duration {
        self.store_timeout
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoot {
    domain: Option<String>,
    descriptors: Option<Vec<RawDescriptor>>,
    on_store_error: Option<String>,
    store_timeout: Option<String>,
    response_headers: Option<Flag>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: Option<String>,
    value: Option<String>,
    rate_limit: Option<RawRateLimit>,
    descriptors: Option<Vec<RawDescriptor>>,
    shadow_mode: Option<Flag>,
    share_threshold: Option<Flag>,
    // Both only shape the reference service's statistics, named by value there: accepted so its
    // files load unchanged, and unused, since metrics here are by limit (a bounded table).
    #[serde(rename = "detailed_metric")]
    _detailed_metric: Option<Flag>,
    #[serde(rename = "value_to_metric")]
    _value_to_metric: Option<Flag>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    unit: Option<String>,
    requests_per_unit: Option<u64>,
    unit_multiplier: Option<u64>,
    unlimited: Option<Flag>,
    name: Option<String>,
    replaces: Option<Vec<RawReplace>>,
    algorithm: Option<String>,
    burst: Option<u64>,
    grant: Option<RawGrant>,
}

/// `grant: {want, ttl}`: the descriptor's limit is spent from chunks of `want` units leased
/// from the store (`RL.GRANT`) and spent in this process for `ttl`, as a policy rule's `grant`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    want: Option<u64>,
    ttl: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplace {
    name: Option<String>,
}

/// A boolean as YAML 1.1 (the reference service's parser) writes it: `true`, but also `yes`,
/// `on`, `y` and their negations.
struct Flag(bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Flag, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a boolean (true or false)")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Flag, E> {
                Ok(Flag(b))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Flag, E> {
                match s {
                    "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True"
                    | "TRUE" => Ok(Flag(true)),
                    "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False"
                    | "FALSE" => Ok(Flag(false)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

fn flag(f: &Option<Flag>) -> bool {
    f.as_ref().is_some_and(|f| f.0)
}

fn invalid(path: &str, message: impl std::fmt::Display) -> String {
    format!("{path}: {message}")
}

impl RawRoot {
    fn validate(self) -> Result<Config, String> {
        let domain = self.domain.unwrap_or_default();
        if domain.is_empty() {
            return Err(invalid("domain", "config file cannot have empty domain"));
        }
        let on_store_error = match self.on_store_error.as_deref() {
            None | Some("deny") => OnStoreError::Deny,
            Some("allow") => OnStoreError::Allow,
            Some("fallback") => OnStoreError::Fallback,
            Some(other) => {
                return Err(invalid(
                    "on_store_error",
                    format!("must be deny, allow or fallback (got '{other}')"),
                ))
            }
        };
        let store_timeout = match self.store_timeout.as_deref() {
            None => DEFAULT_STORE_TIMEOUT,
            Some(text) => timeout(text).map_err(|e| invalid("store_timeout", e))?,
        };
        let mut count = 0;
        let root = level(
            self.descriptors.unwrap_or_default(),
            &Walk {
                path: String::new(),
                key_path: String::new(),
                depth: 1,
            },
            &mut count,
        )?;
        Ok(Config {
            route: format!("rls:{domain}"),
            domain,
            root,
            on_store_error,
            store_timeout,
            response_headers: flag(&self.response_headers),
        })
    }
}

/// `250ms`, `1s`: a whole number of milliseconds or seconds, from 1 ms to [`MAX_STORE_TIMEOUT`].
fn timeout(text: &str) -> Result<Duration, String> {
    let (digits, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1000)
    } else {
        return Err(format!("'{text}' needs a unit: ms or s (as in 50ms)"));
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a whole number of ms or s"))?;
    let d = Duration::from_millis(n.saturating_mul(scale));
    if d.is_zero() || d > MAX_STORE_TIMEOUT {
        return Err(format!(
            "'{text}' must be from 1ms to {MAX_STORE_TIMEOUT:?}"
        ));
    }
    Ok(d)
}

/// Where the walk is: the field path for errors, the descriptor path for names.
struct Walk {
    path: String,
    key_path: String,
    depth: usize,
}

fn level(raws: Vec<RawDescriptor>, at: &Walk, count: &mut usize) -> Result<Level, String> {
    let mut out = Level::default();
    let mut seen = HashSet::new();
    for (i, raw) in raws.into_iter().enumerate() {
        let path = if at.path.is_empty() {
            format!("descriptors[{i}]")
        } else {
            format!("{}.descriptors[{i}]", at.path)
        };
        *count = count.saturating_add(1);
        if *count > MAX_DESCRIPTORS {
            return Err(invalid(
                &path,
                format!("more than {MAX_DESCRIPTORS} descriptors"),
            ));
        }
        let key = raw.key.clone().unwrap_or_default();
        if key.is_empty() {
            return Err(invalid(&path, "descriptor has empty key"));
        }
        let value = raw.value.clone().unwrap_or_default();
        // The reference service's composite key: the key, and `_value` when there is one.
        let composite = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let key_path = if at.key_path.is_empty() {
            composite.clone()
        } else {
            format!("{}.{composite}", at.key_path)
        };
        if !seen.insert(composite) {
            return Err(invalid(
                &path,
                format!("duplicate descriptor composite key '{key_path}'"),
            ));
        }
        // `share_threshold` means something for a wildcard only, and is ignored elsewhere, as
        // in the reference service.
        let matching = if value.is_empty() {
            Match::Any
        } else if value.contains('*') {
            Match::Glob {
                pattern: value,
                shared: flag(&raw.share_threshold),
            }
        } else {
            Match::Exact(value)
        };
        let shadow = flag(&raw.shadow_mode);
        let limit = match raw.rate_limit {
            Some(rl) => Some(Arc::new(limit(
                rl,
                &format!("{path}.rate_limit"),
                &key_path,
                shadow,
            )?)),
            None => None,
        };
        let children = match raw.descriptors {
            Some(list) if !list.is_empty() => {
                if at.depth >= MAX_DEPTH {
                    return Err(invalid(
                        &format!("{path}.descriptors"),
                        format!("descriptors nest at most {MAX_DEPTH} deep"),
                    ));
                }
                let next = Walk {
                    path: path.clone(),
                    key_path: key_path.clone(),
                    depth: at.depth.saturating_add(1),
                };
                level(list, &next, count)?
            }
            _ => Level::default(),
        };
        out.push(Node {
            key,
            matching,
            limit,
            children,
        });
    }
    Ok(out)
}

fn limit(raw: RawRateLimit, path: &str, key_path: &str, shadow: bool) -> Result<Limit, String> {
    let at = |field: &str| format!("{path}.{field}");
    let name = raw.name.filter(|n| !n.is_empty());
    let mut replaces = Vec::new();
    for (i, r) in raw.replaces.unwrap_or_default().into_iter().enumerate() {
        let replaced = r.name.unwrap_or_default();
        if replaced.is_empty() {
            return Err(invalid(
                &at(&format!("replaces[{i}]")),
                "should not have an empty replaces entry",
            ));
        }
        if name.as_deref() == Some(replaced.as_str()) {
            return Err(invalid(
                &at(&format!("replaces[{i}]")),
                "replaces should not contain name of same descriptor",
            ));
        }
        replaces.push(replaced);
    }
    let label = name.clone().unwrap_or_else(|| key_path.to_string());
    let unit_text = raw.unit.unwrap_or_default();
    let rate = if flag(&raw.unlimited) {
        if !unit_text.is_empty() {
            return Err(invalid(
                &at("unit"),
                "should not specify rate limit unit when unlimited",
            ));
        }
        if let Some(field) = [
            ("algorithm", raw.algorithm.is_some()),
            ("burst", raw.burst.is_some()),
            ("unit_multiplier", raw.unit_multiplier.is_some()),
            ("grant", raw.grant.is_some()),
        ]
        .iter()
        .find_map(|(f, given)| given.then_some(*f))
        {
            return Err(invalid(&at(field), "an unlimited descriptor has no rate"));
        }
        None
    } else {
        Some(rate(
            &unit_text,
            raw.requests_per_unit,
            raw.unit_multiplier,
            raw.algorithm.as_deref(),
            raw.burst,
            raw.grant.map(|g| grant(g, &at)).transpose()?,
            &at,
        )?)
    };
    // The engine's rule for the rate (for `requests_per_unit: 0`, one whose checks are
    // blocked: see `Rate::rule`).
    let rule = match rate {
        Some(r) => Some(Arc::new(
            r.rule(&label, shadow)
                .map_err(|e| invalid(&at("requests_per_unit"), &e))?,
        )),
        None => None,
    };
    Ok(Limit {
        label,
        name,
        replaces,
        rate,
        shadow,
        rule,
    })
}

/// `want` from 1 to the module's largest count, `ttl` a duration (`500ms`, `1s`, at most
/// `1d`, `1s` when not given), as `RL.GRANT` takes them.
fn grant(raw: RawGrant, at: &dyn Fn(&str) -> String) -> Result<GrantSpec, String> {
    let want = match raw.want {
        Some(w) if (1..=MAX_COUNT).contains(&w) => w,
        Some(_) => {
            return Err(invalid(
                &at("grant.want"),
                format!("must be in the range [1, {MAX_COUNT}]"),
            ))
        }
        None => return Err(invalid(&at("grant.want"), "is required")),
    };
    let ttl_us = match raw.ttl.as_deref() {
        None => DEFAULT_TTL_US,
        Some(text) => parse_duration(text.as_bytes(), "ttl", MAX_TTL_US, "1d").map_err(|e| {
            let message = e.to_string();
            let message = message
                .strip_prefix("ERR ttl ")
                .unwrap_or(&message)
                .to_string();
            invalid(&at("grant.ttl"), message)
        })?,
    };
    Ok(GrantSpec {
        want,
        ttl: Duration::from_micros(ttl_us),
    })
}

fn rate(
    unit_text: &str,
    requests_per_unit: Option<u64>,
    unit_multiplier: Option<u64>,
    algorithm: Option<&str>,
    burst: Option<u64>,
    grant: Option<GrantSpec>,
    at: &dyn Fn(&str) -> String,
) -> Result<Rate, String> {
    let unit = match unit_text.to_ascii_lowercase().as_str() {
        "second" => Unit::Second,
        "minute" => Unit::Minute,
        "hour" => Unit::Hour,
        "day" => Unit::Day,
        _ => {
            return Err(invalid(
                &at("unit"),
                format!("invalid rate limit unit '{unit_text}' (second, minute, hour or day)"),
            ))
        }
    };
    let Some(requests) = requests_per_unit else {
        return Err(invalid(
            &at("requests_per_unit"),
            "is required (0 refuses every request)",
        ));
    };
    let requests_per_unit = u32::try_from(requests).map_err(|_| {
        invalid(
            &at("requests_per_unit"),
            format!("{requests} is more than {}", u32::MAX),
        )
    })?;
    let multiplier = match unit_multiplier {
        None => 1,
        Some(0) => return Err(invalid(&at("unit_multiplier"), "must be at least 1")),
        Some(m) => u32::try_from(m)
            .map_err(|_| invalid(&at("unit_multiplier"), format!("{m} is too large")))?,
    };
    let period =
        Duration::from_secs(super::tree::unit_seconds(unit).saturating_mul(u64::from(multiplier)));
    let algo = match algorithm {
        None => Algo::Window,
        Some(text) => match Algo::parse(text.as_bytes()) {
            Ok(a) => a,
            Err(_) => {
                return Err(invalid(
                    &at("algorithm"),
                    format!("must be gcra, bucket, window, sliding or log (got '{text}')"),
                ))
            }
        },
    };
    // A limit of 0 refuses everything without a store call; the module's bounds still apply
    // to the rest of the rule, checked as if it admitted one request.
    let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
    let limit = u64::from(requests_per_unit.max(1));
    let rule = Rule::new(algo, limit, period_us, burst).map_err(|e| {
        use rl_core::error::Error as E;
        match e {
            E::OutOfRange {
                arg: "limit", max, ..
            } => invalid(
                &at("requests_per_unit"),
                format!("must be at most {max} with algorithm {}", algo.name()),
            ),
            E::DurationRange { max, .. } => invalid(
                &at("unit_multiplier"),
                format!("the window (unit x unit_multiplier) must be at most {max}"),
            ),
            E::OptionNotAllowed { .. } => invalid(
                &at("burst"),
                format!(
                    "only gcra and bucket take a burst (the capacity of {} is requests_per_unit)",
                    algo.name()
                ),
            ),
            E::RefillTooLong => invalid(
                &at("burst"),
                format!(
                    "refilling it (burst / requests_per_unit x unit) must take at most {}",
                    rl_core::rule::MAX_PERIOD_TEXT
                ),
            ),
            other => invalid(&at("burst"), other.to_string().trim_start_matches("ERR ")),
        }
    })?;
    Ok(Rate {
        requests_per_unit,
        unit,
        period,
        algo,
        burst,
        capacity: rule.burst(),
        grant,
    })
}
