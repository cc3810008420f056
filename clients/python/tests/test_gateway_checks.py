"""Keyed checks through the gateway (`Gateway.check`) against a real server: a rate rule and a
semaphore decided together under a route of the policy, all or nothing, each check's outcome
read back, the slot held until the outcome's release."""

import json

import pytest
from gateway_support import gateway, policy

RULES = {
    "user": {"key": "{j}:u:${user}", "limit": 2, "period": "1h"},
    "slot": {"key": "{j}:slot:${tenant}", "concurrency": 1, "lease": "60s"},
}
ROUTES = [{"name": "jobs", "method": "*", "path": "/jobs", "rules": ["user", "slot"]}]


async def test_keyed_checks_are_decided_together_and_hold_their_slot(server):
    gw = gateway(server.port, policy(ROUTES, RULES))
    await gw.prepare()
    checks = [("user", "{ck}:u:ann"), {"rule": "slot", "key": "{ck}:slot"}]
    first = await gw.check("jobs", checks)
    assert first.admitted and first.holds
    assert [(c.over, c.source) for c in first.checks] == [(False, "store"), (False, "store")]
    assert first.checks[0].remaining == 1
    # The slot is held: the same checks are refused by it, and spend nothing on the rate rule.
    busy = await gw.check("jobs", checks)
    assert busy.status == 429 and json.loads(busy.body)["violated-policies"] == ["slot"]
    assert [c.over for c in busy.checks] == [False, True]
    assert (await gw.client.info("{ck}:u:ann")).remaining == 1
    await first.release()
    again = await gw.check("jobs", checks)
    assert again.admitted and again.checks[0].remaining == 0
    await again.release()
    # A rule the policy lacks is the caller's error: raised, nothing decided.
    with pytest.raises(ValueError, match='no rule named "other"'):
        await gw.check("jobs", [("user", "{ck}:u:ann"), ("other", "{ck}:o")])
    assert (await gw.client.info("{ck}:u:ann")).remaining == 0
