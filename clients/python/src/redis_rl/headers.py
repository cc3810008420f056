"""Header rendering (clients/SPEC.md section 3): pure functions of a rule and its outcome."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from .commands import duration_us


@dataclass(frozen=True)
class Shown:
    """One rule as the headers show it. `semaphore` rules show capacity in `limit`."""

    name: str
    limit: int
    period_ms: int
    capacity: int
    remaining: int
    reset_after_ms: int
    refused: bool = False
    retry_after_ms: int = 0
    semaphore: bool = False

    @property
    def seconds(self) -> int:
        wait = self.retry_after_ms if self.refused else self.reset_after_ms
        return -(-wait // 1000)


def sf_string(name: str) -> str:
    out = []
    for ch in name:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("_")
    return '"' + "".join(out) + '"'


def policy_item(rule: Shown) -> str:
    if rule.semaphore:
        return f'{sf_string(rule.name)};q={rule.capacity};qu="concurrent-requests"'
    if rule.period_ms % 1000 == 0:
        q, w = rule.limit, rule.period_ms // 1000
    else:
        w = rule.period_ms // math.gcd(rule.limit * 1000, rule.period_ms)
        q = rule.limit * 1000 * w // rule.period_ms
    item = f"{sf_string(rule.name)};q={q};w={w}"
    if rule.capacity != q:
        item += f";rl-burst={rule.capacity}"
    return item


def ratelimit_item(rule: Shown) -> str:
    return f"{sf_string(rule.name)};r={rule.remaining};t={rule.seconds}"


def constraining(rules: Sequence[Shown]) -> Optional[Shown]:
    """The rule that constrains most: a refusing one with the longest wait, otherwise the one
    with the fewest units left (the first on ties)."""
    refusing = [r for r in rules if r.refused]
    if refusing:
        best = refusing[0]
        for r in refusing[1:]:
            if r.retry_after_ms > best.retry_after_ms:
                best = r
        return best
    if not rules:
        return None
    best = rules[0]
    for r in rules[1:]:
        if r.remaining < best.remaining:
            best = r
    return best


def render(rules: Sequence[Shown], legacy: bool = False) -> Dict[str, str]:
    """RateLimit-Policy and RateLimit for the rules shown (and X-RateLimit-* when `legacy`)."""
    if not rules:
        return {}
    out = {
        "RateLimit-Policy": ", ".join(policy_item(r) for r in rules),
        "RateLimit": ", ".join(ratelimit_item(r) for r in rules),
    }
    if legacy:
        top = constraining(rules)
        assert top is not None
        out["X-RateLimit-Limit"] = str(top.limit)
        out["X-RateLimit-Remaining"] = str(top.remaining)
        out["X-RateLimit-Reset"] = str(top.seconds)
    return out


def retry_after(retry_after_ms: int, jitter: float = 0.0,
                rng: Optional[random.Random] = None) -> int:
    """Retry-After seconds: never earlier than the true wait, at most `jitter` later."""
    if not (jitter > 0):  # negative or NaN counts as 0
        jitter = 0.0
    u = (rng or random).random()
    return -(-(retry_after_ms + math.floor(retry_after_ms * jitter * u)) // 1000)


def shown_of_admission(name: str, limit: int, period_ms: int, decision) -> Shown:
    return Shown(name=name, limit=limit, period_ms=period_ms, capacity=decision.capacity,
                 remaining=decision.remaining, reset_after_ms=decision.reset_after_ms,
                 refused=not decision.allowed, retry_after_ms=decision.retry_after_ms)


def shown_of_multi(rules, decision) -> List[Shown]:
    """Headers rules of an RL.MULTI: the wait is attributed to `denied_by` only (SPEC 1)."""
    out = []
    for rule, outcome in zip(rules, decision.rules):
        period_ms = duration_us(rule.period, "period") // 1000
        refused = decision.denied_by is not None and rule.name == decision.denied_by
        out.append(Shown(name=rule.name, limit=rule.limit, period_ms=period_ms,
                         capacity=rule.burst if rule.burst is not None else rule.limit,
                         remaining=outcome.remaining, reset_after_ms=outcome.reset_after_ms,
                         refused=refused,
                         retry_after_ms=decision.retry_after_ms if refused else 0))
    return out
