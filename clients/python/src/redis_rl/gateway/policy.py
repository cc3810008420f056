"""The versioned JSON policy (CLIENTS.md section 2, SPEC "Gateway behaviour" section 1), validated
into objects the gateway uses without re-checking. Every refusal names the field by its JSON
path, because the operator reading it has the file open, not this code."""

from __future__ import annotations

import ipaddress
import json
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

MAX_COUNT = 10**15
MAX_DURATION_MS = 3650 * 86_400_000
ANONYMOUS = "anonymous"
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^([0-9]+)([a-zA-Z]*)$")
_ALGOS = ("gcra", "bucket", "window", "sliding", "log")
_VARS = ("user", "tenant", "ip", "route")


class PolicyError(Exception):
    """Why a policy was not loaded; the snapshot in force stays whatever the error."""


def _invalid(path: str, message: str) -> PolicyError:
    return PolicyError(f"invalid policy: {path}: {message}" if path else f"invalid policy: {message}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def parse_duration_ms(text: Any, path: str, max_ms: int = MAX_DURATION_MS,
                      max_text: str = "3650d") -> int:
    """A duration as the module parses it: a positive integer and a unit, case-insensitive."""
    if not isinstance(text, str):
        raise _invalid(path, f"a duration must be a string such as \"10s\", not {json.dumps(text)}")
    m = _DURATION.match(text.strip())
    if not m:
        raise _invalid(path, f"'{text}' is not a duration (a positive integer and ms, s, m, h or d)")
    number, unit = m.groups()
    if not unit:
        raise _invalid(path, f"'{text}' needs a unit: add ms, s, m, h or d (for example 10s)")
    if unit.lower() not in _UNITS:
        raise _invalid(path, f"'{text}' has an unknown unit '{unit}': use ms, s, m, h or d")
    ms = int(number) * _UNITS[unit.lower()]
    if ms < 1 or ms > max_ms:
        raise _invalid(path, f"'{text}' must be between 1ms and {max_text}")
    return ms


# ---- key templates ----

