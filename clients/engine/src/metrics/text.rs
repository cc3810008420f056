//! The Prometheus text format's pieces: a family's header, a single sample, a label value
//! escaped, microseconds written as seconds.

use std::fmt::{self, Write as _};

/// A family of one unlabelled sample: its header, then its value.
pub(super) fn single(
    out: &mut String,
    (name, kind): (&str, &str),
    help: &str,
    value: impl fmt::Display,
) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

pub(super) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format requires: backslash, double quote and newline escaped.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Microseconds as decimal seconds without float rounding noise (`2500` → `0.0025`).
pub(super) fn seconds(us: u64) -> String {
    let (whole, frac) = (us / 1_000_000, us % 1_000_000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:06}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}
