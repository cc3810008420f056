"""A policy published through Redis (`rl-gateway policy publish`, clients/CONTRACT.md
section 11), followed: the snapshot at `key` loaded at start (or, with Redis down, the last good
one from `cache`), then every publication's notice on the key's channel, and a poll every
`poll` seconds as a safety net, put a higher version in force. A gateway that cannot refresh
keeps enforcing the snapshot it has; `Gateway.render_metrics` shows its age.

    published = PublishedPolicy(redis.asyncio.Redis(), cache="/var/lib/app/policy.json")
    gateway = Gateway(client, await published.load())
    published.follow(gateway)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from redis.exceptions import RedisError
from redis_rl_engine import InvalidPolicy, StalePolicy

log = logging.getLogger("redis_rl.gateway")

DEFAULT_KEY = "rl:policy"


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

    async def _fetch(self) -> dict | None:
        fields = await asyncio.wait_for(self.redis.hgetall(self.key), self.timeout)
        fields = {_text(k): _text(v) for k, v in fields.items()}
        if "document" not in fields:
            return None
        return {"version": int(fields.get("version") or 0),
                "published_by": fields.get("published_by", ""),
                "published_at_ms": int(fields.get("published_at_ms") or 0),
                "document": fields["document"]}

    def _write_cache(self, snapshot: dict) -> None:
        # Whole or not at all: a crash mid-write never leaves a half file to start from.
        if self.cache is None:
            return
        temporary = f"{self.cache}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(snapshot, f)
        os.replace(temporary, self.cache)

    async def load(self) -> dict:
        """The snapshot to start with, as a policy document: the store's, else the cache's.
        Raises InvalidPolicy saying why there is none."""
        try:
            snapshot = await self._fetch()
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            unreachable = exc
        else:
            if snapshot is None:
                raise InvalidPolicy(f"no policy is published at {self.key}")
            self.published_at_ms = snapshot["published_at_ms"]
            try:
                self._write_cache(snapshot)
            except OSError as exc:
                log.warning("cannot write the policy cache: %s", exc)
            return json.loads(snapshot["document"])
        if self.cache is None:
            raise InvalidPolicy(f"the store is unreachable ({unreachable!r}) and no cache "
                                "holds a snapshot to start from")
        try:
            with open(self.cache, encoding="utf-8") as f:
                snapshot = json.load(f)
        except (OSError, ValueError) as exc:
            raise InvalidPolicy(f"the store is unreachable ({unreachable!r}) and the policy "
                                f"cache cannot be read: {exc}") from exc
        log.warning("the store is unreachable (%r); starting from the snapshot cached in %s "
                    "(version %s)", unreachable, self.cache, snapshot.get("version"))
        self.published_at_ms = int(snapshot.get("published_at_ms") or 0)
        return json.loads(snapshot["document"])

    async def refresh(self, gateway: Any) -> int | None:
        """Puts the stored snapshot in force if it is higher than the gateway's: its version,
        or None when there is nothing newer."""
        version = await asyncio.wait_for(self.redis.hget(self.key, "version"), self.timeout)
        if version is None or int(version) <= gateway.policy_version:
            return None
        snapshot = await self._fetch()
        if snapshot is None:
            return None
        try:
            in_force = gateway.engine.reload(snapshot["document"])
        except StalePolicy:
            return None
        self.published_at_ms = snapshot["published_at_ms"]
        gateway.engine.policy_published(self.published_at_ms * 1000)
        self._write_cache(snapshot)
        log.info("following %s: version %d in force (published by %s)", self.key, in_force,
                 snapshot["published_by"])
        return in_force

    def follow(self, gateway: Any) -> asyncio.Task:
        """Follows the key on a task of its own until `stop`."""
        if self.published_at_ms:
            gateway.engine.policy_published(self.published_at_ms * 1000)
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
            except (RedisError, OSError, asyncio.TimeoutError):
                subscribed = False  # the store is down: poll until it is back
            while True:
                try:
                    # What was published while nothing listened is read now.
                    await self.refresh(gateway)
                    failing = False
                except (RedisError, OSError, asyncio.TimeoutError, InvalidPolicy) as exc:
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
