"""Findings 1 to 7 of issue 24: refusals and the breaker, reconnecting and starting without
the store, X-Forwarded-For, a reused Idempotency-Key, variants of a request, and TCP_NODELAY to
the store and on accepted connections. Each takes a `Ctx` and returns a `result` row."""

from __future__ import annotations

import json
import statistics
import time

from procs import (
    Ctx,
    Gateway,
    fill_reservations,
    reap,
    result,
    start_delay_proxy,
    start_gateway,
    tcp_sockets,
    upstream_counts,
)
from wire import Conn, counts, export, http, ms, pctl


def f1(ctx: Ctx):
    """A refused call never opens the breaker: 6 exports with a 257-byte Idempotency-Key, then
    6 exports on a tenant holding 10,000 reservations; another tenant's checkout after each."""
    ctx.ensure_redis()
    g = ctx.gateway()
    c = Conn(g.port)
    long_key = [export(c, "f1-long", b"k" * 257).status for _ in range(6)]
    after_long = c.request("POST", "/checkout", [("x-tenant", "f1-next"), ("x-user", "u")]).status
    breaker_long = g.breaker()
    fill_reservations(ctx.redis.client(), "{t:f1-full}:export")
    full = [export(c, "f1-full", user=f"u{i}") for i in range(6)]
    full_codes = [a.status for a in full]
    violated = sorted({tuple(json.loads(a.body).get("violated-policies", [])) for a in full
                       if a.status == 429})
    after_full = c.request("POST", "/checkout", [("x-tenant", "f1-next2"), ("x-user", "u")]).status
    breaker_full = g.breaker()
    ok = (all(s is not None and s < 500 for s in long_key + full_codes)
          and after_long == 200 and after_full == 200
          and breaker_long == "closed" and breaker_full == "closed")
    now = (f"257-byte key: {counts(long_key)}, next tenant {after_long}, breaker {breaker_long}; "
           f"10,001st reservation: {counts(full_codes)} (violated {violated}), next tenant "
           f"{after_full}, breaker {breaker_full}")
    return result(now, ok)


def _until_first_200(g: Gateway, within=30.0) -> float | None:
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < within:
        a = http(g.port, "POST", "/checkout", [("x-tenant", "f2"), ("x-user", f"back-{i}")],
                 timeout=5)
        i += 1
        if a.status == 200:
            return time.monotonic() - started
        time.sleep(0.025)
    return None


def f2(ctx: Ctx):
    """Reconnect: kill -9 and restart Redis on the same port (down 0.5 s, then 5 s, with a
    checkout every 100 ms meanwhile): seconds from the first PONG to the first 200. Start: a
    gateway started while Redis is down: seconds to `listening on`, its postures, and seconds
    from Redis's first PONG to the first 200."""
    ctx.ensure_redis()
    g = ctx.gateway()
    figures = []
    backs = []
    for down in (0.5, 5.0):
        assert _until_first_200(g, 10) is not None
        ctx.redis.kill9()
        t_end = time.monotonic() + down
        during = []
        while time.monotonic() < t_end:
            during.append(http(g.port, "POST", "/checkout", [("x-tenant", "f2"), ("x-user", "d")], timeout=5).status)
            time.sleep(0.1)
        ctx.redis.start()
        back = _until_first_200(g, 30)
        backs.append(back)
        figures.append(f"down {down:g} s ({counts(during)}): first 200 "
                       f"{'never (30 s)' if back is None else ms(back)} after Redis answered")
    ctx.cleanup()
    # Started while Redis is down.
    ctx.redis.kill9()
    g, took = start_gateway(ctx.kind, ctx.redis.url, ctx.policy, ctx.workdir, within=60)
    ctx.gateways.append(g)
    posture = [http(g.port, "POST", "/checkout", [("x-tenant", "f2"), ("x-user", "s")], timeout=5)
               for _ in range(3)]
    cat = http(g.port, "GET", "/catalog", [("x-tenant", "f2"), ("x-user", "s")], timeout=5)
    time.sleep(2.0)
    ctx.redis.start()
    first = _until_first_200(g, 30)
    posture_ms = max(a.elapsed for a in posture)
    figures.append(f"started with Redis down: listening after {ms(took)}; checkout "
                   f"{counts([a.status for a in posture])} (slowest {ms(posture_ms)}), catalog "
                   f"{cat.status} (fallback); Redis up 2 s later: first 200 "
                   f"{'never (30 s)' if first is None else ms(first)} after it answered")
    limit = 2.0  # breaker.open (1 s) plus one second
    ok = (all(b is not None and b <= limit for b in backs + [first]) and took < 5
          and all(a.status == 503 for a in posture) and cat.status == 200)
    return result("; ".join(figures), ok)


