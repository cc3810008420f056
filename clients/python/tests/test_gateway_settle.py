"""`settle` rules through the ASGI middleware against a real server: the reported cost settled,
an Idempotency-Key not charged again until an attempt answered a 2xx, and a key holding as
many reservations as the module keeps refusing the caller with a 429."""

import os

import pytest
from gateway_support import gateway, http, policy

RULES = {"export": {"key": "{t:${tenant}}:export", "limit": 100, "period": "1h", "cost": 10,
                    "settle": True}}
ROUTES = [{"method": "POST", "path": "/export", "rules": ["export"]}]


async def test_settle_with_the_actual_cost(server):
    import redis_rl
    gw = gateway(server.port, policy(ROUTES, RULES))
    async with http(gw) as c:
        h = {"x-tenant": "settle1", "x-user": "u", "idempotency-key": "same"}
        r = await c.post("/export?units=3", headers={"x-tenant": "settle1", "x-user": "u"})
        failed = await c.post("/export?status=502", headers=h)
        retry = await c.post("/export", headers=h)
        reused = await c.post("/export", headers=h)
    assert r.status_code == 200 and r.headers["ratelimit"].startswith('"export";r=90;')
    assert (failed.status_code, retry.status_code, reused.status_code) == (502, 200, 200)
    info = await gw.client.info("{t:settle1}:export")
    # 3 actual; then 10 for the key "same", its retry after the 502 not charged again; the
    # retry's 200 forgot the reservation, so the key used once more is charged 10 anew
    assert info.remaining == 100 - 3 - 10 - 10
    assert isinstance(info, redis_rl.KeyInfo)


@pytest.mark.skipif(os.environ.get("RL_MODE") == "script",
                    reason="the script rewrites a key's reservations at each call: filling one "
                           "takes minutes; its refusal's text is the module's (the engine's test)")
async def test_a_key_full_of_reservations_is_the_callers_429_and_trips_nothing(server):
    conn = server.conn()
    with conn.pipeline(transaction=False) as pipe:
        for i in range(10_000):
            pipe.execute_command("RL.ADMIT", "{t:full}:export", 1_000_000, "1h", "RESERVE",
                                 f"held-{i}")
        pipe.execute()
    gw = gateway(server.port, policy(ROUTES, RULES))
    async with http(gw) as c:
        refused = [await c.post("/export", headers={"x-tenant": "full", "idempotency-key": "k"})
                   for _ in range(6)]
        other = await c.post("/export", headers={"x-tenant": "other"})
    assert [r.status_code for r in refused] == [429] * 6
    assert {r.headers["retry-after"] for r in refused} == {"3600"}
    assert refused[0].json()["violated-policies"] == ["export"]
    # six refusals later the breaker is closed: another tenant is decided by the store
    assert other.status_code == 200 and other.headers["ratelimit"].startswith('"export";r=90;')
