"""The negative cache (SPEC gateway section 2): recent refusals, refused again locally for at
most min(retry_after, max), never longer than the store would."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional, Tuple


class NegativeCache:
    def __init__(self, entries: int):
        self.entries = entries
        self._map: "OrderedDict[Tuple[str, str], Tuple[int, float]]" = OrderedDict()
        self._lock = threading.Lock()

    def refused(self, rule: str, key: str, cost: int, retry_after_ms: int, max_ms: int,
                now: float) -> None:
        if retry_after_ms <= 0:
            return
        until = now + min(retry_after_ms, max_ms) / 1000
        with self._lock:
            self._map[(rule, key)] = (cost, until)
            self._map.move_to_end((rule, key))
            while len(self._map) > self.entries:
                self._map.popitem(last=False)

    def check(self, rule: str, key: str, cost: int, now: float) -> Optional[float]:
        """The remaining wait in seconds when a request of `cost` is refused locally."""
        with self._lock:
            entry = self._map.get((rule, key))
            if entry is None:
                return None
            cached_cost, until = entry
            if now >= until:
                del self._map[(rule, key)]
                return None
            self._map.move_to_end((rule, key))
            if cost < cached_cost:
                return None
            return until - now

    def resize(self, entries: int) -> None:
        with self._lock:
            self.entries = entries
            while len(self._map) > entries:
                self._map.popitem(last=False)

    def __len__(self) -> int:
        return len(self._map)
