//! `commands.md` cannot drift from the code: each command's synopsis is compared with what the
//! server's `COMMAND DOCS` says about it (the `ERR` texts it quotes are checked in
//! `docs_errors.rs`).
//!
//! The commands come from the running server (`COMMAND LIST FILTERBY MODULE rl`), which lists
//! exactly the module's command table as registered. The test does not link the module's rlib:
//! it installs Redis's allocator as the global one, which cannot allocate outside a server.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use common::*;
use rl_testkit as common;

const COMMANDS_MD: &str = include_str!("../commands.md");

// ---------------------------------------------------------------- COMMAND DOCS, as a tree

/// One argument of `COMMAND DOCS`.
#[derive(Debug)]
struct DocArg {
    name: String,
    kind: String,
    token: Option<String>,
    optional: bool,
    subargs: Vec<DocArg>,
}

fn text(v: &Value) -> String {
    redis::from_redis_value::<String>(v).unwrap_or_default()
}

/// The value of `field` in a RESP2 flat list of field, value pairs.
fn field<'a>(pairs: &'a [Value], name: &str) -> Option<&'a Value> {
    pairs
        .chunks(2)
        .find(|p| p.len() == 2 && text(&p[0]) == name)
        .map(|p| &p[1])
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

fn doc_args(v: &Value) -> Vec<DocArg> {
    items(v)
        .iter()
        .map(|a| {
            let pairs = items(a);
            let flags: Vec<String> = field(pairs, "flags")
                .map(|f| items(f).iter().map(text).collect())
                .unwrap_or_default();
            DocArg {
                name: field(pairs, "name").map(text).unwrap_or_default(),
                kind: field(pairs, "type").map(text).unwrap_or_default(),
                token: field(pairs, "token").map(text),
                optional: flags.iter().any(|f| f == "optional"),
                subargs: field(pairs, "arguments").map(doc_args).unwrap_or_default(),
            }
        })
        .collect()
}

