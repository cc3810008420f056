"""Typed requests: each builds the module's exact arguments (clients/SPEC.md section 1), names its
keys (for cluster routing and script mode) and parses its reply (section 2)."""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Union

from redis.crc import key_slot as _key_slot

from .errors import InvalidRequest
from . import replies

Duration = Union[datetime.timedelta, int, float, decimal.Decimal]
"""A timedelta, or a number of seconds (as `time.sleep` takes)."""

Bytes = Union[bytes, str]
ALGOS = ("gcra", "bucket", "window", "sliding", "log")

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


def duration_us(value: Duration, arg: str = "duration") -> int:
    """The duration in whole microseconds; finer parts and negative values are invalid."""
    if isinstance(value, bool):
        raise InvalidRequest(f"{arg} must be a duration, not {value!r}")
    if type(value) is int:
        us, exact = value * 1_000_000, True
    elif isinstance(value, datetime.timedelta):
        us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        exact = True
    elif isinstance(value, (int, float, decimal.Decimal)):
        exact_value = decimal.Decimal(str(value)) * 1_000_000
        us = int(exact_value)
        exact = exact_value == us
    else:
        raise InvalidRequest(f"{arg} must be a timedelta or a number of seconds, not {value!r}")
    if not exact:
        raise InvalidRequest(f"{arg} {value!r} is finer than a microsecond")
    if us < 0:
        raise InvalidRequest(f"{arg} must not be negative")
    return us


def duration_arg(value: Duration, arg: str = "duration") -> str:
    """The duration in the largest unit that states it exactly; finer than 1 ms is refused,
    never rounded (rounding a period changes the rate it means)."""
    us = duration_us(value, arg)
    if us % 1000:
        raise InvalidRequest(
            f"{arg} of {us} µs has a part finer than a millisecond, the module's finest unit")
    ms = us // 1000
    if ms == 0:
        return "0ms"
    for unit, size in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    raise AssertionError("1 ms divides every whole number of milliseconds")


