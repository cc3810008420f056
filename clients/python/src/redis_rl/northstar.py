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


async def backend(scope, receive, send):
    """200 with a small JSON body; waits ?ms=N; reports X-Actual-Cost for ?units=N; POST /login
    is 401 unless X-Password: ok (a failed attempt has already counted against the IP rule)."""
    query = parse_qs(scope.get("query_string", b"").decode())
    headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
    if "ms" in query and query["ms"][0].isdigit():
        await asyncio.sleep(int(query["ms"][0]) / 1000)
    status = 200
    if scope["method"] == "POST" and scope["path"] == "/login" and headers.get("x-password") != "ok":
        status = 401
    body = json.dumps({"ok": status == 200, "path": scope["path"]}).encode()
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if "units" in query and query["units"][0].isdigit():
        out.append((b"x-actual-cost", query["units"][0].encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


def build(redis_url: str, policy_path: str, cluster: bool) -> RateLimitMiddleware:
    if cluster:
        conn = redis.asyncio.RedisCluster.from_url(redis_url)
    else:
        conn = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, max_connections=64, timeout=1))
    gateway = Gateway(AsyncClient(conn), policy_path)
    return RateLimitMiddleware(backend, gateway, health_path="/healthz", metrics_path="/metrics",
                               reload_path="/-/reload")


async def serve(args) -> None:
    import uvicorn

    host, _, port = args.listen.rpartition(":")
    sock = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), int(port)))
    app = build(args.redis, args.policy, args.cluster)
    # uvicorn runs without lifespan here: the mode detection (and a cluster's slot map) is done
    # now, not under the first request's deadline.
    await app.gateway.prepare()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           access_log=False))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
            return
        await asyncio.sleep(0.01)
    bound = sock.getsockname()
    print(f"listening on {host}:{bound[1]}", flush=True)
    await task


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="northstar", description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--listen", default="127.0.0.1:8080")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--cluster", action="store_true")
    args = parser.parse_args(argv)
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
