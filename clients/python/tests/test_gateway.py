"""The gateway over ASGI against real servers: decisions, headers, problem bodies, the negative
cache, semaphores, reservations, grants, shadows, postures under real faults, and metrics."""

import asyncio
import json
import os

import pytest
from gateway_support import calls, decisions, gateway, http, metric, policy

RULES = {
    "user": {"key": "{t:${tenant}}:u:${user}", "limit": 2, "period": "1h"},
    "tenant": {"key": "{t:${tenant}}:t", "limit": 100, "period": "1h", "public": False},
}


def _routes(**ose):
    return [{"method": "GET", "path": "/r", "rules": ["user", "tenant"], **ose}]


async def test_an_unrouted_request_passes_untouched(server):
    async with http(gateway(server.port, policy(_routes(), RULES))) as c:
        r = await c.get("/elsewhere")
    assert r.status_code == 200 and "ratelimit" not in r.headers


async def test_a_path_above_the_root_is_answered_400_and_an_unmatched_one_counted(server):
    # HTTP clients remove dot segments before sending: the driver is asked directly, as the
    # middleware asks it for a raw request target.
    gw = gateway(server.port, policy(_routes(), RULES))
    above = await gw.decide("GET", "/../r", [])
    assert above is not None and above.status == 400
    assert json.loads(above.body)["title"] == "Bad Request"
    assert await gw.decide("GET", "/elsewhere", []) is None
    assert metric(gw, "rl_gateway_unmatched_total") == 1


async def test_admit_then_refuse_with_headers_and_problem_body(server):
    gw = gateway(server.port, policy(_routes(), RULES))
    h = {"x-user": "ann", "x-tenant": "acme1"}
    async with http(gw) as c:
        first = await c.get("/r", headers=h)
        second = await c.get("/r", headers=h)
        third = await c.get("/r", headers=h)
    assert (first.status_code, second.status_code, third.status_code) == (200, 200, 429)
    assert first.headers["ratelimit-policy"] == '"user";q=2;w=3600, "tenant";q=100;w=3600'
    assert first.headers["ratelimit"] == '"user";r=1;t=1800, "tenant";r=99;t=36'
    assert third.headers["content-type"] == "application/problem+json"
    body = third.json()
    assert body["status"] == 429 and body["violated-policies"] == ["user"]
    assert body["type"] == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    assert int(third.headers["retry-after"]) >= 1790
    assert third.headers["ratelimit"].startswith('"user";r=0;t=')
    assert decisions(gw, "GET /r", "user", "refuse") == 1
    assert decisions(gw, "GET /r", "tenant", "admit") == 2


async def test_a_private_rule_is_hidden_without_a_user(server):
    gw = gateway(server.port, policy(_routes(), RULES))
    async with http(gw) as c:
        r = await c.get("/r", headers={"x-tenant": "acme2"})
    assert r.headers["ratelimit-policy"] == '"user";q=2;w=3600'


async def test_the_negative_cache_refuses_without_a_store_call(server):
    gw = gateway(server.port, policy(_routes(), RULES, negative_cache={"max": "10s"}))
    h = {"x-user": "bob", "x-tenant": "acme3"}
    async with http(gw) as c:
        for _ in range(3):
            await c.get("/r", headers=h)
        before = calls(gw, "ok")
        cached = await c.get("/r", headers=h)
    assert cached.status_code == 429 and cached.json()["violated-policies"] == ["user"]
    assert calls(gw, "ok") == before
    assert decisions(gw, "GET /r", "user", "refuse_cached") == 1
    assert cached.headers["ratelimit"].startswith('"user";r=0;t=')


async def test_dead_port_deny_is_a_503_without_ratelimit_fields():
    from servers import free_port
    gw = gateway(free_port(), policy(_routes(), RULES, store={"breaker": {"open": "3s"}}))
    async with http(gw) as c:
        r = await c.get("/r", headers={"x-user": "u"})
        health = await c.get("/healthz")
    assert r.status_code == 503 and "ratelimit" not in r.headers
    assert r.json()["title"] == "Service Unavailable"
    assert r.json()["detail"].startswith("The rate limiter is unavailable; ")
    assert int(r.headers["retry-after"]) >= 3
    assert health.status_code == 200
    assert decisions(gw, "GET /r", "user", "unavailable_deny") == 1


