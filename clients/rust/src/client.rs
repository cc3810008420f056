//! The async client: one method per command, over any of the `redis` crate's async connections.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{get_slot, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Value};

use crate::command::{self, Acquire, Admit, Grant, Multi};
use crate::metrics::Metrics;
use crate::mode::{self, Mode, ModeCell};
use crate::reply::{self, Decision, Error, GrantReply, KeyInfo, Lease, MultiDecision, Settlement};

/// A connection `Rl` can send on. Single-key commands go through `ConnectionLike` (a cluster
/// connection routes them by their key, argument 1); only `RL.MULTI`, whose argument 1 is
/// `numkeys`, and `WAIT`, which has no key, need to say where they go, and only a cluster
/// connection cares.
pub trait RlConnection: ConnectionLike + Clone + Send + Sync {
    /// Sends a command to the primary serving `slot`.
    fn send_to_slot<'a>(&'a mut self, cmd: &'a Cmd, slot: u16) -> RedisFuture<'a, Value> {
        let _ = slot;
        self.req_packed_command(cmd)
    }
}

impl RlConnection for MultiplexedConnection {}
impl RlConnection for ConnectionManager {}

impl RlConnection for ClusterConnection {
    fn send_to_slot<'a>(&'a mut self, cmd: &'a Cmd, slot: u16) -> RedisFuture<'a, Value> {
        let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            slot,
            SlotAddr::Master,
        )));
        Box::pin(self.route_command(cmd, to))
    }
}

/// The redis-rl client. Cloning is cheap when the connection's is (all three of the crate's
/// async connections share one socket or pool among their clones); clones share the mode.
#[derive(Clone)]
pub struct Rl<C> {
    conn: C,
    mode: Arc<ModeCell>,
}

impl<C: RlConnection> Rl<C> {
    /// The mode (module or script) is detected by the first call, and again whenever the
    /// server's answers say it changed (a restart or a failover onto another server).
    pub fn new(conn: C) -> Rl<C> {
        Rl {
            conn,
            mode: Arc::default(),
        }
    }

    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The mode in force; `None` before the first call has detected it.
    pub fn mode(&self) -> Option<Mode> {
        self.mode.get()
    }

    /// Asks the server whether it has the module (`COMMAND INFO RL.ADMIT`), and records it.
    pub async fn detect_mode(&self) -> Result<Mode, Error> {
        self.detect(None).await
    }

    /// Reports the mode in force and its every change to `metrics` (`rl_gateway_store_mode`).
    pub fn report_mode_to(&self, metrics: &Arc<Metrics>) {
        self.mode.observe(metrics);
    }

    async fn detect(&self, slot: Option<u16>) -> Result<Mode, Error> {
        let probe = mode::probe();
        let reply = self.raw(&probe, slot).await?;
        let mode = mode::mode_of_probe(&reply)?;
        self.mode.set(mode);
        Ok(mode)
    }