/// Every command of the module, with its argument tree, as the server documents it.
fn server_docs(c: &mut Connection) -> Vec<(String, Vec<DocArg>)> {
    let names: Vec<String> = cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("rl")
        .query(c)
        .unwrap();
    assert!(
        names.len() >= 10,
        "the module registers its commands: {names:?}"
    );
    let mut out = Vec::new();
    for name in names {
        let v: Value = cmd("COMMAND").arg("DOCS").arg(&name).query(c).unwrap();
        let reply = items(&v);
        assert_eq!(reply.len(), 2, "COMMAND DOCS {name}: {v:?}");
        let args = field(items(&reply[1]), "arguments")
            .map(doc_args)
            .unwrap_or_default();
        out.push((text(&reply[0]).to_ascii_uppercase(), args));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

// ---------------------------------------------------------------- what a synopsis says

/// One word of a synopsis, in the form both sides are compared in.
#[derive(Debug, PartialEq)]
enum Word {
    /// A literal token (`BURST`, `RULE`).
    Token(String),
    /// A positional argument, named (`key`, `limit`).
    Name(String),
    /// The value after a token: its name in a synopsis is a placeholder (`KEEP duration`).
    Value,
    /// The choices of a one-of (`gcra|bucket|...`), or a placeholder for them (`ALGO algo`).
    Choices(Vec<String>),
}

/// What a synopsis must show for `args`: tokens and positional names in order. A repeated
/// argument or block is shown once (its repetition, `[key ...]`, is dropped from the synopsis).
/// Each word comes with whether it is optional at the top level.
fn expected(args: &[DocArg], top: bool, out: &mut Vec<(Word, Option<bool>)>) {
    for a in args {
        let optional = top.then_some(a.optional);
        if let Some(token) = &a.token {
            out.push((Word::Token(token.clone()), optional));
        }
        match a.kind.as_str() {
            "pure-token" => {}
            "oneof" => {
                let choices = a
                    .subargs
                    .iter()
                    .map(|s| s.token.clone().unwrap_or_else(|| s.name.clone()))
                    .collect();
                out.push((Word::Choices(choices), None));
            }
            "block" => expected(&a.subargs, top && a.token.is_none() && !a.optional, out),
            _ if a.token.is_some() => out.push((Word::Value, None)),
            _ => out.push((Word::Name(a.name.clone()), optional)),
        }
    }
}

/// The words of one synopsis line after the command name, each with its bracket depth. A
/// bracketed group that ends in `...` is the repetition of what precedes it and is dropped.
fn synopsis_words(line: &str) -> Vec<(String, usize)> {
    // Split into words and brackets.
    let mut lexemes = Vec::new();
    for raw in line.split_whitespace().skip(1) {
        let mut word = raw;
        while let Some(rest) = word.strip_prefix('[') {
            lexemes.push("[".to_string());
            word = rest;
        }
        let mut closing = 0;
        while let Some(rest) = word.strip_suffix(']') {
            closing += 1;
            word = rest;
        }
        if !word.is_empty() {
            lexemes.push(word.to_string());
        }
        lexemes.extend(std::iter::repeat_n("]".to_string(), closing));
    }
    // Drop repetition groups: `[` ... `...` `]`.
    let mut kept: Vec<String> = Vec::new();
    for lexeme in lexemes {
        if lexeme == "]" && kept.last().map(String::as_str) == Some("...") {
            let open = kept
                .iter()
                .rposition(|l| l == "[")
                .expect("balanced brackets");
            kept.truncate(open);
            continue;
        }
        kept.push(lexeme);
    }
    let mut depth = 0usize;
    let mut out = Vec::new();
    for lexeme in kept {
        match lexeme.as_str() {
            "[" => depth += 1,
            "]" => depth = depth.checked_sub(1).expect("balanced brackets"),
            "..." => panic!("`...` outside a repetition group in {line:?}"),
            _ => out.push((lexeme, depth)),
        }
    }
    assert_eq!(depth, 0, "unbalanced brackets in {line:?}");
    out
}

/// Compares one synopsis line with the command's `COMMAND DOCS` arguments; an error names the
/// first difference.
fn check_synopsis(line: &str, args: &[DocArg]) -> Result<(), String> {
    let mut want = Vec::new();
    expected(args, true, &mut want);
    let got = synopsis_words(line);
    if got.len() != want.len() {
        return Err(format!(
            "{} words where COMMAND DOCS has {}: {got:?} vs {want:?}",
            got.len(),
            want.len()
        ));
    }
    for ((word, depth), (w, optional)) in got.iter().zip(&want) {
        let ok = match w {
            Word::Token(t) => word == t,
            Word::Name(n) => word == n,
            Word::Value => !word.contains('|') && word.chars().all(|c| !c.is_ascii_uppercase()),
            Word::Choices(choices) => {
                if word.contains('|') {
                    word.split('|').eq(choices.iter().map(String::as_str))
                } else {
                    word.chars().all(|c| !c.is_ascii_uppercase())
                }
            }
        };
        if !ok {
            return Err(format!("`{word}` where COMMAND DOCS has {w:?}"));
        }
        if let Some(optional) = optional {
            if *optional != (*depth > 0) {
                return Err(format!(
                    "`{word}` is {} in the synopsis but {} in COMMAND DOCS",
                    if *depth > 0 { "optional" } else { "required" },
                    if *optional { "optional" } else { "required" },
                ));
            }
        }
    }
    Ok(())
}

/// The synopsis lines of commands.md: the lines of the first code block of each `## ` section
/// that start with a command name (`RL.` or `CL.`), with the section's heading.
fn synopses(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut in_block = false;
    let mut first_block_seen = true;
    for line in md.lines() {
        if line.starts_with("```") {
            if in_block {
                first_block_seen = true;
            }
            in_block = !in_block;
            continue;
        }
        if in_block {
            let name = line.split_whitespace().next().unwrap_or("");
            if !first_block_seen && (name.starts_with("RL.") || name.starts_with("CL.")) {
                out.push((heading.clone(), line.trim().to_string()));
            }
            continue;
        }
        if let Some(h) = line.strip_prefix("## ") {
            heading = h.trim().to_string();
            first_block_seen = false;
        }
    }
    out
}

fn check_all_synopses(md: &str, docs: &[(String, Vec<DocArg>)]) -> Vec<String> {
    let found = synopses(md);
    let mut problems = Vec::new();
    for (name, args) in docs {
        let lines: Vec<_> = found
            .iter()
            .filter(|(_, l)| l.split_whitespace().next() == Some(name.as_str()))
            .collect();
        match lines.as_slice() {
            [] => problems.push(format!("{name}: no synopsis in commands.md")),
            [(heading, line)] => {
                if !heading.contains(name.as_str()) {
                    problems.push(format!("{name}: its synopsis is under `## {heading}`"));
                }
                if let Err(e) = check_synopsis(line, args) {
                    problems.push(format!("{name}: {e}\n    synopsis: {line}"));
                }
            }
            more => problems.push(format!("{name}: {} synopses in commands.md", more.len())),
        }
    }
    for (heading, line) in &found {
        let name = line.split_whitespace().next().unwrap_or("");
        if !docs.iter().any(|(n, _)| n == name) {
            problems.push(format!(
                "`## {heading}` documents {name}, which the module does not register"
            ));
        }
    }
    problems
}

#[test]
fn every_synopsis_matches_command_docs() {
    let s = Server::start();
    let docs = server_docs(&mut s.conn());
    let problems = check_all_synopses(COMMANDS_MD, &docs);
    assert!(problems.is_empty(), "commands.md:\n{}", problems.join("\n"));
}

/// The check fails on the drifts it exists for: a renamed, a reordered, a missing or a made-up
/// argument, a token in the wrong case, a required argument shown optional, a command without
/// a section.
#[test]
fn a_drifted_synopsis_is_caught() {
    let s = Server::start();
    let docs = server_docs(&mut s.conn());
    let admit = "RL.ADMIT key limit period [BURST capacity] [COST units] \
                 [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]";
    assert!(
        COMMANDS_MD.contains(admit),
        "the test's copy of the synopsis"
    );
    for drifted in [
        "RL.ADMIT key rate period [BURST capacity] [COST units] [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]",
        "RL.ADMIT key period limit [BURST capacity] [COST units] [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]",
        "RL.ADMIT key limit period [BURST capacity] [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]",
        "RL.ADMIT key limit period [BURST capacity] [COST units] [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]] [NOW ms]",
        "RL.ADMIT key limit period [burst capacity] [COST units] [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]",
        "RL.ADMIT key limit [period] [BURST capacity] [COST units] [ALGO gcra|bucket|window|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]",
        "RL.ADMIT key limit period [BURST capacity] [COST units] [ALGO gcra|bucket|sliding|log] [DRYRUN] [RESERVE id [KEEP duration]]",
    ] {
        let md = COMMANDS_MD.replace(admit, drifted);
        let problems = check_all_synopses(&md, &docs);
        assert!(
            problems.iter().any(|p| p.starts_with("RL.ADMIT:")),
            "not caught: {drifted}"
        );
    }
    let md = COMMANDS_MD.replace("RL.INFO key\n", "\n");
    let problems = check_all_synopses(&md, &docs);
    assert!(problems
        .iter()
        .any(|p| p.starts_with("RL.INFO: no synopsis")));
}
