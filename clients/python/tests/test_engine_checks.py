"""Keyed checks through the binding (`Engine.check`), answered by the engine's memory store:
the forms a check may take, and the bad ones refused whole before anything is decided. What
the engine decides for them is the contract's (clients/vectors/scenarios/checks.json, run by
test_engine_vectors.py)."""

import json

import pytest

engine = pytest.importorskip("redis_rl_engine")

NOW = 1_767_225_600_000_000
POLICY = {
    "version": 3,
    "rules": {
        "user": {"key": "{r}u", "algo": "window", "limit": 3, "period": "1m"},
        "tenant": {"key": "{r}t", "algo": "window", "limit": 10, "period": "1m"},
    },
    "routes": [{"name": "rls:api", "method": "*", "path": "/rls", "rules": ["user", "tenant"]}],
    "default": {"rules": []},
}


def _engine():
    return engine.Engine(json.dumps(POLICY), log_sample=0.0, seed=1, now=NOW)


def _decide(eng, store, checks, route="rls:api"):
    pending, step = eng.check(route, checks, NOW)
    while not isinstance(step, engine.Verdict):
        answers = [store.call(c.args, NOW) for c in step.calls]
        step = eng.resume(pending, answers, NOW)
    return step


def _read(verdict):
    return [(o.over, o.remaining, o.source) for o in verdict.checks]


def test_tuples_dicts_and_bytes_keys_are_one_check():
    eng, store = _engine(), engine.MemoryStore()
    first = _decide(eng, store, [("user", "rls:u1"), ("tenant", b"rls:t1", 2)])
    assert first.status is None and first.kind == "admit" and first.route == "rls:api"
    assert _read(first) == [(False, 2, "store"), (False, 8, "store")]
    second = _decide(eng, store, [{"rule": "user", "key": b"rls:u1", "cost": 2},
                                  {"rule": "tenant", "key": "rls:t1"}])
    assert _read(second) == [(False, 0, "store"), (False, 7, "store")]
    refused = _decide(eng, store, [["tenant", "rls:t1"], ["user", "rls:u1", 1]])
    assert (refused.status, refused.kind) == (429, "refuse")
    over = refused.checks[1]
    assert (over.over, over.remaining, over.source) == (True, 0, "store")
    assert over.retry_after_ms is not None and 0 < over.retry_after_ms <= 60_000
    assert "CheckOutcome(over=True, remaining=0" in repr(over)


def test_a_cost_of_zero_only_asks():
    eng, store = _engine(), engine.MemoryStore()
    for _ in range(3):
        asked = _decide(eng, store, [("user", "rls:u2", 0)])
        assert asked.status is None and _read(asked) == [(False, 3, "store")]
    assert _read(_decide(eng, store, [("user", "rls:u2")])) == [(False, 2, "store")]


def test_a_blocked_check_is_refused_without_a_call_and_the_other_only_asked():
    eng, store = _engine(), engine.MemoryStore()
    checks = [{"rule": "user", "key": "rls:u4", "blocked": True}, ("tenant", "rls:t4")]
    pending, step = eng.check("rls:api", checks, NOW)
    assert [c.args[0] for c in step.calls] == [b"RL.ADMIT"] and b"DRYRUN" in step.calls[0].args
    refused = _decide(eng, store, checks)
    assert (refused.status, refused.kind) == (429, "refuse")
    assert _read(refused) == [(True, 0, "blocked"), (False, 10, "store")]
    assert _read(_decide(eng, store, [{"rule": "user", "key": "rls:u4", "blocked": False}])) \
        == [(False, 2, "store")]


@pytest.mark.parametrize("checks,error,text", [
    ([("user", "rls:u3"), ("nobody", "rls:x")], ValueError,
     "check 1: no rule named \"nobody\" in the policy in force (version 3)"),
    ([("user", b"\xff")], ValueError, "check 0: the key is not UTF-8"),
    ([("user", "rls:u3", -1)], ValueError, "check 0: the cost is a whole number"),
    ([("user", "rls:u3", 2**64)], ValueError, "check 0: the cost is a whole number"),
    ([("user", "rls:u3", True)], TypeError, "check 0: the cost is a number of units"),
    ([("user",)], ValueError, "check 0: (rule, key, cost) has 3 items, not 1"),
    ([{"rule": "user"}], ValueError, "check 0: no \"key\""),
    (["user"], TypeError, "check 0: a (rule, key, cost) tuple or a {rule, key, cost} dict"),
    ([(1, "rls:u3")], TypeError, "check 0: the rule is named by a str"),
    ([("user", 7)], TypeError, "check 0: the key is str or bytes, not int"),
    ([{"rule": "user", "key": "rls:u3", "blocked": 1}], TypeError, "check 0: blocked is a bool"),
])
def test_a_bad_check_is_refused_and_nothing_is_decided(checks, error, text):
    eng, store = _engine(), engine.MemoryStore()
    with pytest.raises(error) as info:
        eng.check("rls:api", checks, NOW)
    assert str(info.value).startswith(text)
    # Nothing counted, nothing spent on the good check beside it.
    assert "rl_gateway_decisions_total{" not in eng.render_metrics(now=NOW)
    assert _read(_decide(eng, store, [("user", "rls:u3")])) == [(False, 2, "store")]


def test_a_route_the_policy_lacks_is_a_500_and_a_request_has_no_checks():
    eng, store = _engine(), engine.MemoryStore()
    lacking = _decide(eng, store, [("user", "rls:u4")], route="nowhere")
    assert (lacking.status, lacking.kind) == (500, "error")
    assert _read(lacking) == [(False, None, "open")]
    pending, step = eng.begin("GET", "/rls", [], "192.0.2.1", NOW)
    while not isinstance(step, engine.Verdict):
        step = eng.resume(pending, [store.call(c.args, NOW) for c in step.calls], NOW)
    assert step.status is None and step.checks == []