async def test_dead_port_fallback_limits_locally_and_allow_admits():
    from servers import free_port
    routes = [{"method": "GET", "path": "/f", "rules": ["user"],
               "on_store_error": {"mode": "fallback", "limit": 2, "period": "1h"}},
              {"method": "GET", "path": "/a", "rules": ["user"],
               "on_store_error": {"mode": "allow"}}]
    gw = gateway(free_port(), policy(routes, RULES))
    async with http(gw) as c:
        f = [await c.get("/f", headers={"x-user": "fb"}) for _ in range(3)]
        a = await c.get("/a", headers={"x-user": "fb"})
    assert [r.status_code for r in f] == [200, 200, 429]
    assert f[0].headers["ratelimit"] == '"user";r=1;t=1800'
    assert f[2].json()["violated-policies"] == ["user"]
    assert a.status_code == 200
    assert decisions(gw, "GET /f", "user", "fallback_admit") == 2
    assert decisions(gw, "GET /f", "user", "fallback_refuse") == 1
    assert decisions(gw, "GET /a", "user", "open_admit") == 1


async def test_the_breaker_opens_and_stops_calling_the_store():
    from servers import free_port
    gw = gateway(free_port(), policy(_routes(), RULES,
                                     store={"breaker": {"failures": 2, "open": "1h"}}))
    async with http(gw) as c:
        for _ in range(5):
            assert (await c.get("/r", headers={"x-user": "b"})).status_code == 503
    assert calls(gw, "error") == 2
    assert 'rl_gateway_breaker_state{state="open"} 1' in gw.render_metrics()


async def test_a_killed_server_takes_the_posture_and_a_restart_recovers():
    from servers import Server
    s = Server()
    try:
        gw = gateway(s.port, policy(_routes(), RULES, store={
            "timeout": "500ms", "breaker": {"failures": 1, "open": "1ms"}, "ramp": "1ms"}))
        h = {"x-user": "k", "x-tenant": "kill"}
        async with http(gw) as c:
            assert (await c.get("/r", headers=h)).status_code == 200
            s.kill()
            assert (await c.get("/r", headers=h)).status_code == 503
            s.start()
            await asyncio.sleep(0.01)
            statuses = [(await c.get("/r", headers=h)).status_code for _ in range(3)]
        # the restarted server is empty: the probe and one more admit, then the limit holds
        assert statuses == [200, 200, 429]
    finally:
        s.close()


async def test_debug_sleep_misses_the_deadline(server):
    import redis.asyncio
    gw = gateway(server.port, policy(_routes(), RULES, store={"timeout": "100ms"}))
    await gw.prepare()
    async with http(gw) as c:
        admin = redis.asyncio.Redis(port=server.port)
        sleeper = asyncio.ensure_future(admin.execute_command("DEBUG", "SLEEP", "1"))
        await asyncio.sleep(0.2)
        r = await c.get("/r", headers={"x-user": "sleepy"})
        await sleeper
        await admin.aclose()
    assert r.status_code == 503
    assert calls(gw, "timeout") == 1


async def test_client_pause_misses_the_deadline(server):
    import redis.asyncio
    gw = gateway(server.port, policy(_routes(), RULES, store={"timeout": "100ms"}))
    await gw.prepare()
    admin = redis.asyncio.Redis(port=server.port)
    await admin.execute_command("CLIENT", "PAUSE", "800", "WRITE")
    try:
        async with http(gw) as c:
            r = await c.get("/r", headers={"x-user": "paused"})
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()
    assert r.status_code == 503
    assert calls(gw, "timeout") == 1


