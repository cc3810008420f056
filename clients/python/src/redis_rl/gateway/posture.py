"""Posture when the store cannot answer (SPEC gateway section 3): one breaker per store and the
local fallback limiters, on the module's gcra arithmetic."""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

CLOSED, OPEN, HALF_OPEN, RAMPING = "closed", "open", "half_open", "ramping"
STATES = (CLOSED, OPEN, HALF_OPEN, RAMPING)


class Breaker:
    """closed -> open after `failures` consecutive failures; half-open lets one probe through;
    a good probe ramps the share of requests sent to the store from 0 to 1 over `ramp`."""

    def __init__(self, failures: int, open_s: float, ramp_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Optional[random.Random] = None,
                 on_state: Optional[Callable[[str], None]] = None):
        self.failures, self.open_s, self.ramp_s = failures, open_s, ramp_s
        self.clock = clock
        self.rng = rng or random.Random()
        self.on_state = on_state
        self._state = CLOSED
        self._count = 0
        self._until = 0.0
        self._ramp_start = 0.0
        self._probe = False
        self._epoch = 0  # bumped when the breaker opens: outcomes of older calls change nothing
        self._lock = threading.Lock()

    def configure(self, failures: int, open_s: float, ramp_s: float) -> None:
        with self._lock:
            self.failures, self.open_s, self.ramp_s = failures, open_s, ramp_s

    @property
    def state(self) -> str:
        with self._lock:
            self._advance()
            return self._state

    def _set(self, state: str) -> None:
        if state != self._state:
            self._state = state
            if self.on_state:
                self.on_state(state)

    def _advance(self) -> None:
        now = self.clock()
        if self._state == OPEN and now >= self._until:
            self._set(HALF_OPEN)
            self._probe = False
        if self._state == RAMPING and now - self._ramp_start >= self.ramp_s:
            self._set(CLOSED)

    def admit(self, route_mode: str) -> Optional[Tuple[int, bool]]:
        """None: take the posture. Otherwise (epoch, is_probe): go to the store and report."""
        with self._lock:
            self._advance()
            if self._state == CLOSED:
                return self._epoch, False
            if self._state == OPEN:
                return None
            if self._state == HALF_OPEN:
                if self._probe:
                    return None
                self._probe = True
                return self._epoch, True
            share = (self.clock() - self._ramp_start) / self.ramp_s if self.ramp_s else 1.0
            if route_mode == "deny" or self.rng.random() < share:
                return self._epoch, False
            return None

    def cancel(self, ticket: Tuple[int, bool]) -> None:
        """The probe's request was cancelled before it reported: the next request probes."""
        with self._lock:
            if ticket[1] and ticket[0] == self._epoch and self._state == HALF_OPEN:
                self._probe = False

    def report(self, ticket: Tuple[int, bool], ok: bool) -> None:
        with self._lock:
            self._advance()
            epoch, probe = ticket
            if epoch != self._epoch:
                return
            if self._state == HALF_OPEN:
                if not probe:
                    return
                self._probe = False
                if ok:
                    if self.ramp_s > 0:
                        self._ramp_start = self.clock()
                        self._set(RAMPING)
                    else:
                        self._set(CLOSED)
                    self._count = 0
                else:
                    self._open()
                return
            if self._state in (CLOSED, RAMPING):
                if ok:
                    self._count = 0
                else:
                    self._count += 1
                    if self._count >= self.failures:
                        self._open()

    def _open(self) -> None:
        self._count = 0
        self._epoch += 1
        self._until = self.clock() + self.open_s
        self._set(OPEN)


@dataclass
class LocalDecision:
    allowed: bool
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    capacity: int


class LocalGcra:
    """The module's gcra in ticks (microseconds times `limit`: one token is `period_us`
    ticks), so the fallback decides exactly as the module would at the gateway's clock."""

    def __init__(self, limit: int, period_ms: int, burst: Optional[int]):
        self.limit = limit
        self.period_us = period_ms * 1000
        self.capacity = burst if burst is not None else limit
        self.tat = 0

    def _ticks_to_us(self, ticks: int) -> int:
        return -(-max(ticks, 0) // self.limit)

    def decide(self, cost: int, now_us: int) -> LocalDecision:
        token = self.period_us
        cap = self.capacity * token
        now = now_us * self.limit
        level = cap - max(self.tat - now, 0)
        need = cost * token
        allowed = level >= need
        after = level - need if allowed else level
        if allowed:
            self.tat = now + cap - after
        return LocalDecision(
            allowed=allowed, remaining=max(after, 0) // token,
            retry_after_ms=0 if allowed else -(-self._ticks_to_us(need - level) // 1000),
            reset_after_ms=-(-self._ticks_to_us(cap - after) // 1000), capacity=self.capacity)


class FallbackLimiters:
    """One local limiter per rendered key of a route's first rule, least recently used evicted
    (an evicted key starts full again)."""

    def __init__(self, entries: int):
        self.entries = entries
        self._map: "OrderedDict[Tuple[str, str], LocalGcra]" = OrderedDict()
        self._lock = threading.Lock()

    def decide(self, route: str, key: str, limit: int, period_ms: int, burst: Optional[int],
               cost: int, now_us: Optional[int] = None) -> LocalDecision:
        if now_us is None:
            now_us = time.time_ns() // 1000
        with self._lock:
            limiter = self._map.get((route, key))
            if limiter is None or (limiter.limit, limiter.period_us, limiter.capacity) != (
                    limit, period_ms * 1000, burst if burst is not None else limit):
                limiter = LocalGcra(limit, period_ms, burst)
                self._map[(route, key)] = limiter
            self._map.move_to_end((route, key))
            while len(self._map) > self.entries:
                self._map.popitem(last=False)
            return limiter.decide(cost, now_us)
