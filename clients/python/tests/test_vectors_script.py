"""The shared vectors in script mode: a server without the module, every command sent as EVALSHA
of the rl.lua the package ships (clients/SPEC.md section 5). A command the shipped script does
not have yet is skipped with the script's own refusal as the reason."""

import pytest
import redis
import redis.asyncio

import redis_rl
from redis_rl.client import load_script

import vectors
from servers import Server

VECTORS = vectors.load()

pytestmark = pytest.mark.skipif(load_script() is None, reason="this build ships no rl.lua")


def _ids():
    return [f"{v['file']}:{i}:{v['name']}" for i, v in enumerate(VECTORS)]


def _lacking(exc):
    text = str(exc)
    if text.startswith("ERR unknown command") and "rl.lua" in text:
        pytest.skip(f"the shipped rl.lua lacks it: {text}")


def _setup(conn, client, vector, prefix):
    for cmd in vectors.subst(vector["setup"], prefix):
        try:
            if cmd[0].upper().startswith(("RL.", "CL.")):
                client.execute(redis_rl.Raw(cmd))
            else:
                conn.execute_command(*cmd)
        except (redis_rl.Refused, redis.exceptions.ResponseError) as exc:
            _lacking(exc)


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("vector", VECTORS, ids=_ids())
def test_vector_in_script_mode(plain_server, vector, protocol):
    prefix = vectors.fresh_prefix()
    req = vectors.request(vectors.subst(vector["request"], prefix))
    with redis.Redis(port=plain_server.port, protocol=protocol) as conn:
        client = redis_rl.Client(conn)
        if "client_error" in vector:
            with pytest.raises(redis_rl.InvalidRequest):
                client.execute(req)
            return
        _setup(conn, client, vector, prefix)
        try:
            decision = client.execute(req)
        except redis_rl.Refused as exc:
            _lacking(exc)
            assert "error" in vector, exc
            assert str(exc) == vectors.subst(vector["error"], prefix)
            return
        assert client.mode == redis_rl.SCRIPT
        assert "error" not in vector, decision
        expected = vectors.subst(vector["decision"], prefix)
        assert vectors.matches(expected, vectors.as_json(decision)), (expected, decision)
        if "headers" in vector:
            got = vectors.rendered(vector, req, decision)
            assert {k: got.get(k) for k in vector["headers"]} == vector["headers"]


def test_noscript_reloads_and_retries_once(plain_server):
    with redis.Redis(port=plain_server.port) as conn:
        client = redis_rl.Client(conn)
        assert client.admit("noscript:k", 3, 3600).remaining == 2
        conn.script_flush()
        assert client.admit("noscript:k", 3, 3600).remaining == 1
        assert client.mode == redis_rl.SCRIPT


def test_mode_is_logged_once_and_reported(plain_server, server, caplog):
    seen = []
    with redis.Redis(port=plain_server.port) as conn:
        client = redis_rl.Client(conn)
        client.on_mode(seen.append)
        with caplog.at_level("INFO", logger="redis_rl"):
            for _ in range(3):
                client.admit("mode:k", 10, 60)
    assert seen == ["script"]
    assert [r.getMessage() for r in caplog.records].count("redis-rl store mode: script") == 1
    with redis.Redis(port=server.port) as conn:
        client = redis_rl.Client(conn)
        client.admit("mode:k", 10, 60)
        assert client.mode == redis_rl.MODULE


async def test_async_script_mode(plain_server):
    conn = redis.asyncio.Redis(port=plain_server.port, protocol=3)
    try:
        client = redis_rl.AsyncClient(conn)
        first = await client.admit("async:script", 2, 3600)
        second = await client.admit("async:script", 2, 3600)
        third = await client.admit("async:script", 2, 3600)
        assert [first.allowed, second.allowed, third.allowed] == [True, True, False]
        assert client.mode == redis_rl.SCRIPT
    finally:
        await conn.aclose()


@pytest.mark.parametrize("protocol", [2, 3])
def test_script_mode_on_a_cluster(protocol):
    from redis.cluster import RedisCluster
    from servers import Cluster
    cluster = Cluster(module=False)
    try:
        rc = RedisCluster(host="127.0.0.1", port=cluster.port, protocol=protocol)
        client = redis_rl.Client(rc)
        for i in range(9):
            tag = f"{{s{i}}}"
            d = client.multi([redis_rl.Rule("u", f"{tag}:u", 1, 3600),
                              redis_rl.Rule("t", f"{tag}:t", 5, 3600)])
            assert d.allowed and client.mode == redis_rl.SCRIPT
            again = client.multi([redis_rl.Rule("u", f"{tag}:u", 1, 3600),
                                  redis_rl.Rule("t", f"{tag}:t", 5, 3600)])
            assert not again.allowed and again.denied_by == "u"
            assert client.admit(f"solo{i}", 2, 3600).remaining == 1
        rc.close()
    finally:
        cluster.close()


async def test_async_prepare_loads_the_script_on_a_cluster():
    import redis.asyncio
    from servers import Cluster
    cluster = Cluster(module=False)
    try:
        rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.port)
        client = redis_rl.AsyncClient(rc)
        assert await client.prepare() == redis_rl.SCRIPT
        for n in cluster.nodes:
            with n.conn() as conn:
                assert conn.script_exists(client._modes.sha) == [True]
        assert (await client.admit("{p}:k", 1, 3600)).allowed
        await rc.aclose()
    finally:
        cluster.close()


def test_a_failover_onto_a_server_without_the_module_switches_to_the_script():
    """A server that loses the module (a failover onto a replica without it, a restart) answers
    a native command `unknown command`: nothing was spent, so the client detects the mode again
    and sends the same command through the script."""
    server = Server(module=True)
    try:
        with redis.Redis(port=server.port, retry_on_error=[]) as conn:
            client = redis_rl.Client(conn)
            assert client.admit("failover:a", 5, 3600).remaining == 4
            assert client.mode == redis_rl.MODULE
            server.kill()
            server.module = False
            server.start()
            # The first call may meet the dead connection; a call then gets the new server.
            for _ in range(3):
                try:
                    d = client.admit("failover:b", 5, 3600)
                    break
                except redis_rl.Unavailable:
                    continue
            assert (d.allowed, d.remaining) == (True, 4)
            assert client.mode == redis_rl.SCRIPT
            # A module refusal is not taken for a change of mode.
            with pytest.raises(redis_rl.Refused):
                client.admit("failover:b", 5, 3600, cost=6)
            assert client.mode == redis_rl.SCRIPT
    finally:
        server.close()
