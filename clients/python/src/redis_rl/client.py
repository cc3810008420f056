"""Sync and asyncio clients over any redis-py (or valkey-py) connection: `Redis`, `RedisCluster`,
`asyncio.Redis`, `asyncio.RedisCluster`.

Every command goes through one execute function that knows the command's keys, so it is sent
natively to the module or, on a server without it, as `EVALSHA` of `rl.lua` (clients/SPEC.md
section 5); on a cluster it goes to the primary of its first key's slot, computed here (no
`COMMAND GETKEYS` per call)."""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import threading
from typing import Any, Callable, List, Optional, Sequence

from . import commands as c
from .commands import Bytes, Duration, Request, Rule
from .errors import Refused, RLError, Unavailable, classify
from .replies import (Acquisition, Admission, Allotment, GrantDecision, KeyInfo,
                      MultiDecision, Settlement, ThrottleDecision)

log = logging.getLogger("redis_rl")

MODULE = "module"
SCRIPT = "script"


def load_script() -> Optional[bytes]:
    """The text of rl.lua shipped in the package, or None when this build has none."""
    try:
        return importlib.resources.files("redis_rl").joinpath("rl.lua").read_bytes()
    except (FileNotFoundError, OSError):
        return None


class _Modes:
    """The mode in force (None: to detect before the next call), logged once per change and
    handed to `on_mode` hooks (the gateway's `rl_gateway_store_mode` gauge)."""

    def __init__(self, mode: str, script: Optional[bytes]):
        if mode not in ("auto", MODULE, SCRIPT):
            raise ValueError(f"mode must be auto, module or script, not {mode!r}")
        self.fixed = mode != "auto"
        self.current: Optional[str] = None if mode == "auto" else mode
        self.last_reported: Optional[str] = None
        self.script = script
        self.sha = hashlib.sha1(script).hexdigest() if script is not None else None
        self.hooks: List[Callable[[str], None]] = []
        self.lock = threading.Lock()

    def set(self, mode: str) -> None:
        self.current = mode
        with self.lock:
            if mode == self.last_reported:
                return
            self.last_reported = mode
        log.info("redis-rl store mode: %s", mode)
        for hook in list(self.hooks):
            hook(mode)

    def forget(self) -> None:
        if not self.fixed:
            self.current = None

    @staticmethod
    def of_command_info(reply: Any) -> str:
        # Sent as "COMMAND INFO" in one word, which redis-py splits on the wire but has no
        # parser for (its COMMAND parser fails on the nil entry of an unknown command).
        if isinstance(reply, (list, tuple)):
            return MODULE if reply and reply[0] else SCRIPT
        return MODULE if reply else SCRIPT

    def wire(self, request: Request, args: List[Any]) -> List[Any]:
        if self.current != SCRIPT:
            return args
        if self.sha is None:
            raise Refused("ERR script mode needs rl.lua, and this build of redis-rl ships none")
        keys = request.keys()
        return ["EVALSHA", self.sha, str(len(keys)), *keys, *args]


def _is_cluster(redis: Any) -> bool:
    return hasattr(redis, "nodes_manager") and hasattr(redis, "get_node_from_key")


def _is_noscript(exc: BaseException) -> bool:
    return type(exc).__name__ == "NoScriptError" or str(exc).startswith("NOSCRIPT")


def _mode_may_have_changed(exc: BaseException, native: bool, fixed: bool) -> bool:
    """NOSCRIPT (the script cache was emptied: a restart, a failover), or `unknown command` to
    a native command (a failover onto a server without the module). Neither spent anything,
    so the mode is detected again and the command sent once more."""
    if _is_noscript(exc):
        return True
    # redis-py strips the ERR code from the text, older versions and valkey-py may not.
    text = str(exc)
    return native and not fixed and text.startswith(("unknown command", "ERR unknown command"))


class _Base:
    def __init__(self, redis: Any, mode: str = "auto", script: Optional[bytes] = None):
        self.redis = redis
        self.cluster = _is_cluster(redis)
        self._modes = _Modes(mode, script if script is not None else load_script())
        if self._modes.current is not None:
            self._modes.set(self._modes.current)

    @property
    def mode(self) -> Optional[str]:
        """`module` or `script`; None until the first call detected it."""
        return self._modes.current

    def on_mode(self, hook: Callable[[str], None]) -> None:
        """Calls `hook(mode)` on every change of mode (and now, if it is known)."""
        self._modes.hooks.append(hook)
        if self._modes.last_reported is not None:
            hook(self._modes.last_reported)

    def _any_node(self) -> dict:
        return {"target_nodes": self.redis.get_default_node()} if self.cluster else {}

    def _target(self, request: Request) -> dict:
        if not self.cluster:
            return {}
        node = self.redis.nodes_manager.get_node_from_slot(request.slot())
        return {"target_nodes": node}


