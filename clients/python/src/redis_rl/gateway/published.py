"""A policy published through Redis (`rl-gateway policy publish`, clients/CONTRACT.md
section 11), followed: the snapshot at `key` loaded at start (or, with Redis down or holding
nothing enforceable, the last good one from `cache`), then every publication's notice on the
key's channel, and a poll every `poll` seconds as a safety net, put a higher version in force.
A gateway that cannot refresh keeps enforcing the snapshot it has; `Gateway.render_metrics`
shows its age.

The same rules as the Rust and Node followers: the document's own `version` governs (an entry
whose `version` field disagrees is refused), an entry is read whole only when its small fields
or its length changed, a document past `MAX_DOCUMENT_BYTES` is refused without being read, and
each distinct refused document is logged once and counted in `rl_gateway_policy_rejected_total`.

    published = PublishedPolicy(redis.asyncio.Redis(), cache="/var/lib/app/policy.json")
    gateway = Gateway(client, await published.load())
    published.follow(gateway)
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
from typing import Any

from redis.exceptions import RedisError
from redis_rl_engine import InvalidPolicy, StalePolicy, load_policy

log = logging.getLogger("redis_rl.gateway")

DEFAULT_KEY = "rl:policy"

# The largest document a follower reads (8 MiB), as in the Rust client
# (`redis_rl_client::gateway::published::MAX_DOCUMENT_BYTES`).
MAX_DOCUMENT_BYTES = 8 << 20

# Refused documents remembered so each is logged and counted once.
_REMEMBERED = 16

_STORE_ERRORS = (RedisError, OSError, asyncio.TimeoutError)


class _Refused(Exception):
    pass


_READ_HEAD = """
return {redis.call('HMGET', KEYS[1], 'version', 'published_by', 'published_at_ms'),
        redis.call('HSTRLEN', KEYS[1], 'document')}
