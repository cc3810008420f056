"""The gateway's own overload (clients/SPEC.md section 7), judged by the engine: the driver only
reports how late its event loop ran. Lateness the loop recovered from before a request arrived,
or that began before its call was sent, sheds nothing."""

import asyncio
import json
import time

import redis.asyncio
import redis_rl_engine as engine
from gateway_support import calls, decisions, gateway, policy

RULES = {"user": {"key": "u:${user}", "limit": 100, "period": "1h"}}
ROUTES = [{"method": "GET", "path": "/r", "rules": ["user"]}]
OVERLOADED = "The gateway is overloaded; "


def _policy(timeout):
    return policy(ROUTES, RULES, store={"timeout": timeout})


async def test_the_binding_asks_the_engine_its_rule():
    e = engine.Engine(json.dumps(_policy("10ms")))
    # A quarter of the 40 ms the call had, and 5 ms at least.
    assert e.missed(40_000, 9_999) == engine.timeout()
    assert e.missed(40_000, 10_000) == engine.overloaded()
    assert e.missed(8_000, 4_999) == engine.timeout()
    assert e.missed(8_000, 5_000) == engine.overloaded()
    # Two store timeouts of a stall under way.
    assert not e.saturated(19_999)
    assert e.saturated(20_000)
    assert not e.saturated(0)


async def test_a_stall_the_loop_recovered_from_sheds_no_new_request(server):
    gw = gateway(server.port, _policy("50ms"))
    await gw.prepare()
    h = [(b"x-user", b"recovered")]
    first = await gw.decide("GET", "/r", h)
    assert first is not None and first.admitted
    # The loop stalls four store timeouts, then runs on time again.
    time.sleep(0.2)  # noqa: ASYNC251 (the loop blocked on purpose)
    await asyncio.sleep(0.02)
    after = await gw.decide("GET", "/r", h)
    assert after is not None and after.admitted, after.body
    assert decisions(gw, "GET /r", "user", "shed") == 0


async def test_lateness_that_began_before_the_request_arrived_is_not_its_overload(server):
    gw = gateway(server.port, _policy("100ms"))
    await gw.prepare()
    h = [(b"x-user", b"paused")]
    assert (await gw.decide("GET", "/r", h)).admitted
    await asyncio.sleep(0.03)
    admin = redis.asyncio.Redis(port=server.port)
    await admin.execute_command("CLIENT", "PAUSE", "800", "WRITE")
    try:
        # The loop's tick is 50 ms overdue when the request arrives (a quarter of the deadline
        # is 25 ms), well short of two timeouts: the request is decided, its call sent, and the
        # paused store misses the deadline. The lateness is older than the request: a timeout.
        time.sleep(0.06)  # noqa: ASYNC251 (the loop blocked on purpose)
        outcome = await gw.decide("GET", "/r", h)
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()
    assert outcome is not None and outcome.status == 503
    assert not json.loads(outcome.body)["detail"].startswith(OVERLOADED)
    assert calls(gw, "timeout") == 1
    assert decisions(gw, "GET /r", "user", "shed") == 0
