"""Policy validation: each refusal names the field by its JSON path; the example policy of
clients/CONTRACT.md loads."""

import copy
import json
from pathlib import Path

import pytest

from redis_rl.gateway import PolicyError, PolicySource, parse_policy

EXAMPLE = json.loads((Path(__file__).resolve().parents[1] / "northstar.policy.json").read_text())


def _refused(doc):
    with pytest.raises(PolicyError) as info:
        parse_policy(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(info.value)


def _with(change):
    doc = copy.deepcopy(EXAMPLE)
    change(doc)
    return doc


def test_the_example_policy_loads():
    p = parse_policy(json.dumps(EXAMPLE))
    assert p.version == 7 and len(p.routes) == 5
    assert p.route("get", "/catalog").on_store_error.mode == "fallback"
    assert p.rules["global"].grant.want == 100 and p.rules["global"].grant.ttl_ms == 250
    assert p.store_timeout_ms == 50 and p.retry_after_jitter == 0.2


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("version"), "invalid policy: missing field 'version'"),
    (lambda d: d.update(extra=1), "invalid policy: extra: unknown field"),
    (lambda d: d["rules"]["read"].update(colour="red"), "invalid policy: rules.read.colour: unknown field"),
    (lambda d: d["routes"][1]["rules"].append("nope"), "invalid policy: routes[1].rules[2]: unknown rule 'nope'"),
    (lambda d: d["routes"][1]["rules"].append("write"), "invalid policy: routes[1].rules[2]: rule 'write' named twice"),
    (lambda d: d["rules"]["read"].update(period="10"), "invalid policy: rules.read.period: '10' needs a unit: add ms, s, m, h or d (for example 10s)"),
    (lambda d: d["rules"]["read"].update(period="10y"), "invalid policy: rules.read.period: '10y' has an unknown unit 'y'"),
    (lambda d: d["rules"]["read"].update(period="3651d"), "invalid policy: rules.read.period: '3651d' must be between 1ms and 3650d"),
    (lambda d: d["rules"]["inflight"].update(limit=3), "invalid policy: rules.inflight.limit: a semaphore rule takes no rate field or grant"),
    (lambda d: d["rules"]["inflight"].update(grant={"want": 1}), "invalid policy: rules.inflight.grant: a semaphore rule takes no rate field or grant"),
    (lambda d: d["rules"]["inflight"].pop("lease"), "invalid policy: rules.inflight: a semaphore rule needs 'lease'"),
    (lambda d: d["rules"]["read"].update(lease="1s"), "invalid policy: rules.read.lease:"),
    (lambda d: d["rules"]["read"].pop("limit"), "invalid policy: rules.read: a rate rule needs 'limit'"),
    (lambda d: d["rules"]["read"].update(algo="leaky"), "invalid policy: rules.read.algo: unknown algo"),
    (lambda d: d["rules"]["anon"].update(burst=5), "invalid policy: rules.anon.burst: burst is not allowed with algo window"),
    (lambda d: d["rules"]["anon"].update(settle=True), "invalid policy: rules.anon.settle: settle is only for algo gcra and bucket"),
    (lambda d: d["rules"]["read"].update(limit=0), "invalid policy: rules.read.limit: must be in the range [1, 1000000000000000]"),
    (lambda d: d["rules"]["anon"].update(algo="log", limit=10001), "invalid policy: rules.anon.limit: must be in the range [1, 10000]"),
    (lambda d: d["rules"]["write"].update(cost=11), "invalid policy: rules.write.cost: cost 11 exceeds the capacity 10"),
    (lambda d: d["rules"]["read"].update(limit=1, period="3650d", burst=2), "invalid policy: rules.read.burst: the capacity takes more than 3650d to refill"),
    (lambda d: d["routes"].append(dict(d["routes"][0])), "invalid policy: routes[5]: duplicate route GET /catalog (also routes[0])"),
    (lambda d: d.update(retry_after_jitter=1.5), "invalid policy: retry_after_jitter: must be a number in [0, 1]"),
    (lambda d: d["negative_cache"].update(entries=0), "invalid policy: negative_cache.entries: must be in the range"),
    (lambda d: d["store"]["breaker"].update(failures=0), "invalid policy: store.breaker.failures: must be in the range"),
    (lambda d: d["identity"].update(trusted_proxies=["10.0.0.0/8", "nope"]), "invalid policy: identity.trusted_proxies[1]:"),
    (lambda d: d["rules"]["write"].update(key="w:${user}"), "invalid policy: routes[1].rules: the rules sent in one RL.MULTI (write, tenant) need keys with one non-empty hash tag"),
    (lambda d: d["rules"]["write"].update(key="{t:${tenant}}:tenant"), "invalid policy: routes[1].rules: two rules of one RL.MULTI have the same key"),
    (lambda d: d["routes"][0]["on_store_error"].update(limit=1, burst=None) or d["routes"][0]["on_store_error"].pop("burst"), None),
    (lambda d: d["routes"][4]["on_store_error"].update(limit=1, burst=1), "invalid policy: routes[4].on_store_error: the fallback's capacity 1 is below the cost 2 of rule 'search'"),
    (lambda d: d["routes"][1]["on_store_error"].update(limit=1), "invalid policy: routes[1].on_store_error.limit: mode deny takes no limit"),
    (lambda d: d["rules"]["read"].update(key="r:${who}"), "invalid policy: rules.read.key: unknown variable '${who}'"),
    (lambda d: d["rules"]["read"].update(key="r:${user"), "invalid policy: rules.read.key: unclosed '${'"),
    (lambda d: d["rules"]["read"].update(key=""), "invalid policy: rules.read.key: a key must not be empty"),
])
def test_refusals_name_the_field(change, message):
    doc = _with(change)
    if message is None:
        parse_policy(json.dumps(doc))
        return
    assert _refused(doc).startswith(message)


def test_not_json():
    assert _refused("{").startswith("invalid policy: not JSON")


def test_a_reload_keeps_the_snapshot_unless_newer(tmp_path):
    f = tmp_path / "policy.json"
    f.write_text(json.dumps(EXAMPLE))
    source = PolicySource(f)
    with pytest.raises(PolicyError, match="policy version 7 is not higher than the version in force, 7"):
        source.reload()
    f.write_text(json.dumps(_with(lambda d: d.update(version=8, rules={}))))
    with pytest.raises(PolicyError, match="unknown rule"):
        source.reload()
    f.unlink()
    with pytest.raises(PolicyError, match="cannot read policy"):
        source.reload()
    assert source.current.version == 7
    f.write_text(json.dumps(_with(lambda d: d.update(version=8))))
    assert source.reload().version == 8


def test_keys_escape_caller_values():
    p = parse_policy(json.dumps(EXAMPLE))
    key = p.rules["read"].key.render({"tenant": "a}b{c%", "user": None})
    assert key == "{t:a%7Db%7Bc%25}:read:anonymous"
