"""One request, end to end (SPEC gateway section 7): route, identity, negative cache, breaker,
the store calls under one deadline (grants, semaphores, reservations, one RL.MULTI, shadows),
the posture when the store cannot answer, and what the caller sees."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import random
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .. import commands as c
from ..client import AsyncClient
from ..errors import RLError, Unavailable
from ..headers import Shown, render, retry_after
from . import problem
from .cache import NegativeCache
from .metrics import Metrics
from .policy import Policy, PolicySource, Route, RuleSpec
from .posture import Breaker, FallbackLimiters

decision_log = logging.getLogger("redis_rl.decision")
log = logging.getLogger("redis_rl.gateway")

Identify = Callable[[Any], Awaitable[Tuple[Optional[str], Optional[str]]]]


@dataclass
class Outcome:
    """What the gateway decided for one routed request. `status` None: admitted, pass it on with
    `headers` added, `settle` with the backend's X-Actual-Cost, `release` once the response
    has been sent (or dropped)."""

    status: Optional[int]
    headers: Dict[str, str]
    body: bytes = b""
    content_type: str = problem.CONTENT_TYPE
    _settle: Optional[Callable[[Optional[str]], Awaitable[None]]] = None
    _release: Optional[Callable[[], Awaitable[None]]] = None

    @property
    def admitted(self) -> bool:
        return self.status is None

    async def settle(self, actual_cost: Optional[str]) -> None:
        """Settles the request's reservations with a valid X-Actual-Cost (absent or invalid:
        the estimate stands). Only the first call counts."""
        fn, self._settle = self._settle, None
        if fn is not None:
            await fn(actual_cost)

    async def release(self) -> None:
        """Releases the request's semaphore slots and stops their renewal. Idempotent."""
        fn, self._release = self._release, None
        if fn is not None:
            await fn()

    async def finish(self, actual_cost: Optional[str] = None) -> None:
        await self.settle(actual_cost)
        await self.release()


@dataclass
class _Chunk:
    tokens: int = 0
    lapses_at: float = 0.0
    generation: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Taken:
    """What one request holds, undone when a later rule refuses or the store fails."""

    grants: List[Tuple[_Chunk, int, int]] = field(default_factory=list)  # chunk, generation, n
    slots: List[Tuple[bytes, bytes, RuleSpec]] = field(default_factory=list)  # key, holder, rule
    reservations: List[Tuple[str, str]] = field(default_factory=list)  # key, id


class _Refusal(Exception):
    def __init__(self, rule: RuleSpec, key: str, retry_after_ms: int, shown: List[Shown]):
        super().__init__(rule.name)
        self.rule, self.key, self.retry_after_ms, self.shown = rule, key, retry_after_ms, shown


def _peer_ip(peer: Optional[str], xff: Optional[str], trusted: Sequence[Any]) -> Optional[str]:
    """The caller: the peer, or, behind trusted proxies, the first untrusted hop of
    X-Forwarded-For read from the right (a malformed hop ends the walk at the last address)."""
    def is_trusted(addr: Any) -> bool:
        return any(addr in net for net in trusted)

    try:
        current = ipaddress.ip_address(peer) if peer else None
    except ValueError:
        return peer
    if current is None or not trusted or not is_trusted(current) or not xff:
        return str(current) if current is not None else None
    for hop in reversed([h.strip() for h in xff.split(",")]):
        try:
            addr = ipaddress.ip_address(hop)
        except ValueError:
            break
        current = addr
        if not is_trusted(addr):
            break
    return str(current)


