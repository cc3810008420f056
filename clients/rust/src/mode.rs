//! Which implementation of the commands the store runs (`clients/SPEC.md` section 5): the
//! module's native commands, or the same commands as one Lua script on plain Redis types where
//! the module cannot be loaded. The client finds out by itself, so an application runs on
//! either server unchanged, and tells whoever subscribed when the mode changes.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redis::{Cmd, Value};
pub use rl_engine::wire::{script_sha, Mode, SCRIPT};

use crate::error::Error;

/// Where the tracing event that names the mode goes, once per change.
pub const MODE_LOG: &str = "redis_rl_client::mode";

/// Called with the mode in force when it is detected and at every change.
pub type ModeListener = Arc<dyn Fn(Mode) + Send + Sync>;

fn code(mode: Mode) -> u8 {
    match mode {
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

/// The mode one client and its clones share: unknown until the first call detects it.
#[derive(Default)]
pub(crate) struct ModeCell {
    mode: AtomicU8,
    listeners: Mutex<Vec<ModeListener>>,
}

impl ModeCell {
    pub(crate) fn get(&self) -> Option<Mode> {
        from_code(self.mode.load(Ordering::Acquire))
    }

    /// Records the detected mode; logs it and tells the listeners only when it changed.
    pub(crate) fn set(&self, mode: Mode) {
        if self.mode.swap(code(mode), Ordering::AcqRel) == code(mode) {
            return;
        }
        tracing::info!(
            target: MODE_LOG,
            mode = mode.name(),
            "redis-rl runs in {} mode",
            mode.name()
        );
        let listeners: Vec<ModeListener> = self.lock().clone();
        for listener in listeners {
            listener(mode);
        }
    }

    /// `listener` hears of every change from now on, and of the mode in force already.
    pub(crate) fn subscribe(&self, listener: ModeListener) {
        if let Some(mode) = self.get() {
            listener(mode);
        }
        self.lock().push(listener);
    }

    fn lock(&self) -> MutexGuard<'_, Vec<ModeListener>> {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner())
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
            None => Err(Error::Unexpected("COMMAND INFO replied nothing".into())),
        },
        other => Err(Error::Unexpected(format!("COMMAND INFO replied {other:?}"))),
    }
}

pub(crate) fn script_load() -> Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(SCRIPT);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn listeners_hear_each_change_once() {
        let cell = ModeCell::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = Arc::clone(&heard);
        cell.subscribe(Arc::new(move |m| h.lock().unwrap().push(m)));
        cell.set(Mode::Script);
        cell.set(Mode::Script);
        cell.set(Mode::Module);
        assert_eq!(*heard.lock().unwrap(), [Mode::Script, Mode::Module]);
        let late = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&late);
        cell.subscribe(Arc::new(move |m| l.lock().unwrap().push(m)));
        assert_eq!(*late.lock().unwrap(), [Mode::Module]);
    }
}
