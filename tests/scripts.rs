//! Script mode (`clients/scripts/rl.lua`, `clients/SPEC.md` section 5) against the module: the
//! shared vectors on a server without the module, the script on a cluster, and a replica of a
//! server running it. The differential run against the module is in `scripts_differential.rs`.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;
mod script_mode;

use common::cluster::Cluster;
use common::{cmd, error_text, Connection, Server, Value};
use script_mode::{load_script, repo_file, script_call};

// ---------------------------------------------------------------------------------------------
// A small JSON reader for the vectors (the module crate has no JSON dependency).

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(i64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Obj(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) {
        self.ws();
        assert_eq!(
            self.s[self.i], b,
            "JSON: expected {} at {}",
            b as char, self.i
        );
        self.i += 1;
    }

    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out = String::new();
        loop {
            let b = self.s[self.i];
            self.i += 1;
            match b {
                b'"' => return out,
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    match e {
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        b'r' => out.push('\r'),
                        b'u' => {
                            let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                            self.i += 4;
                            let code = u32::from_str_radix(hex, 16).unwrap();
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        other => out.push(other as char),
                    }
                }
                _ => {
                    // Copy a UTF-8 sequence whole.
                    let start = self.i - 1;
                    let mut end = self.i;
                    while end < self.s.len() && (self.s[end] & 0xC0) == 0x80 {
                        end += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.s[start..end]).unwrap());
                    self.i = end;
                }
            }
        }
    }

    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut fields = Vec::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(fields);
                }
                loop {
                    let k = self.string();
                    self.eat(b':');
                    fields.push((k, self.value()));
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b'}' {
                        return Json::Obj(fields);
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(items);
                }
                loop {
                    items.push(self.value());
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b']' {
                        return Json::Arr(items);
                    }
                }
            }
            b'"' => Json::Str(self.string()),
            b't' => {
                self.i += 4;
                Json::Bool(true)
            }
            b'f' => {
                self.i += 5;
                Json::Bool(false)
            }
            b'n' => {
                self.i += 4;
                Json::Null
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i] == b'-' || self.s[self.i].is_ascii_digit())
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Num(text.parse().expect("JSON: integers only"))
            }
        }
    }
}

fn parse_json(text: &str) -> Json {
    Reader {
        s: text.as_bytes(),
        i: 0,
    }
    .value()
}

/// A RESP2 reply against an expected vector value (`$range`, `$any` included).
fn matches(got: &Value, want: &Json) -> bool {
    if let Some(Json::Arr(r)) = want.get("$range") {
        let (Json::Num(lo), Json::Num(hi)) = (&r[0], &r[1]) else {
            return false;
        };
        return matches!(got, Value::Int(n) if lo <= n && n <= hi);
    }
    if want.get("$any").is_some() {
        return !matches!(got, Value::Nil);
    }
    match (got, want) {
        (Value::Nil, Json::Null) => true,
        (Value::Int(n), Json::Num(m)) => n == m,
        (Value::BulkString(b), Json::Str(s)) => b == s.as_bytes(),
        (Value::SimpleString(a), Json::Str(s)) => a == s,
        (Value::Okay, Json::Str(s)) => s == "OK",
        (Value::Array(items), Json::Arr(wants)) => {
            items.len() == wants.len() && items.iter().zip(wants).all(|(g, w)| matches(g, w))
        }
        _ => false,
    }
}

fn with_prefix(args: &[Json], prefix: &str) -> Vec<String> {
    args.iter().map(|a| a.str().replace("$p", prefix)).collect()
}

