"""A storage for the `limits` library (and so flask-limiter and slowapi) on the module, under the
URI schemes `rl://`, `rls://` (TLS) and `async+rl://` / `async+rls://` (`limits.aio`).

Importing this module registers the schemes and a `gcra` strategy in `limits.strategies` (and
`limits.aio.strategies`), so flask-limiter and slowapi take `storage_uri="rl://host:port"` and
`strategy="gcra"` by name. limits' strategies map to the module's algorithms:

    fixed-window            ALGO window   (windows aligned to the epoch, see the README)
    moving-window           ALGO log
    sliding-window-counter  ALGO sliding
    gcra (this package)     ALGO gcra     (not in limits)
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

import redis
import redis.asyncio
import limits.aio.storage
import limits.aio.strategies
import limits.storage
import limits.strategies
from limits.limits import RateLimitItem
from limits.util import WindowStats

from . import replies
from .client import AsyncClient, Client
from .commands import Admit, Info, Request
from .errors import RLError
from .replies import Admission

# What a limits fixed window holds: limits increments and compares itself, so every hit is
# counted (as limits' own redis:// does); the module never refuses below this.
_UNBOUNDED = 10**15
# Not limits' own "LIMITS": a switch from redis:// on the same server would otherwise meet the
# old plain keys and answer WRONGTYPE until they expire.
_PREFIX = "LIMITS-RL"


# The connection a storage makes for itself speaks RESP2 unless the options (or the URI's query)
# say `protocol`: RL.ADMIT's reply is then an array of five integers, where RESP3 makes it a map
# of five names and integers, which redis-py's Python parser reads in about twice the time (the
# larger part of what a hit cost above limits' own redis://, whose script answers one integer).
# The replies are read the same either way.
_OWN_CONNECTION = {"protocol": 2}


def _redis_url(uri: str) -> str:
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.replace("async+", "")
    return urllib.parse.urlunparse(parsed._replace(scheme={"rl": "redis", "rls": "rediss"}[scheme]))


# Rules whose arguments a storage keeps (see _Rules): more than an application's limits; a cost that
# changes from hit to hit cannot grow the table past it.
_RULES_KEPT = 1024


class _Hit(Request):
    """RL.ADMIT of one hit: the key, then the arguments after it as `Admit` built them for
    the hit's rule."""

    name = "RL.ADMIT"

    def __init__(self, key: str, rest: Tuple[str, ...]):
        self.key = key
        self.rest = rest

    def args(self) -> List[Any]:
        return [self.name, self.key, *self.rest]

    def parse(self, reply: Any) -> Admission:
        return replies.admission(reply)


class _Rules:
    """What both storages share: their keys, and the request of one hit.

    limits sends the same few rules (limit, expiry, cost) over and over, so the arguments after
    the key are built (and checked) by `Admit` once per rule and kept; COST 1 and ALGO gcra, the
    module's defaults, are left out (two arguments fewer to write and parse per hit). Only whole
    ints are kept: 1.0 and True equal 1 as dict keys, but `Admit` refuses them, and still does."""

    prefix: str
    _rules: Dict[tuple, Tuple[str, ...]]

    def _key(self, key: str) -> str:
        return f"{self.prefix}:{key}"

    def _admit(self, key: str, limit: int, expiry: int, amount: int, algo: str,
               dry_run: bool = False) -> Request:
        key = self._key(key)
        if type(limit) is not int or type(expiry) is not int or type(amount) is not int:
            return Admit(key, limit, expiry, cost=amount, algo=algo, dry_run=dry_run)
        rules = self._rules
        rule = (limit, expiry, amount, algo, dry_run)
        rest = rules.get(rule)
        if rest is None:
            args = Admit(key, limit, expiry, cost=None if amount == 1 else amount,
                         algo=None if algo == "gcra" else algo, dry_run=dry_run).args()
            rest = tuple(args[2:])
            if len(rules) >= _RULES_KEPT:
                rules.clear()
            rules[rule] = rest
        return _Hit(key, rest)


