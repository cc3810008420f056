"""Typed replies, read from a RESP2 array in the documented order or a RESP3 map by name
(clients/SPEC.md section 2); both give the same record."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Sequence

from .errors import UnexpectedReply, classify


@dataclass(frozen=True)
class Admission:
    allowed: bool
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    capacity: int


@dataclass(frozen=True)
class RuleOutcome:
    name: str
    remaining: int
    reset_after_ms: int


@dataclass(frozen=True)
class MultiDecision:
    allowed: bool
    denied_by: Optional[str]
    retry_after_ms: int
    rules: List[RuleOutcome]


@dataclass(frozen=True)
class GrantDecision:
    granted: int
    remaining: int
    valid_ms: int
    retry_after_ms: int


@dataclass(frozen=True)
class Acquisition:
    acquired: bool
    holder: Optional[bytes]
    in_flight: int
    retry_after_ms: int


@dataclass(frozen=True)
class Settlement:
    delta: int
    remaining: int


@dataclass(frozen=True)
class ThrottleDecision:
    """CL.THROTTLE's five integers, as redis-cell names them."""

    limited: bool
    limit: int
    remaining: int
    retry_after_s: int
    reset_after_s: int


@dataclass(frozen=True)
class KeyInfo:
    algo: str
    limit: int
    period_ms: int
    capacity: int
    remaining: int
    reset_after_ms: int
    ttl_ms: int
    tat_us: Optional[int] = None
    tokens: Optional[int] = None
    updated_us: Optional[int] = None
    window_start_ms: Optional[int] = None
    count: Optional[int] = None
    previous: Optional[int] = None
    current: Optional[int] = None
    entries: Optional[int] = None
    logged_units: Optional[int] = None
    in_flight: Optional[int] = None
    next_expiry_ms: Optional[int] = None
    reservations: Optional[int] = None
    debt: Optional[int] = None

    def present(self) -> Dict[str, Any]:
        """The fields the key's algorithm has (the others are None)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


def _check_error(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise classify(value)
    return value


def _text(value: Any, what: str) -> str:
    value = _check_error(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise UnexpectedReply(f"{what} is not UTF-8: {value!r}") from None
    if isinstance(value, str):
        return value
    raise UnexpectedReply(f"{what} should be a string, got {value!r}")


def _int(value: Any, what: str, signed: bool = False) -> int:
    value = _check_error(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnexpectedReply(f"{what} should be an integer, got {value!r}")
    if value < 0 and not signed:
        raise UnexpectedReply(f"{what} should not be negative, got {value}")
    return value


def _flag(value: Any, what: str) -> bool:
    value = _int(value, what)
    if value not in (0, 1):
        raise UnexpectedReply(f"{what} should be 0 or 1, got {value}")
    return value == 1


def _record(reply: Any, names: Sequence[str], command: str) -> Dict[str, Any]:
    """The fields of a record, read by position (RESP2) or by name (RESP3)."""
    reply = _check_error(reply)
    if isinstance(reply, dict):
        by_name = {(_text(k, f"{command} field name")): v for k, v in reply.items()}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise UnexpectedReply(f"{command} reply lacks {', '.join(missing)}: {reply!r}")
        return {n: by_name[n] for n in names}
    if isinstance(reply, (list, tuple)):
        if len(reply) != len(names):
            raise UnexpectedReply(
                f"{command} reply should have {len(names)} fields, got {reply!r}")
        return dict(zip(names, reply))
    raise UnexpectedReply(f"{command} reply should be an array or a map, got {reply!r}")


_ADMISSION = ("allowed", "remaining", "retry_after_ms", "reset_after_ms", "capacity")
_ADMISSION_BYTES = tuple(name.encode() for name in _ADMISSION)


def admission(reply: Any) -> Admission:
    # The replies redis-py hands over, read with no record in between (a per-hit cost the limits
    # storage pays): a RESP2 array of five integers, or a RESP3 map with bytes names in the
    # module's order. Anything else, or a value out of bounds, takes the general path, which
    # reads it the same way or says what is wrong.
    if type(reply) is list and len(reply) == 5:
        allowed, remaining, retry_after, reset_after, capacity = reply
    elif type(reply) is dict and tuple(reply) == _ADMISSION_BYTES:
        allowed, remaining, retry_after, reset_after, capacity = reply.values()
    else:
        allowed = None
    # `type(...) is int`: a bool is not a count, as in _int.
    if (type(allowed) is int and 0 <= allowed <= 1
            and type(remaining) is int and remaining >= 0
            and type(retry_after) is int and retry_after >= 0
            and type(reset_after) is int and reset_after >= 0
            and type(capacity) is int and capacity >= 0):
        return Admission(allowed == 1, remaining, retry_after, reset_after, capacity)
    r = _record(reply, _ADMISSION, "RL.ADMIT")
    return Admission(
        allowed=_flag(r["allowed"], "allowed"),
        remaining=_int(r["remaining"], "remaining"),
        retry_after_ms=_int(r["retry_after_ms"], "retry_after_ms"),
        reset_after_ms=_int(r["reset_after_ms"], "reset_after_ms"),
        capacity=_int(r["capacity"], "capacity"),
    )


def multi_decision(reply: Any) -> MultiDecision:
    r = _record(reply, ("allowed", "denied_by", "retry_after_ms", "rules"), "RL.MULTI")
    rules_reply = _check_error(r["rules"])
    if not isinstance(rules_reply, (list, tuple)):
        raise UnexpectedReply(f"RL.MULTI rules should be an array, got {rules_reply!r}")
    rules = []
    for item in rules_reply:
        o = _record(item, ("name", "remaining", "reset_after_ms"), "RL.MULTI rule")
        rules.append(RuleOutcome(
            name=_text(o["name"], "rule name"),
            remaining=_int(o["remaining"], "remaining"),
            reset_after_ms=_int(o["reset_after_ms"], "reset_after_ms"),
        ))
    allowed = _flag(r["allowed"], "allowed")
    denied_by = None if _check_error(r["denied_by"]) is None else _text(r["denied_by"], "denied_by")
    if allowed == (denied_by is not None):
        raise UnexpectedReply(f"RL.MULTI denied_by {denied_by!r} with allowed {allowed}")
    return MultiDecision(allowed=allowed, denied_by=denied_by,
                         retry_after_ms=_int(r["retry_after_ms"], "retry_after_ms"), rules=rules)


def grant_decision(reply: Any) -> GrantDecision:
    r = _record(reply, ("granted", "remaining", "valid_ms", "retry_after_ms"), "RL.GRANT")
    return GrantDecision(**{k: _int(v, k) for k, v in r.items()})


def acquisition(reply: Any) -> Acquisition:
    r = _record(reply, ("acquired", "holder", "in_flight", "retry_after_ms"), "RL.ACQUIRE")
    holder = _check_error(r["holder"])
    if holder is not None:
        if isinstance(holder, str):
            holder = holder.encode()
        elif not isinstance(holder, bytes):
            raise UnexpectedReply(f"holder should be a string, got {holder!r}")
    return Acquisition(acquired=_flag(r["acquired"], "acquired"), holder=holder,
                       in_flight=_int(r["in_flight"], "in_flight"),
                       retry_after_ms=_int(r["retry_after_ms"], "retry_after_ms"))


@dataclass(frozen=True)
class Allotment:
    """RL.ALLOCATE's answer: the units per period the reporter's region may admit until the
    lease ends (counted from when the call was sent), and the live demand of the region and
    of all regions."""

    allocation: int
    lease_ms: int
    region_demand: int
    total_demand: int


def allotment(reply: Any) -> Allotment:
    r = _record(reply, ("allocation", "lease_ms", "region_demand", "total_demand"),
                "RL.ALLOCATE")
    return Allotment(**{k: _int(v, k) for k, v in r.items()})


def flag(reply: Any, command: str) -> bool:
    return _flag(reply, f"{command} reply")


def settlement(reply: Any) -> Optional[Settlement]:
    if _check_error(reply) is None:
        return None
    r = _record(reply, ("delta", "remaining"), "RL.SETTLE")
    return Settlement(delta=_int(r["delta"], "delta", signed=True),
                      remaining=_int(r["remaining"], "remaining"))


def throttle_decision(reply: Any) -> ThrottleDecision:
    reply = _check_error(reply)
    if not isinstance(reply, (list, tuple)) or len(reply) != 5:
        raise UnexpectedReply(f"CL.THROTTLE reply should be five integers, got {reply!r}")
    limited, limit, remaining, retry_after, reset_after = reply
    # redis-cell replies -1 as retry_after when the request was admitted.
    return ThrottleDecision(limited=_flag(limited, "limited"), limit=_int(limit, "limit"),
                            remaining=_int(remaining, "remaining"),
                            retry_after_s=_int(retry_after, "retry_after", signed=True),
                            reset_after_s=_int(reset_after, "reset_after"))


_INFO_ALWAYS = ("algo", "limit", "period_ms", "capacity", "remaining", "reset_after_ms", "ttl_ms")
_INFO_KNOWN = {f.name for f in fields(KeyInfo)}
_INFO_SIGNED = {"tokens", "ttl_ms"}


def key_info(reply: Any) -> Optional[KeyInfo]:
    reply = _check_error(reply)
    if reply is None:
        return None
    if isinstance(reply, dict):
        pairs = list(reply.items())
    elif isinstance(reply, (list, tuple)) and len(reply) % 2 == 0:
        pairs = list(zip(reply[0::2], reply[1::2]))
    else:
        raise UnexpectedReply(f"RL.INFO reply should be name/value pairs, got {reply!r}")
    values: Dict[str, Any] = {}
    for name, value in pairs:
        name = _text(name, "RL.INFO field name")
        if name not in _INFO_KNOWN:
            continue  # a field a newer module adds
        if name == "algo":
            values[name] = _text(value, "algo")
        else:
            values[name] = _int(value, name, signed=name in _INFO_SIGNED)
    missing = [n for n in _INFO_ALWAYS if n not in values]
    if missing:
        raise UnexpectedReply(f"RL.INFO reply lacks {', '.join(missing)}: {reply!r}")
    return KeyInfo(**values)