@dataclass(frozen=True)
class KeyTemplate:
    """`{t:${tenant}}:read:${user}` as literal parts and variables."""

    text: str
    parts: Tuple[Tuple[bool, str], ...]  # (is_variable, literal or variable name)

    @staticmethod
    def parse(text: Any, path: str) -> "KeyTemplate":
        if not isinstance(text, str):
            raise _invalid(path, "a key must be a string")
        if not text:
            raise _invalid(path, "a key must not be empty")
        parts: List[Tuple[bool, str]] = []
        i = 0
        literal = ""
        while i < len(text):
            if text.startswith("${", i):
                end = text.find("}", i + 2)
                if end < 0:
                    raise _invalid(path, f"unclosed '${{' in key '{text}'")
                name = text[i + 2:end]
                if name not in _VARS:
                    raise _invalid(path, f"unknown variable '${{{name}}}' in key '{text}' "
                                   "(use ${user}, ${tenant}, ${ip} or ${route})")
                if literal:
                    parts.append((False, literal))
                    literal = ""
                parts.append((True, name))
                i = end + 1
            else:
                literal += text[i]
                i += 1
        if literal:
            parts.append((False, literal))
        return KeyTemplate(text, tuple(parts))

    def hash_tag(self) -> Optional[str]:
        """The text between the first literal `{` and the next literal `}`, as Redis Cluster
        reads the rendered key (variables inside keep their names: escaping keeps braces out
        of values)."""
        flat = "".join(f"\0{v}\0" if var else v for var, v in self.parts)
        start = flat.find("{")
        if start < 0:
            return None
        end = flat.find("}", start + 1)
        if end < 0:
            return None
        return flat[start + 1:end] or None

    def render(self, values: Dict[str, Optional[str]]) -> str:
        out = []
        for var, v in self.parts:
            if var:
                value = values.get(v) or ANONYMOUS
                out.append(value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D"))
            else:
                out.append(v)
        return "".join(out)


# ---- the validated policy ----

@dataclass(frozen=True)
class GrantSpec:
    want: int
    ttl_ms: int


@dataclass(frozen=True)
class RuleSpec:
    name: str
    key: KeyTemplate
    public: bool = True
    shadow: bool = False
    durable: bool = False
    # rate rules
    algo: str = "gcra"
    limit: int = 0
    period_ms: int = 0
    burst: Optional[int] = None
    cost: int = 1
    settle: bool = False
    grant: Optional[GrantSpec] = None
    # semaphores
    concurrency: Optional[int] = None
    lease_ms: Optional[int] = None

    @property
    def semaphore(self) -> bool:
        return self.concurrency is not None

    @property
    def capacity(self) -> int:
        if self.semaphore:
            return self.concurrency  # type: ignore[return-value]
        return self.burst if self.burst is not None else self.limit

    @property
    def multi(self) -> bool:
        """A multi rule (SPEC gateway 1, validation 8): a rate rule without grant, not shadow.
        Settle rules among them go as RL.ADMIT RESERVE, since RL.MULTI takes no reservation."""
        return not self.semaphore and self.grant is None and not self.shadow


@dataclass(frozen=True)
class OnStoreError:
    mode: str = "deny"
    limit: Optional[int] = None
    period_ms: Optional[int] = None
    burst: Optional[int] = None


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    rules: Tuple[RuleSpec, ...]
    on_store_error: OnStoreError

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class Policy:
    version: int
    user_header: Optional[str]
    tenant_header: Optional[str]
    trusted_proxies: Tuple[Any, ...]
    rules: Dict[str, RuleSpec]
    routes: Tuple[Route, ...]
    negative_cache_max_ms: int = 250
    negative_cache_entries: int = 100_000
    store_timeout_ms: int = 50
    breaker_failures: int = 5
    breaker_open_ms: int = 1000
    ramp_ms: int = 10_000
    retry_after_jitter: float = 0.0
    by_route: Dict[Tuple[str, str], Route] = field(default_factory=dict, compare=False)

    def route(self, method: str, path: str) -> Optional[Route]:
        return self.by_route.get((method.upper(), path))


def _object(value: Any, path: str, allowed: Sequence[str]) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(path, "must be an object")
    for k in value:
        if k not in allowed:
            raise _invalid(_join(path, k), "unknown field")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _invalid(path, "must be true or false")
    return value


def _uint(value: Any, path: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(path, "must be an unsigned integer")
    if value < lo or value > hi:
        raise _invalid(path, f"must be in the range [{lo}, {hi}]")
    return value


def _header(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value or not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", value):
        raise _invalid(path, "must be a header name")
    return value.lower()


_RATE_FIELDS = ("algo", "limit", "period", "burst", "cost", "settle")


def _rule(name: str, raw: Any, path: str) -> RuleSpec:
    if not isinstance(raw, dict):
        raise _invalid(path, "must be an object")
    common = {}
    key = KeyTemplate.parse(raw.get("key"), _join(path, "key")) if "key" in raw else None
    if key is None:
        raise _invalid(path, "missing field 'key'")
    if "concurrency" in raw:
        for f in list(raw):
            if f in _RATE_FIELDS or f == "grant":
                raise _invalid(_join(path, f), "a semaphore rule takes no rate field or grant")
        r = _object(raw, path, ("key", "concurrency", "lease", "public", "shadow", "durable"))
        if "lease" not in r:
            raise _invalid(path, "a semaphore rule needs 'lease'")
        for f in ("public", "shadow", "durable"):
            if f in r:
                common[f] = _bool(r[f], _join(path, f))
        return RuleSpec(name=name, key=key,
                        concurrency=_uint(r["concurrency"], _join(path, "concurrency"), 1, 100_000),
                        lease_ms=parse_duration_ms(r["lease"], _join(path, "lease")), **common)
    r = _object(raw, path, ("key", "algo", "limit", "period", "burst", "cost", "public", "shadow",
                            "settle", "durable", "grant", "lease"))
    if "lease" in r:
        raise _invalid(_join(path, "lease"), "a rate rule takes no lease (semaphores have one)")
    for f in ("limit", "period"):
        if f not in r:
            raise _invalid(path, f"a rate rule needs '{f}'")
    algo = r.get("algo", "gcra")
    if algo not in _ALGOS:
        raise _invalid(_join(path, "algo"),
                       f"unknown algo {json.dumps(algo)}: use gcra, bucket, window, sliding or log")
    limit = _uint(r["limit"], _join(path, "limit"), 1, 10_000 if algo == "log" else MAX_COUNT)
    period_ms = parse_duration_ms(r["period"], _join(path, "period"))
    burst = None
    if "burst" in r:
        if algo not in ("gcra", "bucket"):
            raise _invalid(_join(path, "burst"), f"burst is not allowed with algo {algo}")
        burst = _uint(r["burst"], _join(path, "burst"), 1)
    capacity = burst if burst is not None else limit
    if capacity * period_ms > MAX_DURATION_MS * limit:
        raise _invalid(_join(path, "burst") if burst is not None else _join(path, "period"),
                       "the capacity takes more than 3650d to refill")
    cost = _uint(r.get("cost", 1), _join(path, "cost"), 1)
    if cost > capacity:
        raise _invalid(_join(path, "cost"), f"cost {cost} exceeds the capacity {capacity}")
    for f in ("public", "shadow", "durable", "settle"):
        if f in r:
            common[f] = _bool(r[f], _join(path, f))
    if common.get("settle") and algo not in ("gcra", "bucket"):
        raise _invalid(_join(path, "settle"), "settle is only for algo gcra and bucket")
    grant = None
    if "grant" in r:
        g = _object(r["grant"], _join(path, "grant"), ("want", "ttl"))
        if "want" not in g:
            raise _invalid(_join(path, "grant"), "missing field 'want'")
        ttl = parse_duration_ms(g["ttl"], _join(path, "grant.ttl"), 86_400_000, "1d") \
            if "ttl" in g else 1000
        grant = GrantSpec(_uint(g["want"], _join(path, "grant.want"), 1), ttl)
    return RuleSpec(name=name, key=key, algo=algo, limit=limit, period_ms=period_ms, burst=burst,
                    cost=cost, grant=grant, **common)


def _on_store_error(raw: Any, path: str, first: RuleSpec) -> OnStoreError:
    r = _object(raw, path, ("mode", "limit", "period", "burst"))
    mode = r.get("mode", "deny")
    if mode not in ("deny", "fallback", "allow"):
        raise _invalid(_join(path, "mode"), f"unknown mode {json.dumps(mode)}: use deny, fallback or allow")
    if mode != "fallback":
        for f in ("limit", "period", "burst"):
            if f in r:
                raise _invalid(_join(path, f), f"mode {mode} takes no {f}")
        return OnStoreError(mode)
    for f in ("limit", "period"):
        if f not in r:
            raise _invalid(path, f"a fallback needs '{f}'")
    limit = _uint(r["limit"], _join(path, "limit"), 1)
    period_ms = parse_duration_ms(r["period"], _join(path, "period"))
    burst = _uint(r["burst"], _join(path, "burst"), 1) if "burst" in r else None
    capacity = burst if burst is not None else limit
    if capacity * period_ms > MAX_DURATION_MS * limit:
        raise _invalid(path, "the fallback's capacity takes more than 3650d to refill")
    cost = 1 if first.semaphore else first.cost
    if capacity < cost:
        raise _invalid(path, f"the fallback's capacity {capacity} is below the cost {cost} of "
                       f"rule '{first.name}': it could never admit this route")
    return OnStoreError(mode, limit, period_ms, burst)


def parse_policy(text: Union[str, bytes]) -> Policy:
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _invalid("", f"not JSON: {exc}") from None
    d = _object(doc, "", ("version", "identity", "rules", "routes", "negative_cache", "store",
                          "retry_after_jitter"))
    if "version" not in d:
        raise _invalid("", "missing field 'version'")
    version = _uint(d["version"], "version", 0, 2**64 - 1)
    ident = _object(d.get("identity", {}), "identity", ("user", "tenant", "trusted_proxies"))
    user = _header(ident["user"], "identity.user") if "user" in ident else None
    tenant = _header(ident["tenant"], "identity.tenant") if "tenant" in ident else None
    proxies_raw = ident.get("trusted_proxies", [])
    if not isinstance(proxies_raw, list):
        raise _invalid("identity.trusted_proxies", "must be a list")
    proxies = []
    for i, p in enumerate(proxies_raw):
        try:
            proxies.append(ipaddress.ip_network(p, strict=False))
        except (ValueError, TypeError):
            raise _invalid(f"identity.trusted_proxies[{i}]",
                           f"{json.dumps(p)} is not an IP address or CIDR block") from None
    rules_raw = d.get("rules", {})
    if not isinstance(rules_raw, dict):
        raise _invalid("rules", "must be an object")
    rules = {name: _rule(name, raw, f"rules.{name}") for name, raw in rules_raw.items()}
    if "routes" not in d:
        raise _invalid("", "missing field 'routes'")
    if not isinstance(d["routes"], list):
        raise _invalid("routes", "must be a list")
    routes: List[Route] = []
    seen: Dict[Tuple[str, str], int] = {}
    for i, raw in enumerate(d["routes"]):
        path = f"routes[{i}]"
        r = _object(raw, path, ("method", "path", "rules", "on_store_error"))
        for f in ("method", "path", "rules"):
            if f not in r:
                raise _invalid(path, f"missing field '{f}'")
        method = r["method"]
        if not isinstance(method, str) or not method.isalpha() or not method.isascii():
            raise _invalid(f"{path}.method", "must be letters")
        route_path = r["path"]
        if not isinstance(route_path, str) or not route_path.startswith("/"):
            raise _invalid(f"{path}.path", "must start with /")
        if not isinstance(r["rules"], list) or not r["rules"]:
            raise _invalid(f"{path}.rules", "must name at least one rule")
        names: List[str] = []
        for j, n in enumerate(r["rules"]):
            if not isinstance(n, str) or n not in rules:
                raise _invalid(f"{path}.rules[{j}]", f"unknown rule '{n}'")
            if n in names:
                raise _invalid(f"{path}.rules[{j}]", f"rule '{n}' named twice")
            names.append(n)
        specs = tuple(rules[n] for n in names)
        multi = [s for s in specs if s.multi]
        if len(multi) >= 2:
            tags = [s.key.hash_tag() for s in multi]
            if any(t is None for t in tags) or len(set(tags)) != 1:
                raise _invalid(f"{path}.rules", "the rules sent in one RL.MULTI ("
                               + ", ".join(s.name for s in multi)
                               + ") need keys with one non-empty hash tag, such as {t:${tenant}}")
            keys = [s.key.text for s in multi]
            if len(set(keys)) != len(keys):
                raise _invalid(f"{path}.rules", "two rules of one RL.MULTI have the same key")
        ose = _on_store_error(r.get("on_store_error", {}), f"{path}.on_store_error", specs[0])
        key = (method.upper(), route_path)
        if key in seen:
            raise _invalid(path, f"duplicate route {key[0]} {key[1]} (also routes[{seen[key]}])")
        seen[key] = i
        routes.append(Route(key[0], route_path, specs, ose))
    nc = _object(d.get("negative_cache", {}), "negative_cache", ("max", "entries"))
    st = _object(d.get("store", {}), "store", ("timeout", "breaker", "ramp"))
    br = _object(st.get("breaker", {}), "store.breaker", ("failures", "open"))
    jitter = d.get("retry_after_jitter", 0)
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or math.isnan(jitter) \
            or not 0 <= jitter <= 1:
        raise _invalid("retry_after_jitter", "must be a number in [0, 1]")
    policy = Policy(
        version=version, user_header=user, tenant_header=tenant, trusted_proxies=tuple(proxies),
        rules=rules, routes=tuple(routes),
        negative_cache_max_ms=parse_duration_ms(nc["max"], "negative_cache.max") if "max" in nc else 250,
        negative_cache_entries=_uint(nc.get("entries", 100_000), "negative_cache.entries", 1, 2**32),
        store_timeout_ms=parse_duration_ms(st["timeout"], "store.timeout") if "timeout" in st else 50,
        breaker_failures=_uint(br.get("failures", 5), "store.breaker.failures", 1, 2**32),
        breaker_open_ms=parse_duration_ms(br["open"], "store.breaker.open") if "open" in br else 1000,
        ramp_ms=_ramp(st),
        retry_after_jitter=float(jitter),
    )
    policy.by_route.update({(r.method, r.path): r for r in routes})
    return policy


def _ramp(st: Dict[str, Any]) -> int:
    if "ramp" not in st:
        return 10_000
    if st["ramp"] in ("0", "0ms", "0s"):
        return 0
    return parse_duration_ms(st["ramp"], "store.ramp")


class PolicySource:
    """The snapshot in force, loaded from a file and reloaded on demand: a reload must carry a
    higher version, and whatever goes wrong the snapshot in force stays."""

    def __init__(self, path: Union[str, Path, None] = None, policy: Optional[Policy] = None):
        if (path is None) == (policy is None):
            raise ValueError("give a policy file or a policy")
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self.current: Policy = policy if policy is not None else self._read()
        self._hooks: List[Any] = []

    def _read(self) -> Policy:
        assert self.path is not None
        try:
            text = self.path.read_bytes()
        except OSError as exc:
            raise PolicyError(f"cannot read policy {self.path}: {exc.strerror or exc}") from None
        return parse_policy(text)

    def on_change(self, hook) -> None:
        self._hooks.append(hook)

    def reload(self) -> Policy:
        """Re-reads the file; raises PolicyError (the snapshot in force stays) when unreadable,
        invalid or not newer."""
        if self.path is None:
            raise PolicyError("this policy was not loaded from a file")
        offered = self._read()
        return self.replace(offered)

    def replace(self, offered: Policy) -> Policy:
        with self._lock:
            if offered.version <= self.current.version:
                raise PolicyError(f"policy version {offered.version} is not higher than the "
                                  f"version in force, {self.current.version}")
            self.current = offered
        for hook in self._hooks:
            hook(offered)
        return offered
