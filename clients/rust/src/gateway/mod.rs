//! The gateway over redis-rs: a driver of the engine (`redis-rl-engine`) that does only the
//! I/O. It hands each request to the engine, sends the store calls the engine asks for under
//! the engine's deadline, feeds the replies back, sends the background calls after answering,
//! writes the decision records to `tracing`, and keeps what an admitted request holds until
//! its response ends ([`Leases`]). The faces over it are the tower layers ([`layer`],
//! [`concurrency`]) and `northstar`.

pub mod concurrency;
pub mod connect;
mod deadlines;
pub mod layer;
mod leases;
pub mod published;
pub mod retry;
mod tasks;

pub use leases::Leases;
pub use rl_engine::engine::{Check, CheckOutcome, CheckSource};
pub use rl_engine::engine::{ACTUAL_COST, IDEMPOTENCY_KEY, RETRY_AFTER};
pub use rl_engine::{Caller, Request, Verdict, VerdictKind};

use deadlines::Deadlines;
use tasks::Tasks;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use rl_engine::metrics::{Event, Metrics};
use rl_engine::{
    Answer, Call, Engine, Headers, LogLevel, LogRecord, Options, Pending, Policy, PolicyError,
    Reply, Step,
};
use tokio::sync::watch;

use crate::client::{reply_of, Error, Rl, RlConnection};

/// The `tracing` target of decision records.
pub const DECISION_LOG: &str = "redis_rl_client::decision";

/// A release, a refund or a settlement that cannot be sent in this long is abandoned: a lease
/// expires on its own, a reservation stays at its estimate.
const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(1);

/// An `http` header map as the engine reads headers: what a [`Request`]'s `headers` point to.
pub struct HttpHeaders<'a>(pub &'a HeaderMap);

impl Headers for HttpHeaders<'_> {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.0.get(name).map(|v| v.as_bytes())
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        for v in self.0.get_all(name) {
            f(v.as_bytes());
        }
    }
}

/// The engine's clock: Unix microseconds at the process's first reading, moved on by tokio's
/// monotonic clock (so a wall-clock step never moves it, and tokio's paused time in tests
/// does).
static BASE: LazyLock<(tokio::time::Instant, u64)> = LazyLock::new(|| {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (
        tokio::time::Instant::now(),
        u64::try_from(wall.as_micros()).unwrap_or(0),
    )
});

pub fn now() -> rl_engine::Instant {
    let (start, wall) = *BASE;
    let since = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    rl_engine::Instant::from_micros(wall.saturating_add(since))
}

fn tokio_instant(at: rl_engine::Instant) -> tokio::time::Instant {
    let (start, wall) = *BASE;
    start + Duration::from_micros(at.as_micros().saturating_sub(wall))
}

/// Reads a policy file: the snapshot to start with, and the file reloads re-read.
pub struct PolicyStore {
    file: PathBuf,
    policy: Policy,
}

fn read_policy(file: &Path) -> Result<Policy, PolicyError> {
    let text = std::fs::read_to_string(file).map_err(|e| PolicyError::Io {
        source: file.display().to_string(),
        message: e.to_string(),
    })?;
    let policy = Policy::from_json(&text)?;
    // Legal but worth an operator's look (an override that had already expired).
    for warning in &policy.warnings {
        tracing::warn!(policy = %file.display(), version = policy.version, "{warning}");
    }
    Ok(policy)
}

impl PolicyStore {
    pub fn load_file(file: impl AsRef<Path>) -> Result<PolicyStore, PolicyError> {
        let file = file.as_ref().to_path_buf();
        let policy = read_policy(&file)?;
        Ok(PolicyStore { file, policy })
    }

