//! `commands.md` cannot drift from the code's errors: each `ERR` text the reference quotes (its
//! error tables and its example sessions) must be one the core's `Error` can produce, with the
//! names it carries spelled out in the module's or the core's sources. The synopses are checked
//! against `COMMAND DOCS` in `docs.rs`.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_core::error::Error;

const COMMANDS_MD: &str = include_str!("../commands.md");

/// Where an error's text varies: a name the code spells out as a string literal (an argument,
/// an option, an algorithm, a payload's reason), a token the user typed (any text), a number.
const NAME: char = '\u{1}';
const TYPED: char = '\u{2}';
const DIGITS: char = '\u{3}';
const NUMBER: u64 = 987_654_321;
const NUMBER_USIZE: usize = 987_654_321;

/// Every error the core can produce, with what varies replaced by [`NAME`], [`TYPED`] or
/// [`DIGITS`].
fn core_templates() -> Vec<String> {
    let n: &'static str = "\u{1}";
    let typed = TYPED.to_string();
    let errors = [
        Error::Arity(n),
        Error::NotInteger(n),
        Error::OutOfRange {
            arg: n,
            min: NUMBER,
            max: NUMBER,
        },
        Error::MissingUnit(n),
        Error::BadDuration(n),
        Error::DurationRange { arg: n, max: n },
        Error::MissingValue(n),
        Error::MissingOption(n),
        Error::Duplicate(n),
        Error::Syntax(typed.clone()),
        Error::UnknownAlgo(typed.clone()),
        Error::OptionNotAllowed { option: n, algo: n },
        Error::CostAboveCapacity {
            cost: NUMBER,
            capacity: NUMBER,
        },
        Error::RefillTooLong,
        Error::AlgoMismatch {
            stored: n,
            asked: n,
        },
        Error::DuplicateKey(typed),
        Error::RuleCount {
            keys: NUMBER_USIZE,
            rules: NUMBER_USIZE,
        },
        Error::IncompleteRule,
        Error::ReserveNeedsRate,
        Error::TooManyReservations,
        Error::BadId(n),
        Error::AheadOfClock(n),
        Error::BadLease,
        Error::TooManyLeases,
        Error::BadPayload(n),
        Error::BadDeadline,
        Error::DeadlineAhead,
        Error::Late { late_ms: NUMBER },
        Error::TooManyReporters(NUMBER_USIZE),
        Error::BadName(n),
        Error::BadAllocation,
    ];
    // A variant added to the core without a template here is caught by this match.
    for e in &errors {
        match e {
            Error::Arity(_)
            | Error::NotInteger(_)
            | Error::OutOfRange { .. }
            | Error::MissingUnit(_)
            | Error::BadDuration(_)
            | Error::DurationRange { .. }
            | Error::MissingValue(_)
            | Error::MissingOption(_)
            | Error::Duplicate(_)
            | Error::Syntax(_)
            | Error::UnknownAlgo(_)
            | Error::OptionNotAllowed { .. }
            | Error::CostAboveCapacity { .. }
            | Error::RefillTooLong
            | Error::AlgoMismatch { .. }
            | Error::DuplicateKey(_)
            | Error::RuleCount { .. }
            | Error::IncompleteRule
            | Error::ReserveNeedsRate
            | Error::TooManyReservations
            | Error::BadId(_)
            | Error::AheadOfClock(_)
            | Error::BadLease
            | Error::TooManyLeases
            | Error::BadPayload(_)
            | Error::BadDeadline
            | Error::DeadlineAhead
            | Error::Late { .. }
            | Error::TooManyReporters(_)
            | Error::BadName(_)
            | Error::BadAllocation => {}
        }
    }
    errors
        .iter()
        .map(|e| {
            e.to_string()
                .replace(&NUMBER.to_string(), &DIGITS.to_string())
        })
        .collect()
}

/// Every string literal in the module's and the core's sources: the names an error can carry.
fn source_literals() -> std::collections::HashSet<String> {
    fn walk(dir: &std::path::Path, out: &mut std::collections::HashSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let mut chars = text.chars();
                while let Some(c) = chars.next() {
                    if c != '"' {
                        continue;
                    }
                    let mut literal = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => {
                                literal.push(c);
                                literal.extend(chars.next());
                            }
                            c => literal.push(c),
                        }
                    }
                    out.insert(literal);
                }
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = std::collections::HashSet::new();
    walk(&root.join("src"), &mut out);
    walk(&root.join("core/src"), &mut out);
    out
}

