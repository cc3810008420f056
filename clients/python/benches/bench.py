"""Benchmarks of the Python client against a real server (started here, with the module):

1. the ASGI middleware against the same app without it, and against the app making the same
   RL.MULTI through redis-py without the gateway (the store's round trip alone): decisions
   per second with 32 requests in flight, and the latency per request (p50, p99) one request
   at a time;
2. the limits storage rl:// against limits' own redis:// on the same server, per strategy;
   with RL_BENCH_BEFORE=<another copy's src/redis_rl>, that copy's rl:// storage beside them.

    clients/python/.venv/bin/python clients/python/benches/bench.py [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import httpx  # noqa: E402
import redis.asyncio  # noqa: E402
import redis.utils  # noqa: E402

import redis_rl  # noqa: E402
import redis_rl.limits  # noqa: E402,F401
from redis_rl.gateway import Gateway, RateLimitMiddleware  # noqa: E402
from servers import Server  # noqa: E402


async def plain(scope, receive, send):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok": true}'})


POLICY = {
    "version": 1, "default": {"rules": []}, "identity": {"user": "x-user", "tenant": "x-tenant"},
    "rules": {"user": {"key": "{t:${tenant}}:u:${user}", "limit": 1000000, "period": "1s"},
              "tenant": {"key": "{t:${tenant}}:t", "limit": 1000000, "period": "1s"}},
    "routes": [{"method": "GET", "path": "/r", "rules": ["user", "tenant"]}],
    "store": {"timeout": "1s"},
}


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


async def drive(app, n, concurrency, users):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://b") as c:
        for i in range(50):
            await c.get("/r", headers={"x-user": "warm", "x-tenant": "w"})
        lat = []
        if concurrency == 1:
            for i in range(n):
                t = time.perf_counter()
                r = await c.get("/r", headers={"x-user": f"u{i % users}", "x-tenant": "t"})
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200
            return lat, None
        sem = asyncio.Semaphore(concurrency)

        async def one(i):
            async with sem:
                r = await c.get("/r", headers={"x-user": f"u{i % users}", "x-tenant": "t"})
                assert r.status_code == 200

        t = time.perf_counter()
        await asyncio.gather(*[one(i) for i in range(n)])
        return None, n / (time.perf_counter() - t)


ROUNDS = 5  # the contenders alternate round by round, so a change of load hits both alike


async def middleware_bench(port, n):
    pool = redis.asyncio.BlockingConnectionPool(port=port, max_connections=64, timeout=5)
    conn = redis.asyncio.Redis(connection_pool=pool)
    gw = Gateway(redis_rl.AsyncClient(conn), POLICY, log_sample=0)
    await gw.prepare()
    multi = ["RL.MULTI", "2", "{t:t}:u:floor", "{t:t}:t", "RULE", "user", "1000000", "1s",
             "RULE", "tenant", "1000000", "1s"]

    async def one_call(scope, receive, send):
        # The store round trip alone: the same RL.MULTI through redis-py, no gateway.
        await conn.execute_command(*multi)
        await plain(scope, receive, send)

    apps = {"plain": plain, "one RL.MULTI": one_call,
            "middleware": RateLimitMiddleware(plain, gw)}
    lat = {k: [] for k in apps}
    took = {k: 0.0 for k in apps}
    for _ in range(ROUNDS):
        for name, app in apps.items():
            samples, _ = await drive(app, n // ROUNDS, 1, 100)
            lat[name] += samples
            t = time.perf_counter()
            await drive(app, n // ROUNDS, 32, 100)
            took[name] += time.perf_counter() - t
    await pool.disconnect()
    return {k: (n / took[k], pct(lat[k], .5), pct(lat[k], .99)) for k in apps}


def _hits(lim, item, n, tag):
    lat = []
    for i in range(n):
        t = time.perf_counter()
        lim.hit(item, f"k{i % 100}", tag)
        lat.append(time.perf_counter() - t)
    return lat


def load_before(path):
    """Another copy's package (RL_BENCH_BEFORE: its src/redis_rl) as `redis_rl_before`, beside
    this one; its limits module, whose storage and gcra strategy are then used by class (their
    registration under rl:// and gcra is this copy's)."""
    spec = importlib.util.spec_from_file_location(
        "redis_rl_before", Path(path) / "__init__.py", submodule_search_locations=[str(path)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return importlib.import_module("redis_rl_before.limits")


def limits_bench(port, n):
    from limits import parse, storage, strategies
    # the module caps a log at 10000 entries; 100 keys keep every hit admitted
    item = parse("10000/second")
    copies = {"rl://": redis_rl.limits}
    if os.environ.get("RL_BENCH_BEFORE"):
        copies["rl:// before"] = load_before(os.environ["RL_BENCH_BEFORE"])
    out = {}
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter", "gcra"):
        lims = {}
        for name, copy in copies.items():
            st = copy.RLStorage(f"rl://127.0.0.1:{port}")
            lims[name] = (copy.GCRARateLimiter if strategy == "gcra"
                          else strategies.STRATEGIES[strategy])(st)
        if strategy != "gcra":
            lims["redis://"] = strategies.STRATEGIES[strategy](
                storage.storage_from_string(f"redis://127.0.0.1:{port}"))
        schemes = tuple(lims)
        lat = {sc: [] for sc in schemes}
        for sc, lim in lims.items():
            _hits(lim, item, 50, f"warm-{strategy}")
        for _ in range(ROUNDS):
            for sc, lim in lims.items():
                lat[sc] += _hits(lim, item, n // ROUNDS, f"{sc}-{strategy}")
        out[strategy] = {sc: (len(v) / sum(v), pct(v, .5), pct(v, .99)) for sc, v in lat.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=5000)
    args = ap.parse_args()
    server = Server()
    try:
        with redis.Redis(port=server.port) as r:
            info = r.info("server")
            version = info.get("valkey_version") or info.get("redis_version")
        print(f"server: {Path(server.proc.args[0]).name} {version}, requests per run: {args.requests}")
        m = asyncio.run(middleware_bench(server.port, args.requests))
        parser = "hiredis" if redis.utils.HIREDIS_AVAILABLE else "pure Python"
        print(f"redis-py {redis.__version__}, its {parser} parser")
        print("\n| app | requests/s (32 in flight) | p50 (one at a time) | p99 | p50 over plain |"
              "\n|---|---|---|---|---|")
        base = m["plain"][1]
        for name, (rps, p50, p99) in m.items():
            print(f"| {name} | {rps:,.0f} | {p50 * 1e6:,.0f} µs | {p99 * 1e6:,.0f} µs | "
                  f"{(p50 - base) * 1e6:,.0f} µs |")
        lb = limits_bench(server.port, args.requests)
        print("\n| strategy | storage | hits/s | p50 | p99 | p50 over redis:// |"
              "\n|---|---|---|---|---|---|")
        for strategy, row in lb.items():
            base = row.get("redis://")
            for name, (hps, p50, p99) in row.items():
                over = f"{(p50 - base[1]) * 1e6:+,.1f} µs" if base else "(limits has no gcra)"
                print(f"| {strategy} | {name} | {hps:,.0f} | {p50 * 1e6:,.1f} µs | "
                      f"{p99 * 1e6:,.0f} µs | {over} |")
    finally:
        server.close()


if __name__ == "__main__":
    main()