def f3(ctx: Ctx):
    """X-Forwarded-For with trusted_proxies []: 25 logins (20 per 10 s window), each with
    another X-Forwarded-For, from one caller, inside one window."""
    ctx.ensure_redis()
    g = ctx.gateway()
    while time.time() % 10 > 5:
        time.sleep(0.1)
    c = Conn(g.port)
    codes = [c.request("POST", "/login", [("x-forwarded-for", f"10.9.{i}.1")]).status for i in range(25)]
    keys = sorted(k.decode("utf-8", "replace") for k in ctx.redis.client().keys("anon:*"))
    admitted = sum(1 for s in codes if s == 401)
    ok = admitted <= 20 and all(not k.startswith("anon:10.9.") for k in keys)
    return result(f"{admitted} of 25 admitted ({counts(codes)}); keys {keys}", ok)


def f4(ctx: Ctx):
    """One Idempotency-Key reused: 40 exports (cost 10 of 100 a minute) with one key, 40
    without, each on a tenant of its own; the backend's runs counted where it can be."""
    ctx.ensure_redis()
    g = ctx.gateway()
    c = Conn(g.port)
    before = upstream_counts(g) if ctx.kind == "rl-gateway" else None
    with_key = [export(c, "f4-key", b"same-key").status for _ in range(40)]
    mid = upstream_counts(g) if ctx.kind == "rl-gateway" else None
    without = [export(c, "f4-nokey").status for _ in range(40)]
    after = upstream_counts(g) if ctx.kind == "rl-gateway" else None
    a_key, a_no = with_key.count(200), without.count(200)
    runs = ""
    if before is not None:
        k = "POST /reports/export"
        runs = f"; upstream ran {mid.get(k, 0) - before.get(k, 0)} and {after.get(k, 0) - mid.get(k, 0)} times"
    ok = a_key == a_no and a_key <= 10
    return result(f"one key: {a_key} of 40 admitted ({counts(with_key)}); no key: {a_no} of 40{runs}", ok)


def f5(ctx: Ctx):
    """Request variants on one budget: 30 requests of one user each, GET vs HEAD /catalog (read:
    burst 20, 2/s), POST /checkout vs /checkout/, /CHECKOUT, //checkout, /./checkout, and
    /%63heckout (write: burst 10, 5/s); then /CHECKOUT under a copy of the policy with
    "case_sensitive": false."""
    ctx.ensure_redis()
    g = ctx.gateway()
    c = Conn(g.port)

    def run(method, path, user):
        got = [c.request(method, path, [("x-tenant", "f5"), ("x-user", user)]) for _ in range(30)]
        return got

    rows = {}
    for label, method, path in [("GET /catalog", "GET", "/catalog"), ("HEAD /catalog", "HEAD", "/catalog"),
                                ("POST /checkout", "POST", "/checkout"), ("POST /checkout/", "POST", "/checkout/"),
                                ("POST /CHECKOUT", "POST", "/CHECKOUT"), ("POST //checkout", "POST", "//checkout"),
                                ("POST /./checkout", "POST", "/./checkout"), ("POST /%63heckout", "POST", "/%63heckout")]:
        got = run(method, path, "u-" + label.replace(" ", "_"))
        rows[label] = got
    n = {k: sum(1 for a in v if a.status == 200) for k, v in rows.items()}
    head_headers = rows["HEAD /catalog"][0].header("ratelimit") is not None
    parts = [f"{k} {n[k]}/30" for k in rows]
    ok_head = n["HEAD /catalog"] <= n["GET /catalog"] + 2 and any(a.status == 429 for a in rows["HEAD /catalog"])
    ok_slash = n["POST /checkout/"] <= n["POST /checkout"] + 2
    ok_norm = all(n[k] <= n["POST /checkout"] + 2 for k in ("POST //checkout", "POST /./checkout"))
    case_applies = ctx.kind == "node"  # express routes case-insensitively by default
    ok_case = (n["POST /CHECKOUT"] <= n["POST /checkout"] + 2) if case_applies else True
    ok = ok_head and ok_slash and ok_norm and ok_case
    # The policy's own switch for a backend that routes without case (a copy of the policy).
    nocase = ctx.workdir / f"policy-f5-nocase-{ctx.kind}.json"
    doc = json.loads(ctx.policy.read_text())
    doc["case_sensitive"] = False
    nocase.write_text(json.dumps(doc))
    g2 = ctx.gateway(policy=nocase)
    c2 = Conn(g2.port)
    n_nocase = sum(1 for _ in range(30) if c2.request("POST", "/CHECKOUT", [("x-tenant", "f5"), ("x-user", "u-nocase")]).status == 200)
    parts.append(f'with "case_sensitive": false, POST /CHECKOUT {n_nocase}/30')
    ok = ok and n_nocase <= n["POST /checkout"] + 2
    if ctx.kind == "rl-gateway":
        # Percent-encoded targets, forwarded as received, in front of an upstream that decodes.
        g3 = ctx.gateway(variant="starlette")
        c3 = Conn(g3.port)
        for path in ("/checkout", "/%63heckout", "/check%6Fut"):
            got = [c3.request("POST", path, [("x-tenant", "f5s"), ("x-user", "u-" + path)]) for _ in range(30)]
            ran = sum(1 for a in got if a.status == 200 and a.body == b"checkout handler")
            parts.append(f"Starlette upstream: POST {path} reached its /checkout handler {ran}/30"
                         + (f" ({counts([a.status for a in got])})" if path == "/checkout" else ""))
            if path == "/checkout":
                control = ran
                ok = ok and 5 <= ran <= 12  # the control: the handler runs, limited
            else:
                ok = ok and ran <= control + 2
    notes = [f"HEAD carries RateLimit: {head_headers}"]
    if ctx.kind == "rl-gateway":
        notes.append("the stub's /CHECKOUT and /%63heckout rows are informational (the stub routes nothing); "
                     "the Starlette rows are what a decoding upstream does with them")
    elif not case_applies:
        notes.append("/CHECKOUT and /%63heckout: informational (the framework would not route them to /checkout"
                     + ("; Starlette decodes %63, and so does this gateway" if ctx.kind == "python" else "") + ")")
    return result("; ".join(parts) + "; " + "; ".join(notes), ok)