/// Whether `text` is `template` with each slot filled as its kind allows; with `prefix`, whether
/// `text` begins such a text (for a quote cut short with `...`).
fn fits(
    template: &str,
    text: &str,
    prefix: bool,
    names: &std::collections::HashSet<String>,
) -> bool {
    let Some(at) = template.find([NAME, TYPED, DIGITS]) else {
        return if prefix {
            template.starts_with(text)
        } else {
            template == text
        };
    };
    let (literal, slot) = template.split_at(at);
    let kind = slot.chars().next().unwrap();
    let rest = &slot[kind.len_utf8()..];
    if prefix && text.len() <= literal.len() {
        return literal.starts_with(text);
    }
    let Some(after) = text.strip_prefix(literal) else {
        return false;
    };
    (1..=after.len())
        .filter(|&i| after.is_char_boundary(i))
        .any(|i| {
            let filled = &after[..i];
            let ok = match kind {
                NAME => names.contains(filled),
                DIGITS => filled.bytes().all(|b| b.is_ascii_digit()),
                _ => true,
            };
            // Cut short inside the slot: what is there only has to start a valid filling.
            let cut = prefix && i == after.len() && kind != DIGITS;
            (ok || cut) && fits(rest, &after[i..], prefix, names)
        })
}

/// The `ERR` texts commands.md quotes: in the first cell of its tables (several per cell when
/// a row lists a family), and after `(error)` in its example sessions.
fn documented_errors(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in md.lines() {
        if let Some(row) = line.strip_prefix('|') {
            let first = row.split(" | ").next().unwrap_or("");
            for (i, span) in first.split('`').enumerate() {
                if i % 2 == 1 && span.starts_with("ERR ") {
                    out.push(span.to_string());
                }
            }
        } else if let Some((_, error)) = line.split_once("(error) ") {
            if error.starts_with("ERR ") {
                out.push(error.trim_end().to_string());
            }
        }
    }
    out
}

fn unknown_errors(md: &str) -> Vec<String> {
    let templates = core_templates();
    let names = source_literals();
    documented_errors(md)
        .into_iter()
        .filter(|e| match e.strip_suffix("...") {
            Some(cut) => !templates.iter().any(|t| fits(t, cut, true, &names)),
            None => !templates.iter().any(|t| fits(t, e, false, &names)),
        })
        .collect()
}

#[test]
fn every_documented_error_is_one_the_core_produces() {
    let documented = documented_errors(COMMANDS_MD);
    assert!(
        documented.len() > 50,
        "the tables were found: {documented:?}"
    );
    let unknown = unknown_errors(COMMANDS_MD);
    assert!(
        unknown.is_empty(),
        "commands.md quotes errors the core cannot produce:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn a_drifted_error_text_is_caught() {
    for (text, drifted) in [
        (
            "`ERR limit must be an integer`",
            "`ERR limit must be a whole number`",
        ),
        (
            "`ERR reservations are only for ALGO gcra and bucket keys`",
            "`ERR reservations are only for gcra and bucket keys`",
        ),
        (
            "`ERR period needs a unit: add ms, s, m, h or d (for example 10s)`",
            "`ERR period needs a unit (for example 10s)`",
        ),
    ] {
        assert!(COMMANDS_MD.contains(text), "the test's copy of {text}");
        let md = COMMANDS_MD.replacen(text, drifted, 1);
        assert_eq!(
            unknown_errors(&md),
            vec![drifted.trim_matches('`').to_string()]
        );
    }
    // Names must be names the code spells out; numbers must be digits; typed tokens anything.
    let names = source_literals();
    let range = format!("ERR {NAME} must be in the range [{DIGITS}, {DIGITS}]");
    assert!(fits(
        &range,
        "ERR limit must be in the range [1, 10000]",
        false,
        &names
    ));
    assert!(!fits(
        &range,
        "ERR limmit must be in the range [1, 10000]",
        false,
        &names
    ));
    assert!(!fits(
        &range,
        "ERR limit must be in the range [1, many]",
        false,
        &names
    ));
    assert!(!fits(
        &range,
        "ERR limit must be in the range 1 to 10000",
        false,
        &names
    ));
    let syntax = format!("ERR syntax error near '{TYPED}'");
    assert!(fits(
        &syntax,
        "ERR syntax error near 'anything at all'",
        false,
        &names
    ));
}