async def test_a_semaphore_caps_requests_in_flight_and_releases(server):
    import redis.asyncio
    rules = {"inflight": {"key": "{t:${tenant}}:sem", "concurrency": 1, "lease": "60s"},
             "rate": {"key": "{t:${tenant}}:rate", "limit": 100, "period": "1h"}}
    routes = [{"method": "GET", "path": "/slow", "rules": ["inflight", "rate"]}]
    gw = gateway(server.port, policy(routes, rules))
    h = {"x-tenant": "semtest", "x-user": "u"}
    async with http(gw) as c:
        slow = asyncio.ensure_future(c.get("/slow?ms=300", headers=h))
        await asyncio.sleep(0.1)
        refused = await c.get("/slow", headers=h)
        first = await slow
        after = await c.get("/slow", headers=h)
    assert (first.status_code, refused.status_code, after.status_code) == (200, 429, 200)
    assert first.headers["ratelimit-policy"].startswith('"inflight";q=1;qu="concurrent-requests"')
    assert refused.json()["violated-policies"] == ["inflight"]
    admin = redis.asyncio.Redis(port=server.port)
    assert await admin.exists("{t:semtest}:sem") == 0
    await admin.aclose()


async def test_grants_spend_locally(server):
    rules = {"global": {"key": "g:${tenant}", "limit": 1000, "period": "1h",
                        "grant": {"want": 10, "ttl": "1h"}}}
    routes = [{"method": "GET", "path": "/g", "rules": ["global"]}]
    gw = gateway(server.port, policy(routes, rules))
    async with http(gw) as c:
        codes = [(await c.get("/g", headers={"x-tenant": "grant1"})).status_code for _ in range(25)]
    assert codes == [200] * 25
    assert metric(gw, 'rl_gateway_grant_refills_total{rule="global"}') == 3
    info = await gw.client.info("g:grant1")
    assert info.remaining == 1000 - 30


async def test_shadow_rules_never_refuse(server):
    rules = {"real": {"key": "{s}:${user}", "limit": 100, "period": "1h"},
             "trial": {"key": "{s}:${user}", "limit": 1, "period": "1h", "shadow": True}}
    routes = [{"method": "GET", "path": "/s", "rules": ["real", "trial"]}]
    gw = gateway(server.port, policy(routes, rules))
    async with http(gw) as c:
        codes = [(await c.get("/s", headers={"x-user": "sh"})).status_code for _ in range(3)]
        last = await c.get("/s", headers={"x-user": "sh"})
    assert codes == [200] * 3
    assert "trial" not in last.headers["ratelimit"]
    assert decisions(gw, "GET /s", "trial", "shadow_refuse") == 3
    assert await gw.client.info("shadow:{s}:sh") is not None


async def test_tasks_hammering_one_key_stay_within_the_bound(server):
    rules = {"one": {"key": "{h}:${user}", "limit": 25, "period": "1h"}}
    routes = [{"method": "GET", "path": "/h", "rules": ["one"]}]
    gw = gateway(server.port, policy(routes, rules, negative_cache={"max": "1ms"},
                                     store={"timeout": "5s"}))
    async with http(gw) as c:
        rs = await asyncio.gather(*[c.get("/h", headers={"x-user": "hammer"}) for _ in range(120)])
    assert sum(r.status_code == 200 for r in rs) == 25
    assert all(r.status_code in (200, 429) for r in rs), [(r.status_code, r.text) for r in rs if r.status_code not in (200, 429)][:3]


async def test_metrics_declare_every_family(server):
    gw = gateway(server.port, policy(_routes(), RULES))
    async with http(gw) as c:
        await c.get("/r", headers={"x-user": "m", "x-tenant": "m\"x"})
        text = (await c.get("/metrics")).text
    for family in ("rl_gateway_decisions_total", "rl_gateway_store_call_duration_seconds",
                   "rl_gateway_grant_refills_total", "rl_gateway_breaker_state",
                   "rl_gateway_policy_version", "rl_gateway_route_mode",
                   "rl_gateway_store_mode"):
        assert f"# TYPE {family} " in text
    assert 'rl_gateway_decisions_total{route="GET /r",rule="tenant",outcome="admit"} 1' in text
    assert 'rl_gateway_route_mode{route="GET /r",mode="deny"} 1' in text
    assert f'rl_gateway_store_mode{{mode="{gw.client.mode}"}} 1' in text
    assert "rl_gateway_policy_version 1" in text
    assert 'rl_gateway_store_call_duration_seconds_count{result="ok"} 1' in text


