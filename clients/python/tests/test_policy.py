"""The policy is the engine's to validate (clients/vectors/policies holds every case, run by
test_engine_vectors.py); here, that the gateway reads a file, says which, and that the
example policy loads."""

import json
from pathlib import Path

import pytest
import redis.asyncio

import redis_rl
from redis_rl.gateway import Gateway, InvalidPolicy

EXAMPLE = Path(__file__).resolve().parents[1] / "northstar.policy.json"


def _gateway(policy):
    return Gateway(redis_rl.AsyncClient(redis.asyncio.Redis()), policy)


def test_the_example_policy_loads():
    assert _gateway(EXAMPLE).policy_version == json.loads(EXAMPLE.read_text())["version"]


def test_a_refusal_names_the_field(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    doc["rules"]["read"]["colour"] = "red"
    with pytest.raises(InvalidPolicy) as info:
        _gateway(doc)
    assert "rules.read" in str(info.value) and "colour" in str(info.value)


def test_a_missing_file_is_an_invalid_policy(tmp_path):
    with pytest.raises(InvalidPolicy) as info:
        _gateway(tmp_path / "absent.json")
    assert "absent.json" in str(info.value)


def test_reload_needs_a_file():
    with pytest.raises(InvalidPolicy):
        _gateway(json.loads(EXAMPLE.read_text())).reload()