/// Every vector with raw arguments, through the script on a server without the module.
#[test]
fn vectors_pass_in_script_mode() {
    let server = Server::start_plain(&[]);
    let mut c = server.conn();
    let sha = load_script(&mut c);
    let doc = parse_json(&repo_file("clients/vectors/commands.json"));
    let mut failures = Vec::new();
    let mut ran = 0;
    for (n, v) in doc.get("vectors").unwrap().arr().iter().enumerate() {
        let Some(args) = v.get("args") else { continue };
        if let Some(Json::Arr(modes)) = v.get("modes") {
            if !modes.iter().any(|m| m.str() == "script") {
                continue;
            }
        }
        let name = v.get("name").map_or("?", Json::str).to_string();
        let prefix = format!("sv{n}");
        for setup in v.get("setup").map_or(&[][..], Json::arr) {
            let _ = script_call(&mut c, &sha, &with_prefix(setup.arr(), &prefix));
        }
        let args = with_prefix(args.arr(), &prefix);
        let got = script_call(&mut c, &sha, &args);
        ran += 1;
        match (got, v.get("resp2"), v.get("error")) {
            (Ok(value), Some(want), _) if matches(&value, want) => {}
            (Err(e), _, Some(want)) if error_text(&e) == want.str().replace("$p", &prefix) => {}
            (got, want, error) => failures.push(format!(
                "{name}: {args:?}\n  got  {got:?}\n  want {want:?} {error:?}"
            )),
        }
    }
    assert!(ran >= 50, "only {ran} vectors ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// A cluster without the module: every key is declared, so hash-tagged keys run in one call.

#[test]
fn multi_runs_on_a_cluster_with_hash_tags() {
    let cluster = Cluster::start_plain();
    let mut conns: Vec<Connection> = (0..3).map(|i| cluster.conn(i)).collect();
    let sha = load_script(&mut conns[0]);
    for c in conns.iter_mut().skip(1) {
        assert_eq!(load_script(c), sha);
    }
    let tagged: Vec<String> =
        "RL.MULTI 2 {t:atlas}:user:17 {t:atlas} RULE user 2 1s BURST 20 RULE tenant 1000 1m"
            .split(' ')
            .map(String::from)
            .collect();
    let slot = common::cluster::keyslot(&mut conns[0], "{t:atlas}");
    let owner = cluster.owner(slot);
    let reply = script_call(&mut conns[owner], &sha, &tagged).expect("tagged RL.MULTI");
    let want = parse_json(r#"[1, null, 0, [["user", 19, 500], ["tenant", 999, 60]]]"#);
    assert!(matches(&reply, &want), "{reply:?}");
    let split: Vec<String> = "RL.MULTI 2 user:17 tenant:atlas RULE user 2 1s RULE tenant 1000 1m"
        .split(' ')
        .map(String::from)
        .collect();
    let e = script_call(&mut conns[0], &sha, &split).expect_err("CROSSSLOT");
    assert!(
        error_text(&e).starts_with("CROSSSLOT"),
        "{}",
        error_text(&e)
    );
}

// ---------------------------------------------------------------------------------------------
// Replication: the script's writes reach a replica as effects (its TIME is the primary's).

#[test]
fn a_replica_holds_what_the_script_wrote() {
    let primary = Server::start_plain(&[]);
    let replica = Server::start_plain(&[]);
    replica.replicate_from(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let sha = load_script(&mut p);
    let lines = [
        "RL.ADMIT rep:g 10 1h BURST 20 COST 3",
        "RL.ADMIT rep:g 10 1h BURST 20 COST 4 RESERVE job",
        "RL.SETTLE rep:g job 9",
        "RL.ADMIT rep:s 10 1h ALGO sliding COST 2",
        "RL.ADMIT rep:l 10 1h ALGO log COST 2",
        "RL.ACQUIRE rep:m 2 1h ID a",
        "RL.ACQUIRE rep:m 2 1h ID b",
        "RL.RELEASE rep:m a",
        "RL.ACQUIRE rep:gone 1 1h ID x",
        "RL.RELEASE rep:gone x",
    ];
    for line in lines {
        let args: Vec<String> = line.split(' ').map(String::from).collect();
        script_call(&mut p, &sha, &args).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    common::wait_for_sync(&primary, &replica);
    for key in ["rep:g", "rep:s", "rep:l", "rep:m", "rep:gone"] {
        let on = |c: &mut Connection| -> (Value, i64) {
            let all: Value = cmd("HGETALL").arg(key).query(c).unwrap();
            let at: i64 = cmd("PEXPIRETIME").arg(key).query(c).unwrap();
            (all, at)
        };
        assert_eq!(on(&mut p), on(&mut r), "{key}");
    }
    let on_replica = script_call(&mut r, &sha, &["RL.INFO".into(), "rep:m".into()]);
    assert!(
        matches!(on_replica, Err(ref e) if error_text(e).contains("NOSCRIPT")),
        "scripts are not replicated, only their effects: {on_replica:?}"
    );
}