async def test_prometheus_client_exposes_the_same_names(server):
    from prometheus_client import CollectorRegistry, generate_latest
    gw = gateway(server.port, policy(_routes(), RULES))
    registry = CollectorRegistry()
    gw.register_metrics(registry)
    async with http(gw) as c:
        await c.get("/r", headers={"x-user": "p"})
    text = generate_latest(registry).decode()
    assert 'rl_gateway_decisions_total{outcome="admit",route="GET /r",rule="user"} 1.0' in text
    assert 'rl_gateway_breaker_state{state="closed"} 1.0' in text


async def test_the_hook_sees_every_event(server):
    events = []
    gw = gateway(server.port, policy(_routes(), RULES),
                 metrics_hook=lambda name, labels, value: events.append((name, labels, value)))
    async with http(gw) as c:
        await c.get("/r", headers={"x-user": "hook"})
    names = {n for n, _, _ in events}
    assert {"decision", "store_call", "policy_version", "route_mode", "store_mode"} <= names
    assert ("decision", {"route": "GET /r", "rule": "user", "outcome": "admit"}, 1.0) in events


async def test_decision_logs_never_carry_identities(server, caplog):
    gw = gateway(server.port, policy(_routes(), RULES), log_sample=1.0)
    with caplog.at_level("INFO", logger="redis_rl.decision"):
        async with http(gw) as c:
            await c.get("/r", headers={"x-user": "secret-user", "x-tenant": "secret-tenant"})
    records = [r for r in caplog.records if r.name == "redis_rl.decision"]
    assert {r.rule for r in records} == {"user", "tenant"}
    assert all(r.policy_version == 1 and r.outcome == "admit" for r in records)
    assert not any("secret" in r.getMessage() for r in records)


async def test_refusals_and_unmatched_requests_are_recorded_with_their_reason(server, caplog):
    gw = gateway(server.port, policy(_routes(), RULES), log_sample=0.0)
    h = {"x-user": "rec", "x-tenant": "rec"}
    with caplog.at_level("INFO", logger="redis_rl.decision"):
        async with http(gw) as c:
            statuses = [(await c.get("/r", headers=h)).status_code for _ in range(3)]
            await c.get("/nowhere", headers=h)
    assert statuses == [200, 200, 429]
    records = [r for r in caplog.records if r.name == "redis_rl.decision"]
    assert [r.reason for r in records] == ["refuse:user", "unmatched"]
    refused, unmatched = records
    assert (refused.route, refused.rule, refused.outcome) == ("GET /r", "user", "refuse")
    assert (unmatched.route, unmatched.rule) == ("default", "")
    assert len(refused.decision) == 16 and refused.decision != unmatched.decision


async def test_legacy_headers_and_jittered_retry_after(server):
    gw = gateway(server.port, policy(_routes(), RULES, retry_after_jitter=0.5),
                 legacy_headers=True)
    h = {"x-user": "leg", "x-tenant": "leg"}
    async with http(gw) as c:
        ok = await c.get("/r", headers=h)
        await c.get("/r", headers=h)
        refused = await c.get("/r", headers=h)
    assert ok.headers["x-ratelimit-limit"] == "2" and ok.headers["x-ratelimit-remaining"] == "1"
    wait = int(refused.headers["retry-after"])
    assert 1790 <= wait <= 2700


async def test_reload_answers_409_to_an_older_version_and_400_to_an_invalid_one(server, tmp_path):
    f = tmp_path / "p.json"
    doc = {"version": 3, "default": {"rules": []}, "rules": RULES, "routes": _routes()}
    f.write_text(json.dumps(doc))
    gw = gateway(server.port, f)
    async with http(gw) as c:
        stale = await c.post("/-/reload")
        f.write_text(json.dumps(dict(doc, version=4)))
        fresh = await c.post("/-/reload")
        f.write_text("{")
        broken = await c.post("/-/reload")
        f.write_text(json.dumps(dict(doc, version=5, rules={"user": {"limit": 2}})))
        invalid = await c.post("/-/reload")
    assert stale.status_code == 409
    assert "policy version 3 is not higher than the version in force, 3" in stale.text
    assert fresh.status_code == 200 and gw.policy_version == 4
    # 409 is for a version not higher; a document that is no policy is the request's fault
    assert broken.status_code == 400 and broken.text.startswith("invalid policy: ")
    assert invalid.status_code == 400 and "rules.user" in invalid.text
    assert gw.policy_version == 4