def to_bytes(value: Bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def key_slot(key: Bytes) -> int:
    """The cluster slot of a key (CRC16 of the key or of its non-empty hash tag)."""
    return _key_slot(to_bytes(key))


def _count(value: int, arg: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{arg} must be an integer, not {value!r}")
    return str(value)


def _algo(algo: Optional[str]) -> Optional[str]:
    if algo is None:
        return None
    if not isinstance(algo, str):
        raise InvalidRequest(f"ALGO must be a string, not {algo!r}")
    return algo


class Request:
    """A command: its arguments (name first), its keys, and how to read its reply."""

    name: str = ""

    def args(self) -> List[Any]:
        raise NotImplementedError

    def keys(self) -> List[bytes]:
        return [to_bytes(self.key)]  # type: ignore[attr-defined]

    def slot(self) -> int:
        """The cluster slot the command goes to: its first key's."""
        return key_slot(self.keys()[0])

    def parse(self, reply: Any) -> Any:
        raise NotImplementedError


def _rate_options(burst: Optional[int], cost: Optional[int], algo: Optional[str]) -> List[str]:
    out: List[str] = []
    if burst is not None:
        out += ["BURST", _count(burst, "BURST")]
    if cost is not None:
        out += ["COST", _count(cost, "COST")]
    if algo is not None:
        out += ["ALGO", _algo(algo)]
    return out


@dataclass
class Admit(Request):
    key: Bytes
    limit: int
    period: Duration
    burst: Optional[int] = None
    cost: Optional[int] = None
    algo: Optional[str] = None
    dry_run: bool = False
    reserve: Optional[Bytes] = None
    keep: Optional[Duration] = None
    name = "RL.ADMIT"

    def args(self) -> List[Any]:
        out: List[Any] = [self.name, self.key, _count(self.limit, "limit"),
                          duration_arg(self.period, "period")]
        out += _rate_options(self.burst, self.cost, self.algo)
        if self.dry_run:
            out.append("DRYRUN")
        if self.reserve is not None:
            out += ["RESERVE", self.reserve]
            if self.keep is not None:
                out += ["KEEP", duration_arg(self.keep, "KEEP")]
        elif self.keep is not None:
            raise InvalidRequest("KEEP goes with RESERVE only")
        return out

    def parse(self, reply: Any) -> replies.Admission:
        return replies.admission(reply)


@dataclass
class Rule:
    """One clause of RL.MULTI."""

    name: str
    key: Bytes
    limit: int
    period: Duration
    burst: Optional[int] = None
    cost: Optional[int] = None
    algo: Optional[str] = None


@dataclass
class Multi(Request):
    rules: Sequence[Rule]
    dry_run: bool = False
    name = "RL.MULTI"

    def keys(self) -> List[bytes]:
        return [to_bytes(r.key) for r in self.rules]

    def slot(self) -> int:
        """The one slot every key is in; keys in several slots are refused before any round
        trip, on a single server too (a policy that works only until sharding is a trap)."""
        keys = self.keys()
        if not keys:
            raise InvalidRequest("RL.MULTI needs at least one rule")
        first = key_slot(keys[0])
        for k in keys[1:]:
            other = key_slot(k)
            if other != first:
                raise InvalidRequest(
                    f"RL.MULTI keys are in several cluster slots: {keys[0]!r} in slot {first}, "
                    f"{k!r} in slot {other}; give them one hash tag")
        return first

    def args(self) -> List[Any]:
        self.slot()
        out: List[Any] = [self.name, str(len(self.rules))]
        out += [r.key for r in self.rules]
        for r in self.rules:
            out += ["RULE", r.name, _count(r.limit, "limit"), duration_arg(r.period, "period")]
            out += _rate_options(r.burst, r.cost, r.algo)
        if self.dry_run:
            out.append("DRYRUN")
        return out

    def parse(self, reply: Any) -> replies.MultiDecision:
        return replies.multi_decision(reply)


@dataclass
class Grant(Request):
    key: Bytes
    limit: int
    period: Duration
    want: int
    burst: Optional[int] = None
    algo: Optional[str] = None
    ttl: Optional[Duration] = None
    name = "RL.GRANT"

    def args(self) -> List[Any]:
        out: List[Any] = [self.name, self.key, _count(self.limit, "limit"),
                          duration_arg(self.period, "period")]
        out += _rate_options(self.burst, None, self.algo)
        out += ["WANT", _count(self.want, "WANT")]
        if self.ttl is not None:
            out += ["TTL", duration_arg(self.ttl, "TTL")]
        return out

    def parse(self, reply: Any) -> replies.GrantDecision:
        return replies.grant_decision(reply)


@dataclass
class Acquire(Request):
    key: Bytes
    capacity: int
    lease: Duration
    holder: Optional[Bytes] = None
    name = "RL.ACQUIRE"

    def args(self) -> List[Any]:
        out: List[Any] = [self.name, self.key, _count(self.capacity, "capacity"),
                          duration_arg(self.lease, "lease")]
        if self.holder is not None:
            out += ["ID", self.holder]
        return out

    def parse(self, reply: Any) -> replies.Acquisition:
        return replies.acquisition(reply)


@dataclass
class Release(Request):
    key: Bytes
    holder: Bytes
    name = "RL.RELEASE"

    def args(self) -> List[Any]:
        return [self.name, self.key, self.holder]

    def parse(self, reply: Any) -> bool:
        return replies.flag(reply, "RL.RELEASE")


@dataclass
class Renew(Request):
    key: Bytes
    holder: Bytes
    lease: Duration
    name = "RL.RENEW"

    def args(self) -> List[Any]:
        return [self.name, self.key, self.holder, duration_arg(self.lease, "lease")]

    def parse(self, reply: Any) -> bool:
        return replies.flag(reply, "RL.RENEW")


@dataclass
class Settle(Request):
    """`forget`: then forget the reservation, so the id reserves (and is charged) anew."""

    key: Bytes
    id: Bytes
    actual: int
    forget: bool = False
    name = "RL.SETTLE"

    def args(self) -> List[Any]:
        args = [self.name, self.key, self.id, _count(self.actual, "actual")]
        return [*args, "FORGET"] if self.forget else args

    def parse(self, reply: Any) -> Optional[replies.Settlement]:
        return replies.settlement(reply)


@dataclass
class Info(Request):
    key: Bytes
    name = "RL.INFO"

    def args(self) -> List[Any]:
        return [self.name, self.key]

    def parse(self, reply: Any) -> Optional[replies.KeyInfo]:
        return replies.key_info(reply)


@dataclass
class Throttle(Request):
    """redis-cell's CL.THROTTLE: `period` is a bare number of seconds, as redis-cell takes it."""

    key: Bytes
    max_burst: int
    count: int
    period: int
    quantity: Optional[int] = None
    name = "CL.THROTTLE"

    def args(self) -> List[Any]:
        out: List[Any] = [self.name, self.key, _count(self.max_burst, "max_burst"),
                          _count(self.count, "count"), _count(self.period, "period")]
        if self.quantity is not None:
            out.append(_count(self.quantity, "quantity"))
        return out

    def parse(self, reply: Any) -> replies.ThrottleDecision:
        return replies.throttle_decision(reply)


# The most demand RL.ALLOCATE takes (units per period): a larger one is sent as this, since
# only its share of the total matters.
MAX_DEMAND = 10**12


@dataclass
class Allocate(Request):
    """RL.ALLOCATE on the home store: a region's allocation of a global rule's `limit`
    (commands.md). `lease` is a Duration, as every duration here."""

    key: Bytes
    limit: int
    region: Bytes
    reporter: Bytes
    demand: int
    held: int
    reserve: int
    regions: int
    lease: Duration
    name = "RL.ALLOCATE"

    def args(self) -> List[Any]:
        demand = min(int(_count(self.demand, "demand")), MAX_DEMAND)
        return [self.name, self.key, _count(self.limit, "limit"), self.region, self.reporter,
                str(demand), _count(self.held, "held"), "RESERVE",
                _count(self.reserve, "reserve"), "REGIONS", _count(self.regions, "regions"),
                "LEASE", duration_arg(self.lease, "lease")]

    def parse(self, reply: Any) -> replies.Allotment:
        return replies.allotment(reply)


@dataclass
class Raw(Request):
    """Any command of the module by its arguments (name first), its reply unparsed: keys are
    argument 1, or for RL.MULTI the `numkeys` arguments after `numkeys` (SPEC section 5)."""

    command: Sequence[Any]

    def args(self) -> List[Any]:
        return list(self.command)

    def keys(self) -> List[bytes]:
        name = str(self.command[0]).upper()
        if name == "RL.MULTI":
            try:
                n = int(self.command[1])
            except (IndexError, ValueError):
                raise InvalidRequest("RL.MULTI needs numkeys") from None
            return [to_bytes(k) for k in self.command[2:2 + n]]
        if len(self.command) < 2:
            raise InvalidRequest(f"{name} needs a key")
        return [to_bytes(self.command[1])]

    def parse(self, reply: Any) -> Any:
        return reply
