"""The example gateway of clients/CONTRACT.md section 7, in front of a stub backend:

    northstar --redis redis://127.0.0.1:6379 --listen 127.0.0.1:8080 --policy policy.json [--cluster]

Prints `listening on ADDR` once it accepts connections."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from urllib.parse import parse_qs

import redis.asyncio

from .client import AsyncClient
from .gateway import Gateway, InvalidPolicy, RateLimitMiddleware


def _number(query: dict[str, list[str]], name: str) -> int | None:
    """A query parameter of ASCII digits ("\u00b2".isdigit() is true, and int() refuses it)."""
    value = query.get(name, [""])[0]
    return int(value) if value.isascii() and value.isdigit() else None


async def backend(scope, receive, send):
    """200 with a small JSON body; waits ?ms=N; reports X-Actual-Cost for ?units=N; POST /login
    is 401 unless X-Password: ok (a failed attempt has already counted against the IP rule)."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    # Header values are bytes, not always UTF-8.
    headers = {k.lower(): v for k, v in scope.get("headers", [])}
    ms = _number(query, "ms")
    if ms is not None:
        await asyncio.sleep(ms / 1000)
    status = 200
    login = scope["method"] == "POST" and scope["path"] == "/login"
    if login and headers.get(b"x-password") != b"ok":
        status = 401
    body = json.dumps({"ok": status == 200, "path": scope["path"]}).encode()
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    units = _number(query, "units")
    if units is not None:
        out.append((b"x-actual-cost", str(units).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


def build(redis_url: str, policy_path: str, cluster: bool, region: str | None = None,
          home: str | None = None, reporter: str | None = None) -> RateLimitMiddleware:
    if cluster:
        conn = redis.asyncio.RedisCluster.from_url(redis_url)
    else:
        # Each call in flight holds a connection of its own (redis-py multiplexes none), and a
        # call that waits for one spends its deadline in the pool's queue, where neither the
        # store nor the event loop is late: the pool is as large as the concurrency the
        # example takes (64 were fewer than a flood's 200 callers).
        conn = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, max_connections=1024, timeout=1))
    gateway = Gateway(AsyncClient(conn), policy_path, region=region, home=home,
                      reporter=reporter)
    return RateLimitMiddleware(backend, gateway, health_path="/healthz", metrics_path="/metrics",
                               reload_path="/-/reload")


async def serve(args) -> None:
    import uvicorn

    host, _, port = args.listen.rpartition(":")
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose protocol says TCP, and
    # accepted sockets take the listener's. Without it every keep-alive answer (head and body
    # written apart) waited for the caller's delayed ACK, 40 ms.
    sock = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), int(port)))
    # The reporter's default name, as rl-gateway's: the host's and the listening port.
    reporter = args.reporter or f"{socket.gethostname()}:{sock.getsockname()[1]}"
    app = build(args.redis, args.policy, args.cluster, args.region, args.home,
                reporter if args.region else None)
    # uvicorn runs without lifespan here: the mode detection (and a cluster's slot map) starts
    # now, beside the server's startup, so it is rarely left to the first request's deadline;
    # a store that is down or does not answer never holds the listening socket back.
    preparing = asyncio.ensure_future(app.gateway.prepare())
    # proxy_headers off: uvicorn would otherwise put X-Forwarded-For's address in the peer (it
    # trusts 127.0.0.1 by default), and the gateway, which walks X-Forwarded-For itself as the
    # policy's trusted_proxies say, would take a caller's header for its address.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           access_log=False, proxy_headers=False))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
            return
        await asyncio.sleep(0.01)
    bound = sock.getsockname()
    print(f"listening on {host}:{bound[1]}", flush=True)
    await task
    preparing.cancel()
    await app.gateway.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="northstar", description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--listen", default="127.0.0.1:8080")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--region", help="this gateway's region, for the policy's global rules")
    parser.add_argument("--home", help="redis://HOST:PORT of the home store (with --region)")
    parser.add_argument("--reporter", help="this gateway's name among its region's reporters")
    args = parser.parse_args(argv)
    if (args.region is None) != (args.home is None):
        parser.error("--region and --home go together")
    try:
        asyncio.run(serve(args))
    except InvalidPolicy as exc:
        print(f"northstar: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
