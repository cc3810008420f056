"""The retry helper for outgoing calls, as httpx transports, against an in-process httpx
handler that answers a scripted sequence."""

import random

import httpx

from redis_rl.gateway.retry import (AsyncRetryTransport, Policy, RetryTransport, backoff,
                                    retry_after_seconds)


def _scripted(*statuses, retry_after=None):
    seen = []

    def handler(request):
        seen.append(request)
        status = statuses[min(len(seen) - 1, len(statuses) - 1)]
        if isinstance(status, Exception):
            raise status
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        return httpx.Response(status, headers=headers)

    return handler, seen


def _client(handler, sleeps, **policy):
    transport = RetryTransport(httpx.MockTransport(handler), Policy(**policy),
                               sleep=sleeps.append)
    return httpx.Client(transport=transport, base_url="http://up")


def test_backoff_draws_in_half_to_full():
    rng = random.Random(1)
    for attempt in range(1, 8):
        d = min(2.0, 0.1 * 2 ** (attempt - 1))
        assert d / 2 <= backoff(attempt, 0.1, 2.0, rng) <= d


def test_retried_statuses_then_success():
    handler, seen = _scripted(503, 429, 200)
    sleeps = []
    r = _client(handler, sleeps, max_attempts=5).get("/")
    assert r.status_code == 200 and len(seen) == 3 and len(sleeps) == 2


def test_other_statuses_return_at_once():
    handler, seen = _scripted(404)
    assert _client(handler, []).get("/").status_code == 404 and len(seen) == 1


def test_max_attempts_returns_the_last():
    handler, seen = _scripted(500)
    r = _client(handler, [], max_attempts=3).get("/")
    assert r.status_code == 500 and len(seen) == 3


def test_retry_after_is_a_lower_bound_and_past_cap_stops():
    handler, _ = _scripted(429, 200, retry_after="2")
    sleeps = []
    _client(handler, sleeps, base=0.01, cap=5).get("/")
    assert sleeps == [2.0]
    handler, seen = _scripted(429, 200, retry_after="60")
    r = _client(handler, [], cap=5).get("/")
    assert r.status_code == 429 and len(seen) == 1


def test_http_dates():
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after_seconds("7") == 7.0


def test_transport_errors_are_retried():
    handler, seen = _scripted(httpx.ConnectError("refused"), 200)
    assert _client(handler, []).get("/").status_code == 200 and len(seen) == 2


def test_non_idempotent_calls_carry_one_key_on_every_attempt():
    handler, seen = _scripted(503, 503, 200)
    _client(handler, [], max_attempts=3).post("/pay")
    keys = {r.headers["idempotency-key"] for r in seen}
    assert len(keys) == 1 and len(keys.pop()) == 32
    handler, seen = _scripted(503, 200)
    _client(handler, []).post("/pay", headers={"Idempotency-Key": "mine"})
    assert {r.headers["idempotency-key"] for r in seen} == {"mine"}
    handler, seen = _scripted(200)
    _client(handler, []).get("/")
    assert "idempotency-key" not in seen[0].headers


async def test_async_transport():
    handler, seen = _scripted(502, 200)
    sleeps = []

    async def sleep(s):
        sleeps.append(s)

    transport = AsyncRetryTransport(httpx.MockTransport(handler), Policy(), sleep=sleep)
    async with httpx.AsyncClient(transport=transport, base_url="http://up") as c:
        assert (await c.put("/x")).status_code == 200
    assert len(seen) == 2 and len(sleeps) == 1
