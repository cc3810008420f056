#!/usr/bin/env python3
"""Reruns the fifteen findings of issue 24 (a hostile caller and a failing store against the
gateways) on 127.0.0.1 with real processes, and prints today's figures.

    clients/python/.venv/bin/python clients/hostile/rerun.py [--gateway rust|python|node|rl-gateway]
                                                              [--finding N] [--json FILE] [--keep]

`--gateway` and `--finding` may be repeated (or take a comma-separated list); without them every
finding runs on every gateway, one gateway at a time. Each finding starts a fresh gateway (and
flushes Redis): state left by one finding never reaches the next. What each check sends and what
it counts is in clients/hostile/README.md. This is measurement: a figure is printed, a "pass" or
"FAIL" is the comparison with the rule of clients/CONTRACT.md section 12 ("What no caller and no
fault may do") named in the README, and nothing here changes product code.

Needs: Python 3.11 stdlib, redis-py (in clients/python/.venv), /usr/bin/redis-server, the module
(target/release/librl.so), and the gateways built as their READMEs say.

This file is the entry point: the command line, the "then" figures and the table. Beside it:
wire.py (HTTP/1.1 on raw sockets), procs.py (Redis, the gateways, the upstreams and the delaying
proxy as processes; socket options; each check's context), findings_a.py (findings 1 to 7),
findings_b.py (8 to 15) and modes.py (the internal modes below).

Internal modes (used by the harness itself, as subprocesses):
    rerun.py --upstream-stub PORTFILE        the upstream rl-gateway proxies to
    rerun.py --upstream-starlette PORTFILE   a Starlette application as that upstream (finding 5)
    rerun.py --delay-proxy LISTEN TARGET MS  a loopback TCP proxy delaying every reply by MS
    rerun.py --python-northstar-rawunits ... Python northstar whose stub also sends
                                             ?rawunits= verbatim as X-Actual-Cost (finding 12)
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import modes
from findings_a import f1, f2, f3, f4, f5, f6, f7
from findings_b import f8, f9, f10, f11, f12, f13, f14, f15
from procs import CLIENTS, MODULE, ROOT, Ctx, Redis, reap_all, result

GATEWAYS = ["rust", "python", "node", "rl-gateway"]
FINDINGS = list(range(1, 16))
CHECKS = {1: f1, 2: f2, 3: f3, 4: f4, 5: f5, 6: f6, 7: f7, 8: f8, 9: f9, 10: f10, 11: f11, 12: f12,
          13: f13, 14: f14, 15: f15}

# What issue 24 reported, by finding and gateway (the table's "then" column).
THEN = {
    1: {"rust": "5 exports with a 257-byte Idempotency-Key: 503, and the next tenant's checkout 503 (breaker open); same at the 10,001st reservation",
        "python": "500 (caller-provoked)", "node": "500 (caller-provoked)"},
    2: {"rust": "first 200 113 s after a kill -9/restart; does not listen while Redis is down",
        "node": "does not listen while Redis is down"},
    3: {"python": "25 of 25 logins admitted with rotating X-Forwarded-For (trusted_proxies: [])"},
    4: {"rust": "40 of 40 exports admitted with one Idempotency-Key (10 of 40 without)",
        "python": "40 of 40 admitted with one key (10 without)",
        "node": "40 of 40 admitted with one key (10 without)"},
    5: {"rust": "HEAD /catalog unlimited; /checkout/ 30 of 30 (10 of 30 for /checkout)",
        "python": "HEAD /catalog unlimited; /checkout/ 30 of 30",
        "node": "HEAD /catalog unlimited; /checkout/ and /CHECKOUT 30 of 30"},
    6: {"rust": "96 of 100 exports miss the 50 ms deadline (20 ms added per reply)",
        "python": "9 of 100", "node": "1 of 100"},
    7: {"python": "44 ms per keep-alive request"},
    8: {"python": "503s of up to 1.1 s under a 50 ms deadline (waits for RL.RELEASE)"},
    9: {"rust": "é, 用户 and no user share one key (anonymous)"},
    10: {"rust": "0% 503", "python": "76% of answers 503, Redis healthy", "node": "87% of answers 503, Redis healthy"},
    11: {"rust": "503 (see 1)", "python": "500 for an Idempotency-Key over 256 bytes (200 Latin-1 bytes too) and at a tenant's 10,001st reservation",
         "node": "500 for an Idempotency-Key over 256 bytes and at a tenant's 10,001st reservation"},
    12: {"python": "500 on a header byte \\xff; X-Actual-Cost ² raised in the middleware, no response sent"},
    13: {"python": "a semaphore slot leaked after a Redis restart in 2 of 4 runs; no log line"},
    14: {"rust": "RSS 5 MB -> 1,258 MB after 20,000 fallback entries of 60 KB x-user (7 s)"},
    15: {"python": "409 for an invalid document; repeated identity headers joined",
         "rust": "repeated identity headers: the first taken",
         "node": "repeated identity headers joined"},
}


def listing(values, allowed, name):
    out = []
    for v in values or []:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            conv = int(part) if name == "finding" else part
            if conv not in allowed:
                raise SystemExit(f"--{name} {part}: one of {allowed}")
            out.append(conv)
    return out or list(allowed)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--upstream-stub":
        return modes.upstream_stub(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "--upstream-starlette":
        return modes.upstream_starlette(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "--delay-proxy":
        return modes.delay_proxy(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--python-northstar-rawunits":
        return modes.python_northstar_rawunits(sys.argv[2:])
    p = argparse.ArgumentParser(description="Reruns issue 24's findings against the gateways.")
    p.add_argument("--gateway", action="append", help="rust, python, node, rl-gateway (repeatable)")
    p.add_argument("--finding", action="append", help="1 to 15 (repeatable, or a list: 1,4,5)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = p.parse_args()
    gateways = listing(args.gateway, GATEWAYS, "gateway")
    findings = listing(args.finding, FINDINGS, "finding")
    for path in (MODULE, ROOT / "target/release/northstar", ROOT / "target/release/rl-gateway"):
        if not path.exists():
            print(f"missing {path}: build it as clients/hostile/README.md says", file=sys.stderr)
    workdir = Path(tempfile.mkdtemp(prefix="rl-hostile-"))
    print(f"# work directory {workdir} (logs of every process)", file=sys.stderr)
    rows = []
    signal.signal(signal.SIGTERM, lambda *_: (reap_all(), sys.exit(143)))
    try:
        for kind in gateways:
            redis = Redis(workdir)
            policy = {"rust": CLIENTS / "rust/northstar.policy.json",
                      "python": CLIENTS / "python/northstar.policy.json",
                      "node": CLIENTS / "node/northstar.policy.json",
                      "rl-gateway": CLIENTS / "rust/northstar.policy.json"}[kind]
            ctx = Ctx(kind, redis, policy, workdir)
            try:
                for n in findings:
                    then = THEN.get(n, {}).get(kind, "not reported" if kind != "rl-gateway" else "not built then")
                    started = time.monotonic()
                    try:
                        r = CHECKS[n](ctx)
                    except Exception as e:  # noqa: BLE001 - a check that cannot finish is a figure
                        r = result(f"check did not finish: {type(e).__name__}: {e}", False,
                                   traceback.format_exc())
                    finally:
                        ctx.cleanup()
                    r.update(gateway=kind, finding=n, then=then, seconds=round(time.monotonic() - started, 1))
                    rows.append(r)
                    mark = {True: "pass", False: "FAIL", None: "n/a"}[r["pass"]]
                    print(f"{n:>2} | {kind:<10} | {mark:<4} | then: {then}\n   |            |      | now:  {r['now']}",
                          flush=True)
                    if r["pass"] is False and r.get("detail"):
                        print("   " + r["detail"].replace("\n", "\n   "), flush=True)
            finally:
                ctx.cleanup()
                redis.close()
    finally:
        reap_all()
    print()
    print("| # | gateway | then | now | result |")
    print("|---|---|---|---|---|")
    for r in rows:
        mark = {True: "pass", False: "**FAIL**", None: "n/a"}[r["pass"]]
        print(f"| {r['finding']} | {r['gateway']} | {r['then']} | {r['now']} | {mark} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(r["pass"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
