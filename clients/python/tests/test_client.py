"""The client beyond the vectors: durations, errors of each kind, cluster routing, CL.THROTTLE,
and many callers on one key staying within the exact bound."""

import asyncio
import datetime
import threading

import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster

import redis_rl
from redis_rl import Rule


@pytest.mark.parametrize("value, wire", [
    (60, "1m"), (90, "90s"), (1.5, "1500ms"), (datetime.timedelta(hours=24), "1d"),
    (datetime.timedelta(minutes=90), "90m"), (0, "0ms"), (0.001, "1ms"), (7200, "2h"),
])
def test_durations_take_the_largest_exact_unit(value, wire):
    assert redis_rl.duration_arg(value) == wire


@pytest.mark.parametrize("value", [0.0015, datetime.timedelta(microseconds=1500), -1, "1s"])
def test_durations_finer_than_a_millisecond_are_refused_not_rounded(value):
    with pytest.raises(redis_rl.InvalidRequest):
        redis_rl.duration_arg(value)


def test_multi_keys_in_two_slots_are_refused_naming_both(server):
    client = redis_rl.Client(server.conn())
    rules = [Rule("user", "user:17", 2, 1), Rule("tenant", "tenant:atlas", 10, 60)]
    with pytest.raises(redis_rl.InvalidRequest) as info:
        client.multi(rules)
    slots = sorted({redis_rl.key_slot("user:17"), redis_rl.key_slot("tenant:atlas")})
    assert all(str(s) in str(info.value) for s in slots)


def test_a_dead_port_is_unavailable():
    from servers import free_port
    client = redis_rl.Client(redis.Redis(port=free_port(), socket_connect_timeout=0.2))
    with pytest.raises(redis_rl.Unavailable):
        client.admit("k", 1, 1)


def test_without_the_module_and_without_script_mode_commands_are_refused(plain_server):
    client = redis_rl.Client(plain_server.conn(), mode="module")
    with pytest.raises(redis_rl.Refused) as info:
        client.admit("k", 1, 1)
    assert str(info.value).startswith("ERR unknown command")


def _no_retry():
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    return Retry(NoBackoff(), 0)


def test_client_pause_past_the_socket_timeout_is_unavailable(server):
    client = redis_rl.Client(server.conn(socket_timeout=0.1, retry=_no_retry()))
    client.admit("paused", 5, 1)
    server.conn().execute_command("CLIENT", "PAUSE", "1000", "WRITE")
    try:
        with pytest.raises(redis_rl.Unavailable):
            client.admit("paused", 5, 1)
    finally:
        server.conn().execute_command("CLIENT", "UNPAUSE")


def test_debug_sleep_past_the_socket_timeout_is_unavailable(server):
    import time
    client = redis_rl.Client(server.conn(socket_timeout=0.1, retry=_no_retry()))
    client.admit("sleepy", 5, 1)
    sleeper = threading.Thread(
        target=lambda: server.conn().execute_command("DEBUG", "SLEEP", "1.5"))
    sleeper.start()
    try:
        # the window is wide: the call only has to reach the server while it sleeps
        time.sleep(0.2)
        with pytest.raises(redis_rl.Unavailable):
            client.admit("sleepy", 5, 1)
    finally:
        sleeper.join()


def test_throttle_is_redis_cell(server):
    client = redis_rl.Client(server.conn())
    first = client.throttle("cell:1", 1, 10, 60)
    assert (first.limited, first.limit, first.remaining, first.retry_after_s) == (False, 2, 1, -1)
    client.throttle("cell:1", 1, 10, 60)
    third = client.throttle("cell:1", 1, 10, 60)
    assert third.limited and third.remaining == 0 and third.retry_after_s >= 1


@pytest.mark.parametrize("protocol", [2, 3])
def test_cluster_routes_each_command_to_its_slot(cluster, protocol):
    rc = RedisCluster(host="127.0.0.1", port=cluster.port, protocol=protocol)
    try:
        client = redis_rl.Client(rc)
        for i in range(12):
            tag = f"{{t{i}:{protocol}}}"
            d = client.multi([Rule("user", f"{tag}:u", 2, 1, burst=5), Rule("tenant", f"{tag}:t", 100, 60)])
            assert d.allowed and [r.name for r in d.rules] == ["user", "tenant"]
            assert d.rules[0].remaining == 4
            a = client.admit(f"solo:{i}:{protocol}", 3, 60)
            assert a.allowed and a.remaining == 2
            info = client.info(f"{tag}:u")
            assert info is not None and info.algo == "gcra" and info.capacity == 5
            held = client.acquire(f"sem:{i}:{protocol}", 1, 60, holder="me")
            assert held.acquired and client.release(f"sem:{i}:{protocol}", "me")
        with pytest.raises(redis_rl.InvalidRequest):
            client.multi([Rule("a", "a", 1, 1), Rule("b", "b", 1, 1)])
    finally:
        rc.close()


async def test_async_cluster_routes_multi(cluster):
    rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.port)
    try:
        client = redis_rl.AsyncClient(rc)
        for i in range(8):
            tag = f"{{a{i}}}"
            d = await client.multi([Rule("x", f"{tag}:x", 1, 3600), Rule("y", f"{tag}:y", 5, 60)])
            assert d.allowed
            d = await client.multi([Rule("x", f"{tag}:x", 1, 3600), Rule("y", f"{tag}:y", 5, 60)])
            assert not d.allowed and d.denied_by == "x" and d.retry_after_ms > 0
    finally:
        await rc.aclose()


def test_threads_on_one_key_stay_within_the_bound(server):
    client = redis_rl.Client(redis.Redis(connection_pool=redis.BlockingConnectionPool(
        port=server.port, max_connections=8)))
    admitted = []
    lock = threading.Lock()

    def worker():
        n = 0
        for _ in range(50):
            if client.admit("hammer:threads", 37, 3600).allowed:
                n += 1
        with lock:
            admitted.append(n)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 37


async def test_tasks_on_one_key_stay_within_the_bound(server):
    conn = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=16))
    client = redis_rl.AsyncClient(conn)
    try:
        results = await asyncio.gather(*[client.admit("hammer:tasks", 41, 3600, algo="window")
                                         for _ in range(300)])
        assert sum(r.allowed for r in results) == 41
    finally:
        await conn.aclose()