async def test_the_gateway_in_script_mode(plain_server):
    from redis_rl.client import load_script
    if load_script() is None:
        pytest.skip("this build ships no rl.lua")
    gw = gateway(plain_server.port, policy(_routes(), RULES))
    h = {"x-user": "script", "x-tenant": "script"}
    async with http(gw) as c:
        codes = [(await c.get("/r", headers=h)).status_code for _ in range(3)]
        text = (await c.get("/metrics")).text
    assert codes == [200, 200, 429]
    assert gw.client.mode == "script"
    assert 'rl_gateway_store_mode{mode="script"} 1' in text


async def test_the_gateway_on_a_cluster(cluster):
    import redis.asyncio

    import redis_rl
    from redis_rl.gateway import Gateway
    rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.port)
    gw = Gateway(redis_rl.AsyncClient(rc), policy(_routes(), RULES, store={"timeout": "2s"}))
    try:
        async with http(gw) as c:
            for tenant in ("c1", "c2", "c3", "c4"):
                h = {"x-user": "u", "x-tenant": tenant}
                codes = [(await c.get("/r", headers=h)).status_code for _ in range(3)]
                assert codes == [200, 200, 429]
    finally:
        await rc.aclose()


async def test_durable_rules_on_a_cluster_wait_once_per_slot(cluster):
    import redis.asyncio

    import redis_rl
    from redis_rl.gateway import Gateway
    rules = {"a": {"key": "{da}:${user}", "limit": 10, "period": "1h", "durable": True},
             "c": {"key": "{dc}:${user}", "concurrency": 2, "lease": "1m", "durable": True}}
    routes = [{"method": "POST", "path": "/d", "rules": ["c", "a"]}]
    rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.port)
    gw = Gateway(redis_rl.AsyncClient(rc), policy(routes, rules, store={"timeout": "200ms"}))
    try:
        async with http(gw) as c:
            r = await c.post("/d", headers={"x-user": "dc"})
        # no replicas: the primary of each slot answers its WAIT with 0 acknowledgements
        assert r.status_code == 200
        assert decisions(gw, "POST /d", "a", "unreplicated_admit") == 1
        assert decisions(gw, "POST /d", "c", "unreplicated_admit") == 1
    finally:
        await rc.aclose()


async def test_the_fastapi_dependency(server):
    import httpx
    from fastapi import Depends, FastAPI

    from redis_rl.gateway import dependency, install

    gw = gateway(server.port, policy([{"method": "GET", "path": "/dep", "rules": ["user"]}], RULES))
    await gw.prepare()  # no middleware, so no ASGI startup to do it
    app = FastAPI()
    install(app)

    @app.get("/dep", dependencies=[Depends(dependency(gw))])
    async def dep():
        return {"ok": True}

    @app.get("/free", dependencies=[Depends(dependency(gw))])
    async def free():
        return {"ok": True}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        rs = [await c.get("/dep", headers={"x-user": "dep"}) for _ in range(3)]
        free_r = await c.get("/free")
    assert [r.status_code for r in rs] == [200, 200, 429]
    assert rs[0].headers["ratelimit"] == '"user";r=1;t=1800'
    assert rs[2].json()["violated-policies"] == ["user"]
    assert rs[2].headers["content-type"] == "application/problem+json"
    assert free_r.status_code == 200 and "ratelimit" not in free_r.headers


