"""A stub backend behind the gateway's middleware, as the example gateway has it, and a client
driving it over ASGI in the test's own event loop."""

import asyncio
import contextlib
import json

import httpx
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

import redis_rl
from redis_rl.gateway import Gateway, RateLimitMiddleware


async def backend(scope, receive, send):
    """200 (?status=N: N) with a small JSON body; waits ?ms=N; reports X-Actual-Cost for
    ?units=N."""
    query = dict(p.split("=", 1) for p in scope.get("query_string", b"").decode().split("&") if "=" in p)
    if "ms" in query:
        await asyncio.sleep(int(query["ms"]) / 1000)
    headers = [(b"content-type", b"application/json")]
    if "units" in query:
        headers.append((b"x-actual-cost", query["units"].encode()))
    body = json.dumps({"ok": True, "path": scope["path"]}).encode()
    status = int(query.get("status", "200"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def policy(routes, rules, **extra):
    doc = {"version": extra.pop("version", 1), "default": {"rules": []}, "identity": {"user": "x-user", "tenant": "x-tenant"},
           "rules": rules, "routes": routes}
    doc.update(extra)
    return doc


def store(port, timeout=0.5):
    pool = redis.asyncio.BlockingConnectionPool(
        port=port, max_connections=32, timeout=timeout, socket_timeout=timeout,
        socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
    return redis_rl.AsyncClient(redis.asyncio.Redis(connection_pool=pool))


def gateway(port, pol, **kw):
    return Gateway(store(port), pol, **kw)


def metric(gw, series):
    """The value of one series of the gateway's Prometheus text, None when absent."""
    for line in gw.render_metrics().splitlines():
        name, _, value = line.rpartition(" ")
        if name == series:
            return float(value)
    return None


def decisions(gw, route, rule, outcome):
    labels = f'route="{route}",rule="{rule}",outcome="{outcome}"'
    n = metric(gw, f"rl_gateway_decisions_total{{{labels}}}")
    return int(n or 0)


def calls(gw, result):
    """How many store calls ended so (`ok`, `error`, `timeout`)."""
    n = metric(gw, f'rl_gateway_store_call_duration_seconds_count{{result="{result}"}}')
    return int(n or 0)


@contextlib.asynccontextmanager
async def http(gw, app=backend, **kw):
    """The app behind the middleware, after the startup an ASGI server would give it (httpx's
    transport sends no lifespan events): the store's mode is known before the first request."""
    wrapped = RateLimitMiddleware(app, gw, health_path="/healthz", metrics_path="/metrics",
                                  reload_path="/-/reload", **kw)
    await gw.prepare()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapped),
                                 base_url="http://gw") as client:
        yield client