class Client(_Base):
    """A redis-rl client over a sync redis-py `Redis` or `RedisCluster`.

    `mode`: `auto` (detect with `COMMAND INFO RL.ADMIT`), `module` or `script`."""

    def execute(self, request: Request) -> Any:
        args = request.args()
        target = self._target(request)
        try:
            if self._modes.current is None:
                self._detect(target)
            wired = self._modes.wire(request, args)
            try:
                reply = self.redis.execute_command(*wired, **target)
            except Exception as exc:
                if not _mode_may_have_changed(exc, wired is args, self._modes.fixed):
                    raise
                self._detect(target)
                if wired is args and self._modes.current != SCRIPT:
                    raise
                if self._modes.current == SCRIPT:
                    self.redis.execute_command("SCRIPT", "LOAD", self._modes.script, **target)
                reply = self.redis.execute_command(*self._modes.wire(request, args), **target)
        except RLError:
            raise
        except Exception as exc:
            err = classify(exc)
            if isinstance(err, Unavailable):
                self._modes.forget()
            raise err from exc
        return request.parse(reply)

    def _detect(self, target: dict) -> None:
        if self._modes.fixed:
            return
        reply = self.redis.execute_command("COMMAND INFO", "RL.ADMIT", **target)
        self._modes.set(_Modes.of_command_info(reply))

    def prepare(self) -> str:
        """Detects the mode now and, in script mode, loads the script, so that the first
        command does not pay for either; returns the mode."""
        try:
            if self._modes.current is None:
                self._detect(self._any_node())
            if self._modes.current == SCRIPT and self._modes.script is not None:
                if self.cluster:
                    self.redis.script_load(self._modes.script)
                else:
                    self.redis.execute_command("SCRIPT", "LOAD", self._modes.script)
        except RLError:
            raise
        except Exception as exc:
            raise classify(exc) from exc
        return self._modes.current

    def admit(self, key: Bytes, limit: int, period: Duration, *, burst: Optional[int] = None,
              cost: Optional[int] = None, algo: Optional[str] = None, dry_run: bool = False,
              reserve: Optional[Bytes] = None, keep: Optional[Duration] = None) -> Admission:
        return self.execute(c.Admit(key, limit, period, burst=burst, cost=cost, algo=algo,
                                    dry_run=dry_run, reserve=reserve, keep=keep))

    def multi(self, rules: Sequence[Rule], *, dry_run: bool = False) -> MultiDecision:
        return self.execute(c.Multi(list(rules), dry_run=dry_run))

    def grant(self, key: Bytes, limit: int, period: Duration, want: int, *,
              burst: Optional[int] = None, algo: Optional[str] = None,
              ttl: Optional[Duration] = None) -> GrantDecision:
        return self.execute(c.Grant(key, limit, period, want, burst=burst, algo=algo, ttl=ttl))

    def acquire(self, key: Bytes, capacity: int, lease: Duration, *,
                holder: Optional[Bytes] = None) -> Acquisition:
        return self.execute(c.Acquire(key, capacity, lease, holder=holder))

    def release(self, key: Bytes, holder: Bytes) -> bool:
        return self.execute(c.Release(key, holder))

    def renew(self, key: Bytes, holder: Bytes, lease: Duration) -> bool:
        return self.execute(c.Renew(key, holder, lease))

    def settle(self, key: Bytes, id: Bytes, actual: int,
               forget: bool = False) -> Optional[Settlement]:
        return self.execute(c.Settle(key, id, actual, forget))

    def info(self, key: Bytes) -> Optional[KeyInfo]:
        return self.execute(c.Info(key))

    def allocate(self, key: Bytes, limit: int, region: Bytes, reporter: Bytes, demand: int,
                 held: int, *, reserve: int, regions: int, lease: Duration) -> Allotment:
        """RL.ALLOCATE, on the home store of a global rule (one limit across regions)."""
        return self.execute(c.Allocate(key, limit, region, reporter, demand, held, reserve,
                                       regions, lease))

    def throttle(self, key: Bytes, max_burst: int, count: int, period: int,
                 quantity: Optional[int] = None) -> ThrottleDecision:
        return self.execute(c.Throttle(key, max_burst, count, period, quantity))


