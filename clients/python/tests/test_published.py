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


# Following cannot be steered around (clients/CONTRACT.md section 11): entries written into
# Redis by hand, as an attacker or a mistaken script would.

BOUND = 8 << 20  # MAX_DOCUMENT_BYTES


def write_entry(server, key, version_field, document, at_ms=None):
    c = server.conn()
    c.hset(key, mapping={"version": version_field, "published_by": "by-hand",
                         "published_at_ms": at_ms or int(time.time() * 1000),
                         "document": document})
    c.publish(key, version_field)


async def until(check):
    for _ in range(400):
        if check():
            return
        await asyncio.sleep(0.025)
    assert check()


def rejected(gw):
    return metric(gw, "rl_gateway_policy_rejected_total")


def refusals(caplog):
    return [r.getMessage() for r in caplog.records if "is refused" in r.getMessage()]


def sent(server):
    return server.conn().info("stats")["total_net_output_bytes"]


async def test_a_version_field_that_disagrees_with_its_document_is_refused(server):
    key = "rl:policy:disagree"
    publish(server, 1, key=key)
    published = PublishedPolicy(redis.asyncio.Redis(port=server.port), key=key, poll=0.05)
    gw = gateway(server.port, await published.load())
    published.follow(gw)
    try:
        assert rejected(gw) == 0
        # The field claims 9, the document is version 5: never in force.
        write_entry(server, key, 9, json.dumps(policy(ROUTES, RULES, version=5)))
        await until(lambda: rejected(gw) == 1)
        # The field claims less than the document: refused too.
        write_entry(server, key, 3, json.dumps(policy(ROUTES, RULES, version=900)))
        await until(lambda: rejected(gw) == 2)
        assert gw.policy_version == 1
        # A correct entry is followed as ever.
        publish(server, 2, key=key)
        await until(lambda: gw.policy_version == 2)
    finally:
        await published.stop()


async def test_a_start_with_a_good_cache_uses_it_whatever_the_store_holds(server, tmp_path,
                                                                         caplog):
    key = "rl:policy:restart"
    publish(server, 4, key=key)
    cache = str(tmp_path / "policy.json")
    await PublishedPolicy(redis.asyncio.Redis(port=server.port), key=key, cache=cache).load()
    held = [(5, json.dumps({"version": 5, "routes": []})),
            (9, json.dumps(policy(ROUTES, RULES, version=6))),
            (7, json.dumps({"version": 7, "pad": "x" * BOUND}))]
    for field, document in held:
        caplog.clear()
        write_entry(server, key, field, document)
        published = PublishedPolicy(redis.asyncio.Redis(port=server.port), key=key, cache=cache,
                                    poll=3600)
        doc = await published.load()
        assert doc["version"] == 4
        gw = gateway(server.port, doc)
        published.follow(gw)
        await published.stop()
        assert rejected(gw) == 1
        assert len(refusals(caplog)) == 1, refusals(caplog)
    # Without a cache to start on, a refused entry is a refusal to start, saying why.
    with pytest.raises(InvalidPolicy, match="is refused.*and no cache holds"):
        await PublishedPolicy(redis.asyncio.Redis(port=server.port), key=key).load()


async def test_a_document_is_read_only_when_it_changed_and_never_past_the_bound(server):
    key = "rl:policy:large"
    publish(server, 1, key=key)
    published = PublishedPolicy(redis.asyncio.Redis(port=server.port), key=key, poll=0.02)
    gw = gateway(server.port, await published.load())
    published.follow(gw)
    try:
        # Past the bound: refused by its length, never read.
        before = sent(server)
        write_entry(server, key, 2, json.dumps({"version": 2, "pad": "x" * (BOUND + 1024)}))
        await until(lambda: rejected(gw) == 1)
        await asyncio.sleep(1)
        assert sent(server) - before < 1 << 20
        # Under the bound but invalid: read once, not at each of some fifty polls.
        before = sent(server)
        write_entry(server, key, 3, json.dumps({"version": 3, "routes": [],
                                                "pad": "x" * (1 << 20)}))
        await until(lambda: rejected(gw) == 2)
        await asyncio.sleep(1)
        assert 1 << 20 <= sent(server) - before < 2 << 20
        assert gw.policy_version == 1
    finally:
        await published.stop()


async def test_every_distinct_refused_document_is_logged_once_and_counted(server, caplog):
    key = "rl:policy:distinct"
    publish(server, 1, key=key)
    published = PublishedPolicy(redis.asyncio.Redis(port=server.port), key=key, poll=0.02)
    gw = gateway(server.port, await published.load())
    published.follow(gw)
    try:
        first = json.dumps({"version": 2, "routes": []})
        second = json.dumps({"version": 3, "rules": {}})
        at = int(time.time() * 1000)
        write_entry(server, key, 2, first, at)
        await until(lambda: rejected(gw) == 1)
        write_entry(server, key, 3, second, at)
        await until(lambda: rejected(gw) == 2)
        # The first again, exactly: the same document, neither logged nor counted twice.
        write_entry(server, key, 2, first, at)
        await asyncio.sleep(0.5)
        assert rejected(gw) == 2
        assert gw.policy_version == 1
        logged = refusals(caplog)
        assert len(logged) == 2, logged
        assert "version 2" in logged[0] and "version 3" in logged[1], logged
    finally:
        await published.stop()