async def test_durable_rules_wait_for_a_replica():
    import time as _time

    import redis as sync_redis
    from servers import Server
    primary = Server()
    replica = Server(extra=["--replicaof", "127.0.0.1", str(primary.port)])
    try:
        deadline = _time.monotonic() + 20
        with sync_redis.Redis(port=replica.port, decode_responses=True) as r:
            while r.info("replication").get("master_link_status") != "up":
                assert _time.monotonic() < deadline, "the replica never synced"
                await asyncio.sleep(0.05)
        rules = {"durable": {"key": "{d}:${user}", "limit": 100, "period": "1h", "durable": True}}
        routes = [{"method": "POST", "path": "/d", "rules": ["durable"]}]
        gw = gateway(primary.port, policy(routes, rules, store={"timeout": "1s"}),
                     durable_connections=2)
        async with http(gw) as c:
            ok = await c.post("/d", headers={"x-user": "dur"})
            assert decisions(gw, "POST /d", "durable", "unreplicated_admit") == 0
            replica.kill()
            lagging = await c.post("/d", headers={"x-user": "dur"})
        assert ok.status_code == lagging.status_code == 200
        assert decisions(gw, "POST /d", "durable", "unreplicated_admit") == 1
        assert decisions(gw, "POST /d", "durable", "admit") == 2
        # Only the durable connections were used, and they report the mode too.
        assert metric(gw, 'rl_gateway_store_mode{mode="module"}') == 1
    finally:
        replica.close()
        primary.close()


async def test_a_module_refusal_is_neither_a_429_nor_an_admit(plain_server):
    import redis.asyncio

    import redis_rl
    from redis_rl.gateway import Gateway
    client = redis_rl.AsyncClient(redis.asyncio.Redis(port=plain_server.port), mode="module")
    gw = Gateway(client, policy(_routes(), RULES))
    async with http(gw) as c:
        r = await c.get("/r", headers={"x-user": "nomodule"})
    assert r.status_code == 500 and r.json()["title"] == "Internal Server Error"
    assert metric(gw, 'rl_gateway_breaker_state{state="closed"}') == 1


async def test_a_later_refusal_gives_back_grant_tokens_and_refunds_reservations(server):
    rules = {"hot": {"key": "hot:${tenant}", "limit": 1000, "period": "1h",
                     "grant": {"want": 5, "ttl": "1h"}},
             "export": {"key": "{e:${tenant}}:export", "limit": 100, "period": "1h", "cost": 10,
                        "settle": True},
             "strict": {"key": "{e:${tenant}}:strict", "limit": 1, "period": "1h"}}
    routes = [{"method": "POST", "path": "/x", "rules": ["hot", "export", "strict"]}]
    gw = gateway(server.port, policy(routes, rules, negative_cache={"max": "1ms"}))
    h = {"x-tenant": "giveback", "x-user": "u"}
    async with http(gw) as c:
        ok = await c.post("/x", headers=h)
        refused = await c.post("/x", headers=h)
        await asyncio.sleep(0.01)
        again = await c.post("/x", headers=h)
    assert (ok.status_code, refused.status_code, again.status_code) == (200, 429, 429)
    assert refused.json()["violated-policies"] == ["strict"]
    # one refill of 5: the admitted request took 1, each refusal gave its token back
    assert metric(gw, 'rl_gateway_grant_refills_total{rule="hot"}') == 1
    await gw.drain()
    # the refused requests' reservations were refunded: only the first request's 10 is spent
    info = await gw.client.info("{e:giveback}:export")
    assert info.remaining == 90


async def test_stacked_layers_add_their_items_and_identify_resolves_callers(server):
    import httpx

    from redis_rl.gateway import RateLimitMiddleware

    async def identify(scope):
        token = dict(scope["headers"]).get(b"authorization", b"").decode()
        return (token.removeprefix("Bearer ") or None, None)

    inner = gateway(server.port, policy([{"method": "GET", "path": "/two", "rules": ["user"]}],
                                        {"user": {"key": "in:${user}", "limit": 5, "period": "1h"}}),
                    identify=identify)
    outer = gateway(server.port, policy([{"method": "GET", "path": "/two", "rules": ["edge"]}],
                                        {"edge": {"key": "out:${ip}", "limit": 9, "period": "1h"}}))
    from gateway_support import backend
    app = RateLimitMiddleware(RateLimitMiddleware(backend, inner), outer)
    await inner.prepare()
    await outer.prepare()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        r = await c.get("/two", headers={"authorization": "Bearer carol"})
    assert r.headers["ratelimit-policy"] == '"user";q=5;w=3600, "edge";q=9;w=3600'
    assert r.headers["ratelimit"] == '"user";r=4;t=720, "edge";r=8;t=400'
    assert await inner.client.info("in:carol") is not None