def f6(ctx: Ctx):
    """TCP_NODELAY to the store: Redis behind a loopback proxy adding 20 ms to every reply; 100
    sequential exports (two store calls before the answer), one tenant each: how many miss the
    50 ms deadline (503), latency; and TCP_NODELAY read on the gateway's sockets to the store."""
    ctx.ensure_redis()
    proxy, pport = start_delay_proxy(ctx.redis.port, 20, ctx.workdir)
    try:
        g = ctx.gateway(redis_url=f"redis://127.0.0.1:{pport}")
        c = Conn(g.port)
        for i in range(5):
            export(c, f"f6-warm-{i}")
        got = [export(c, f"f6-{i}") for i in range(100)]
        socks = [s for s in tcp_sockets(g.pid) if s[1] == pport]
        miss = sum(1 for a in got if a.status != 200)
        lat = [a.elapsed for a in got]
        m = g.metrics()
        timeouts = m.get('rl_gateway_store_call_duration_seconds_count{result="timeout"}', 0)
        nodelay = sum(1 for s in socks if s[2])
        now = (f"{miss} of 100 not 200 ({counts([a.status for a in got])}); p50 {ms(statistics.median(lat))}, "
               f"p99 {ms(pctl(lat, 99))}; store-call timeouts {timeouts:.0f}; TCP_NODELAY on {nodelay} of "
               f"{len(socks)} sockets to the store")
        return result(now, miss == 0 and socks and nodelay == len(socks))
    finally:
        reap(proxy)


def f7(ctx: Ctx):
    """Nagle on accepted connections: 50 keep-alive GET /status (exempt: no store call) on one
    connection whose client sets TCP_NODELAY; latency, and TCP_NODELAY read on the accepted socket."""
    ctx.ensure_redis()
    g = ctx.gateway()
    c = Conn(g.port)
    c.request("GET", "/status")
    lat = []
    for _ in range(50):
        a = c.request("GET", "/status")
        assert a.status == 200, a
        lat.append(a.elapsed)
    mine = c.sock.getsockname()[1]
    socks = [s for s in tcp_sockets(g.pid) if s[1] == mine]
    post = []
    for _ in range(20):
        a = c.request("POST", "/status", [("x-user", "f7")], body=b"x" * 100)
        post.append(a.elapsed)
    flag = socks[0][2] if socks else None
    streamed = ""
    if ctx.kind == "rl-gateway":
        chunked = [c.request("GET", "/status?chunks=3").elapsed for _ in range(20)]
        streamed = (f"; a body streamed in 3 chunks 2 ms apart: median {statistics.median(chunked) * 1000:.1f} ms "
                    f"(6 ms of it the upstream's)")
    now = (f"GET median {statistics.median(lat) * 1000:.2f} ms, max {max(lat) * 1000:.2f} ms; "
           f"POST with a body median {statistics.median(post) * 1000:.2f} ms{streamed}; accepted socket "
           f"TCP_NODELAY {flag}")
    if flag is False:
        now += " (section 12: every socket to callers sets it)"
    return result(now, statistics.median(lat) < 0.010 and flag is True)
