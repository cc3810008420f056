"""The limits storage under rl:// and async+rl://, through limits' own strategies, flask-limiter
and slowapi, each app driven by its test client."""

import pytest

import redis_rl.limits  # noqa: F401  (registers rl://, rls://, async+rl:// and gcra)
from limits import parse, storage, strategies
from limits.aio import strategies as aio_strategies

STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter", "gcra"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_admits_exactly_the_limit(server, strategy):
    st = storage.storage_from_string(f"rl://127.0.0.1:{server.port}")
    limiter = strategies.STRATEGIES[strategy](st)
    item = parse("3/hour")
    assert [limiter.hit(item, "each", strategy) for _ in range(5)] == [True] * 3 + [False] * 2
    assert not limiter.test(item, "each", strategy)
    stats = limiter.get_window_stats(item, "each", strategy)
    assert stats.remaining == 0
    limiter.clear(item, "each", strategy)
    assert limiter.test(item, "each", strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_costs_and_remaining(server, strategy):
    st = storage.storage_from_string(f"rl://127.0.0.1:{server.port}")
    limiter = strategies.STRATEGIES[strategy](st)
    item = parse("10/hour")
    assert limiter.hit(item, "cost", strategy, cost=4)
    assert limiter.get_window_stats(item, "cost", strategy).remaining == 6
    assert limiter.hit(item, "cost", strategy, cost=6)
    assert not limiter.hit(item, "cost", strategy, cost=1)


def test_script_mode_storage(plain_server):
    st = storage.storage_from_string(f"rl://127.0.0.1:{plain_server.port}")
    limiter = strategies.STRATEGIES["gcra"](st)
    item = parse("2/hour")
    assert [limiter.hit(item, "script") for _ in range(3)] == [True, True, False]
    assert st.client.mode == "script"


def test_rls_maps_to_rediss():
    assert redis_rl.limits._redis_url("rls://h:1/2") == "rediss://h:1/2"
    assert redis_rl.limits._redis_url("async+rl://h:1") == "redis://h:1"


def test_a_dead_store_raises_a_storage_error_when_wrapped():
    from limits.errors import StorageError
    from servers import free_port
    st = storage.storage_from_string(f"rl://127.0.0.1:{free_port()}", wrap_exceptions=True,
                                     socket_connect_timeout=0.2)
    with pytest.raises(StorageError):
        st.incr("k", 60)
    assert not st.check()


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_async_storage(server, strategy):
    st = storage.storage_from_string(f"async+rl://127.0.0.1:{server.port}")
    limiter = aio_strategies.STRATEGIES[strategy](st)
    item = parse("3/hour")
    got = [await limiter.hit(item, "aio", strategy) for _ in range(4)]
    assert got == [True, True, True, False]
    assert (await limiter.get_window_stats(item, "aio", strategy)).remaining == 0
    await st.redis.aclose()


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "gcra"])
def test_flask_limiter_app(server, strategy):
    from flask import Flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=f"rl://127.0.0.1:{server.port}",
                      strategy=strategy, headers_enabled=True,
                      key_prefix=f"flask-{strategy}")

    @app.route("/ping")
    @limiter.limit("3 per hour")
    def ping():
        return "pong"

    client = app.test_client()
    codes = [client.get("/ping").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    refused = client.get("/ping")
    assert refused.headers["X-RateLimit-Limit"] == "3"
    assert refused.headers["X-RateLimit-Remaining"] == "0"


@pytest.mark.parametrize("strategy", ["fixed-window", "sliding-window-counter", "gcra"])
def test_slowapi_app(server, strategy):
    from fastapi import FastAPI, Request
    from fastapi.testclient import TestClient
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    limiter = Limiter(key_func=get_remote_address, storage_uri=f"rl://127.0.0.1:{server.port}",
                      strategy=strategy, key_prefix=f"slowapi-{strategy}")
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/ping")
    @limiter.limit("2/hour")
    async def ping(request: Request):
        return {"pong": True}

    with TestClient(app) as client:
        codes = [client.get("/ping").status_code for _ in range(4)]
    assert codes == [200, 200, 429, 429]
