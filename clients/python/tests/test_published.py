"""A policy published through Redis, followed (clients/CONTRACT.md section 11): the snapshot
`rl-gateway policy publish` writes (a hash at the key, a notice on the key's channel) loaded,
a publication put in force by its notice, the cache file a start falls back on while Redis is
down."""

import asyncio
import json
import time

import pytest
import redis.asyncio
from gateway_support import gateway, metric, policy
from servers import free_port

from redis_rl.gateway import InvalidPolicy
from redis_rl.gateway.published import PublishedPolicy

RULES = {"user": {"key": "pub:u:${user}", "limit": 10, "period": "1m"}}
ROUTES = [{"method": "GET", "path": "/r", "rules": ["user"]}]


def publish(server, version, key="rl:policy"):
    # What `rl-gateway policy publish` stores, then its notice.
    c = server.conn()
    c.hset(key, mapping={"version": version, "published_by": "test",
                         "published_at_ms": int(time.time() * 1000),
                         "document": json.dumps(policy(ROUTES, RULES, version=version))})
    c.publish(key, version)


async def test_the_published_snapshot_is_loaded_and_a_publication_followed_by_its_notice(
        server, tmp_path):
    publish(server, 1)
    cache = tmp_path / "policy.json"
    # A poll an hour apart: what reaches the gateway here comes by the notice.
    published = PublishedPolicy(redis.asyncio.Redis(port=server.port), cache=str(cache),
                                poll=3600)
    gw = gateway(server.port, await published.load())
    assert gw.policy_version == 1
    assert json.loads(cache.read_text())["version"] == 1
    published.follow(gw)
    try:
        # Published before the subscription is made or after: the read that follows each
        # subscription, or the notice, brings it.
        publish(server, 2)
        for _ in range(400):
            if gw.policy_version == 2:
                break
            await asyncio.sleep(0.05)
        assert gw.policy_version == 2
        assert metric(gw, "rl_gateway_policy_age_seconds") is not None
        assert json.loads(cache.read_text())["version"] == 2
        # A lower version is never put in force.
        publish(server, 1)
        await asyncio.sleep(0.3)
        assert gw.policy_version == 2
    finally:
        await published.stop()


async def test_with_redis_down_a_start_uses_the_cache_and_without_one_says_why(server, tmp_path):
    publish(server, 3, key="rl:policy:cached")
    cache = tmp_path / "policy.json"
    up = PublishedPolicy(redis.asyncio.Redis(port=server.port), key="rl:policy:cached",
                         cache=str(cache))
    await up.load()
    down = redis.asyncio.Redis(port=free_port(), socket_connect_timeout=0.5)
    doc = await PublishedPolicy(down, key="rl:policy:cached", cache=str(cache)).load()
    assert doc["version"] == 3
    with pytest.raises(InvalidPolicy, match="unreachable"):
        await PublishedPolicy(down, key="rl:policy:cached").load()
    with pytest.raises(InvalidPolicy, match="no policy is published at rl:policy:none"):
        await PublishedPolicy(redis.asyncio.Redis(port=server.port), key="rl:policy:none").load()
