"""The executable contract of clients/vectors through the binding: every policy document gives
its stated outcome, and every scenario's requests, clock steps and store replies give the
statuses, headers, bodies, store calls and metrics it states. A port of the reference runner,
clients/engine/tests/vectors.rs; the format is clients/vectors/README.md."""

import json
import os
from pathlib import Path

import pytest

engine = pytest.importorskip("redis_rl_engine")

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
# The clock every scenario starts at: 2026-01-01T00:00:00Z, in microseconds.
START_US = 1_767_225_600_000_000
UNITS = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}


def _read(f):
    # A file's `env` holds the variables its documents read (the identity hash key).
    doc = json.loads(f.read_text())
    os.environ.update(doc.get("env", {}))
    return doc


def _policy_cases():
    out = []
    for f in sorted((VECTORS / "policies").glob("*.json")):
        doc = _read(f)
        out += [pytest.param(case, id=f"{f.name}:{case['name']}") for case in doc["policies"]]
    return out


def _scenarios():
    out = []
    for f in sorted((VECTORS / "scenarios").glob("*.json")):
        doc = _read(f)
        for s in doc["scenarios"]:
            out.append(pytest.param(s, doc.get("policies", {}), id=f"{f.name}:{s['name']}"))
    return out


POLICIES = _policy_cases()
SCENARIOS = _scenarios()


def test_there_are_scenarios():
    assert SCENARIOS


@pytest.mark.parametrize("case", POLICIES)
def test_policy_document(case):
    text = case["text"] if "text" in case else json.dumps(case["policy"])
    # A gateway in the policy's first region, if it names regions: a global rule needs one.
    regions = case.get("policy", {}).get("regions")
    region = regions[0] if isinstance(regions, list) and regions else None
    # Loaded at the vectors' clock: an override may expire at most 90 days after it.
    if case["error"] is None:
        engine.Engine(text, now=START_US, region=region)
        return
    with pytest.raises(engine.InvalidPolicy) as info:
        engine.Engine(text, now=START_US, region=region)
    assert str(info.value) == case["error"]


@pytest.mark.parametrize("scenario,policies", SCENARIOS)
def test_scenario(scenario, policies):
    run = Run(scenario, policies)
    for i, step in enumerate(scenario["steps"]):
        try:
            run.step(step)
        except AssertionError as exc:
            raise AssertionError(f"step {i}: {exc}") from None


def duration_us(text: str) -> int:
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(digits) * UNITS[text[len(digits):]]


def args_json(args):
    out = []
    for a in args:
        try:
            out.append(a.decode())
        except UnicodeDecodeError:
            out.append({"hex": a.hex()})
    return out


def value_bytes(v) -> bytes:
    if isinstance(v, dict) and "hex" in v:
        return bytes.fromhex(v["hex"])
    if isinstance(v, dict) and "repeat" in v:
        return (v["repeat"] * v["times"]).encode()
    return v.encode()