"""


class PublishedPolicy:
    """`redis`: a `redis.asyncio.Redis` client (the store `policy publish` wrote to)."""

    def __init__(self, redis: Any, key: str = DEFAULT_KEY, cache: str | None = None,
                 poll: float = 5.0, timeout: float = 2.0):
        self.redis = redis
        self.key = key
        self.cache = cache
        self.poll = poll
        self.timeout = timeout
        self.published_at_ms = 0
        self._task: asyncio.Task | None = None
        self._seen: tuple | None = None  # the head last examined: unchanged, not read again
        self._refused: collections.deque = collections.deque(maxlen=_REMEMBERED)
        self._uncounted = 0  # refusals before a gateway was given, counted by `follow`
        self._lock = asyncio.Lock()

    async def _call(self, command) -> Any:
        return await asyncio.wait_for(command, self.timeout)

    async def _head(self) -> tuple:
        """The small fields and the document's length: what tells one entry from another. Read
        at one instant, by a script: as two commands, a write between them gave a head that
        never was (the old version with the new length), refused twice as two documents."""
        (version, by, at), length = await self._call(self.redis.eval(_READ_HEAD, 1, self.key))
        return (_text(version), _text(by) or "", _text(at), int(length))

    async def _whole(self) -> tuple[tuple, bytes]:
        version, by, at, document = await self._call(self.redis.hmget(
            self.key, "version", "published_by", "published_at_ms", "document"))
        document = _bytes(document)
        return (_text(version), _text(by) or "", _text(at), len(document)), document

    def _refuse(self, head: tuple, identity: int, why: str, gateway: Any) -> str:
        """Logs and counts a refused entry once per distinct document."""
        message = f"{_describe(self.key, head)} is refused: {why}"
        self._seen = head
        if identity in self._refused:
            return message
        self._refused.append(identity)
        if gateway is None:
            self._uncounted += 1
        else:
            gateway.engine.policy_rejected()
        log.warning("%s; the snapshot in force stays", message)
        return message

    async def _examine(self, gateway: Any) -> dict | None:
        """The stored snapshot when its head changed and it is enforceable; None when nothing
        is stored or nothing changed; raises `_Refused` (logged and counted)."""
        head = await self._head()
        if _absent(head):
            return None
        if head == self._seen:
            return None
        if head[3] > MAX_DOCUMENT_BYTES:
            why = f"its document is {head[3]} bytes, past the bound of {MAX_DOCUMENT_BYTES} (8 MiB)"
            raise _Refused(self._refuse(head, hash(head), why, gateway))
        try:
            head, document = await self._whole()
        except UnicodeDecodeError:  # a client that decodes replies met bytes that are not text
            raise _Refused(self._refuse(head, hash(head), "its document is not UTF-8 text",
                                        gateway)) from None
        if _absent(head):
            return None
        try:
            return _judge(head, document)
        except (_Refused, InvalidPolicy) as exc:
            raise _Refused(self._refuse(head, hash((head, document)), str(exc), gateway)) \
                from exc

    def _write_cache(self, snapshot: dict) -> None:
        # Whole or not at all: a crash mid-write never leaves a half file to start from.
        if self.cache is None:
            return
        temporary = f"{self.cache}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump({k: v for k, v in snapshot.items() if k != "head"}, f)
        os.replace(temporary, self.cache)

    def _read_cache(self) -> dict:
        """The cache file's snapshot, held to the rules of a stored entry."""
        # A document escaped into JSON grows; twice the bound is room enough for any real one.
        if os.path.getsize(self.cache) > 2 * MAX_DOCUMENT_BYTES:
            raise ValueError(f"{self.cache}: larger than {2 * MAX_DOCUMENT_BYTES} bytes")
        with open(self.cache, encoding="utf-8") as f:
            snapshot = json.load(f)
        document = snapshot["document"].encode()
        version = snapshot.get("version")
        head = (None if version is None else str(version), snapshot.get("published_by", ""),
                str(snapshot.get("published_at_ms") or 0), len(document))
        try:
            return _judge(head, document)
        except (_Refused, InvalidPolicy) as exc:
            raise ValueError(f"{self.cache}: {exc}") from exc

    async def load(self) -> dict:
        """The snapshot to start with, as a policy document: the store's when it is good (and
        not below the cache's), else the cache's when that is good, whatever the store holds.
        Raises InvalidPolicy saying why there is none."""
        cached, cache_error = None, "no cache holds a snapshot to start from"
        if self.cache is not None:
            try:
                cached = self._read_cache()
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                cache_error = f"the policy cache cannot be used: {exc}"
        refused = False  # a refusal was logged on its own already
        async with self._lock:
            try:
                stored = await self._examine(None)
            except _Refused as exc:
                why, refused = str(exc), True
            except _STORE_ERRORS as exc:
                why = f"the store is unreachable ({exc!r})"
            else:
                if stored is None:
                    why = f"no policy is published at {self.key}"
                else:
                    self._seen = stored["head"]
                    if cached is None or stored["version"] >= cached["version"]:
                        self.published_at_ms = stored["published_at_ms"]
                        try:
                            self._write_cache(stored)
                        except OSError as exc:
                            log.warning("cannot write the policy cache: %s", exc)
                        return json.loads(stored["document"])
                    why = (f"the snapshot at {self.key} is version {stored['version']}, below "
                           "the cached one")
        if cached is None:
            raise InvalidPolicy(f"{why}, and {cache_error}")
        said = f"the store holds nothing to enforce at {self.key}" if refused else why
        log.warning("%s; starting from the snapshot cached in %s (version %s)", said, self.cache,
                    cached["version"])
        self.published_at_ms = cached["published_at_ms"]
        return json.loads(cached["document"])

    async def refresh(self, gateway: Any) -> int | None:
        """Puts the stored snapshot in force if it changed and is higher than the gateway's:
        its version, or None when there is nothing new to enforce. Raises InvalidPolicy for a
        stored entry no gateway may enforce (logged and counted already)."""
        async with self._lock:
            try:
                snapshot = await self._examine(gateway)
            except _Refused as exc:
                raise InvalidPolicy(str(exc)) from None
            if snapshot is None:
                return None
            self._seen = snapshot["head"]
            try:
                in_force = gateway.engine.reload(snapshot["document"])
            except StalePolicy as exc:
                # Not above the version in force (a store reset, an entry written by hand).
                log.warning("%s is not followed: %s", _describe(self.key, snapshot["head"]), exc)
                return None
        self.published_at_ms = snapshot["published_at_ms"]
        gateway.engine.policy_published(self.published_at_ms * 1000)
        try:
            self._write_cache(snapshot)
        except OSError as exc:
            log.warning("cannot write the policy cache: %s", exc)
        log.info("following %s: version %d in force (published by %s)", self.key, in_force,
                 snapshot["published_by"])
        return in_force

    def follow(self, gateway: Any) -> asyncio.Task:
        """Follows the key on a task of its own until `stop`."""
        if self.published_at_ms:
            gateway.engine.policy_published(self.published_at_ms * 1000)
        for _ in range(self._uncounted):
            gateway.engine.policy_rejected()
        self._uncounted = 0
        self._task = asyncio.ensure_future(self._follow(gateway))
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _follow(self, gateway: Any) -> None:
        failing = False
        while True:
            pubsub = self.redis.pubsub()
            try:
                await asyncio.wait_for(pubsub.subscribe(self.key), self.timeout)
                subscribed = True
            except _STORE_ERRORS:
                subscribed = False  # the store is down: poll until it is back
            while True:
                try:
                    # What was published while nothing listened is read now.
                    await self.refresh(gateway)
                    failing = False
                except InvalidPolicy:
                    failing = False  # logged when it was refused
                except _STORE_ERRORS as exc:
                    if not failing:
                        log.warning("cannot refresh the policy from %s (%r); the snapshot in "
                                    "force stays", self.key, exc)
                    failing = True
                if not subscribed:
                    await asyncio.sleep(self.poll)
                    break
                try:
                    await pubsub.get_message(ignore_subscribe_messages=True, timeout=self.poll)
                except (RedisError, OSError):
                    break  # the subscription's connection is gone: subscribe again
            try:
                await pubsub.aclose()
            except (RedisError, OSError):
                pass  # already gone


def _judge(head: tuple, document: bytes) -> dict:
    """The rules an entry meets before any gateway enforces it: a document within the bound, a
    valid policy, and a `version` field that says the document's own version."""
    if len(document) > MAX_DOCUMENT_BYTES:
        raise _Refused(f"its document is {len(document)} bytes, past the bound of "
                       f"{MAX_DOCUMENT_BYTES} (8 MiB)")
    try:
        text = document.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("its document is not UTF-8 text") from None
    version = load_policy(text)
    if head[0] != str(version):
        raise _Refused(f"its version field says {head[0] or 'nothing'}, its document's version "
                       f"is {version}")
    return {"version": version, "published_by": head[1],
            "published_at_ms": int(head[2]) if (head[2] or "").isdigit() else 0,
            "document": text, "head": head}


def _absent(head: tuple) -> bool:
    return head[0] is None and head[2] is None and head[3] == 0


def _describe(key: str, head: tuple) -> str:
    return (f"the snapshot at {key} (version {head[0] or 'none'}, published by "
            f"{head[1] or 'nobody'})")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    return value if isinstance(value, bytes) else str(value).encode()
