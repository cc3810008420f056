#!/usr/bin/env python3
"""Asks rl-gateway's rate limit face as Envoy would, with a client generated from Envoy's protos.

The types and the stub are those of the PyPI package `envoy-data-plane` (betterproto2 classes
generated from envoyproxy/data-plane-api, `envoy/service/ratelimit/v3/rls.proto`); the
transport is grpcio, through that package's `RateLimitServiceSyncStub`. Nothing here comes
from the server's own types, so a disagreement on the wire shows.

    envoy_client.py scenario HOST:PORT [--domain api --key user --limit 100 --unit MINUTE]
        Runs the checks below against a service configured with one limit of LIMIT requests
        per UNIT on descriptor key KEY in DOMAIN (the defaults are examples/ratelimit.yaml),
        prints a JSON summary and exits 0, or exits 1 with `check failed: NAME: ...` on stderr.
    envoy_client.py drive HOST:PORT
        Reads one request a line on stdin, as JSON
        `{"domain": "api", "descriptors": [[["user", "ann"]]], "hits_addend": 1}`, and writes
        one answer a line on stdout, over one channel kept for the whole session:
        `{"grpc": "OK", "overall": "OK", "statuses": [...]}` or
        `{"grpc": "UNAVAILABLE", "details": "..."}`.

The limits are fixed windows aligned on the clock, so a scenario can straddle the start of a
window. A group of checks that sees one start (a `duration_until_reset` that grew) is run
again with fresh descriptor values, at most three times; nothing here measures time.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
    RateLimitDescriptor,
    RateLimitDescriptorEntry,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponse,
    RateLimitResponseCode,
    RateLimitResponseDescriptorStatus,
    RateLimitResponseRateLimitUnit,
    RateLimitServiceSyncStub,
)

UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}
OK = RateLimitResponseCode.OK
OVER_LIMIT = RateLimitResponseCode.OVER_LIMIT

Entries = Sequence[tuple[str, str]]


class CheckFailed(Exception):
    """A check that did not hold: its name and what was seen."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


class WindowStarted(Exception):
    """A new window began during a group of checks: its answers do not add up."""


def check(name: str, holds: bool, message: str) -> None:
    if not holds:
        raise CheckFailed(name, message)


class _Deadline(grpc.UnaryUnaryClientInterceptor):
    """Puts a deadline on every call, so a service that never answers ends the run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, RateLimitRequest], grpc.Future],
        details: grpc.ClientCallDetails,
        request: RateLimitRequest,
    ) -> grpc.Future:
        timed = _CallDetails(
            details.method,
            self.seconds,
            details.metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )
        return continuation(timed, request)


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    """A call's details with the deadline set."""


def client(addr: str, deadline: float) -> tuple[grpc.Channel, RateLimitServiceSyncStub]:
    channel = grpc.intercept_channel(grpc.insecure_channel(addr), _Deadline(deadline))
    return channel, RateLimitServiceSyncStub(channel)


def descriptor(entries: Entries, hits_addend: int | None = None) -> RateLimitDescriptor:
    return RateLimitDescriptor(
        entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries],
        hits_addend=hits_addend,
    )


def status_json(s: RateLimitResponseDescriptorStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"code": s.code.name, "remaining": s.limit_remaining}
    if s.current_limit is not None:
        out["limit"] = {
            "requests_per_unit": s.current_limit.requests_per_unit,
            "unit": s.current_limit.unit.name,
            "name": s.current_limit.name,
        }
    if s.duration_until_reset is not None:
        out["reset_ms"] = round(s.duration_until_reset.total_seconds() * 1000)
    return out


def answer_json(r: RateLimitResponse) -> dict[str, Any]:
    return {
        "grpc": "OK",
        "overall": r.overall_code.name,
        "statuses": [status_json(s) for s in r.statuses],
        "headers": {h.key: h.value for h in r.response_headers_to_add},
    }


