"""Retrying outgoing calls (SPEC gateway section 5): jittered exponential backoff with the
reply's Retry-After as the lower bound, capped attempts, one Idempotency-Key per call on
non-idempotent methods. `RetryTransport` and `AsyncRetryTransport` wrap httpx transports."""

from __future__ import annotations

import asyncio
import email.utils
import random
import secrets
import time
from typing import Any, Awaitable, Callable, Optional

RETRIED_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})


def retry_after_seconds(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Retry-After as delay-seconds or an HTTP date (a past date is no wait)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff(attempt: int, base: float, cap: float, rng: Any = random) -> float:
    """A uniform draw in [d/2, d], d = min(cap, base * 2^(attempt-1))."""
    d = min(cap, base * 2 ** (attempt - 1))
    return d / 2 + rng.random() * d / 2


class Policy:
    def __init__(self, max_attempts: int = 3, base: float = 0.1, cap: float = 10.0,
                 rng: Any = None, transport_errors: tuple = (OSError,)):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.max_attempts, self.base, self.cap = max_attempts, base, cap
        self.rng = rng or random.Random()
        self.transport_errors = transport_errors

    def wait(self, attempt: int, response: Any) -> Optional[float]:
        """Seconds before the next attempt, or None to return this result now."""
        if attempt >= self.max_attempts:
            return None
        if response is not None and response.status_code not in RETRIED_STATUSES:
            return None
        delay = backoff(attempt, self.base, self.cap, self.rng)
        if response is not None:
            after = retry_after_seconds(response.headers.get("retry-after"))
            if after is not None:
                if after > self.cap:
                    return None
                delay = max(delay, after)
        return delay


def idempotency_headers(method: str, headers: Any, key: Optional[str] = None) -> None:
    if method.upper() in IDEMPOTENT:
        return
    if "idempotency-key" not in {k.lower() for k in headers.keys()}:
        headers["Idempotency-Key"] = key or secrets.token_hex(16)


def call(send: Callable[[], Any], policy: Policy, sleep: Callable[[float], None] = time.sleep):
    """Calls `send()` until it returns a final response, per `policy`."""
    attempt = 0
    while True:
        attempt += 1
        try:
            response = send()
        except policy.transport_errors:
            delay = policy.wait(attempt, None)
            if delay is None:
                raise
            sleep(delay)
            continue
        delay = policy.wait(attempt, response)
        if delay is None:
            return response
        _discard(response)
        sleep(delay)


async def acall(send: Callable[[], Awaitable[Any]], policy: Policy,
                sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await send()
        except policy.transport_errors:
            delay = policy.wait(attempt, None)
            if delay is None:
                raise
            await sleep(delay)
            continue
        delay = policy.wait(attempt, response)
        if delay is None:
            return response
        close = getattr(response, "aclose", None)
        if close is not None:
            await close()
        await sleep(delay)


def _discard(response: Any) -> None:
    close = getattr(response, "close", None)
    if close is not None:
        close()


def _httpx_errors() -> tuple:
    import httpx
    return (httpx.TransportError, OSError)


class RetryTransport:
    """`httpx.Client(transport=RetryTransport(httpx.HTTPTransport()))`."""

    def __init__(self, inner: Any, policy: Optional[Policy] = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.inner = inner
        self.policy = policy or Policy()
        self.policy.transport_errors = _httpx_errors()
        self.sleep = sleep

    def handle_request(self, request: Any) -> Any:
        idempotency_headers(request.method, request.headers)
        return call(lambda: self.inner.handle_request(request), self.policy, self.sleep)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.inner.__exit__(*exc)


class AsyncRetryTransport:
    """`httpx.AsyncClient(transport=AsyncRetryTransport(httpx.AsyncHTTPTransport()))`."""

    def __init__(self, inner: Any, policy: Optional[Policy] = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.inner = inner
        self.policy = policy or Policy()
        self.policy.transport_errors = _httpx_errors()
        self.sleep = sleep

    async def handle_async_request(self, request: Any) -> Any:
        idempotency_headers(request.method, request.headers)
        return await acall(lambda: self.inner.handle_async_request(request), self.policy,
                           self.sleep)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self):
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.inner.__aexit__(*exc)