def _window_expiry(info: Any) -> float:
    if info is None or info.window_start_ms is None:
        return time.time()
    return (info.window_start_ms + info.period_ms) / 1000


def _moving(decision: Any, limit: int, expiry: int) -> Tuple[float, int]:
    # A dry run of one unit: `remaining` is what spending it would leave, and a refusal's
    # retry_after_ms is when the oldest entry leaves the window.
    now = time.time()
    if decision.allowed:
        return now - expiry + decision.reset_after_ms / 1000, limit - 1 - decision.remaining
    return now - expiry + decision.retry_after_ms / 1000, limit - decision.remaining


def _sliding(info: Any, expiry: int) -> Tuple[int, float, int, float]:
    if info is None or info.window_start_ms is None:
        return 0, 0.0, 0, 0.0
    now_ms = time.time() * 1000
    start = info.window_start_ms
    return (info.previous or 0, max(0.0, (start + info.period_ms - now_ms) / 1000),
            info.current or 0, max(0.0, (start + 2 * info.period_ms - now_ms) / 1000))


class RLStorage(_Rules, limits.storage.Storage, limits.storage.MovingWindowSupport,
                limits.storage.SlidingWindowCounterSupport):
    """`rl://host:port/db` (`rls://` for TLS); options go to `redis.Redis.from_url`, or pass a
    ready `connection` (a `Redis` or `RedisCluster`)."""

    STORAGE_SCHEME = ["rl", "rls"]
    DEPENDENCIES: list = []

    def __init__(self, uri: str, wrap_exceptions: bool = False, key_prefix: str = _PREFIX,
                 connection: Optional[Any] = None, mode: str = "auto", **options: Any):
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.prefix = key_prefix
        self.redis = connection if connection is not None else redis.Redis.from_url(
            _redis_url(uri), **{**_OWN_CONNECTION, **options})
        self.client = Client(self.redis, mode=mode)
        self._rules = {}

    @property
    def base_exceptions(self):
        return (RLError, redis.exceptions.RedisError)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        d = self.client.execute(self._admit(key, _UNBOUNDED, expiry, amount, "window"))
        return _UNBOUNDED - d.remaining

    def get(self, key: str) -> int:
        info = self.client.execute(Info(self._key(key)))
        return info.count if info is not None and info.count is not None else 0

    def get_expiry(self, key: str) -> float:
        return _window_expiry(self.client.execute(Info(self._key(key))))

    def check(self) -> bool:
        try:
            return bool(self.redis.ping())
        except Exception:
            return False

    def reset(self) -> Optional[int]:
        count = 0
        for k in self.redis.scan_iter(match=f"{self.prefix}:*", count=1000):
            count += self.redis.delete(k)
        return count

    def clear(self, key: str) -> None:
        self.redis.delete(self._key(key))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.client.execute(self._admit(key, limit, expiry, amount, "log")).allowed

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return _moving(self.client.execute(
            self._admit(key, limit, expiry, 1, "log", dry_run=True)), limit, expiry)

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                     amount: int = 1) -> bool:
        return self.client.execute(
            self._admit(key, limit, expiry, amount, "sliding")).allowed

    def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        return _sliding(self.client.execute(Info(self._key(key))), expiry)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.clear(key)

    def gcra(self, key: str, limit: int, expiry: int, amount: int = 1, dry_run: bool = False):
        return self.client.execute(
            self._admit(key, limit, expiry, amount, "gcra", dry_run=dry_run))

    def info(self, key: str):
        return self.client.execute(Info(self._key(key)))


