"""Metrics (SPEC gateway section 4): counters by route, rule and outcome, the store call
histogram, grant refills, breaker state, policy version, route modes and the store mode, in
Prometheus text format 0.0.4, through prometheus_client as well when it is installed; every event
also goes to the application's hook."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .posture import STATES

OUTCOMES = ("admit", "refuse", "refuse_cached", "unavailable_deny", "fallback_admit",
            "fallback_refuse", "open_admit", "shadow_refuse", "unreplicated_admit")
RESULTS = ("ok", "error", "timeout")
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
MODES = ("deny", "fallback", "allow")
STORE_MODES = ("module", "script")

Hook = Callable[[str, Dict[str, str], float], None]

_FAMILIES = (
    ("rl_gateway_decisions_total", "counter", "Rule decisions by route, rule and outcome."),
    ("rl_gateway_store_call_duration_seconds", "histogram", "Store call latency by result."),
    ("rl_gateway_grant_refills_total", "counter", "RL.GRANT calls by rule."),
    ("rl_gateway_breaker_state", "gauge", "1 for the breaker's current state, 0 for the others."),
    ("rl_gateway_policy_version", "gauge", "Version of the policy in force."),
    ("rl_gateway_route_mode", "gauge", "1 per route, its posture when the store cannot answer."),
    ("rl_gateway_store_mode", "gauge", "1 for the store mode in force (module or script)."),
)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    if v == int(v):
        return str(int(v))
    return repr(v)


class Metrics:
    def __init__(self, hook: Optional[Hook] = None):
        self.hook = hook
        self._lock = threading.Lock()
        self.decisions: Dict[Tuple[str, str, str], int] = {}
        self.calls: Dict[str, List[float]] = {r: [0] * (len(BUCKETS) + 2) for r in RESULTS}
        self.refills: Dict[str, int] = {}
        self.breaker = "closed"
        self.version = 0
        self.route_modes: Dict[str, str] = {}
        self.store_mode: Optional[str] = None

    def _emit(self, name: str, labels: Dict[str, str], value: float) -> None:
        if self.hook is not None:
            self.hook(name, labels, value)

    def decision(self, route: str, rule: str, outcome: str) -> None:
        with self._lock:
            key = (route, rule, outcome)
            self.decisions[key] = self.decisions.get(key, 0) + 1
        self._emit("decision", {"route": route, "rule": rule, "outcome": outcome}, 1)

    def store_call(self, result: str, seconds: float) -> None:
        with self._lock:
            h = self.calls[result]
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    h[i] += 1
            h[len(BUCKETS)] += 1  # count
            h[len(BUCKETS) + 1] += seconds  # sum
        self._emit("store_call", {"result": result}, seconds)

    def grant_refill(self, rule: str) -> None:
        with self._lock:
            self.refills[rule] = self.refills.get(rule, 0) + 1
        self._emit("grant_refill", {"rule": rule}, 1)

    def set_breaker(self, state: str) -> None:
        self.breaker = state
        self._emit("breaker_state", {"state": state}, 1)

    def set_policy(self, version: int, route_modes: Dict[str, str]) -> None:
        with self._lock:
            self.version = version
            self.route_modes = dict(route_modes)
        self._emit("policy_version", {}, version)
        for route, mode in route_modes.items():
            self._emit("route_mode", {"route": route, "mode": mode}, 1)

    def set_store_mode(self, mode: str) -> None:
        self.store_mode = mode
        self._emit("store_mode", {"mode": mode}, 1)

    def count(self, route: str, rule: str, outcome: str) -> int:
        return self.decisions.get((route, rule, outcome), 0)

    def samples(self) -> List[Tuple[str, str, str, List[Tuple[str, Dict[str, str], float]]]]:
        """(name, type, help, [(sample name, labels, value)]) per family, series sorted."""
        with self._lock:
            out = []
            for name, kind, help_text in _FAMILIES:
                s: List[Tuple[str, Dict[str, str], float]] = []
                if name == "rl_gateway_decisions_total":
                    order = {o: i for i, o in enumerate(OUTCOMES)}
                    for (route, rule, outcome) in sorted(
                            self.decisions, key=lambda k: (k[0], k[1], order[k[2]])):
                        s.append((name, {"route": route, "rule": rule, "outcome": outcome},
                                  self.decisions[(route, rule, outcome)]))
                elif kind == "histogram":
                    for result in RESULTS:
                        h = self.calls[result]
                        for i, bound in enumerate(BUCKETS):
                            s.append((name + "_bucket", {"result": result, "le": _num(bound)}, h[i]))
                        s.append((name + "_bucket", {"result": result, "le": "+Inf"}, h[len(BUCKETS)]))
                        s.append((name + "_sum", {"result": result}, h[len(BUCKETS) + 1]))
                        s.append((name + "_count", {"result": result}, h[len(BUCKETS)]))
                elif name == "rl_gateway_grant_refills_total":
                    for rule in sorted(self.refills):
                        s.append((name, {"rule": rule}, self.refills[rule]))
                elif name == "rl_gateway_breaker_state":
                    for st in STATES:
                        s.append((name, {"state": st}, 1 if st == self.breaker else 0))
                elif name == "rl_gateway_policy_version":
                    s.append((name, {}, self.version))
                elif name == "rl_gateway_route_mode":
                    for route in sorted(self.route_modes):
                        for mode in MODES:
                            s.append((name, {"route": route, "mode": mode},
                                      1 if self.route_modes[route] == mode else 0))
                elif name == "rl_gateway_store_mode" and self.store_mode is not None:
                    for mode in STORE_MODES:
                        s.append((name, {"mode": mode}, 1 if mode == self.store_mode else 0))
                out.append((name, kind, help_text, s))
            return out

    def render(self) -> str:
        lines = []
        for name, kind, help_text, samples in self.samples():
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for sample, labels, value in samples:
                if labels:
                    body = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
                    lines.append(f"{sample}{{{body}}} {_num(value)}")
                else:
                    lines.append(f"{sample} {_num(value)}")
        return "\n".join(lines) + "\n"

    def register(self, registry: Any = None) -> Any:
        """Registers these metrics with prometheus_client (its default registry unless given),
        under the same names; returns the collector."""
        from prometheus_client.core import REGISTRY, Metric

        metrics = self

        class Collector:
            def collect(self):
                for name, kind, help_text, samples in metrics.samples():
                    base = name[:-len("_total")] if kind == "counter" else name
                    m = Metric(base, help_text, kind)
                    for sample, labels, value in samples:
                        m.add_sample(sample, labels, value)
                    yield m

        collector = Collector()
        (registry or REGISTRY).register(collector)
        return collector