class Scenario:
    def __init__(
        self,
        stub: RateLimitServiceSyncStub,
        domain: str,
        key: str,
        limit: int,
        unit: str,
    ) -> None:
        self.stub = stub
        self.domain = domain
        self.key = key
        self.limit = limit
        self.unit = unit
        self.unit_seconds = UNIT_SECONDS[unit]
        # Fresh values for every run, so that a rerun on the same service counts from zero.
        self.run = os.urandom(4).hex()
        self.fresh = 0
        self.last_reset: float | None = None
        self.attempts: dict[str, int] = {}

    def value(self) -> str:
        self.fresh += 1
        return f"{self.run}-{self.fresh}"

    def ask(
        self, name: str, descriptors: Sequence[RateLimitDescriptor], hits_addend: int = 0
    ) -> RateLimitResponse:
        request = RateLimitRequest(
            domain=self.domain, descriptors=list(descriptors), hits_addend=hits_addend
        )
        try:
            r = self.stub.should_rate_limit(request)
        except grpc.RpcError as e:
            raise CheckFailed(name, f"gRPC status {e.code().name}: {e.details()}") from e
        for s in r.statuses:
            if s.current_limit is None or s.duration_until_reset is None:
                continue
            reset = s.duration_until_reset.total_seconds()
            if self.last_reset is not None and reset > self.last_reset:
                raise WindowStarted()
            self.last_reset = reset
        check(
            name,
            len(r.statuses) == len(descriptors),
            f"{len(r.statuses)} statuses for {len(descriptors)} descriptors",
        )
        return r

    def limited(self, name: str, s: RateLimitResponseDescriptorStatus) -> None:
        """The status carries the configured limit, and a reset within one unit."""
        lim = s.current_limit
        check(name, lim is not None, "no current_limit on a limited descriptor")
        assert lim is not None
        check(
            name,
            lim.requests_per_unit == self.limit,
            f"current_limit.requests_per_unit {lim.requests_per_unit}, want {self.limit}",
        )
        check(
            name,
            lim.unit == RateLimitResponseRateLimitUnit[self.unit],
            f"current_limit.unit {lim.unit.name}, want {self.unit}",
        )
        reset = s.duration_until_reset
        check(name, reset is not None, "no duration_until_reset")
        assert reset is not None
        check(
            name,
            0 < reset.total_seconds() <= self.unit_seconds,
            f"duration_until_reset {reset} outside one {self.unit}",
        )

    def remaining(
        self,
        name: str,
        s: RateLimitResponseDescriptorStatus,
        code: RateLimitResponseCode,
        left: int,
    ) -> None:
        check(name, s.code == code, f"code {s.code.name}, want {code.name}")
        check(name, s.limit_remaining == left, f"limit_remaining {s.limit_remaining}, want {left}")
        self.limited(name, s)

    def group(self, name: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Runs one group of checks, again with fresh values if a window began during it."""
        for attempt in range(1, 4):
            self.last_reset = None
            try:
                out = body()
            except WindowStarted:
                continue
            self.attempts[name] = attempt
            return out
        raise CheckFailed(name, "a new window began during each of three attempts")

    # The groups of checks.

    def countdown(self) -> dict[str, Any]:
        """LIMIT requests OK, `limit_remaining` counting down; the next one OVER_LIMIT."""
        who = [(self.key, self.value())]
        seen = []
        for left in range(self.limit - 1, -1, -1):
            r = self.ask("countdown", [descriptor(who)])
            check(
                "countdown",
                r.overall_code == OK,
                f"overall {r.overall_code.name} with {left + 1} left",
            )
            self.remaining("countdown", r.statuses[0], OK, left)
            seen.append(r.statuses[0].limit_remaining)
        r = self.ask("over_limit", [descriptor(who)])
        check("over_limit", r.overall_code == OVER_LIMIT, f"overall {r.overall_code.name}")
        self.remaining("over_limit", r.statuses[0], OVER_LIMIT, 0)
        # Another caller has a count of its own.
        other = self.ask("other_user", [descriptor([(self.key, self.value())])])
        check("other_user", other.overall_code == OK, f"overall {other.overall_code.name}")
        self.remaining("other_user", other.statuses[0], OK, self.limit - 1)
        # Still refused: the refusal spent nothing that would let the next one in.
        again = self.ask("over_limit", [descriptor(who)])
        check("over_limit", again.overall_code == OVER_LIMIT, "admitted after a refusal")
        return {
            "remaining": seen,
            "over_limit": answer_json(r),
            "other_user": answer_json(other),
        }

    def hits(self) -> dict[str, Any]:
        """`hits_addend` 0 (unset) costs 1, N costs N, a descriptor's own overrides it."""
        who = [(self.key, self.value())]
        steps = []
        left = self.limit
        for request_hits, own_hits, cost in (
            (0, None, 1),
            (1, None, 1),
            (5, None, 5),
            (1, 3, 3),
            (0, 2, 2),
        ):
            r = self.ask("hits_addend", [descriptor(who, own_hits)], request_hits)
            left -= cost
            self.remaining(
                f"hits_addend {request_hits} (descriptor {own_hits})", r.statuses[0], OK, left
            )
            steps.append({"request": request_hits, "descriptor": own_hits, "remaining": left})
        # What is left is all there is: asking for one more than that is refused, for nothing.
        r = self.ask("hits_addend_over", [descriptor(who)], left + 1)
        check(
            "hits_addend_over",
            r.overall_code == OVER_LIMIT,
            f"overall {r.overall_code.name} asking {left + 1} of {left}",
        )
        r = self.ask("hits_addend_over", [descriptor(who)], left)
        self.remaining("hits_addend_over", r.statuses[0], OK, 0)
        return {"steps": steps, "exact_rest_admitted": True}

    def order(self) -> dict[str, Any]:
        """One status per descriptor, in request order; a descriptor nothing matches is OK."""
        v, w = (self.key, self.value()), (self.key, self.value())
        free = [("rl-gateway-test-unmatched", "x")]
        self.ask("request_order", [descriptor([v])])  # v: limit - 1 left
        r1 = self.ask("request_order", [descriptor([w]), descriptor([v])])
        check("request_order", r1.overall_code == OK, f"overall {r1.overall_code.name}")
        self.remaining("request_order [w, v] first", r1.statuses[0], OK, self.limit - 1)
        self.remaining("request_order [w, v] second", r1.statuses[1], OK, self.limit - 2)
        r2 = self.ask("request_order", [descriptor([v]), descriptor(free), descriptor([w])])
        check("request_order", r2.overall_code == OK, f"overall {r2.overall_code.name}")
        self.remaining("request_order [v, free, w] first", r2.statuses[0], OK, self.limit - 3)
        s = r2.statuses[1]
        check("unmatched_descriptor", s.code == OK, f"code {s.code.name}")
        check("unmatched_descriptor", s.current_limit is None, f"current_limit {s.current_limit}")
        self.remaining("request_order [v, free, w] third", r2.statuses[2], OK, self.limit - 2)
        return {"two": answer_json(r1), "three": answer_json(r2)}

    def all_or_nothing(self) -> dict[str, Any]:
        """A request one descriptor refuses is OVER_LIMIT overall and debits none of them."""
        full, spare = (self.key, self.value()), (self.key, self.value())
        self.ask("all_or_nothing", [descriptor([full])], self.limit)
        r = self.ask("all_or_nothing", [descriptor([spare]), descriptor([full])])
        check("all_or_nothing", r.overall_code == OVER_LIMIT, f"overall {r.overall_code.name}")
        check("all_or_nothing", r.statuses[0].code == OK, f"first {r.statuses[0].code.name}")
        check(
            "all_or_nothing",
            r.statuses[0].limit_remaining == self.limit,
            f"the admitted descriptor says {r.statuses[0].limit_remaining} left, not all",
        )
        check(
            "all_or_nothing", r.statuses[1].code == OVER_LIMIT, f"second {r.statuses[1].code.name}"
        )
        after = self.ask("all_or_nothing", [descriptor([spare])])
        self.remaining("all_or_nothing spared", after.statuses[0], OK, self.limit - 1)
        return {"refused": answer_json(r), "spare_after": answer_json(after)}


def scenario(args: argparse.Namespace) -> int:
    channel, stub = client(args.addr, args.deadline)
    s = Scenario(stub, args.domain, args.key, args.limit, args.unit)
    summary: dict[str, Any] = {
        "client": {
            name: importlib.metadata.version(name)
            for name in ("envoy-data-plane", "betterproto2", "grpcio")
        },
        "domain": args.domain,
    }
    try:
        summary["countdown"] = s.group("countdown", s.countdown)
        summary["hits_addend"] = s.group("hits_addend", s.hits)
        summary["request_order"] = s.group("request_order", s.order)
        summary["all_or_nothing"] = s.group("all_or_nothing", s.all_or_nothing)
    except CheckFailed as e:
        print(f"check failed: {e}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    summary["attempts"] = s.attempts
    summary["passed"] = list(s.attempts)
    print(json.dumps(summary))
    return 0


def drive(args: argparse.Namespace) -> int:
    channel, stub = client(args.addr, args.deadline)
    for line in sys.stdin:
        if not line.strip():
            continue
        ask = json.loads(line)
        request = RateLimitRequest(
            domain=ask.get("domain", "api"),
            descriptors=[descriptor([(k, v) for k, v in d]) for d in ask["descriptors"]],
            hits_addend=ask.get("hits_addend", 0),
        )
        try:
            out = answer_json(stub.should_rate_limit(request))
        except grpc.RpcError as e:
            out = {"grpc": e.code().name, "details": e.details()}
        print(json.dumps(out), flush=True)
    channel.close()
    return 0


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--deadline", type=float, default=30.0, help="seconds a call may take (default 30)"
    )
    sub = p.add_subparsers(dest="command", required=True)
    sc = sub.add_parser("scenario", help="run the checks, print a JSON summary")
    sc.add_argument("addr", help="the gateway's --grpc address, HOST:PORT")
    sc.add_argument("--domain", default="api")
    sc.add_argument("--key", default="user")
    sc.add_argument("--limit", type=int, default=100)
    sc.add_argument("--unit", default="MINUTE", choices=["MINUTE", "HOUR", "DAY"])
    sc.set_defaults(run=scenario)
    dr = sub.add_parser("drive", help="one request a line on stdin, one answer a line on stdout")
    dr.add_argument("addr", help="the gateway's --grpc address, HOST:PORT")
    dr.set_defaults(run=drive)
    args = p.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