class AsyncRLStorage(_Rules, limits.aio.storage.Storage, limits.aio.storage.MovingWindowSupport,
                     limits.aio.storage.SlidingWindowCounterSupport):
    """`async+rl://host:port/db` (`async+rls://` for TLS), on `redis.asyncio`."""

    STORAGE_SCHEME = ["async+rl", "async+rls"]
    DEPENDENCIES: list = []

    def __init__(self, uri: str, wrap_exceptions: bool = False, key_prefix: str = _PREFIX,
                 connection: Optional[Any] = None, mode: str = "auto", **options: Any):
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.prefix = key_prefix
        self.redis = connection if connection is not None else redis.asyncio.Redis.from_url(
            _redis_url(uri), **{**_OWN_CONNECTION, **options})
        self.client = AsyncClient(self.redis, mode=mode)
        self._rules = {}

    @property
    def base_exceptions(self):
        return (RLError, redis.exceptions.RedisError)

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        d = await self.client.execute(
            self._admit(key, _UNBOUNDED, expiry, amount, "window"))
        return _UNBOUNDED - d.remaining

    async def get(self, key: str) -> int:
        info = await self.client.execute(Info(self._key(key)))
        return info.count if info is not None and info.count is not None else 0

    async def get_expiry(self, key: str) -> float:
        return _window_expiry(await self.client.execute(Info(self._key(key))))

    async def check(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except Exception:
            return False

    async def reset(self) -> Optional[int]:
        count = 0
        async for k in self.redis.scan_iter(match=f"{self.prefix}:*", count=1000):
            count += await self.redis.delete(k)
        return count

    async def clear(self, key: str) -> None:
        await self.redis.delete(self._key(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return (await self.client.execute(
            self._admit(key, limit, expiry, amount, "log"))).allowed

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return _moving(await self.client.execute(
            self._admit(key, limit, expiry, 1, "log", dry_run=True)), limit, expiry)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                           amount: int = 1) -> bool:
        return (await self.client.execute(
            self._admit(key, limit, expiry, amount, "sliding"))).allowed

    async def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        return _sliding(await self.client.execute(Info(self._key(key))), expiry)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.clear(key)

    async def gcra(self, key: str, limit: int, expiry: int, amount: int = 1,
                   dry_run: bool = False):
        return await self.client.execute(
            self._admit(key, limit, expiry, amount, "gcra", dry_run=dry_run))

    async def info(self, key: str):
        return await self.client.execute(Info(self._key(key)))


def _gcra_stats(info: Any, item: RateLimitItem) -> WindowStats:
    now = time.time()
    if info is None:
        return WindowStats(now, item.amount)
    return WindowStats(now + info.reset_after_ms / 1000, info.remaining)


def _needs_rl(storage: Any) -> None:
    if not hasattr(storage, "gcra"):
        raise NotImplementedError(
            f"the gcra strategy needs an rl:// storage, not {storage.__class__.__name__}")


class GCRARateLimiter(limits.strategies.RateLimiter):
    """GCRA, which limits lacks: an idle key admits `amount` at once, then one unit every
    `expiry / amount` seconds (no window edge where twice the limit passes)."""

    def __init__(self, storage: Any):
        _needs_rl(storage)
        super().__init__(storage)

    def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.storage.gcra(item.key_for(*identifiers), item.amount, item.get_expiry(),
                                 cost).allowed

    def test(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.storage.gcra(item.key_for(*identifiers), item.amount, item.get_expiry(),
                                 cost, dry_run=True).allowed

    def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        return _gcra_stats(self.storage.info(item.key_for(*identifiers)), item)


class AsyncGCRARateLimiter(limits.aio.strategies.RateLimiter):
    """The asyncio form of `GCRARateLimiter`, on an `async+rl://` storage."""

    def __init__(self, storage: Any):
        _needs_rl(storage)
        super().__init__(storage)

    async def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return (await self.storage.gcra(item.key_for(*identifiers), item.amount,
                                        item.get_expiry(), cost)).allowed

    async def test(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return (await self.storage.gcra(item.key_for(*identifiers), item.amount,
                                        item.get_expiry(), cost, dry_run=True)).allowed

    async def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        return _gcra_stats(await self.storage.info(item.key_for(*identifiers)), item)


limits.strategies.STRATEGIES.setdefault("gcra", GCRARateLimiter)
limits.aio.strategies.STRATEGIES.setdefault("gcra", AsyncGCRARateLimiter)