def reply_of(v):
    """A scripted reply as redis-py would return it."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, list):
        return [reply_of(x) for x in v]
    if isinstance(v, dict):
        if "error" in v:
            return engine.error(v["error"])
        if "status" in v:
            return v["status"]
        if "map" in v:
            return {reply_of(k): reply_of(x) for k, x in v["map"]}
        return None
    return v


def matches(want, got, what: str) -> None:
    """`want` matches `got`: equal, or `{"$range": [lo, hi]}` for a number, `{"$any": true}`
    for anything present, `"*"` for any string, an object's listed fields only (`$exact`: all),
    an array element by element."""
    def fail():
        raise AssertionError(f"{what}: expected {json.dumps(want)}, got {json.dumps(got)}")

    if want == "*":
        return
    if isinstance(want, dict) and "$range" in want:
        lo, hi = want["$range"]
        if not (isinstance(got, (int, float)) and not isinstance(got, bool) and lo <= got <= hi):
            fail()
        return
    if isinstance(want, dict) and "$any" in want:
        if got is None:
            fail()
        return
    if isinstance(want, dict) and "$exact" in want:
        if got != want["$exact"]:
            fail()
        return
    if isinstance(want, dict):
        if not isinstance(got, dict):
            fail()
        for k, w in want.items():
            matches(w, got.get(k), f"{what}.{k}")
        return
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            fail()
        for i, (w, g) in enumerate(zip(want, got)):
            matches(w, g, f"{what}[{i}]")
        return
    if isinstance(want, bool) or isinstance(got, bool):
        if want is not got:
            fail()
        return
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if want != got:
            fail()
        return
    if want != got:
        fail()


def expect_calls(want, calls) -> None:
    if want is not None:
        matches(want, [args_json(c.args) for c in calls], "calls")


class Script:
    """The store's scripted answers for one request: each entry names the call it expects (or
    `"*"`) and gives a reply, an error or a failure; `"memory"` lets the memory store answer
    that call, and the script may end with `"rest": "memory"`."""

    def __init__(self, spec):
        self.entries, self.rest_memory = [], False
        if spec is None or spec == "memory":
            self.rest_memory = True
        elif isinstance(spec, list):
            self.entries = spec
        elif isinstance(spec, dict):
            self.entries = spec.get("script", [])
            self.rest_memory = spec.get("rest") == "memory"
        self.next = 0
        self.made = []
        self.deadlines = []

    def wait(self):
        """A `{"wait": "1ms"}` entry answers a Wait step by advancing the clock."""
        if self.next < len(self.entries) and "wait" in self.entries[self.next]:
            self.next += 1
            return duration_us(self.entries[self.next - 1]["wait"])
        return None

    def answer(self, call):
        """(answer, advance), or None for the memory store to answer."""
        if self.next >= len(self.entries):
            assert self.rest_memory, f"unscripted call {args_json(call.args)}"
            return None
        entry = self.entries[self.next]
        self.next += 1
        if entry.get("call", "*") != "*":
            matches(entry["call"], args_json(call.args), "call")
        advance = duration_us(entry["after"]) if "after" in entry else 0
        if "memory" in entry:
            return None if not advance else (None, advance)
        if "reply" in entry:
            return reply_of(entry["reply"]), advance
        if "error" in entry:
            return engine.error(entry["error"]), advance
        fail = entry.get("fail")
        assert fail is not None, f"script entry {entry} gives no answer"
        answers = {"timeout": engine.timeout, "overloaded": engine.overloaded}
        return (answers[fail]() if fail in answers else engine.failed(fail)), advance

    def done(self):
        assert self.next == len(self.entries), \
            f"scripted store entries left unused, from {self.entries[self.next]}"


class Run:
    def __init__(self, scenario, policies):
        policy = scenario["policy"]
        if isinstance(policy, str):
            policy = policies[policy]
        o = scenario.get("options", {})
        self.engine = engine.Engine(json.dumps(policy),
                                    legacy_headers=o.get("legacy_headers", False),
                                    log_sample=o.get("log_sample", 0.0),
                                    log_per_second=o.get("log_per_second", 100),
                                    seed=o.get("seed", 1),
                                    table_bytes=o.get("table_bytes"), now=START_US)
        self.store = engine.MemoryStore()
        self.now = START_US
        self.pending = {}
        self.leases = {}

    def step(self, step):
        if "advance" in step:
            self.now += duration_us(step["advance"])
        elif "repeat" in step:
            for k in range(step["repeat"]):
                try:
                    self.step(step["do"])
                except AssertionError as exc:
                    raise AssertionError(f"repetition {k}: {exc}") from None
        elif "request" in step:
            self.request(step["request"], step)
        elif "check" in step:
            self.check(step["check"], step)
        elif "resume" in step:
            pending, first = self.pending.pop(step["resume"])
            script = Script(step.get("store"))
            verdict = self.drive(pending, first, script)
            script.done()
            self.check_verdict(step, verdict, script)
        elif "drop" in step:
            pending, _ = self.pending.pop(step["drop"])
            expect_calls(step.get("calls"), pending.abandon())
        elif "finish" in step:
            # The lease stays known: a later `tick` or `finish` of it must give nothing.
            lease, _ = self.leases[step["finish"]]
            actual = step.get("actual_cost")
            # The response's status: 200 unless the step says otherwise (null: unknown).
            calls = lease.finish(actual.encode() if actual is not None else None,
                                 step.get("status", 200), self.now)
            expect_calls(step.get("calls"), calls)
            self.to_memory(calls)
        elif "tick" in step:
            lease, started = self.leases[step["tick"]]
            calls = lease.tick(started, self.now)
            expect_calls(step.get("calls"), calls)
            self.to_memory(calls)
        elif "reload" in step:
            want = step.get("error")
            try:
                self.engine.reload(json.dumps(step["reload"]), now=self.now)
            except engine.InvalidPolicy as exc:
                assert want == str(exc), f"reload refused: {exc}"
            else:
                assert want is None, f"reload accepted, expected {want}"
        elif "metrics" in step:
            self.check_metrics(step["metrics"])
        elif "tables" in step:
            held = {name: entries for name, (entries, _) in self.engine.tables().items()}
            matches(step["tables"], held, "tables")
        else:
            raise AssertionError(f"unknown step {step}")

    def request(self, r, step):
        headers = []
        for name, v in (r.get("headers") or {}).items():
            for one in v if isinstance(v, list) else [v]:
                headers.append((name.encode(), value_bytes(one)))
        caller = r.get("caller") or {}
        if step.get("shed"):
            # The driver sheds the request before deciding it: no store call at all.
            verdict = self.engine.shed(r.get("method", "GET"), r["path"], headers,
                                       r.get("peer", "192.0.2.1"), self.now, caller.get("user"),
                                       caller.get("tenant"), r.get("case_insensitive", False))
            self.check_verdict(step, verdict, Script(None))
            return
        started = self.now
        pending, first = self.engine.begin(r.get("method", "GET"), r["path"], headers,
                                           r.get("peer", "192.0.2.1"), self.now,
                                           caller.get("user"), caller.get("tenant"),
                                           r.get("case_insensitive", False))
        if "hold" in step:
            # Held after its first step, unanswered: the next requests run beside it.
            if "step" in step:
                check_step(step["step"], first)
            self.pending[step["hold"]] = (pending, first)
            return
        script = Script(step.get("store"))
        verdict = self.drive(pending, first, script)
        script.done()
        self.check_verdict(step, verdict, script)
        if "id" in step:
            self.leases[step["id"]] = (pending.holdings(), started)

    def check(self, c, step):
        """Keyed checks under a route, each naming a rule of the policy."""
        items = [{"rule": i["rule"], "key": i["key"], "cost": i.get("cost", 1),
                  "blocked": i["blocked"]} if "blocked" in i
                 else (i["rule"], i["key"], i.get("cost", 1)) for i in c["items"]]
        pending, first = self.engine.check(c["route"], items, self.now)
        script = Script(step.get("store"))
        verdict = self.drive(pending, first, script)
        script.done()
        self.check_verdict(step, verdict, script)
        want = step.get("expect", {}).get("checks")
        if want is not None:
            got = [{"over": o.over, "remaining": o.remaining, "reset_after_ms": o.reset_after_ms,
                    "retry_after_ms": o.retry_after_ms, "source": o.source}
                   for o in verdict.checks]
            matches(want, got, "checks")

    def drive(self, pending, step, script):
        """Answers each step from the script, or from the memory store when the script has
        no entries left for it and allows that."""
        for _ in range(64):
            if isinstance(step, engine.Verdict):
                self.to_memory(step.background)
                return step
            if isinstance(step, engine.Wait):
                advance = script.wait()
                self.now = self.now + advance if advance is not None else step.until
                step = self.engine.resume(pending, [], self.now)
                continue
            script.deadlines.append(step.deadline - self.now)
            answers = []
            for call in step.calls:
                script.made.append(call.args)
                got = script.answer(call)
                if got is not None:
                    answer, advance = got
                    self.now += advance
                    if answer is not None:
                        answers.append(answer)
                        continue
                answers.append(self.store.call(call.args, self.now))
            step = self.engine.resume(pending, answers, self.now)
        raise AssertionError("more than 64 steps for one request")

    def to_memory(self, calls):
        for call in calls:
            self.store.call(call.args, self.now)

    def check_verdict(self, step, v, script):
        want = step.get("expect")
        if want is None:
            return
        if "status" in want:
            matches(want["status"], v.status or 200, "status")
        if "outcome" in want:
            matches(want["outcome"], v.outcome, "outcome")
        if "kind" in want:
            matches(want["kind"], v.kind, "kind")
        if "route" in want:
            matches(want["route"], v.route, "route")
        got = dict(v.headers)
        for name, w in (want.get("headers") or {}).items():
            g = got.get(name)
            if w is None:
                assert g is None, f"header {name} is {g}, expected none"
                continue
            assert g is not None, f"no header {name}; headers {v.headers}"
            # Retry-After is a number of seconds: a range compares it as one.
            if isinstance(w, dict) and g.isdigit():
                g = int(g)
            matches(w, g, f"header {name}")
        if want.get("no_rate_headers"):
            assert not [k for k in got if k.startswith("RateLimit")], v.headers
        if "problem" in want:
            body = json.loads(v.problem) if v.problem is not None else None
            matches(want["problem"], body, "problem")
        if "calls" in want:
            matches(want["calls"], [args_json(a) for a in script.made], "calls")
        if "deadlines_ms" in want:
            matches(want["deadlines_ms"], [d // 1000 for d in script.deadlines], "deadlines_ms")
        if "background" in want:
            expect_calls(want["background"], v.background)
        if "log" in want:
            got_log = [{k: v for k, v in r.items() if k != "message"} for r in v.log]
            matches(want["log"], got_log, "log")

    def check_metrics(self, want):
        text = self.engine.render_metrics(now=self.now)
        values = {}
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            if series and not line.startswith("#"):
                values[series] = float(value)
        for series, w in want.items():
            g = values.get(series)
            if w is None:
                assert g is None, f"{series} is {g}, expected none"
                continue
            assert g is not None, f"no series {series} in\n{text}"
            matches(w, g, series)


def check_step(want, step):
    if isinstance(step, engine.Verdict):
        got = {"done": step.status or 200}
    elif isinstance(step, engine.Wait):
        got = "wait"
    else:
        got = {"calls": [args_json(c.args) for c in step.calls]}
    matches(want, got, "step")
