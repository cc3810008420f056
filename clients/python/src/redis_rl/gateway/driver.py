"""The gateway over redis-py's asyncio clients: a driver of the engine (`redis_rl_engine`, the
Rust crate `clients/engine`) that does only the I/O. It hands each request to the engine, sends
the store calls the engine asks for under the engine's deadline, feeds the replies back, sends
the background calls after answering, writes the decision records to `logging`, and keeps what
an admitted request holds until its response ends. It mirrors the Rust driver
(`clients/rust/src/gateway/mod.rs`)."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Callable, Optional, Union

import redis_rl_engine as engine
from redis_rl_engine import Calls, InvalidPolicy, Verdict, Wait

from .. import commands as c
from ..client import AsyncClient
from ..errors import Refused, RLError, Unavailable
from . import regions

decision_log = logging.getLogger("redis_rl.decision")
log = logging.getLogger("redis_rl.gateway")

Identify = Callable[[Any], Awaitable[tuple[Optional[str], Optional[str]]]]
MetricsHook = Callable[[str, dict, float], Any]
PolicyInput = Union[str, "os.PathLike[str]", dict]

# A release, a refund or a settlement that cannot be sent in this long is abandoned: a lease
# expires on its own, a reservation stays at its estimate. Until then a call the store could not
# take (a connection lost to a restart) is sent again every RETRY_PAUSE.
BACKGROUND_TIMEOUT = 1.0
RETRY_PAUSE = 0.05

# The engine's clock: Unix microseconds at import, moved on by the monotonic clock, so a
# wall-clock step never moves it (the fallback limiters read it as the module reads its own).
_WALL_US = time.time_ns() // 1000
_MONO_NS = time.monotonic_ns()


def now_us() -> int:
    return _WALL_US + (time.monotonic_ns() - _MONO_NS) // 1000


class _Call(c.Request):
    """An engine call as a request of the typed client, so it goes through the client's mode
    detection, NOSCRIPT handling and cluster routing (to the slot of the call's key)."""

    __slots__ = ("call",)

    def __init__(self, call: engine.Call):
        self.call = call

    def args(self) -> list[Any]:
        # The name as str: redis-py's cluster client looks commands up by name, as str.
        args = self.call.args
        return [args[0].decode(), *args[1:]]

    def keys(self) -> list[bytes]:
        return self.call.script_keys()

    def slot(self) -> int:
        return c.key_slot(self.call.key)

    def parse(self, reply: Any) -> Any:
        return reply


async def _send(store: AsyncClient, call: engine.Call) -> Any:
    """One call's answer as the engine reads it: the reply, or how it failed."""
    try:
        return await store.execute(_Call(call))
    except Refused as exc:
        return engine.error(str(exc))
    except Unavailable as exc:
        return engine.failed(str(exc))
    except RLError as exc:
        # What this client could not read or send is a refusal in the engine's terms.
        return engine.error(f"ERR {exc}")


if hasattr(asyncio, "timeout"):
    async def _send_all(store: AsyncClient, calls: Sequence[engine.Call], deadline: int) -> list:
        """The calls in order until `deadline`; those not answered by then are missing, which
        the engine counts as timeouts. asyncio.timeout (3.11+) runs in the caller's task: it
        saves the task wait_for creates per request."""
        answers: list = []
        try:
            async with asyncio.timeout(max(0.0, (deadline - now_us()) / 1e6)):
                for call in calls:
                    answers.append(await _send(store, call))
        except TimeoutError:
            pass
        return answers
else:  # pragma: no cover - Python before 3.11
    async def _send_all(store: AsyncClient, calls: Sequence[engine.Call], deadline: int) -> list:
        answers: list = []

        async def each() -> None:
            for call in calls:
                answers.append(await _send(store, call))

        try:
            await asyncio.wait_for(each(), max(0.0, (deadline - now_us()) / 1e6))
        except asyncio.TimeoutError:
            pass
        return answers


async def _send_each(store: AsyncClient, calls: Iterable[engine.Call]) -> None:
    """Calls whose replies do not matter (releases, refunds, renewals, settlements), within
    BACKGROUND_TIMEOUT; each is idempotent, so one the store could not take is sent again. A
    call that fails is logged once, by its command alone: its key is made of identities."""
    give_up = time.monotonic() + BACKGROUND_TIMEOUT
    for call in calls:
        while True:
            try:
                await asyncio.wait_for(store.execute(_Call(call)),
                                       max(0.0, give_up - time.monotonic()))
                break
            except asyncio.TimeoutError:
                reason = f"no answer within {BACKGROUND_TIMEOUT:g} s"
            except Unavailable:
                if time.monotonic() + RETRY_PAUSE < give_up:
                    await asyncio.sleep(RETRY_PAUSE)
                    continue
                reason = f"the store was unavailable for {BACKGROUND_TIMEOUT:g} s"
            except RLError as exc:
                reason = exc.kind.replace("_", " ")
            log.warning("rate limiter %s failed: %s", call.args[0].decode(), reason)
            break


class _LoopLag:
    """How late the event loop runs: a callback scheduled every INTERVAL notes how late it ran,
    which is how long every ready callback waits. Ticks stop after IDLE seconds without a
    request and start again with the next. What lateness means for a request (the gateway's
    own overload, clients/SPEC.md section 7) is the engine's to judge: `Engine.missed` and
    `Engine.saturated`."""

    INTERVAL = 0.01
    IDLE = 1.0

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._chain = object()
        self._due = 0.0
        self._used = 0.0
        # (loop time, lateness) of the last ticks: about a second of them.
        self._ticks: collections.deque[tuple[float, float]] = collections.deque(maxlen=128)

    def watch(self) -> float:
        """Called for each request: ticks on the running loop; returns the loop's time."""
        loop = asyncio.get_running_loop()
        self._used = now = loop.time()
        if self._loop is not loop:
            # A new chain of ticks; one left on another loop ends at its next tick.
            self._loop, self._chain = loop, object()
            self._ticks.clear()
            self._schedule(now)
        return now

    def _schedule(self, now: float) -> None:
        self._due = now + self.INTERVAL
        self._loop.call_at(self._due, self._tick, self._chain)

    def _tick(self, chain: object) -> None:
        if chain is not self._chain:
            return
        now = self._loop.time()
        self._ticks.append((now, now - self._due))
        if now - self._used < self.IDLE:
            self._schedule(now)
        else:
            self._loop = None

    def stalled(self) -> float:
        """The stall under way: how long the tick now due has waited for the loop, in
        seconds (0 when it is not yet due, or no tick runs)."""
        if self._loop is None:
            return 0.0
        return max(0.0, self._loop.time() - self._due)

    def since(self, start: float) -> float:
        """The most the loop ran late after `start` (its time), in seconds. A tick's lateness
        counts from when it was due or from `start`, whichever is later: lateness that began
        before `start` (a tick already overdue when a request arrived) is not the request's."""
        if self._loop is None:
            return 0.0
        late = self._loop.time() - max(self._due, start)  # the next tick, overdue
        for at, lateness in reversed(self._ticks):
            if at < start:
                break
            late = max(late, min(lateness, at - start))
        return max(0.0, late)


def _us(seconds: float) -> int:
    return max(0, round(seconds * 1e6))


_LEVELS = {"info": logging.INFO, "warn": logging.WARNING}


def _log(records: Sequence[dict]) -> None:
    """Decision records on the logger `redis_rl.decision`, their fields (`reason`, `route`,
    `rule`, `plan`, `policy_version`, `outcome`, `decision`) in the message and as the
    record's attributes; never a key or an identity."""
    for record in records:
        fields = {k: v for k, v in record.items() if k not in ("level", "message")}
        decision_log.log(_LEVELS[record["level"]], "%s %s", record["message"], fields,
                         extra=fields)


class Outcome:
    """What the gateway decided for one routed request. `status` None: admitted, pass it on
    with `headers` added, `settle` with the backend's X-Actual-Cost and status, `release` once
    the response has been sent (or dropped)."""

    __slots__ = ("_gateway", "_heartbeat", "_holdings", "_store", "body", "checks",
                 "content_type", "headers", "status")

    def __init__(self, gateway: Gateway, store: AsyncClient, verdict: Verdict,
                 holdings: engine.Holdings | None, started: int):
        self.status: int | None = verdict.status
        self.headers: list[tuple[str, str]] = verdict.headers
        self.body: bytes = verdict.problem or b""
        # Each keyed check's outcome, for `Gateway.check` (empty for an HTTP request).
        self.checks: list[engine.CheckOutcome] = verdict.checks
        self.content_type = engine.PROBLEM_CONTENT_TYPE
        self._gateway, self._store, self._holdings = gateway, store, holdings
        self._heartbeat: asyncio.Task | None = None
        every = None if holdings is None else holdings.renew_every_us
        if every is not None:
            self._heartbeat = asyncio.ensure_future(self._renew(every / 1e6, started))

    @property
    def admitted(self) -> bool:
        return self.status is None

    @property
    def holds(self) -> bool:
        """Whether the request holds slots or reservations until its response ends."""
        return self._holdings is not None and not self._holdings.empty

    async def _renew(self, every: float, started: int) -> None:
        # A failed renewal leaves the lease to run out; the request goes on.
        while True:
            await asyncio.sleep(every)
            await _send_each(self._store, self._holdings.tick(started, now_us()))

    async def settle(self, actual_cost: str | bytes | None, status: int | None = None) -> None:
        """Settles the request's reservations with a valid X-Actual-Cost (absent or invalid:
        the estimate stands) and the response's status (None: unknown). After a 2xx they are
        forgotten, so a reused Idempotency-Key is charged anew; after anything else a retry is
        not charged again. Only the first call counts. The request's capacity slot, if its
        route draws on one, is given back: call it when the response's head is known."""
        if self._holdings is None:
            return
        if isinstance(actual_cost, str):
            actual_cost = actual_cost.encode("latin-1")
        # The request's capacity slot is given back now, with the backend's latency.
        calls = self._holdings.settle(actual_cost, status, now_us())
        await self._gateway._send_soon(self._store, calls)

    async def release(self) -> None:
        """Releases the request's semaphore slots and stops their renewal. Idempotent."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        if self._holdings is not None:
            await self._gateway._send_soon(self._store, self._holdings.release())

    async def finish(self, actual_cost: str | bytes | None = None,
                     status: int | None = None) -> None:
        await self.settle(actual_cost, status)
        await self.release()


def _read(policy: PolicyInput) -> str:
    if isinstance(policy, dict):
        return json.dumps(policy)
    try:
        with open(policy, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise InvalidPolicy(f"{os.fspath(policy)}: {exc.strerror}") from exc


class Gateway:
    """The decisions of clients/CONTRACT.md for ASGI apps (see `asgi.RateLimitMiddleware`),
    made by the engine. `policy`: a policy file's path (which `reload` re-reads) or the
    document as a dict; an invalid one raises `InvalidPolicy` with the bad field's JSON path.
    `metrics_hook(name, labels, value)` sees every metrics event, for another metrics
    library. `table_bytes` bounds each of the engine's local tables in bytes (32 MiB by
    default). `region`, `home` and `reporter`: one limit across regions (a policy's `global`
    rules): this gateway's region (one of the policy's `regions`), the home store (an
    AsyncClient or a redis:// URL) its allocations are asked of, and its name among the
    region's reporters (by default the host's name and the process id); a policy with a global
    rule and no region is refused with InvalidPolicy. The reports run from `prepare` or the
    first request until `close`."""

    def __init__(self, client: AsyncClient, policy: PolicyInput, *,
                 legacy_headers: bool = False, log_sample: float = 0.001,
                 log_per_second: int = 100, identify: Identify | None = None, durable_connections: int = 0,
                 metrics_hook: MetricsHook | None = None, seed: int | None = None,
                 table_bytes: int | None = None, region: str | None = None,
                 home: AsyncClient | str | None = None, reporter: str | None = None):
        if not 0 <= log_sample <= 1:
            raise ValueError("log_sample must be in [0, 1]")
        if log_per_second < 0:
            raise ValueError("log_per_second must not be negative")
        self.client = client
        self._file = None if isinstance(policy, dict) else policy
        self.engine = engine.Engine(_read(policy), legacy_headers=legacy_headers,
                                    log_sample=log_sample, log_per_second=log_per_second,
                                    seed=seed, metrics_hook=metrics_hook,
                                    table_bytes=table_bytes, region=region)
        if (region is None) != (home is None):
            raise ValueError("region and home go together: a region's allocations are the "
                             "home store's answers")
        if reporter is not None and region is None:
            raise ValueError("reporter needs region and home")
        self._reporter = None if region is None else regions.Reporter(
            self.engine, now_us, regions.home_client(home), region,
            reporter if reporter is not None else regions.default_reporter())
        self._warn()
        self.identify = identify
        # Connections of their own for routes with a `durable` rule, taken in turn: the server
        # blocks a connection while its WAIT waits, and other routes must not queue behind it.
        self._durable = [_one_connection(client) for _ in range(durable_connections)]
        self._durable_turn = 0
        # Background sends, held so the event loop does not drop them half-way.
        self._tasks: set[asyncio.Task] = set()
        self._lag = _LoopLag()
        for store in [client, *self._durable]:
            store.on_mode(self.engine.store_mode)

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def render_metrics(self) -> str:
        """The Prometheus text (format 0.0.4) of the gateway's metrics."""
        return self.engine.render_metrics()

    def register_metrics(self, registry: Any = None) -> None:
        """Exposes the same families through prometheus_client (its default registry unless
        one is given), read from the engine's text at each scrape."""
        from prometheus_client import REGISTRY
        from prometheus_client.parser import text_string_to_metric_families

        render = self.render_metrics

        class _Collector:
            def collect(self):
                return text_string_to_metric_families(render())

        (registry if registry is not None else REGISTRY).register(_Collector())

    async def prepare(self) -> None:
        """Detects the store's mode and loads the script if it needs one, before the first
        request would (the middleware calls it at ASGI startup; with the FastAPI dependency
        alone, call it at the app's startup). Otherwise the first request does it, within its
        deadline, as after a lost connection. A store that cannot answer now is left to the
        first request's posture."""
        self._report()
        try:
            # Under a deadline of its own: a 37 kB SCRIPT LOAD is no request's fault.
            await asyncio.wait_for(self.client.prepare(),
                                   max(1.0, self.engine.store_timeout_us / 1e6))
        except (asyncio.TimeoutError, RLError) as exc:
            log.warning("rate limiter store not ready at startup: %r", exc)

    def _report(self) -> None:
        if self._reporter is not None:
            self._reporter.start()

    async def close(self) -> None:
        """Stops the reports to the home store and waits for the background calls in flight."""
        if self._reporter is not None:
            await self._reporter.stop()
        await self.drain()

    def reload(self) -> int:
        """Re-reads the policy file and returns the version now in force; raises StalePolicy
        for a version not higher than the one in force and InvalidPolicy for a bad document
        (the policy in force stays)."""
        if self._file is None:
            raise InvalidPolicy("the policy was not read from a file")
        version = self.engine.reload(_read(self._file))
        self._warn()
        return version

    def _warn(self) -> None:
        # What the policy holds that is legal but worth an operator's look (an override that
        # had already expired when it was loaded).
        for warning in self.engine.warnings:
            log.warning("policy version %d: %s", self.engine.policy_version, warning)

    def _store_for(self, pending: engine.Pending) -> AsyncClient:
        if not self._durable or not pending.durable:
            return self.client
        self._durable_turn += 1
        return self._durable[self._durable_turn % len(self._durable)]

    async def drain(self) -> None:
        """Waits for the background calls in flight (releases, refunds): before shutting
        down, so that nothing taken is left to expire on its own."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _background(self, store: AsyncClient, calls: list[engine.Call]) -> asyncio.Task | None:
        if not calls:
            return None
        task = asyncio.ensure_future(_send_each(store, calls))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _send_soon(self, store: AsyncClient, calls: list[engine.Call]) -> None:
        """Sends in the background and waits for a store timeout at most: a settlement made
        before the response is passed on, a slot released before the next request on the
        connection, unless the store does not answer in time (then the sends go on, retried,
        and the response does not wait for them)."""
        task = self._background(store, calls)
        if task is not None:
            await asyncio.wait({task}, timeout=self.engine.store_timeout_us / 1e6)

    async def decide(self, method: str, path: str, headers: list[tuple[bytes, bytes]],
                     peer: str | None = None, request: Any = None) -> Outcome | None:
        """The decision for one request, None when it passes untouched (no route matched and
        the default has no rules).
        `headers` are the ASGI (name, value) pairs; `request` (the ASGI scope, from the
        middleware and the dependency alike) is handed to `identify`."""
        self._lag.watch()
        self._report()
        if self.engine.saturated(_us(self._lag.stalled())):
            # The loop is stalled now, too long for this request to meet its deadline (the
            # engine's rule): shed it, without asking anyone who it is.
            shed = self.engine.shed(method, path, headers, peer, now_us())
            if shed.log:
                _log(shed.log)
            untouched = shed.route is None and shed.status is None
            return None if untouched else Outcome(self, self.client, shed, None, 0)
        user = tenant = None
        if self.identify is not None:
            user, tenant = await self.identify(request)
        started = now_us()
        pending, step = self.engine.begin(method, path, headers, peer, started, user, tenant)
        # No route and no answer of its own: it passes untouched (a path above the root has no
        # route either, and is answered 400).
        if type(step) is Verdict and step.route is None and step.status is None:
            if step.log:
                _log(step.log)
            return None
        return await self._drive(pending, step, started)

    async def check(self, route: str, checks: Iterable[Any]) -> Outcome:
        """Decides keyed checks (what a face that is not HTTP translates its requests into, as
        the Envoy rate limit service's descriptors) under the policy's route named `route`:
        its posture, its name in metrics and records; a route the policy lacks is answered
        500. Each check is a `(rule, key, cost)` tuple or a `{"rule", "key", "cost"}` dict: a
        rule of the policy in force by name (one it lacks raises ValueError, and nothing is
        decided), the key it counts on, the units it takes (1 when not given; 0 only asks).
        All are admitted or none; the outcome's `checks` hold each one's `over`, `remaining`,
        `reset_after_ms`, `retry_after_ms` and `source`, in order. A semaphore's slot is held
        until the outcome's `release`."""
        self._lag.watch()
        self._report()
        started = now_us()
        pending, step = self.engine.check(route, list(checks), started)
        return await self._drive(pending, step, started)

    async def _drive(self, pending: engine.Pending, step: Any, started: int) -> Outcome:
        """Runs a decision's steps until its verdict: the calls under the engine's deadline,
        the waits; then the background calls and the records."""
        store = self._store_for(pending)
        # When the request arrived on the loop's clock, from which its lateness counts.
        arrived = asyncio.get_running_loop().time() - max(0, now_us() - started) / 1e6
        try:
            while type(step) is not Verdict:
                if type(step) is Calls:
                    window = max(0, step.deadline - now_us())
                    answers = await _send_all(store, step.calls, step.deadline)
                    if len(answers) < len(step.calls):
                        # Missed the deadline: the engine tells the store's timeout from the
                        # loop's own lateness since the request arrived (a reply waiting to be
                        # read, or a wait for a chunk that left the call little of its
                        # deadline), which the breaker does not count. Lateness from before
                        # the request arrived is not counted.
                        answers.append(self.engine.missed(window, _us(self._lag.since(arrived))))
                else:
                    assert type(step) is Wait
                    await asyncio.sleep(max(0.0, (step.until - now_us()) / 1e6))
                    answers = []
                step = self.engine.resume(pending, answers, now_us())
        except BaseException:
            # The caller went away (a cancel) mid-decision: give back what was taken.
            self._background(store, pending.abandon())
            raise
        self._background(store, step.background)
        if step.log:
            _log(step.log)
        return Outcome(self, store, step, pending.holdings(), started)


def _one_connection(client: AsyncClient) -> AsyncClient:
    """A client on one connection of its own, to the same server as `client`."""
    import redis.asyncio
    if client.cluster:
        raise ValueError("durable_connections needs a single server; on a cluster WAIT is "
                         "sent on the shared pool")
    pool = client.redis.connection_pool
    kwargs = dict(pool.connection_kwargs)
    one = redis.asyncio.BlockingConnectionPool(connection_class=pool.connection_class,
                                               max_connections=1, timeout=None, **kwargs)
    # The same mode choice and script as the shared client's.
    modes = client._modes
    return AsyncClient(redis.asyncio.Redis(connection_pool=one),
                       mode=modes.current if modes.fixed else "auto", script=modes.script)