class Gateway:
    """The decisions of CLIENTS.md for ASGI apps (see `asgi.RateLimitMiddleware`)."""

    def __init__(self, client: AsyncClient, policy: Union[Policy, PolicySource, str, Path], *,
                 legacy_headers: bool = False, log_sample: float = 0.01,
                 metrics_hook=None, identify: Optional[Identify] = None,
                 durable_connections: int = 0, rng: Optional[random.Random] = None):
        self.client = client
        self._durable = [_one_connection(client) for _ in range(durable_connections)]
        self._durable_turn = 0
        if isinstance(policy, (str, Path)):
            policy = PolicySource(policy)
        elif isinstance(policy, Policy):
            policy = PolicySource(policy=policy)
        self.source: PolicySource = policy
        if not 0 <= log_sample <= 1:
            raise ValueError("log_sample must be in [0, 1]")
        self.legacy_headers = legacy_headers
        self.log_sample = log_sample
        self.identify = identify
        self.rng = rng or random.Random()
        self.metrics = Metrics(metrics_hook)
        p = self.source.current
        self.cache = NegativeCache(p.negative_cache_entries)
        self.fallbacks = FallbackLimiters(p.negative_cache_entries)
        self.breaker = Breaker(p.breaker_failures, p.breaker_open_ms / 1000, p.ramp_ms / 1000,
                               rng=self.rng, on_state=self.metrics.set_breaker)
        self._chunks: "OrderedDict[Tuple[str, str], _Chunk]" = OrderedDict()
        self._policy_changed(p)
        self.source.on_change(self._policy_changed)
        for store in [client, *self._durable]:
            store.on_mode(self.metrics.set_store_mode)

    @property
    def policy(self) -> Policy:
        return self.source.current

    def _policy_changed(self, p: Policy) -> None:
        self.cache.resize(p.negative_cache_entries)
        self.fallbacks.entries = p.negative_cache_entries
        self.breaker.configure(p.breaker_failures, p.breaker_open_ms / 1000, p.ramp_ms / 1000)
        self.metrics.set_policy(p.version, {r.name: r.on_store_error.mode for r in p.routes})

    async def prepare(self) -> None:
        """Detects the store's mode and loads the script if it needs one, before the first
        request would (the middleware calls it at ASGI startup). A store that cannot answer
        now is left to the first request's posture."""
        try:
            await _within(self.client.prepare(), max(1.0, self.policy.store_timeout_ms / 1000))
        except (asyncio.TimeoutError, RLError) as exc:
            log.warning("rate limiter store not ready at startup: %r", exc)

    def reload(self) -> Policy:
        """Re-reads the policy file; raises PolicyError when refused (the snapshot stays)."""
        return self.source.reload()

    # ---- logging and counting ----

    def _count(self, policy: Policy, route: Route, rule: RuleSpec, outcome: str,
               logged: bool) -> None:
        self.metrics.decision(route.name, rule.name, outcome)
        fields = {"route": route.name, "rule": rule.name, "policy_version": policy.version,
                  "outcome": outcome}
        if outcome == "open_admit":
            decision_log.warning("rate-limit decision %s", fields, extra=fields)
        elif outcome == "shadow_refuse" or logged:
            decision_log.info("rate-limit decision %s", fields, extra=fields)

    # ---- the request ----

    async def decide(self, method: str, path: str, headers: Dict[str, str],
                     peer: Optional[str] = None, request: Any = None) -> Optional[Outcome]:
        """The decision for one request, None when no route matches (it passes untouched).
        `headers` maps lower-case names to values; `request` (the ASGI scope, from the
        middleware and the dependency alike) is handed to `identify`."""
        policy = self.source.current
        route = policy.route(method, path)
        if route is None:
            return None
        logged = self.rng.random() < self.log_sample
        user = headers.get(policy.user_header) if policy.user_header else None
        tenant = headers.get(policy.tenant_header) if policy.tenant_header else None
        if self.identify is not None:
            resolved_user, resolved_tenant = await self.identify(request)
            user = resolved_user or user
            tenant = resolved_tenant or tenant
        ip = _peer_ip(peer, headers.get("x-forwarded-for"), policy.trusted_proxies)
        values = {"user": user or None, "tenant": tenant or None, "ip": ip, "route": route.name}
        keys = {r.name: (("shadow:" if r.shadow else "") + r.key.render(values))
                for r in route.rules}
        show_private = bool(user)

        now = time.monotonic()
        cached = []
        for r in route.rules:
            if r.shadow:
                continue
            wait = self.cache.check(r.name, keys[r.name], 1 if r.semaphore else r.cost, now)
            if wait is not None:
                cached.append((r, wait))
        if cached:
            for r, _ in cached:
                self._count(policy, route, r, "refuse_cached", logged)
            shown = [self._shown_refused(r, int(wait * 1000 + 0.999)) for r, wait in cached
                     if r.public or show_private]
            longest = max(int(w * 1000 + 0.999) for _, w in cached)
            return self._too_many(policy, [r.name for r, _ in cached], longest, shown)

        ticket = self.breaker.admit(route.on_store_error.mode)
        if ticket is None:
            return self._posture(policy, route, keys, logged, show_private)

        idem = headers.get("idempotency-key") or secrets.token_hex(16)
        store = self.client
        if self._durable and any(r.durable for r in route.rules):
            store = self._durable[self._durable_turn % len(self._durable)]
            self._durable_turn += 1
        taken = _Taken()
        started = time.perf_counter()
        reported = False
        try:
            if store.mode is None:
                # detection and the script's upload happen once per connection change, under
                # a deadline of their own: a 37 kB SCRIPT LOAD is no request's fault
                await _within(store.prepare(), max(1.0, policy.store_timeout_ms / 1000))
                started = time.perf_counter()
            shown = await _within(
                self._store(store, policy, route, keys, idem, taken, logged),
                policy.store_timeout_ms / 1000)
        except _Refusal as refusal:
            self.breaker.report(ticket, True)
            reported = True
            self.metrics.store_call("ok", time.perf_counter() - started)
            await self._undo(taken, refund=True)
            self._count(policy, route, refusal.rule, "refuse", logged)
            if not refusal.rule.semaphore:
                self.cache.refused(refusal.rule.name, refusal.key,
                                   refusal.rule.cost, refusal.retry_after_ms,
                                   policy.negative_cache_max_ms, time.monotonic())
            return self._too_many(policy, [refusal.rule.name], refusal.retry_after_ms,
                                  [s for s in refusal.shown
                                   if self._visible(route, s, show_private)])
        except (asyncio.TimeoutError, RLError) as exc:
            if isinstance(exc, RLError) and not isinstance(exc, Unavailable):
                # a refused or malformed call is a bug in the policy or the deployment: never a
                # 429, never an admit, and no reason to open the breaker
                self.breaker.report(ticket, True)
                reported = True
                self.metrics.store_call("error", time.perf_counter() - started)
                await self._undo(taken, refund=True)
                log.error("rate limiter refused %s: %s", route.name, exc)
                return Outcome(500, {}, problem.misconfigured())
            self.breaker.report(ticket, False)
            reported = True
            log.warning("store call for %s failed: %r", route.name, exc)
            result = "timeout" if isinstance(exc, asyncio.TimeoutError) else "error"
            self.metrics.store_call(result, time.perf_counter() - started)
            await self._undo(taken, refund=False)
            return self._posture(policy, route, keys, logged, show_private)
        else:
            self.breaker.report(ticket, True)
            reported = True
            self.metrics.store_call("ok", time.perf_counter() - started)
        finally:
            if not reported:
                # cancelled before the store answered: free the probe, give back what was taken
                self.breaker.cancel(ticket)
                asyncio.ensure_future(self._undo(taken, refund=True))
        for r in route.rules:
            if not r.shadow:
                self._count(policy, route, r, "admit", logged)
        if any(r.durable for r in route.rules):
            await self._wait_durable(store, policy, route, keys, logged)
        visible = [s for s in shown if self._visible(route, s, show_private)]
        stop = self._renew(taken)

        async def settle(actual: Optional[str]) -> None:
            if actual is None or not actual.isdigit() or not taken.reservations:
                return
            for key, rid in taken.reservations:
                try:
                    await asyncio.wait_for(self.client.settle(key, rid, int(actual)), 1)
                except (asyncio.TimeoutError, RLError) as exc:
                    log.warning("settlement on %s failed: %s", route.name, exc)

        async def release() -> None:
            stop()
            await self._release(taken.slots)

        return Outcome(None, render(visible, self.legacy_headers), _settle=settle,
                       _release=release)

    def _visible(self, route: Route, s: Shown, show_private: bool) -> bool:
        rule = next((r for r in route.rules if r.name == s.name), None)
        return rule is not None and (rule.public or show_private)

    def _shown_refused(self, r: RuleSpec, wait_ms: int) -> Shown:
        return Shown(name=r.name, limit=r.capacity if r.semaphore else r.limit,
                     period_ms=r.period_ms, capacity=r.capacity, remaining=0, reset_after_ms=0,
                     refused=True, retry_after_ms=wait_ms, semaphore=r.semaphore)

    def _too_many(self, policy: Policy, violated: List[str], wait_ms: int,
                  shown: List[Shown]) -> Outcome:
        seconds = max(1, retry_after(wait_ms, policy.retry_after_jitter, self.rng))
        headers = render(shown, self.legacy_headers)
        headers["Retry-After"] = str(seconds)
        return Outcome(429, headers, problem.too_many_requests(violated, seconds))

    def _posture(self, policy: Policy, route: Route, keys: Dict[str, str], logged: bool,
                 show_private: bool) -> Outcome:
        ose = route.on_store_error
        if ose.mode == "allow":
            for r in route.rules:
                if not r.shadow:
                    self._count(policy, route, r, "open_admit", logged)
            return Outcome(None, {})
        if ose.mode == "deny":
            for r in route.rules:
                if not r.shadow:
                    self._count(policy, route, r, "unavailable_deny", logged)
            seconds = max(1, retry_after(policy.breaker_open_ms, policy.retry_after_jitter,
                                         self.rng))
            return Outcome(503, {"Retry-After": str(seconds)}, problem.unavailable(seconds))
        first = route.rules[0]
        cost = 1 if first.semaphore else first.cost
        d = self.fallbacks.decide(route.name, keys[first.name], ose.limit, ose.period_ms,
                                  ose.burst, cost)
        shown = [Shown(name=first.name, limit=ose.limit, period_ms=ose.period_ms,
                       capacity=d.capacity, remaining=d.remaining,
                       reset_after_ms=d.reset_after_ms, refused=not d.allowed,
                       retry_after_ms=d.retry_after_ms)]
        if not (first.public or show_private):
            shown = []
        if d.allowed:
            self._count(policy, route, first, "fallback_admit", logged)
            return Outcome(None, render(shown, self.legacy_headers))
        self._count(policy, route, first, "fallback_refuse", logged)
        return self._too_many(policy, [first.name], d.retry_after_ms, shown)

    # ---- the store calls ----

    async def _store(self, client: AsyncClient, policy: Policy, route: Route, keys: Dict[str, str], idem: str,
                     taken: _Taken, logged: bool) -> List[Shown]:
        shown: Dict[str, Shown] = {}
        for r in route.rules:
            if r.grant is not None and not r.shadow:
                await self._spend_grant(r, keys[r.name], taken)
        for r in route.rules:
            if r.semaphore and not r.shadow:
                holder = secrets.token_hex(8).encode()
                key = keys[r.name].encode()
                taken.slots.append((key, holder, r))
                a = await client.acquire(key, r.concurrency, _ms(r.lease_ms), holder=holder)
                free = max(0, r.concurrency - a.in_flight)
                s = Shown(name=r.name, limit=r.concurrency, period_ms=0, capacity=r.concurrency,
                          remaining=free, reset_after_ms=0, refused=not a.acquired,
                          retry_after_ms=a.retry_after_ms, semaphore=True)
                shown[r.name] = s
                if not a.acquired:
                    taken.slots.pop()
                    raise _Refusal(r, keys[r.name], a.retry_after_ms, self._ordered(route, shown))
        for r in route.rules:
            if r.settle and not r.shadow:
                d = await client.admit(keys[r.name], r.limit, _ms(r.period_ms),
                                            burst=r.burst, cost=r.cost, algo=_algo(r),
                                            reserve=idem)
                shown[r.name] = _shown_rate(r, d.remaining, d.reset_after_ms, not d.allowed,
                                            d.retry_after_ms)
                if not d.allowed:
                    raise _Refusal(r, keys[r.name], d.retry_after_ms, self._ordered(route, shown))
                taken.reservations.append((keys[r.name], idem))
        multi = [r for r in route.rules if r.multi and not r.settle]
        if multi:
            decision = await client.multi([
                c.Rule(r.name, keys[r.name], r.limit, _ms(r.period_ms), burst=r.burst,
                       cost=None if r.cost == 1 else r.cost, algo=_algo(r)) for r in multi])
            by_name = {o.name: o for o in decision.rules}
            for r in multi:
                o = by_name.get(r.name)
                if o is None:
                    continue
                refused = decision.denied_by == r.name
                shown[r.name] = _shown_rate(r, o.remaining, o.reset_after_ms, refused,
                                            decision.retry_after_ms if refused else 0)
                if refused:
                    cut = self._ordered(route, shown, upto=r.name)
                    raise _Refusal(r, keys[r.name], decision.retry_after_ms, cut)
        for r in route.rules:
            if not r.shadow:
                continue
            if r.semaphore:
                holder = secrets.token_hex(8).encode()
                key = keys[r.name].encode()
                taken.slots.append((key, holder, r))
                a = await client.acquire(key, r.concurrency, _ms(r.lease_ms), holder=holder)
                if not a.acquired:
                    taken.slots.pop()
                    self._count(policy, route, r, "shadow_refuse", logged)
            else:
                d = await client.admit(keys[r.name], r.limit, _ms(r.period_ms),
                                            burst=r.burst, cost=r.cost, algo=_algo(r))
                if not d.allowed:
                    self._count(policy, route, r, "shadow_refuse", logged)
        return self._ordered(route, shown)

    def _ordered(self, route: Route, shown: Dict[str, Shown],
                 upto: Optional[str] = None) -> List[Shown]:
        out = []
        for r in route.rules:
            if r.name in shown:
                out.append(shown[r.name])
            if r.name == upto:
                break
        return out

    async def _spend_grant(self, r: RuleSpec, key: str, taken: _Taken) -> None:
        assert r.grant is not None
        chunk = self._chunk(r.name, key)
        async with chunk.lock:
            now = time.monotonic()
            if now >= chunk.lapses_at or chunk.tokens < r.cost:
                g = await self.client.grant(key, r.limit, _ms(r.period_ms),
                                            max(r.grant.want, r.cost), burst=r.burst,
                                            algo=_algo(r), ttl=_ms(r.grant.ttl_ms))
                self.metrics.grant_refill(r.name)
                chunk.generation += 1
                chunk.tokens = g.granted
                chunk.lapses_at = time.monotonic() + g.valid_ms / 1000
                if g.granted < r.cost:
                    chunk.tokens = 0
                    raise _Refusal(r, key, g.retry_after_ms, [])
            chunk.tokens -= r.cost
            taken.grants.append((chunk, chunk.generation, r.cost))

    def _chunk(self, rule: str, key: str) -> _Chunk:
        chunk = self._chunks.get((rule, key))
        if chunk is None:
            chunk = self._chunks[(rule, key)] = _Chunk()
        self._chunks.move_to_end((rule, key))
        while len(self._chunks) > self.policy.negative_cache_entries:
            self._chunks.popitem(last=False)
        return chunk

    async def _undo(self, taken: _Taken, refund: bool) -> None:
        for chunk, generation, n in taken.grants:
            if chunk.generation == generation:
                chunk.tokens += n
        taken.grants.clear()
        if refund:
            for key, rid in taken.reservations:
                try:
                    await asyncio.wait_for(self.client.settle(key, rid, 0), 1)
                except (asyncio.TimeoutError, RLError):
                    pass
        taken.reservations.clear()
        await self._release(taken.slots)

    async def _release(self, slots: List[Tuple[bytes, bytes, RuleSpec]]) -> None:
        while slots:
            key, holder, _ = slots.pop()
            try:
                await asyncio.wait_for(self.client.release(key, holder), 1)
            except (asyncio.TimeoutError, RLError):
                pass  # left to expire with its lease

    def _renew(self, taken: _Taken) -> Callable[[], None]:
        if not taken.slots:
            return lambda: None
        every = min(r.lease_ms for _, _, r in taken.slots) / 3000
        slots = list(taken.slots)

        async def beat() -> None:
            while True:
                await asyncio.sleep(every)
                for key, holder, r in slots:
                    try:
                        await self.client.renew(key, holder, _ms(r.lease_ms))
                    except RLError:
                        pass

        task = asyncio.ensure_future(beat())
        return task.cancel

    async def _wait_durable(self, client: AsyncClient, policy: Policy, route: Route,
                            keys: Dict[str, str], logged: bool) -> None:
        """WAIT 1 after an admission, once per cluster slot of the durable rules' keys (to that
        slot's primary). On a connection of its own (`durable_connections`) it waits for this
        request's writes, and no other route queues behind a lagging replica; on a shared pool
        (and on a cluster) it waits on whichever connection it gets, which is weaker."""
        durable = [r for r in route.rules if r.durable and r.grant is None and not r.shadow]
        if not durable:
            return
        by_slot: Dict[Optional[int], List[RuleSpec]] = {}
        for r in durable:
            slot = c.key_slot(keys[r.name]) if client.cluster else None
            by_slot.setdefault(slot, []).append(r)
        for slot, rules in by_slot.items():
            target = {} if slot is None else {
                "target_nodes": client.redis.nodes_manager.get_node_from_slot(slot)}
            try:
                acks = await _within(
                    client.redis.execute_command("WAIT", 1, policy.store_timeout_ms, **target),
                    2 * policy.store_timeout_ms / 1000)
            except Exception:  # an error or no answer: the admission stands, counted
                acks = 0
            if not isinstance(acks, int) or acks < 1:
                for r in rules:
                    self._count(policy, route, r, "unreplicated_admit", logged)


async def _within(coro, seconds: float):
    """`coro` under a deadline, in the caller's task where asyncio.timeout exists (3.11+):
    it saves the task wait_for creates per request."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(seconds):
            return await coro
    return await asyncio.wait_for(coro, seconds)


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


def _ms(ms: int) -> datetime.timedelta:
    # a timedelta is exact and cheap to send; a float of seconds takes the exact decimal path
    return datetime.timedelta(milliseconds=ms)


def _algo(r: RuleSpec) -> Optional[str]:
    return None if r.algo == "gcra" else r.algo


def _shown_rate(r: RuleSpec, remaining: int, reset_after_ms: int, refused: bool,
                retry_after_ms: int) -> Shown:
    return Shown(name=r.name, limit=r.limit, period_ms=r.period_ms, capacity=r.capacity,
                 remaining=remaining, reset_after_ms=reset_after_ms, refused=refused,
                 retry_after_ms=retry_after_ms)