class AsyncClient(_Base):
    """A redis-rl client over `redis.asyncio.Redis` or `redis.asyncio.RedisCluster`."""

    async def execute(self, request: Request) -> Any:
        args = request.args()
        if self.cluster:
            # the asyncio cluster client learns its slot map on first use, not at construction
            await self.redis.initialize()
        target = self._target(request)
        try:
            if self._modes.current is None:
                await self._detect(target)
            wired = self._modes.wire(request, args)
            try:
                reply = await self.redis.execute_command(*wired, **target)
            except Exception as exc:
                if not _mode_may_have_changed(exc, wired is args, self._modes.fixed):
                    raise
                await self._detect(target)
                if wired is args and self._modes.current != SCRIPT:
                    raise
                if self._modes.current == SCRIPT:
                    await self.redis.execute_command("SCRIPT", "LOAD", self._modes.script,
                                                     **target)
                reply = await self.redis.execute_command(*self._modes.wire(request, args),
                                                         **target)
        except RLError:
            raise
        except Exception as exc:
            err = classify(exc)
            if isinstance(err, Unavailable):
                self._modes.forget()
            raise err from exc
        return request.parse(reply)

    async def _detect(self, target: dict) -> None:
        if self._modes.fixed:
            return
        reply = await self.redis.execute_command("COMMAND INFO", "RL.ADMIT", **target)
        self._modes.set(_Modes.of_command_info(reply))

    async def prepare(self) -> str:
        """Detects the mode now and, in script mode, loads the script, so that the first
        command does not pay for either; returns the mode."""
        try:
            if self.cluster:
                await self.redis.initialize()
            if self._modes.current is None:
                await self._detect(self._any_node())
            if self._modes.current == SCRIPT and self._modes.script is not None:
                if self.cluster:
                    await self.redis.script_load(self._modes.script)
                else:
                    await self.redis.execute_command("SCRIPT", "LOAD", self._modes.script)
        except RLError:
            raise
        except Exception as exc:
            raise classify(exc) from exc
        return self._modes.current

    async def admit(self, key: Bytes, limit: int, period: Duration, *,
                    burst: Optional[int] = None, cost: Optional[int] = None,
                    algo: Optional[str] = None, dry_run: bool = False,
                    reserve: Optional[Bytes] = None,
                    keep: Optional[Duration] = None) -> Admission:
        return await self.execute(c.Admit(key, limit, period, burst=burst, cost=cost, algo=algo,
                                          dry_run=dry_run, reserve=reserve, keep=keep))

    async def multi(self, rules: Sequence[Rule], *, dry_run: bool = False) -> MultiDecision:
        return await self.execute(c.Multi(list(rules), dry_run=dry_run))

    async def grant(self, key: Bytes, limit: int, period: Duration, want: int, *,
                    burst: Optional[int] = None, algo: Optional[str] = None,
                    ttl: Optional[Duration] = None) -> GrantDecision:
        return await self.execute(c.Grant(key, limit, period, want, burst=burst, algo=algo,
                                          ttl=ttl))

    async def acquire(self, key: Bytes, capacity: int, lease: Duration, *,
                      holder: Optional[Bytes] = None) -> Acquisition:
        return await self.execute(c.Acquire(key, capacity, lease, holder=holder))

    async def release(self, key: Bytes, holder: Bytes) -> bool:
        return await self.execute(c.Release(key, holder))

    async def renew(self, key: Bytes, holder: Bytes, lease: Duration) -> bool:
        return await self.execute(c.Renew(key, holder, lease))

    async def settle(self, key: Bytes, id: Bytes, actual: int,
                     forget: bool = False) -> Optional[Settlement]:
        return await self.execute(c.Settle(key, id, actual, forget))

    async def info(self, key: Bytes) -> Optional[KeyInfo]:
        return await self.execute(c.Info(key))

    async def allocate(self, key: Bytes, limit: int, region: Bytes, reporter: Bytes,
                       demand: int, held: int, *, reserve: int, regions: int,
                       lease: Duration) -> Allotment:
        """RL.ALLOCATE, on the home store of a global rule (one limit across regions)."""
        return await self.execute(c.Allocate(key, limit, region, reporter, demand, held,
                                             reserve, regions, lease))

    async def throttle(self, key: Bytes, max_burst: int, count: int, period: int,
                       quantity: Optional[int] = None) -> ThrottleDecision:
        return await self.execute(c.Throttle(key, max_burst, count, period, quantity))
