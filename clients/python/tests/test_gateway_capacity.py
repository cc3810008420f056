"""Capacity through the ASGI middleware against a real server (section 14 of the contract): a
flood of batch work at twice what the capacity admits leaves every critical request served,
and the shed batch requests get the capacity's own 503."""

import asyncio

from gateway_support import gateway, http, metric, policy

RULES = {"tenant": {"key": "{t:${tenant}}:all", "limit": 100000, "period": "1s"}}
ROUTES = [
    {"method": "POST", "path": "/checkout", "rules": ["tenant"], "capacity": "orders",
     "priority": "critical"},
    {"method": "POST", "path": "/export", "rules": ["tenant"], "capacity": "orders",
     "priority": "batch"},
]
CAPACITY = {"orders": {"limit": {"fixed": 8}}}


async def test_a_batch_flood_at_twice_the_capacity_leaves_critical_requests_served(server):
    gw = gateway(server.port, policy(ROUTES, RULES, capacity=CAPACITY))
    async with http(gw) as c:
        running = True
        batch = {200: 0, 503: 0}

        async def flood():
            while running:
                r = await c.post("/export?ms=50", headers={"x-tenant": "acme"})
                batch[r.status_code] += 1
                if r.status_code == 503:
                    assert r.json()["type"] == "urn:redis-rl:problem:capacity-exceeded"
                    await asyncio.sleep(0.005)

        callers = [asyncio.create_task(flood()) for _ in range(16)]
        await asyncio.sleep(0.3)
        critical = []
        for _ in range(10):
            answers = await asyncio.gather(*(
                c.post("/checkout?ms=50", headers={"x-tenant": "acme"}) for _ in range(4)))
            critical.extend(r.status_code for r in answers)
        running = False
        await asyncio.gather(*callers)
    assert critical == [200] * 40
    assert batch[200] > 0 and batch[503] > 0, batch
    shed = 'rl_gateway_capacity_shed_total{capacity="orders",class="batch"}'
    assert metric(gw, shed) == batch[503]
    assert metric(gw, 'rl_gateway_capacity_shed_total{capacity="orders",class="critical"}') == 0
