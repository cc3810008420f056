//! The async client: one method per command, over any of the `redis` crate's async connections.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Value};
use rl_engine::wire::command::{self, Acquire, Admit, Grant, Multi};
pub use rl_engine::wire::reply::{
    Decision, GrantReply, KeyInfo, Lease, MultiDecision, RuleOutcome, Settlement,
};
// The engine's CRC16, the one the gateway groups keyed checks by: one slot function in Rust.
use rl_engine::wire::{reply, slot as key_slot, Args, Reply};

use crate::allocate::{self, Allotment};
pub use crate::error::{error_of, Error};
use crate::mode::{self, Mode, ModeCell, ModeListener};
use rl_core::allocate::Terms;

/// A reply of the `redis` crate as the engine reads it.
pub fn reply_of(v: &Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(*n),
        Value::BulkString(b) => Reply::Bulk(b.clone()),
        Value::SimpleString(s) => Reply::Status(s.clone()),
        Value::Okay => Reply::Status("OK".into()),
        Value::Array(items) | Value::Set(items) => {
            Reply::Array(items.iter().map(reply_of).collect())
        }
        Value::Map(pairs) => Reply::Map(
            pairs
                .iter()
                .map(|(k, v)| (reply_of(k), reply_of(v)))
                .collect(),
        ),
        Value::Boolean(b) => Reply::Int(i64::from(*b)),
        Value::Double(d) => Reply::Bulk(d.to_string().into_bytes()),
        Value::VerbatimString { text, .. } => Reply::Bulk(text.clone().into_bytes()),
        Value::BigNumber(n) => Reply::Bulk(n.to_string().into_bytes()),
        Value::Attribute { data, .. } => reply_of(data),
        Value::ServerError(e) => Reply::Error(match (e.code(), e.details()) {
            (code, Some(detail)) => format!("{code} {detail}"),
            (code, None) => code.to_string(),
        }),
        Value::Push { data, .. } => Reply::Array(data.iter().map(reply_of).collect()),
    }
}

