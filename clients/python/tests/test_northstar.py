"""The example gateway as an executable: started with the flags of clients/CONTRACT.md section 7
behind a real uvicorn, driven over real HTTP. It runs in this test environment (NORTHSTAR_VENV),
which has the package and uvicorn, rather than building its own on first run."""

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from servers import free_port

HERE = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def northstar(server):
    port = free_port()
    env = dict(os.environ, NORTHSTAR_VENV=sys.prefix)
    proc = subprocess.Popen(
        [str(HERE / "northstar"), "--redis", server.url, "--listen", f"127.0.0.1:{port}",
         "--policy", str(HERE / "northstar.policy.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"listening on 127.0.0.1:{port}", (line, proc.stderr.read())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def test_catalog_admits_with_headers(northstar):
    h = {"x-user": "ns-u", "x-tenant": "ns-t"}
    r = httpx.get(f"{northstar}/catalog", headers=h)
    assert r.status_code == 200 and r.json()["ok"] is True
    assert r.headers["ratelimit-policy"] == '"read";q=2;w=1;rl-burst=20, "tenant";q=1000;w=60'
    assert r.headers["ratelimit"].startswith('"read";r=19;t=1, "tenant";r=999;t=')


def test_login_counts_failed_attempts_and_refuses_past_the_limit(northstar):
    with httpx.Client() as c:
        rs = [c.post(f"{northstar}/login") for _ in range(45)]
    codes = [r.status_code for r in rs]
    # 20 per 10 s window, aligned to the clock: the attempts may straddle one window's end
    first = codes.index(429)
    assert codes[:first] == [401] * first and 20 <= first <= 40
    refused = rs[first]
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["violated-policies"] == ["anon"]
    assert int(refused.headers["retry-after"]) >= 1


def test_checkout_refuses_past_the_burst(northstar):
    h = {"x-user": "ns-w", "x-tenant": "ns-w"}
    with httpx.Client() as c:
        codes = [c.post(f"{northstar}/checkout", headers=h).status_code for _ in range(40)]
    # a burst of 10 at 5 per second: the first 10 pass, and 40 outrun the refill
    assert codes[:10] == [200] * 10 and 429 in codes and set(codes) == {200, 429}


def test_export_settles_and_health_metrics_reload(northstar):
    h = {"x-user": "ns-e", "x-tenant": "ns-e"}
    r = httpx.post(f"{northstar}/reports/export?units=2", headers=h)
    assert r.status_code == 200
    assert r.headers["ratelimit-policy"].startswith('"inflight";q=3;qu="concurrent-requests", "export";q=100;w=60')
    assert httpx.get(f"{northstar}/healthz").status_code == 200
    metrics = httpx.get(f"{northstar}/metrics").text
    assert 'rl_gateway_decisions_total{route="POST /reports/export",rule="export",outcome="admit"} 1' in metrics
    assert httpx.get(f"{northstar}/unrouted").status_code == 200
    reload = httpx.post(f"{northstar}/-/reload")
    assert reload.status_code == 409 and "not higher" in reload.text


def test_northstar_on_a_cluster(cluster):
    port = free_port()
    env = dict(os.environ, NORTHSTAR_VENV=sys.prefix)
    proc = subprocess.Popen(
        [str(HERE / "northstar"), "--redis", f"redis://127.0.0.1:{cluster.port}", "--listen",
         f"127.0.0.1:{port}", "--policy", str(HERE / "northstar.policy.json"), "--cluster"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"listening on 127.0.0.1:{port}", (line, proc.stderr.read())
        with httpx.Client() as c:
            for tenant in ("c1", "c2", "c3"):
                r = c.get(f"http://127.0.0.1:{port}/catalog",
                          headers={"x-user": "u", "x-tenant": tenant})
                assert r.status_code == 200
                assert r.headers["ratelimit"].startswith('"read";r=19;t=1, "tenant";r=999;t=')
    finally:
        proc.kill()
        proc.wait()