async def test_slots_are_renewed_while_the_request_runs(server):
    rules = {"slot": {"key": "{r}:slot:${tenant}", "concurrency": 2, "lease": "600ms"}}
    routes = [{"method": "GET", "path": "/long", "rules": ["slot"]}]
    gw = gateway(server.port, policy(routes, rules, store={"timeout": "1s"}))
    async with http(gw) as c:
        running = asyncio.ensure_future(c.get("/long?ms=1500", headers={"x-tenant": "renew"}))
        await asyncio.sleep(1.0)  # past the lease: held only because it was renewed
        during = await gw.client.info("{r}:slot:renew")
        done = await running
    after = await gw.client.info("{r}:slot:renew")
    assert done.status_code == 200
    assert during is not None and during.in_flight == 1
    assert after is None


def test_the_middleware_prepares_the_store_at_startup(server):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from redis_rl.gateway import RateLimitMiddleware
    gw = gateway(server.port, policy(_routes(), RULES))
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, gateway=gw)
    assert gw.client.mode is None
    with TestClient(app):
        assert gw.client.mode in ("module", "script")


MODULE = os.environ.get("RL_MODE") != "script"


async def test_a_slot_released_while_redis_restarts_is_released_once_it_is_back():
    # The response ends while Redis is down; it is back within the second a release is
    # retried for, with the slot (a snapshot holds it), which must not be left to its lease.
    import redis_rl
    from servers import Server
    s = Server(module=MODULE)
    try:
        rules = {"slot": {"key": "{rs}:slot:${tenant}", "concurrency": 2, "lease": "60s"}}
        routes = [{"method": "GET", "path": "/held", "rules": ["slot"]}]
        # the response waits a store timeout for its release: most of the second is left
        gw = gateway(s.port, policy(routes, rules, store={"timeout": "100ms"}))
        async with http(gw) as c:
            running = asyncio.ensure_future(c.get("/held?ms=500", headers={"x-tenant": "rs"}))
            await asyncio.sleep(0.2)
            s.conn().save()
            s.kill()
            assert (await running).status_code == 200
            s.start()
            assert redis_rl.Client(s.conn()).info("{rs}:slot:rs").in_flight == 1
            await gw.drain()
        info = redis_rl.Client(s.conn()).info("{rs}:slot:rs")
        assert info is None or info.in_flight == 0
    finally:
        s.close()


async def test_a_failed_settlement_and_release_are_logged_once_without_identities(caplog):
    from servers import Server
    s = Server(module=MODULE)
    rules = {"slot": {"key": "{lg}:slot:${tenant}", "concurrency": 2, "lease": "60s"},
             "export": {"key": "{lg}:export:${tenant}", "limit": 100, "period": "1h", "cost": 10,
                        "settle": True}}
    routes = [{"method": "GET", "path": "/held", "rules": ["slot", "export"]}]
    h = {"x-tenant": "secret-tenant", "x-user": "secret-user"}
    try:
        gw = gateway(s.port, policy(routes, rules, store={"timeout": "200ms"}))
        with caplog.at_level("WARNING", logger="redis_rl.gateway"):
            async with http(gw) as c:
                running = asyncio.ensure_future(c.get("/held?ms=300&units=3", headers=h))
                await asyncio.sleep(0.15)
                s.kill()  # and not back: both calls are given up after a second
                assert (await running).status_code == 200
                await gw.drain()
    finally:
        s.close()
    records = [r for r in caplog.records if r.name == "redis_rl.gateway"]
    assert sorted(r.getMessage().split()[2] for r in records) == ["RL.RELEASE", "RL.SETTLE"]
    assert all(r.levelname == "WARNING" for r in records)
    assert not any("secret" in r.getMessage() or "{lg}" in r.getMessage() for r in records)
