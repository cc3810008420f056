"""The shared vectors of clients/vectors (clients/SPEC.md section 4): loading, typed requests,
matching with $range/$any, and the decision as JSON."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
from pathlib import Path
from typing import Any, List

import redis_rl_engine as engine

import redis_rl
from redis_rl import commands as c

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


def load() -> List[dict]:
    out = []
    # commands.json holds the command vectors; the other files are the gateway's contract.
    for path in [VECTORS / "commands.json"]:
        doc = json.loads(path.read_text())
        assert doc["format"] == 1, path
        for v in doc["vectors"]:
            out.append(dict(v, file=path.name))
    return out


_counter = itertools.count()


def fresh_prefix() -> str:
    return f"py{os.getpid()}x{next(_counter)}"


def subst(value: Any, prefix: str) -> Any:
    if isinstance(value, str):
        return value.replace("$p", prefix)
    if isinstance(value, list):
        return [subst(v, prefix) for v in value]
    if isinstance(value, dict):
        return {k: subst(v, prefix) for k, v in value.items()}
    return value


def _duration(fields: dict, name: str):
    if f"{name}_ms" in fields:
        return datetime.timedelta(milliseconds=fields[f"{name}_ms"])
    if f"{name}_us" in fields:
        return datetime.timedelta(microseconds=fields[f"{name}_us"])
    return None


def request(r: dict) -> c.Request:
    kind = r["type"]
    if kind == "admit":
        reserve = r.get("reserve") or {}
        return c.Admit(r["key"], r["limit"], _duration(r, "period"), burst=r.get("burst"),
                       cost=r.get("cost"), algo=r.get("algo"), dry_run=r.get("dry_run", False),
                       reserve=reserve.get("id"), keep=_duration(reserve, "keep"))
    if kind == "multi":
        return c.Multi([c.Rule(x["name"], x["key"], x["limit"], _duration(x, "period"),
                               burst=x.get("burst"), cost=x.get("cost"), algo=x.get("algo"))
                        for x in r["rules"]], dry_run=r.get("dry_run", False))
    if kind == "grant":
        return c.Grant(r["key"], r["limit"], _duration(r, "period"), r["want"],
                       burst=r.get("burst"), algo=r.get("algo"), ttl=_duration(r, "ttl"))
    if kind == "acquire":
        return c.Acquire(r["key"], r["capacity"], _duration(r, "lease"), holder=r.get("holder"))
    if kind == "release":
        return c.Release(r["key"], r["holder"])
    if kind == "renew":
        return c.Renew(r["key"], r["holder"], _duration(r, "lease"))
    if kind == "settle":
        return c.Settle(r["key"], r["id"], r["actual"], r.get("forget", False))
    if kind == "info":
        return c.Info(r["key"])
    raise AssertionError(f"unknown request type {kind}")


def as_json(decision: Any) -> Any:
    if decision is None or isinstance(decision, bool):
        return decision
    if isinstance(decision, redis_rl.KeyInfo):
        return decision.present()
    out = dataclasses.asdict(decision)
    if isinstance(out.get("holder"), bytes):
        out["holder"] = out["holder"].decode()
    return out


def matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict) and set(expected) == {"$range"}:
        lo, hi = expected["$range"]
        return isinstance(actual, int) and not isinstance(actual, bool) and lo <= actual <= hi
    if isinstance(expected, dict) and set(expected) == {"$any"}:
        return actual is not None
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and set(expected) == set(actual)
                and all(matches(v, actual[k]) for k, v in expected.items()))
    if isinstance(expected, list):
        return (isinstance(actual, (list, tuple)) and len(expected) == len(actual)
                and all(matches(e, a) for e, a in zip(expected, actual)))
    return type(expected) is type(actual) and expected == actual


def rendered(vector: dict, req: c.Request, decision: Any) -> dict:
    """The headers the engine renders for the typed decision (the gateway's own rendering); an
    RL.MULTI's wait is attributed to `denied_by` only."""
    if isinstance(req, c.Admit):
        shown = [{"name": vector["rule_name"], "limit": req.limit,
                  "period_ms": c.duration_us(req.period) // 1000, "capacity": decision.capacity,
                  "remaining": decision.remaining, "reset_after_ms": decision.reset_after_ms,
                  "retry_after_ms": None if decision.allowed else decision.retry_after_ms}]
    else:
        shown = []
        for rule, outcome in zip(req.rules, decision.rules):
            refused = decision.denied_by is not None and rule.name == decision.denied_by
            shown.append({"name": rule.name, "limit": rule.limit,
                          "period_ms": c.duration_us(rule.period, "period") // 1000,
                          "capacity": rule.burst if rule.burst is not None else rule.limit,
                          "remaining": outcome.remaining,
                          "reset_after_ms": outcome.reset_after_ms,
                          "retry_after_ms": decision.retry_after_ms if refused else None})
    return dict(engine.render_headers(shown, legacy=True))
