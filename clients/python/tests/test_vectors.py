"""Every vector of clients/vectors, over RESP2 and RESP3, with the sync and the asyncio client."""

import pytest
import redis
import redis.asyncio

import redis_rl
from redis_rl.errors import classify

import vectors

VECTORS = vectors.load()


def _ids():
    return [f"{v['file']}:{i}:{v['name']}" for i, v in enumerate(VECTORS)]


def _setup(conn, vector, prefix):
    for cmd in vectors.subst(vector["setup"], prefix):
        try:
            conn.execute_command(*cmd)
        except redis.exceptions.ResponseError:
            pass


def _check_raw(conn, vector, protocol):
    prefix = vectors.fresh_prefix()
    _setup(conn, vector, prefix)
    args = vectors.subst(vector["args"], prefix)
    if "error" in vector:
        with pytest.raises(redis.exceptions.ResponseError) as info:
            conn.execute_command(*args)
        assert str(classify(info.value)) == vectors.subst(vector["error"], prefix)
        return
    reply = conn.execute_command(*args)
    expected = vectors.subst(vector[f"resp{protocol}"], prefix)
    assert vectors.matches(expected, reply), (expected, reply)


def _check_typed(vector, prefix, call):
    if "error" in vector:
        with pytest.raises(redis_rl.Refused) as info:
            call()
        assert str(info.value) == vectors.subst(vector["error"], prefix)
        return None
    decision = call()
    expected = vectors.subst(vector["decision"], prefix)
    assert vectors.matches(expected, vectors.as_json(decision)), (expected, decision)
    return decision


def _check_headers(vector, req, decision):
    if "headers" not in vector:
        return
    got = vectors.rendered(vector, req, decision)
    assert {k: got.get(k) for k in vector["headers"]} == vector["headers"]


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("vector", VECTORS, ids=_ids())
def test_vector_sync(server, vector, protocol):
    if "client_error" in vector:
        req = vectors.request(vectors.subst(vector["request"], vectors.fresh_prefix()))
        with pytest.raises(redis_rl.InvalidRequest):
            req.args()
        with redis.Redis(port=server.port, protocol=protocol) as conn:
            with pytest.raises(redis_rl.InvalidRequest):
                redis_rl.Client(conn).execute(req)
        return
    prefix = vectors.fresh_prefix()
    req = vectors.request(vectors.subst(vector["request"], prefix))
    assert [str(a) for a in req.args()] == vectors.subst(vector["args"], prefix)
    with redis.Redis(port=server.port, protocol=protocol, decode_responses=True) as conn:
        _check_raw(conn, vector, protocol)
    with redis.Redis(port=server.port, protocol=protocol) as conn:
        prefix = vectors.fresh_prefix()
        _setup(conn, vector, prefix)
        req = vectors.request(vectors.subst(vector["request"], prefix))
        client = redis_rl.Client(conn)
        decision = _check_typed(vector, prefix, lambda: client.execute(req))
        assert client.mode == redis_rl.MODULE
        _check_headers(vector, req, decision)


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("vector", VECTORS, ids=_ids())
async def test_vector_async(server, vector, protocol):
    prefix = vectors.fresh_prefix()
    req = vectors.request(vectors.subst(vector["request"], prefix))
    conn = redis.asyncio.Redis(port=server.port, protocol=protocol)
    try:
        client = redis_rl.AsyncClient(conn)
        if "client_error" in vector:
            with pytest.raises(redis_rl.InvalidRequest):
                await client.execute(req)
            return
        for cmd in vectors.subst(vector["setup"], prefix):
            try:
                await conn.execute_command(*cmd)
            except redis.exceptions.ResponseError:
                pass
        if "error" in vector:
            with pytest.raises(redis_rl.Refused) as info:
                await client.execute(req)
            assert str(info.value) == vectors.subst(vector["error"], prefix)
            return
        decision = await client.execute(req)
        expected = vectors.subst(vector["decision"], prefix)
        assert vectors.matches(expected, vectors.as_json(decision)), (expected, decision)
        _check_headers(vector, req, decision)
    finally:
        await conn.aclose()
