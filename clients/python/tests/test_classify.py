"""`classify` reads a server error the same way whatever redis-py made of it: without a
status_code (before 6), with None for a code it did not know (6 and 7), or with that code while
the text still starts with it (8)."""

import pytest
import redis

from redis_rl.errors import Refused, Unavailable, classify

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


class ResponseError(Exception):
    """The shape of redis-py 5's ResponseError: classify goes by the class name."""


def _error(text, **attrs):
    exc = redis.exceptions.ResponseError(text)
    for name, value in attrs.items():
        setattr(exc, name, value)
    return exc


@pytest.mark.parametrize(
    "exc",
    [
        ResponseError(WRONGTYPE),
        _error(WRONGTYPE, status_code=None),
        _error(WRONGTYPE, status_code="WRONGTYPE"),
    ],
    ids=["redis-py 5", "redis-py 6 and 7", "redis-py 8"],
)
def test_an_unknown_code_is_named_once(exc):
    err = classify(exc)
    assert isinstance(err, Refused)
    assert str(err) == WRONGTYPE


def test_a_stripped_code_is_put_back():
    err = classify(_error("invalid limit", status_code="ERR"))
    assert isinstance(err, Refused) and str(err) == "ERR invalid limit"


def test_a_server_error_that_is_not_a_refusal_is_unavailable():
    err = classify(_error("BUSY Redis is busy running a script", status_code="BUSY"))
    assert isinstance(err, Unavailable)
    assert str(err) == "BUSY Redis is busy running a script"
