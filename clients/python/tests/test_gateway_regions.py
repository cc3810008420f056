"""One limit across regions through the gateway, against a home server and a regional server:
a global rule's key decided at the floor until the home answers, the home's record of this
gateway's report and its grant, then a burst admitted by the allocation; the reports stopped by
close; a home behind Sentinel, given as redis-py's client of the primary it names; a global rule
without a region refused."""

import asyncio
import math
import os
import time

import pytest
import redis.asyncio
from gateway_support import gateway, http, policy
from servers import Sentinel, Server

from redis_rl import AsyncClient
from redis_rl.gateway import InvalidPolicy

# 100 a second shared by two regions, a tenth held back, reported every 500 ms: the pool is 90
# and the floor 2 (the pool's 5 % over two regions).
RULES = {"tenant": {"key": "{g:${tenant}}:tenant", "limit": 100, "period": "1s",
                    "global": {"reserve": 0.1, "every": "500ms"}}}
ROUTES = [{"method": "GET", "path": "/", "rules": ["tenant"]}]
POLICY = policy(ROUTES, RULES, regions=["eu", "us"])


async def admitted(client, n):
    statuses = [(await client.get("/", headers={"x-tenant": "atlas"})).status_code
                for _ in range(n)]
    assert set(statuses) <= {200, 429}
    return statuses.count(200)


async def test_a_global_key_runs_at_the_floor_then_at_the_homes_allocation(server):
    home = Server(module=os.environ.get("RL_MODE") != "script")
    try:
        gw = gateway(server.port, POLICY, region="eu", home=home.url, reporter="gw-1")
        async with http(gw) as client:
            # No answer yet: the floor's 2, however many ask (and its 2 a second if asking
            # takes a while on a busy machine).
            start = time.monotonic()
            floor = await admitted(client, 10)
            elapsed = time.monotonic() - start
            assert 2 <= floor <= 2 + math.ceil(2 * elapsed), (floor, elapsed)
            # The first report goes `every` after the key's first request; the home keeps it.
            record = {}
            for _ in range(100):
                record = home.conn().hgetall("rl:alloc:{g:atlas}:tenant")
                if record:
                    break
                await asyncio.sleep(0.02)
            assert list(record) == ["eu gw-1"]
            demand, _seen, granted, _held = (int(v) for v in record["eu gw-1"].split())
            # Ten asked within a period, reported per period: a jump goes a quarter of `every`
            # after the key's first request, so at most about ten in 125 ms.
            assert 10 <= demand <= 100, record
            # The only region asking is granted the pool but the other region's floor.
            assert granted == 88, record
            # Once the floor's state has drained (GCRA carries it into the new limit), a burst
            # is admitted by the allocation: ten times the floor or more (a report with less
            # demand is answered the safe share, 45), never more than 88 and what 88 a second
            # adds.
            await asyncio.sleep(1.0)
            start = time.monotonic()
            n = await admitted(client, 150)
            elapsed = time.monotonic() - start
            assert 20 <= n <= 88 + 88 * elapsed + 1, (n, elapsed, record)
        await gw.close()
        assert gw._reporter._task is None
    finally:
        home.close()


async def test_the_home_may_be_behind_sentinel(server):
    home = Server(module=os.environ.get("RL_MODE") != "script")
    sentinel = Sentinel(home)
    try:
        primary = redis.asyncio.Sentinel([("127.0.0.1", sentinel.port)]).master_for(Sentinel.NAME)
        gw = gateway(server.port, POLICY, region="eu", home=AsyncClient(primary), reporter="gw-1")
        async with http(gw) as client:
            record = {}
            for _ in range(100):
                await admitted(client, 2)
                record = home.conn().hgetall("rl:alloc:{g:atlas}:tenant")
                if record:
                    break
                await asyncio.sleep(0.05)
            assert list(record) == ["eu gw-1"]
        await gw.close()
        await primary.aclose()
    finally:
        sentinel.close()
        home.close()


def test_a_global_rule_needs_a_region(server):
    with pytest.raises(InvalidPolicy, match="rules.tenant.global"):
        gateway(server.port, POLICY)
    with pytest.raises(InvalidPolicy, match="'mars' is not one of"):
        gateway(server.port, POLICY, region="mars", home="redis://127.0.0.1:1")