    /// A snapshot that came from elsewhere (a store the driver follows): the driver puts the
    /// next ones in force with `Gateway::engine().reload`, and `Gateway::reload`, which re-reads
    /// a file, has none to read.
    pub fn snapshot(policy: Policy) -> PolicyStore {
        PolicyStore {
            file: PathBuf::new(),
            policy,
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

/// The gateway: one per process and store, shared by every request.
pub struct Gateway<C: RlConnection + 'static> {
    rl: Rl<C>,
    engine: Engine,
    file: PathBuf,
    options: Options,
    // Connections of their own for routes with a `durable` rule, taken in turn: the server
    // blocks a connection while its WAIT waits, and the other routes must not queue behind it.
    durable: Vec<Rl<C>>,
    next_durable: AtomicUsize,
    // What its requests send in the background, for `drain`.
    tasks: Tasks,
    // The store calls' deadlines, swept by one task per CPU.
    deadlines: Deadlines,
    // Turned true by `cut`.
    cut: watch::Sender<bool>,
}

/// Reports a client's mode to the metrics, for as long as the metrics live.
fn report_mode<C: RlConnection>(rl: &Rl<C>, metrics: &Arc<Metrics>) {
    let metrics = Arc::downgrade(metrics);
    rl.on_mode(move |mode| {
        if let Some(metrics) = metrics.upgrade() {
            metrics.record(Event::StoreMode(mode));
        }
    });
}

impl<C: RlConnection + 'static> Gateway<C> {
    /// The negative cache and the breaker are sized from the policy in force now; a reload
    /// changes rules and routes, not those.
    pub fn new(rl: Rl<C>, policies: PolicyStore, metrics: Arc<Metrics>) -> Gateway<C> {
        report_mode(&rl, &metrics);
        let options = Options {
            seed: fastrand::u64(..),
            ..Options::default()
        };
        Gateway {
            engine: Engine::new(policies.policy, metrics, options),
            file: policies.file,
            rl,
            options,
            durable: Vec::new(),
            next_durable: AtomicUsize::new(0),
            tasks: Tasks::default(),
            deadlines: Deadlines::default(),
            cut: watch::Sender::new(false),
        }
    }

    /// Options are the engine's: set before the first request, the engine is built again.
    fn with_options(mut self, options: Options) -> Gateway<C> {
        let policy = (*self.engine.policy()).clone();
        self.engine = Engine::new(policy, Arc::clone(self.engine.metrics()), options);
        self.options = options;
        self
    }

    /// Records the decisions of this share of admissions (0 to 1; 0.1 % by default) as
    /// `tracing` events of target [`DECISION_LOG`]. Every other decision (refusals, postures,
    /// unmatched, rejected and shed requests) is recorded every time, within the bound of
    /// [`Gateway::with_decision_records_per_second`].
    pub fn with_decision_log_sample(self, share: f64) -> Gateway<C> {
        let options = Options {
            log_sample: share,
            ..self.options
        };
        self.with_options(options)
    }

    /// Writes at most this many decision records a second (100 by default); the rest are
    /// counted in `rl_gateway_decision_records_dropped_total`.
    pub fn with_decision_records_per_second(self, records: u64) -> Gateway<C> {
        let options = Options {
            log_per_second: records,
            ..self.options
        };
        self.with_options(options)
    }

    /// The store is a Redis Cluster: keyed checks are decided per hash slot of their keys.
    pub fn with_cluster(self) -> Gateway<C> {
        let options = Options {
            cluster: true,
            ..self.options
        };
        self.with_options(options)
    }

    /// Also sends the older `X-RateLimit-Limit/Remaining/Reset`, for the most constraining
    /// rule, to callers that only read those.
    pub fn with_legacy_headers(self) -> Gateway<C> {
        let options = Options {
            legacy_headers: true,
            ..self.options
        };
        self.with_options(options)
    }

    /// Sends the store calls of routes with a `durable` rule, and their `WAIT`, on these
    /// connections (each request on one, in turn) instead of the gateway's own. The server
    /// blocks a connection while its `WAIT` waits for a replica, so without them every request
    /// sharing the gateway's connection waits behind a durable one whenever replicas lag.
    pub fn with_durable_connections(mut self, connections: Vec<Rl<C>>) -> Gateway<C> {
        for rl in &connections {
            report_mode(rl, self.engine.metrics());
        }
        self.durable = connections;
        self
    }

    pub fn metrics(&self) -> &Metrics {
        self.engine.metrics()
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.engine.policy()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Re-reads the policy file (refused when its version is not higher).
    pub fn reload(&self) -> Result<Arc<Policy>, PolicyError> {
        self.engine.reload(read_policy(&self.file)?)
    }

    /// Answers every admitted request still waiting for its response 503 (the engine's
    /// [`Engine::drained`]: reason `drain`) and ends what each holds; a request decided after
    /// is answered the same. For a server that stops at the end of its drain: no request is
    /// cut without an answer, and [`Gateway::drain`] then waits for the releases. A response
    /// already under way (its body being sent) cannot be answered again: the server closing
    /// its connection ends its leases.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Resolves once [`Gateway::cut`] has been called.
    pub(crate) async fn cut_off(&self) {
        let mut cut = self.cut.subscribe();
        // The sender lives as long as `self`.
        let _ = cut.wait_for(|cut| *cut).await;
    }

    /// The answer to an admitted request cut short: the engine's 503, its record written, and
    /// what the request held ended in the background (`leases` dropped).
    pub(crate) fn drained(&self, admitted: &Verdict, leases: Leases<C>) -> Verdict {
        let verdict = self.engine.drained(admitted, now());
        log(&verdict.log);
        drop(leases);
        verdict
    }

    /// Waits for the background calls in flight (releases, refunds, settlements): before the
    /// process exits, so that nothing its requests held is left to expire on its own. Each
    /// call gives up after a second without an answer.
    pub async fn drain(&self) {
        self.tasks.idle().await;
    }

    /// Decides one request. The leases must live until the response has been sent.
    pub async fn decide(&self, request: &Request<'_>) -> (Verdict, Leases<C>) {
        let started = now();
        let (pending, step) = self.engine.begin(request, started);
        self.drive(pending, step, started).await
    }

    /// Decides keyed checks (what a face that is not HTTP translates its requests into: the
    /// Envoy rate limit service's descriptors) under the route named `route`: see
    /// [`rl_engine::Engine::check`]. The verdict carries each check's outcome.
    pub async fn check(&self, route: &str, checks: Vec<Check>) -> (Verdict, Leases<C>) {
        let started = now();
        let (pending, step) = self.engine.check(route, checks, started);
        self.drive(pending, step, started).await
    }

    /// Runs a request's steps: the calls under the engine's deadline, the waits, until the
    /// verdict.
    async fn drive(
        &self,
        pending: Pending,
        mut step: Step,
        started: rl_engine::Instant,
    ) -> (Verdict, Leases<C>) {
        let rl = self.connection_for(&pending);
        // Dropped with the future (the caller went away), it gives back what was taken.
        let mut pending = Abandon {
            pending: Some(pending),
            rl,
            tasks: &self.tasks,
        };
        loop {
            match step {
                Step::Done(verdict) => {
                    background(rl, &self.tasks, verdict.background.clone());
                    log(&verdict.log);
                    let lease = match pending.pending.take() {
                        Some(mut p) => p.holdings(),
                        None => rl_engine::Holdings::default(),
                    };
                    let leases = Leases::new(rl.clone(), self.tasks.clone(), lease, started);
                    return (verdict, leases);
                }
                Step::Wait { until } => {
                    tokio::time::sleep_until(tokio_instant(until)).await;
                    step = pending.resume(&self.engine, Vec::new());
                }
                Step::Calls { calls, deadline } => {
                    let answers =
                        send_all(&self.engine, &self.deadlines, rl, &calls, deadline).await;
                    step = pending.resume(&self.engine, answers);
                }
            }
        }
    }

    /// The connection a request's store calls go on: one of the durable connections for a
    /// route with a durable rule, when there are any.
    fn connection_for(&self, pending: &Pending) -> &Rl<C> {
        if self.durable.is_empty() || !pending.is_durable() {
            return &self.rl;
        }
        let turn = self.next_durable.fetch_add(1, Ordering::Relaxed);
        self.durable
            .get(turn % self.durable.len())
            .unwrap_or(&self.rl)
    }
}

/// A request being decided; dropped before its verdict, it releases what it holds.
struct Abandon<'a, C: RlConnection + 'static> {
    pending: Option<Pending>,
    rl: &'a Rl<C>,
    tasks: &'a Tasks,
}

impl<C: RlConnection + 'static> Abandon<'_, C> {
    fn resume(&mut self, engine: &Engine, answers: Vec<Answer>) -> Step {
        match self.pending.as_mut() {
            Some(p) => engine.resume(p, answers, now()),
            None => Step::Done(Verdict::pass(0)),
        }
    }
}

impl<C: RlConnection + 'static> Drop for Abandon<'_, C> {
    fn drop(&mut self) {
        if let Some(mut pending) = self.pending.take() {
            background(self.rl, self.tasks, pending.abandon());
        }
    }
}

/// Sends the calls in order until `deadline`; those not answered by then are timeouts (the
/// engine counts a missing answer as one), unless the deadline's timer itself fired late: how
/// late, against the time the calls had, is the engine's to judge ([`Engine::missed`]): a
/// runtime too busy to wait (its workers saturated by other tasks) is the gateway's overload,
/// not the store's failure.
async fn send_all<C: RlConnection>(
    engine: &Engine,
    deadlines: &Deadlines,
    rl: &Rl<C>,
    calls: &[Call],
    deadline: rl_engine::Instant,
) -> Vec<Answer> {
    let mut answers = Vec::with_capacity(calls.len());
    let sending = async {
        for call in calls {
            answers.push(answer_of(rl.send(&call.args, &call.key).await));
        }
    };
    let at = tokio_instant(deadline);
    let window = at.saturating_duration_since(tokio::time::Instant::now());
    let timed_out = tokio::select! {
        biased;
        () = sending => false,
        () = deadlines.at(at) => true,
    };
    if timed_out {
        // The timer's own lateness: it began after the calls were sent.
        let late = tokio::time::Instant::now().saturating_duration_since(at);
        if let Answer::Overloaded = engine.missed(window, late) {
            answers.push(Answer::Overloaded);
        }
    }
    answers
}

fn answer_of(result: Result<redis::Value, Error>) -> Answer {
    match result {
        Ok(value) => Answer::Reply(reply_of(&value)),
        Err(Error::Refused(text)) => Answer::Reply(Reply::Error(text)),
        Err(Error::Unavailable(text)) => Answer::Failed(text),
        // What this client could not read or send is a refusal in the engine's terms.
        Err(e @ (Error::Unexpected(_) | Error::InvalidRequest(_))) => {
            Answer::Reply(Reply::Error(format!("ERR {e}")))
        }
    }
}

/// Sends calls whose replies do not matter (releases, refunds), after the answer, on a task of
/// their own, counted in `tasks`.
pub(crate) fn background<C: RlConnection + 'static>(rl: &Rl<C>, tasks: &Tasks, calls: Vec<Call>) {
    if calls.is_empty() {
        return;
    }
    let rl = rl.clone();
    tasks.spawn(async move { send_each(&rl, calls).await });
}

pub(crate) async fn send_each<C: RlConnection>(rl: &Rl<C>, calls: Vec<Call>) {
    for call in calls {
        let sent = tokio::time::timeout(BACKGROUND_TIMEOUT, rl.send(&call.args, &call.key)).await;
        // Not sent: a slot held until its lease ends, a reservation left at its estimate. Said
        // once, with the command's name only (its key is made of identities).
        let failure = match sent {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no reply within {BACKGROUND_TIMEOUT:?}"),
        };
        let command = call.args.get(0).map(String::from_utf8_lossy);
        tracing::warn!(
            command = command.as_deref().unwrap_or_default(),
            "a background store call failed: {failure}"
        );
    }
}

/// Decision records as `tracing` events; never a key or an identity.
fn log(records: &[LogRecord]) {
    for r in records {
        let (reason, route, rule, plan, policy_version, outcome, decision) = (
            r.reason.as_str(),
            r.route.as_str(),
            r.rule.as_str(),
            r.plan.as_str(),
            r.policy_version,
            r.outcome,
            r.decision.as_str(),
        );
        match r.level {
            LogLevel::Warn => tracing::warn!(
                target: DECISION_LOG,
                reason, route, rule, plan, policy_version, outcome, decision,
                "{}", r.message
            ),
            LogLevel::Info => tracing::info!(
                target: DECISION_LOG,
                reason, route, rule, plan, policy_version, outcome, decision,
                "{}", r.message
            ),
        }
    }
}
