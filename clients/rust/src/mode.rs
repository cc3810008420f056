//! Which implementation of the commands the store runs (`clients/SPEC.md` section 5): the
//! module's native commands, or the same commands as one Lua script on plain Redis types where
//! the module cannot be loaded. The client finds out by itself, so an application runs on
//! either server unchanged.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use redis::{Arg, Cmd, Value};

use crate::metrics::{Event, Metrics};
use crate::reply::Error;

/// The script the client ships, loaded with `SCRIPT LOAD` when the server lacks it.
pub const SCRIPT: &str = include_str!("../../scripts/rl.lua");

/// Its SHA1, from the text itself, so it cannot drift from a hard-coded copy.
static SHA: LazyLock<String> = LazyLock::new(|| redis::Script::new(SCRIPT).get_hash().to_string());

/// Where the tracing event that names the mode goes, once per change.
pub const MODE_LOG: &str = "redis_rl_client::mode";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// The module is loaded: native commands.
    Module,
    /// It is not: `EVALSHA` of [`SCRIPT`].
    Script,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Module, Mode::Script];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Module => "module",
            Mode::Script => "script",
        }
    }

    fn code(self) -> u8 {
        match self {
            Mode::Module => 1,
            Mode::Script => 2,
        }
    }

    fn from_code(code: u8) -> Option<Mode> {
        match code {
            1 => Some(Mode::Module),
            2 => Some(Mode::Script),
            _ => None,
        }
    }
}

/// The mode one client and its clones share: unknown until the first call detects it.
#[derive(Default)]
pub(crate) struct ModeCell {
    mode: AtomicU8,
    // Weak, so a gateway that is dropped does not stay alive through the client it used.
    observers: Mutex<Vec<Weak<Metrics>>>,
}

impl ModeCell {
    pub(crate) fn get(&self) -> Option<Mode> {
        Mode::from_code(self.mode.load(Ordering::Acquire))
    }

    /// Records the detected mode; logs and reports it only when it changed.
    pub(crate) fn set(&self, mode: Mode) {
        if self.mode.swap(mode.code(), Ordering::AcqRel) == mode.code() {
            return;
        }
        tracing::info!(
            target: MODE_LOG,
            mode = mode.name(),
            "redis-rl runs in {} mode",
            mode.name()
        );
        for metrics in self.observers() {
            metrics.record(Event::StoreMode(mode));
        }
    }

    /// `metrics` hears of every change from now on, and of the mode in force already.
    pub(crate) fn observe(&self, metrics: &Arc<Metrics>) {
        self.lock().push(Arc::downgrade(metrics));
        if let Some(mode) = self.get() {
            metrics.record(Event::StoreMode(mode));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Metrics>>> {
        self.observers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn observers(&self) -> Vec<Arc<Metrics>> {
        let mut list = self.lock();
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(Weak::upgrade).collect()
    }
}

/// `COMMAND INFO RL.ADMIT`: one nil entry when the module is not loaded.
pub(crate) fn probe() -> Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("RL.ADMIT");
    cmd
}

pub(crate) fn mode_of_probe(reply: &Value) -> Result<Mode, Error> {
    match reply {
        Value::Array(entries) => match entries.first() {
            Some(Value::Nil) => Ok(Mode::Script),
            Some(_) => Ok(Mode::Module),
            None => Err(Error::UnexpectedReply(
                "COMMAND INFO replied nothing".into(),
            )),
        },
        other => Err(Error::UnexpectedReply(format!(
            "COMMAND INFO replied {other:?}"
        ))),
    }
}

pub(crate) fn script_load() -> Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(SCRIPT);
    cmd
}

/// The script call standing for the native command `cmd`: `EVALSHA sha M k1..kM NAME args...`,
/// the keys being argument 1, or for `RL.MULTI` the `numkeys` arguments after `numkeys`.
pub fn script_call(cmd: &Cmd) -> Result<Cmd, Error> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            Arg::Simple(bytes) => Some(bytes),
            Arg::Cursor => None,
        })
        .collect();
    let Some((name, rest)) = args.split_first() else {
        return Err(Error::InvalidRequest("an empty command".into()));
    };
    let keys: &[&[u8]] = if name.eq_ignore_ascii_case(b"RL.MULTI") {
        let numkeys = rest
            .first()
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| Error::InvalidRequest("RL.MULTI without numkeys".into()))?;
        rest.get(1..numkeys.saturating_add(1))
            .ok_or_else(|| Error::InvalidRequest("RL.MULTI with fewer keys than numkeys".into()))?
    } else {
        rest.get(..1).unwrap_or_default()
    };
    let mut call = redis::cmd("EVALSHA");
    call.arg(SHA.as_str()).arg(keys.len());
    for key in keys {
        call.arg(*key);
    }
    for arg in &args {
        call.arg(*arg);
    }
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                Arg::Cursor => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_script_call_declares_the_keys_and_keeps_the_arguments() {
        let mut admit = redis::cmd("RL.ADMIT");
        admit.arg("user:17").arg(2).arg("1s");
        assert_eq!(
            words(&script_call(&admit).unwrap()),
            ["EVALSHA", &SHA, "1", "user:17", "RL.ADMIT", "user:17", "2", "1s"]
        );
        let mut multi = redis::cmd("RL.MULTI");
        multi
            .arg(2)
            .arg("{t}:a")
            .arg("{t}:b")
            .arg("u")
            .arg(1)
            .arg("1s");
        assert_eq!(
            words(&script_call(&multi).unwrap()),
            [
                "EVALSHA", &SHA, "2", "{t}:a", "{t}:b", "RL.MULTI", "2", "{t}:a", "{t}:b", "u",
                "1", "1s"
            ]
        );
        let mut short = redis::cmd("RL.MULTI");
        short.arg(3).arg("a");
        assert!(matches!(script_call(&short), Err(Error::InvalidRequest(_))));
    }

    #[test]
    fn the_probe_reply_names_the_mode() {
        assert_eq!(
            mode_of_probe(&Value::Array(vec![Value::Nil])).unwrap(),
            Mode::Script
        );
        assert_eq!(
            mode_of_probe(&Value::Array(vec![Value::Array(vec![])])).unwrap(),
            Mode::Module
        );
        assert!(mode_of_probe(&Value::Int(1)).is_err());
    }
}
