"""Memory through the binding: 100,000 distinct callers, each admitted then refused by the
store (a negative-cache entry each) and spending a chunk of its own (a grant rule), then
100,000 others decided by the local fallback while the store is down. Every table of the
engine must stay at its bound, `negative_cache.entries`, and the process's memory must not
grow with the callers. The store is the binding's MemoryStore (the module's arithmetic), so
the figures are the engine's and the binding's alone; clients/engine/tests/bounds.rs is the
same run in Rust.

    clients/python/.venv/bin/python clients/python/benches/bounds.py [--callers N]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import redis_rl_engine as engine

ENTRIES = 1000
POLICY = {
    "version": 1, "default": {"rules": []}, "identity": {"user": "x-user"},
    "rules": {"user": {"key": "u:${user}", "limit": 1, "period": "1h"},
              "chunk": {"key": "c:${user}", "limit": 100, "period": "1s", "grant": {"want": 10}}},
    "routes": [{"method": "GET", "path": "/", "rules": ["user", "chunk"],
                "on_store_error": {"mode": "fallback", "limit": 1, "period": "1h"}}],
    "negative_cache": {"entries": ENTRIES},
}
NOW = 1_767_225_600_000_000
DOWN = engine.failed("connection refused")


def decide(e, store, user: bytes):
    pending, step = e.begin("GET", "/", [(b"x-user", user)], None, NOW)
    while not isinstance(step, engine.Verdict):
        if isinstance(step, engine.Wait):
            step = e.resume(pending, [], step.until)
            continue
        answers = [store.call(c.args, NOW) if store else DOWN for c in step.calls]
        step = e.resume(pending, answers, NOW)
    return step


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--callers", type=int, default=100_000)
    n = ap.parse_args().callers
    e = engine.Engine(json.dumps(POLICY), log_sample=0.0, seed=1)
    print(f"callers: {n:,}, table bound (negative_cache.entries): {ENTRIES:,}")
    print(f"max RSS at start: {max_rss_mb():.1f} MB")
    t = time.perf_counter()
    for i in range(n):
        if i % ENTRIES == 0:
            # A caller's keys matter only for its own two requests: a fresh store now and then
            # keeps the store's memory out of the figures.
            store = engine.MemoryStore()
        user = f"user-{i}".encode()
        assert decide(e, store, user).status is None
        assert decide(e, store, user).status == 429
        if i == n // 10:
            tenth = max_rss_mb()
    took = time.perf_counter() - t
    cache, chunks, fallback = (e.tables()[t][0] for t in ("negative_cache", "chunks", "fallback"))
    assert (cache, chunks, fallback) == (ENTRIES, ENTRIES, 0), (cache, chunks, fallback)
    print(f"store up: {2 * n:,} decisions in {took:.1f} s ({took / (2 * n) * 1e6:.1f} µs each); "
          f"tables {cache:,} / {chunks:,} / {fallback:,}; max RSS {max_rss_mb():.1f} MB "
          f"(after a tenth of the callers: {tenth:.1f} MB)")
    before = max_rss_mb()
    t = time.perf_counter()
    admitted = sum(decide(e, None, f"other-{i}".encode()).status is None for i in range(n))
    took = time.perf_counter() - t
    cache, chunks, fallback = (e.tables()[t][0] for t in ("negative_cache", "chunks", "fallback"))
    assert admitted == n and cache <= ENTRIES and chunks <= ENTRIES and fallback == ENTRIES
    print(f"store down: {n:,} fallback decisions in {took:.1f} s; tables {cache:,} / {chunks:,} "
          f"/ {fallback:,}; max RSS {max_rss_mb():.1f} MB (grew {max_rss_mb() - before:.1f} MB)")


if __name__ == "__main__":
    main()