/// The command as the `redis` crate sends it.
pub fn cmd_of<A: AsRef<[u8]>>(args: impl IntoIterator<Item = A>) -> Cmd {
    let mut cmd = Cmd::new();
    for a in args {
        cmd.arg(a.as_ref());
    }
    cmd
}

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

    /// Calls `listener` with the mode in force once detected, and at its every change (a
    /// gateway reports it as `rl_gateway_store_mode`).
    pub fn on_mode(&self, listener: impl Fn(Mode) + Send + Sync + 'static) {
        let listener: ModeListener = Arc::new(listener);
        self.mode.subscribe(listener);
    }

    async fn detect(&self, slot: Option<u16>) -> Result<Mode, Error> {
        let probe = mode::probe();
        let reply = self.raw(&probe, slot).await.map_err(|e| error_of(&e))?;
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
    async fn call_at(&self, args: &Args, slot: Option<u16>) -> Result<Value, Error> {
        let mode = match self.mode.get() {
            Some(mode) => mode,
            None => self.detect(slot).await?,
        };
        let cmd = cmd_of(args.iter());
        let redis = |e: RedisError| error_of(&e);
        match mode {
            Mode::Module => match self.raw(&cmd, slot).await {
                // A failover or a restart onto a server without the module.
                Err(e) if is_unknown_command(&e) => match self.detect(slot).await? {
                    Mode::Script => self.script(args, slot).await,
                    Mode::Module => Err(redis(e)),
                },
                other => other.map_err(redis),
            },
            Mode::Script => self.script(args, slot).await,
        }
    }

    /// A command whose key is argument 1. Its slot is given explicitly, because in script mode
    /// the `COMMAND INFO` and the `SCRIPT LOAD` it may need must go where the key lives too.
    async fn call(&self, args: &Args) -> Result<Value, Error> {
        let slot = args.get(1).map(key_slot);
        self.call_at(args, slot).await
    }

    /// Any command the engine asks for: `RL.*` in the mode in force, to the primary of
    /// `key`'s slot; `WAIT` as it is, on the connection (and node) that carried the writes.
    pub async fn send(&self, args: &Args, key: &[u8]) -> Result<Value, Error> {
        let slot = key_slot(key);
        if args.get(0).is_some_and(|n| n.eq_ignore_ascii_case(b"WAIT")) {
            let mut conn = self.conn.clone();
            return conn
                .send_to_slot(&cmd_of(args.iter()), slot)
                .await
                .map_err(|e| error_of(&e));
        }
        self.call_at(args, Some(slot)).await
    }

    async fn script(&self, args: &Args, slot: Option<u16>) -> Result<Value, Error> {
        let call = cmd_of(args.encode(Mode::Script)?);
        let redis = |e: RedisError| error_of(&e);
        match self.raw(&call, slot).await {
            // The script cache is empty after a restart or a failover, and the server may have
            // the module by now.
            Err(e) if e.kind() == ErrorKind::NoScriptError => {
                if self.detect(slot).await? == Mode::Module {
                    return self.raw(&cmd_of(args.iter()), slot).await.map_err(redis);
                }
                self.raw(&mode::script_load(), slot).await.map_err(redis)?;
                self.raw(&call, slot).await.map_err(redis)
            }
            other => other.map_err(redis),
        }
    }

    pub async fn admit(&self, request: &Admit) -> Result<Decision, Error> {
        reply::decision(&reply_of(&self.call(&request.args()?).await?))
    }

    /// Refuses, before any round trip, keys that do not share one cluster slot (they would be
    /// `CROSSSLOT` on a cluster, so they are refused on a single server too: a policy that
    /// works only until the store is sharded is a trap).
    pub async fn multi(&self, request: &Multi) -> Result<MultiDecision, Error> {
        let slot = one_slot(request)?;
        let value = self.call_at(&request.args()?, Some(slot)).await?;
        reply::multi_decision(&reply_of(&value))
    }

    pub async fn grant(&self, request: &Grant) -> Result<GrantReply, Error> {
        reply::grant(&reply_of(&self.call(&request.args()?).await?))
    }

    pub async fn acquire(&self, request: &Acquire) -> Result<Lease, Error> {
        reply::lease(&reply_of(&self.call(&request.args()?).await?))
    }

    /// True when released; false when the holder did not hold a slot.
    pub async fn release(&self, key: &[u8], holder: &[u8]) -> Result<bool, Error> {
        let value = self.call(&command::release(key, holder)).await?;
        reply::held(&reply_of(&value), "RL.RELEASE")
    }

    /// True when renewed; false when not held (acquire again: the slot may be someone else's).
    pub async fn renew(&self, key: &[u8], holder: &[u8], lease: Duration) -> Result<bool, Error> {
        let value = self.call(&command::renew(key, holder, lease)?).await?;
        reply::held(&reply_of(&value), "RL.RENEW")
    }

    /// `None` when there was nothing to settle (unknown, refused or forgotten `id`).
    pub async fn settle(
        &self,
        key: &[u8],
        id: &[u8],
        actual: u64,
    ) -> Result<Option<Settlement>, Error> {
        self.settlement(&command::settle(key, id, actual)).await
    }

    /// `RL.SETTLE key id actual FORGET`: settles, then forgets the reservation, so `id`
    /// reserves (and is charged) anew; for an id that names a request, not an attempt.
    pub async fn settle_and_forget(
        &self,
        key: &[u8],
        id: &[u8],
        actual: u64,
    ) -> Result<Option<Settlement>, Error> {
        self.settlement(&command::settle_and_forget(key, id, actual))
            .await
    }

    async fn settlement(&self, cmd: &Args) -> Result<Option<Settlement>, Error> {
        reply::settlement(&reply_of(&self.call(cmd).await?))
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
        match conn
            .send_to_slot(&cmd, key_slot(key))
            .await
            .map_err(|e| error_of(&e))?
        {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            other => Err(Error::Unexpected(format!("WAIT replied {other:?}"))),
        }
    }

    /// `RL.ALLOCATE` on the home store of a global rule: reports `demand` (units per period the
    /// reporter saw asked, admitted and refused) and `held` (the allocation it enforces now) for
    /// `reporter` of `region`, and returns the region's allocation and its lease. A demand above
    /// 10^12 is reported as 10^12.
    pub async fn allocate(
        &self,
        key: &[u8],
        terms: &Terms,
        region: &str,
        reporter: &str,
        demand: u64,
        held: u64,
    ) -> Result<Allotment, Error> {
        let args = allocate::args(key, terms, region, reporter, demand, held);
        allocate::allotment(&reply_of(&self.call(&args).await?))
    }

    /// `None` for a key that does not exist.
    pub async fn info(&self, key: &[u8]) -> Result<Option<KeyInfo>, Error> {
        reply::key_info(&reply_of(&self.call(&command::info(key)).await?))
    }
}

fn is_unknown_command(e: &RedisError) -> bool {
    e.kind() == ErrorKind::ResponseError
        && e.detail().is_some_and(|d| d.starts_with("unknown command"))
}

/// The one slot every key of `request` hashes to (CRC16 with the hash-tag rule).
pub fn one_slot(request: &Multi) -> Result<u16, Error> {
    let mut slots = request.keys().map(key_slot);
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
    use rl_engine::wire::command::MultiRule;

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
        assert_eq!(one_slot(&tagged).unwrap(), key_slot(b"t:atlas"));
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