    /// A server's error is always `Err` here: a multiplexed connection hands it back as a
    /// value, and a script call needs to see `NOSCRIPT` and `unknown command` whatever the
    /// connection.
    async fn raw(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value, RedisError> {
        let mut conn = self.conn.clone();
        let reply = match slot {
            Some(slot) => conn.send_to_slot(cmd, slot).await,
            None => conn.req_packed_command(cmd).await,
        };
        match reply {
            Ok(Value::ServerError(e)) => Err(e.into()),
            other => other,
        }
    }

    /// Sends the native command `cmd` in the mode in force, to the primary serving `slot` (on a
    /// cluster; elsewhere there is one server).
    async fn call_at(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value, Error> {
        let mode = match self.mode.get() {
            Some(mode) => mode,
            None => self.detect(slot).await?,
        };
        match mode {
            Mode::Module => match self.raw(cmd, slot).await {
                // A failover or a restart onto a server without the module.
                Err(e) if is_unknown_command(&e) => match self.detect(slot).await? {
                    Mode::Script => self.script(cmd, slot).await,
                    Mode::Module => Err(e.into()),
                },
                other => Ok(other?),
            },
            Mode::Script => self.script(cmd, slot).await,
        }
    }

    /// A command whose key is argument 1. Its slot is given explicitly, because in script mode
    /// the `COMMAND INFO` and the `SCRIPT LOAD` it may need must go where the key lives too.
    async fn call(&self, cmd: &Cmd) -> Result<Value, Error> {
        let slot = match cmd.args_iter().nth(1) {
            Some(redis::Arg::Simple(key)) => Some(get_slot(key)),
            _ => None,
        };
        self.call_at(cmd, slot).await
    }

    async fn script(&self, cmd: &Cmd, slot: Option<u16>) -> Result<Value, Error> {
        let call = mode::script_call(cmd)?;
        match self.raw(&call, slot).await {
            // The script cache is empty after a restart or a failover, and the server may have
            // the module by now.
            Err(e) if e.kind() == ErrorKind::NoScriptError => {
                if self.detect(slot).await? == Mode::Module {
                    return Ok(self.raw(cmd, slot).await?);
                }
                self.raw(&mode::script_load(), slot).await?;
                Ok(self.raw(&call, slot).await?)
            }
            other => Ok(other?),
        }
    }

    pub async fn admit(&self, request: &Admit) -> Result<Decision, Error> {
        reply::decision(&self.call(&request.to_cmd()?).await?)
    }

    /// Refuses, before any round trip, keys that do not share one cluster slot (they would be
    /// `CROSSSLOT` on a cluster, so they are refused on a single server too: a policy that
    /// works only until the store is sharded is a trap).
    pub async fn multi(&self, request: &Multi) -> Result<MultiDecision, Error> {
        let slot = one_slot(request)?;
        let value = self.call_at(&request.to_cmd()?, Some(slot)).await?;
        reply::multi_decision(&value)
    }

    pub async fn grant(&self, request: &Grant) -> Result<GrantReply, Error> {
        reply::grant(&self.call(&request.to_cmd()?).await?)
    }

    pub async fn acquire(&self, request: &Acquire) -> Result<Lease, Error> {
        reply::lease(&self.call(&request.to_cmd()?).await?)
    }

    /// True when released; false when the holder did not hold a slot.
    pub async fn release(&self, key: &[u8], holder: &[u8]) -> Result<bool, Error> {
        let value = self.call(&command::release(key, holder)).await?;
        reply::held(&value, "RL.RELEASE")
    }

    /// True when renewed; false when not held (acquire again: the slot may be someone else's).
    pub async fn renew(&self, key: &[u8], holder: &[u8], lease: Duration) -> Result<bool, Error> {
        let value = self.call(&command::renew(key, holder, lease)?).await?;
        reply::held(&value, "RL.RENEW")
    }

    /// `None` when there was nothing to settle (unknown, refused or forgotten `id`).
    pub async fn settle(
        &self,
        key: &[u8],
        id: &[u8],
        actual: u64,
    ) -> Result<Option<Settlement>, Error> {
        reply::settlement(&self.call(&command::settle(key, id, actual)).await?)
    }

    /// `WAIT replicas timeout` on the connection that carried this client's writes to `key`
    /// (in a cluster, to the primary serving its slot): how many replicas have acknowledged
    /// them. The server blocks this connection meanwhile, so other calls sharing it wait too.
    pub async fn wait_replicas(
        &self,
        key: &[u8],
        replicas: u64,
        timeout: Duration,
    ) -> Result<u64, Error> {
        // `WAIT n 0` blocks for ever: the shortest wait the server takes is 1 ms.
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(ms);
        let mut conn = self.conn.clone();
        match conn.send_to_slot(&cmd, get_slot(key)).await? {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            other => Err(Error::UnexpectedReply(format!("WAIT replied {other:?}"))),
        }
    }

    /// `None` for a key that does not exist.
    pub async fn info(&self, key: &[u8]) -> Result<Option<KeyInfo>, Error> {
        reply::key_info(&self.call(&command::info(key)).await?)
    }
}

fn is_unknown_command(e: &RedisError) -> bool {
    e.kind() == ErrorKind::ResponseError
        && e.detail().is_some_and(|d| d.starts_with("unknown command"))
}

/// The one slot every key of `request` hashes to (CRC16 with the hash-tag rule).
pub fn one_slot(request: &Multi) -> Result<u16, Error> {
    let mut slots = request.keys().map(get_slot);
    let Some(first) = slots.next() else {
        return Err(Error::InvalidRequest(
            "RL.MULTI needs at least one rule".into(),
        ));
    };
    if let Some(other) = slots.find(|s| *s != first) {
        return Err(Error::InvalidRequest(format!(
            "RL.MULTI keys must share one cluster slot (use a hash tag such as {{t:atlas}}): \
             slots {first} and {other}"
        )));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::MultiRule;

    fn multi(keys: &[&str]) -> Multi {
        Multi::new(
            keys.iter()
                .map(|k| MultiRule::new("r", *k, 1, Duration::from_secs(1)))
                .collect(),
        )
    }

    #[test]
    fn one_slot_follows_the_hash_tag_rule() {
        let tagged = multi(&["{t:atlas}:user:17", "{t:atlas}", "{t:atlas}:route:catalog"]);
        assert_eq!(one_slot(&tagged).unwrap(), get_slot(b"t:atlas"));
        assert!(matches!(
            one_slot(&multi(&["user:17", "tenant:atlas"])),
            Err(Error::InvalidRequest(ref m)) if m.contains("one cluster slot")
        ));
        // An empty tag is no tag: the whole key is hashed.
        assert!(one_slot(&multi(&["{}a", "{}b"])).is_err());
        assert!(one_slot(&multi(&[])).is_err());
        assert!(one_slot(&multi(&["solo"])).is_ok());
    }
}
