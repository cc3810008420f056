//! One line of an access log: a JSON object with `ts` (an RFC 3339 string or epoch
//! milliseconds), `method`, `path`, and optionally `ip` and `headers`; other fields (a status,
//! a latency, whatever the logger adds) are ignored. Strings are borrowed from the line when
//! they hold no escapes, so a line costs one allocation (its header list) besides the engine's.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::net::IpAddr;

use rl_engine::time::parse_rfc3339;
use rl_engine::Headers;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;

/// A request as the log recorded it.
pub(super) struct Line<'a> {
    /// When it arrived, in Unix-epoch microseconds (the engine's clock).
    pub(super) at_us: u64,
    pub(super) method: Cow<'a, str>,
    /// As logged; the query is cut off before matching.
    pub(super) path: Cow<'a, str>,
    /// The address the request came from (its connection's peer).
    pub(super) ip: Option<IpAddr>,
    pub(super) headers: LineHeaders<'a>,
}

#[derive(Deserialize)]
struct Raw<'a> {
    ts: Ts,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    path: Cow<'a, str>,
    #[serde(borrow, default)]
    ip: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    headers: LineHeaders<'a>,
}

impl<'a> Line<'a> {
    /// The line, or why it is not one (the message names the field and the column).
    pub(super) fn parse(text: &'a [u8]) -> Result<Line<'a>, String> {
        let raw: Raw<'a> = serde_json::from_slice(text).map_err(|e| {
            // Every line is a document of its own: its "line 1" would only confuse.
            let message = e.to_string();
            match message.rsplit_once(" at line ") {
                Some((what, _)) => format!("{what} (column {})", e.column()),
                None => message,
            }
        })?;
        let ip = match raw.ip.as_deref() {
            None => None,
            Some(text) => Some(
                text.parse::<IpAddr>()
                    .map_err(|_| format!("ip: {text:?} is not an IP address"))?,
            ),
        };
        Ok(Line {
            at_us: raw.ts.0,
            method: raw.method,
            path: raw.path,
            ip,
            headers: raw.headers,
        })
    }

    /// The path without its query, as the engine matches it.
    pub(super) fn route_path(&self) -> &str {
        match self.path.split_once('?') {
            Some((path, _)) => path,
            None => &self.path,
        }
    }
}

/// `ts` in microseconds: an RFC 3339 string, or a non-negative number of epoch milliseconds
/// (a fraction is kept to the microsecond).
struct Ts(u64);

impl<'de> Deserialize<'de> for Ts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ts, D::Error> {
        d.deserialize_any(TsVisitor)
    }
}

struct TsVisitor;

impl Visitor<'_> for TsVisitor {
    type Value = Ts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp or epoch milliseconds")
    }

    fn visit_u64<E: de::Error>(self, ms: u64) -> Result<Ts, E> {
        ms.checked_mul(1000)
            .map(Ts)
            .ok_or_else(|| E::invalid_value(Unexpected::Unsigned(ms), &self))
    }

    fn visit_i64<E: de::Error>(self, ms: i64) -> Result<Ts, E> {
        // serde_json gives non-negative integers to `visit_u64`: this one is before 1970.
        Err(E::invalid_value(Unexpected::Signed(ms), &self))
    }

    fn visit_f64<E: de::Error>(self, ms: f64) -> Result<Ts, E> {
        let us = (ms * 1000.0).round();
        // `u64::MAX as f64` rounds up to 2^64, which is out of range: compared strictly.
        if us.is_finite() && us >= 0.0 && us < u64::MAX as f64 {
            // In range and whole: the conversion is exact.
            Ok(Ts(us as u64))
        } else {
            Err(E::invalid_value(Unexpected::Float(ms), &self))
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Ts, E> {
        parse_rfc3339(text)
            .map(|at| Ts(at.as_micros()))
            .ok_or_else(|| E::invalid_value(Unexpected::Str(text), &self))
    }
}

/// A string borrowed from the line when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        d.deserialize_str(TextVisitor(PhantomData))
    }
}

struct TextVisitor<'a>(PhantomData<&'a str>);

impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
    type Value = Text<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'a>, E> {
        Ok(Text(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'a>, E> {
        Ok(Text(Cow::Owned(text.to_string())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Text<'a>, E> {
        Ok(Text(Cow::Owned(text)))
    }
}

/// `headers`: names to a string, or to a list of strings for a repeated header (each value
/// then in order, and the engine reads the first).
#[derive(Default)]
pub(super) struct LineHeaders<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl Headers for LineHeaders<'_> {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        for (n, v) in &self.0 {
            if n.eq_ignore_ascii_case(name) {
                f(v.as_bytes());
            }
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for LineHeaders<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LineHeaders<'a>, D::Error> {
        d.deserialize_any(HeadersVisitor(PhantomData))
    }
}

struct HeadersVisitor<'a>(PhantomData<&'a str>);

impl<'de: 'a, 'a> Visitor<'de> for HeadersVisitor<'a> {
    type Value = LineHeaders<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of header names to strings or lists of strings")
    }

    /// `"headers": null` is no headers.
    fn visit_unit<E: de::Error>(self) -> Result<LineHeaders<'a>, E> {
        Ok(LineHeaders::default())
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<LineHeaders<'a>, M::Error> {
        let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(4).min(16));
        while let Some(Text(name)) = map.next_key::<Text<'a>>()? {
            map.next_value_seed(Values {
                name,
                pairs: &mut pairs,
            })?;
        }
        Ok(LineHeaders(pairs))
    }
}

/// One header's value or values, appended under its name.
struct Values<'v, 'a> {
    name: Cow<'a, str>,
    pairs: &'v mut Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Values<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Values<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "header {:?}: a string or a list of strings", self.name)
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<(), E> {
        self.pairs.push((self.name, Cow::Borrowed(text)));
        Ok(())
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        self.pairs.push((self.name, Cow::Owned(text.to_string())));
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        while let Some(Text(value)) = seq.next_element::<Text<'a>>()? {
            self.pairs.push((self.name.clone(), value));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_with_every_field() {
        let text = br#"{"ts": "2026-01-01T00:00:01.5Z", "method": "GET", "path": "/a?b=1",
            "ip": "203.0.113.7", "status": 200,
            "headers": {"X-User": "ann", "x-tag": ["one", "two"], "x-esc": "a\"b"}}"#;
        let line = Line::parse(text).unwrap();
        assert_eq!(line.at_us, 1_767_225_601_500_000);
        assert_eq!(line.route_path(), "/a");
        assert_eq!(line.ip, Some("203.0.113.7".parse().unwrap()));
        assert_eq!(line.headers.first("x-user"), Some(b"ann".as_slice()));
        let mut tags = Vec::new();
        line.headers.each("x-tag", &mut |v| tags.push(v.to_vec()));
        assert_eq!(tags, [b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(line.headers.first("x-esc"), Some(b"a\"b".as_slice()));
    }

    #[test]
    fn epoch_milliseconds_whole_or_not() {
        let at = |ts: &str| {
            let text = format!(r#"{{"ts": {ts}, "method": "GET", "path": "/"}}"#);
            Line::parse(text.as_bytes()).map(|l| l.at_us)
        };
        assert_eq!(at("1767225601500"), Ok(1_767_225_601_500_000));
        assert_eq!(at("1767225601500.25"), Ok(1_767_225_601_500_250));
        assert_eq!(at("0"), Ok(0));
        for bad in [
            "-1",
            "1e300",
            "18446744073709551615",
            "true",
            "\"yesterday\"",
        ] {
            assert!(at(bad).unwrap_err().starts_with("invalid"), "{bad}");
        }
    }

    #[test]
    fn messages_name_the_field_and_the_column() {
        let err = |text: &str| Line::parse(text.as_bytes()).err().unwrap();
        assert_eq!(
            err(r#"{"ts": 1, "method": "GET"}"#),
            "missing field `path` (column 26)"
        );
        assert!(err(r#"{"ts": 1, "method": "GET", "path": "/", "ip": "x"}"#).starts_with("ip:"));
        assert!(
            err(r#"{"ts": 1, "method": "GET", "path": "/", "headers": {"a": 1}}"#)
                .contains("header \"a\"")
        );
        assert!(err("not json").starts_with("expected"));
    }
}
