"""The gateway as native ASGI middleware (Starlette, FastAPI, any ASGI app) and as a FastAPI
dependency, one RL.MULTI per route decision."""

from __future__ import annotations

import asyncio
from typing import Any

from redis_rl_engine import InvalidPolicy, StalePolicy

from .driver import Gateway, Outcome


def _peer(scope: dict[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


def _encode(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def _respond(send, outcome: Outcome) -> None:
    headers = _encode(outcome.headers)
    headers.append((b"content-type", outcome.content_type.encode()))
    headers.append((b"content-length", str(len(outcome.body)).encode()))
    await send({"type": "http.response.start", "status": outcome.status, "headers": headers})
    await send({"type": "http.response.body", "body": outcome.body})


def _merge(start: dict[str, Any], added: list[tuple[str, str]]) -> None:
    """Adds the gateway's fields; RateLimit-Policy and RateLimit are lists, so a second limiting
    layer's items join the first's."""
    existing = list(start.get("headers", []))
    for name, value in added:
        key = name.lower().encode("latin-1")
        for i, (k, v) in enumerate(existing):
            if k.lower() == key and name.lower() in ("ratelimit", "ratelimit-policy"):
                existing[i] = (k, v + b", " + value.encode("latin-1"))
                break
        else:
            existing.append((key, value.encode("latin-1")))
    start["headers"] = existing


class RateLimitMiddleware:
    """`app.add_middleware(RateLimitMiddleware, gateway=gateway)` (Starlette/FastAPI), or
    `RateLimitMiddleware(app, gateway)` around any ASGI app.

    `health_path` is answered here, never asking the store; `metrics_path` serves Prometheus
    text; `reload_path` (POST) re-reads the policy file (409 for a version not higher than the
    one in force, 400 for an invalid document). Leave any of them None to pass those paths to
    the app."""

    def __init__(self, app, gateway: Gateway, health_path: str | None = None,
                 metrics_path: str | None = None, reload_path: str | None = None):
        self.app = app
        self.gateway = gateway
        self.health_path, self.metrics_path, self.reload_path = health_path, metrics_path, reload_path

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            async def lifespan():
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await self.gateway.prepare()
                elif message["type"] == "lifespan.shutdown":
                    # Releases and refunds still in flight are sent before the process ends,
                    # and the reports to the home store stop.
                    await self.gateway.close()
                return message

            await self.app(scope, lifespan, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if path == self.health_path:
            await _plain(send, 200, b"ok\n", "text/plain")
            return
        if path == self.metrics_path:
            await _plain(send, 200, self.gateway.render_metrics().encode(),
                         "text/plain; version=0.0.4; charset=utf-8")
            return
        if path == self.reload_path and method == "POST":
            try:
                version = self.gateway.reload()
                await _plain(send, 200, f"policy version {version}\n".encode(), "text/plain")
            except StalePolicy as exc:
                await _plain(send, 409, f"{exc}\n".encode(), "text/plain")
            except InvalidPolicy as exc:
                await _plain(send, 400, f"{exc}\n".encode(), "text/plain")
            return
        outcome = await self.gateway.decide(method, path, scope.get("headers", []),
                                            _peer(scope), request=scope)
        if outcome is None:
            await self.app(scope, receive, send)
            return
        if not outcome.admitted:
            await _respond(send, outcome)
            return
        await self._pass(outcome, scope, receive, send)

    async def _pass(self, outcome: Outcome, scope, receive, send) -> None:
        if not outcome.holds:
            # Nothing to settle or release (most routes): only the headers to add.
            async def add_headers(message):
                if message["type"] == "http.response.start":
                    message = dict(message)
                    _merge(message, outcome.headers)
                await send(message)

            await self.app(scope, receive, add_headers)
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                actual = None
                for k, v in message.get("headers", []):
                    if k.lower() == b"x-actual-cost":
                        actual = v.decode("latin-1").strip()
                # settled before the response is passed on: a caller may retry as soon as it
                # reads it
                await outcome.settle(actual, message.get("status"))
                message = dict(message)
                _merge(message, outcome.headers)
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await outcome.release()

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            # an error or a cancelled request releases too; shielded so a cancel cannot skip it
            await asyncio.shield(outcome.release())


async def _plain(send, status: int, body: bytes, content_type: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class RateLimited(Exception):
    """Raised by the FastAPI dependency on a refusal or an unavailable store; `install` adds
    the handler that answers it with the problem body and headers."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.status)
        self.outcome = outcome


def install(app) -> None:
    """Adds the RateLimited handler to a Starlette/FastAPI app."""
    from starlette.responses import Response

    async def handler(request, exc: RateLimited):
        o = exc.outcome
        return Response(o.body, status_code=o.status, headers=dict(o.headers),
                        media_type=o.content_type)

    app.add_exception_handler(RateLimited, handler)


def dependency(gateway: Gateway):
    """A FastAPI dependency deciding the route the request matched in the policy:
    `@app.get("/x", dependencies=[Depends(dependency(gw))])`. Slots are released after the
    response; a reservation settles with the X-Actual-Cost the endpoint sets on its Response
    (and is forgotten after a 2xx, so a reused Idempotency-Key is charged anew)."""
    from fastapi import Request, Response

    async def decide(request: Request, response: Response):
        scope = request.scope
        outcome = await gateway.decide(scope["method"], scope["path"], scope.get("headers", []),
                                       _peer(scope), request=scope)
        if outcome is None:
            yield None
            return
        if not outcome.admitted:
            raise RateLimited(outcome)
        for k, v in outcome.headers:
            response.headers[k] = v
        # The status is known only when the endpoint returned: the one it set on `response`,
        # else the route's own (200 unless declared). An exception leaves it unknown, so the
        # reservation is kept and a retry of the failed attempt is not charged again.
        status = None
        try:
            yield outcome
            route = scope.get("route")
            status = response.status_code or getattr(route, "status_code", None) or 200
        finally:
            await asyncio.shield(outcome.finish(response.headers.get("x-actual-cost"), status))

    # this module's annotations are strings (postponed), which FastAPI would resolve in the
    # module's globals, where fastapi is not imported
    decide.__annotations__ = {"request": Request, "response": Response}
    return decide
