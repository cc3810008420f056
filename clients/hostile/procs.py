"""The processes of the hostile rerun: Redis with the module, the four gateways (and
rl-gateway's upstream), the delaying proxy in front of Redis, the socket options read on another
process's sockets, and the context each finding gets (`Ctx`) and the row it returns (`result`)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from wire import Answer, http, parse_metrics

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients"
MODULE = ROOT / "target" / "release" / "librl.so"
REDIS_SERVER = os.environ.get("RL_SERVER", "/usr/bin/redis-server")
VENV = CLIENTS / "python" / ".venv"
# The entry point: the upstreams, the delaying proxy and Python northstar's variant are its
# internal modes, started as subprocesses (`rerun.py --upstream-stub PORTFILE`, ...).
RERUN = Path(__file__).resolve().with_name("rerun.py")


_children: list[subprocess.Popen] = []


def _spawn(args, **kw) -> subprocess.Popen:
    proc = subprocess.Popen(args, **kw)
    _children.append(proc)
    return proc


def reap(proc: subprocess.Popen | None):
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def reap_all():
    for proc in _children:
        reap(proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """redis-server with the module on one port, restartable on the same port."""

    def __init__(self, workdir: Path, port: int | None = None):
        self.port = port or free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def start(self, within=10.0, persist=False) -> float:
        """Starts it; returns the monotonic instant it first answered PING. `persist`: an AOF
        written on every command (appendfsync always), so that state survives a kill -9."""
        aof = ["--appendonly", "yes", "--appendfsync", "always", "--appenddirname", f"aof-{self.port}"] \
            if persist else ["--appendonly", "no"]
        with open(self.workdir / f"redis-{self.port}.log", "ab") as log:
            self.proc = _spawn([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                                "--save", "", *aof, "--dir", str(self.workdir),
                                "--loadmodule", str(MODULE)],
                               stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.ping():
                return time.monotonic()
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited {self.proc.returncode}; see {log.name}")
            time.sleep(0.005)
        raise RuntimeError("redis-server did not answer PING")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop_(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cont(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def client(self):
        import redis
        return redis.Redis(port=self.port, socket_timeout=10)

    def close(self):
        reap(self.proc)


class Gateway:
    """One gateway process: `base` takes the traffic, `admin` serves /metrics and /-/reload."""

    def __init__(self, kind, proc, port, admin_port, stderr_path, extra=None):
        self.kind, self.proc, self.port, self.admin_port = kind, proc, port, admin_port
        self.stderr_path, self.extra = stderr_path, extra or []

    @property
    def pid(self):
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        a = http(self.admin_port, "GET", "/metrics")
        return parse_metrics(a.body.decode("utf-8", "replace")) if a.status == 200 else {}

    def reload(self) -> Answer:
        return http(self.admin_port, "POST", "/-/reload")

    def breaker(self, m=None) -> str:
        m = self.metrics() if m is None else m
        for state in ("closed", "open", "half_open", "half-open", "ramping"):
            if m.get(f'rl_gateway_breaker_state{{state="{state}"}}') == 1:
                return state
        return "?"

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return Path(self.stderr_path).read_text("utf-8", "replace")
        return ""

    def status(self, key: str) -> str | None:
        """A line of /proc/PID/status (VmHWM, VmRSS), in kB."""
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return line.split()[1]
        return None

    def rss_mb(self, key="VmRSS") -> float:
        v = self.status(key)
        return int(v) / 1024 if v else float("nan")

    def stop(self):
        reap(self.proc)
        for p in self.extra:
            reap(p)


def _read_listening(proc, faces_wanted: int, within: float):
    """The `listening on ADDR [(face)]` lines; {face: port}. Raises if they do not come."""
    faces = {}
    buf = b""
    deadline = time.monotonic() + within
    fd = proc.stdout.fileno()
    while len(faces) < faces_wanted:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no 'listening on' line within {within} s")
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"exited {proc.poll()} before listening")
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            text = line.decode().strip()
            if text.startswith("listening on "):
                rest = text[len("listening on "):]
                addr, _, face = rest.partition(" ")
                faces[face.strip("()") or "http"] = int(addr.rpartition(":")[2])
    # Keep draining stdout so that nothing the gateway prints can block it.
    threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(fd, 65536), b"")],
                     daemon=True).start()
    return faces


def start_gateway(kind, redis_url, policy, workdir: Path, within=60.0, variant=None) -> tuple[Gateway, float]:
    """Starts `kind` as its README says; returns it and the seconds until it said it listens.
    `variant`: "rawunits" (Python: the stub sends ?rawunits= verbatim), "starlette" (rl-gateway:
    a Starlette application as the upstream instead of the stub)."""
    stderr_path = workdir / f"{kind}-{time.monotonic_ns()}.stderr"
    listen = "127.0.0.1:0"
    extra = []
    env = dict(os.environ)
    if kind == "rust":
        args = [str(ROOT / "target/release/northstar"), "--redis", redis_url, "--listen", listen,
                "--policy", str(policy)]
        faces_wanted = 1
    elif kind == "python":
        env["NORTHSTAR_VENV"] = str(VENV)
        if variant == "rawunits":
            args = [str(VENV / "bin/python"), str(RERUN), "--python-northstar-rawunits"]
        else:
            args = [str(CLIENTS / "python/northstar")]
        args += ["--redis", redis_url, "--listen", listen, "--policy", str(policy)]
        faces_wanted = 1
    elif kind == "node":
        args = [str(CLIENTS / "node/northstar"), "--redis", redis_url, "--listen", listen,
                "--policy", str(policy)]
        faces_wanted = 1
    elif kind == "rl-gateway":
        portfile = workdir / f"upstream-{time.monotonic_ns()}.port"
        mode = "--upstream-starlette" if variant == "starlette" else "--upstream-stub"
        with open(workdir / "upstream.stderr", "ab") as up_err:
            up = _spawn([sys.executable, str(RERUN), mode, str(portfile)],
                        stdout=subprocess.DEVNULL, stderr=up_err)
        extra.append(up)
        deadline = time.monotonic() + 10
        while not (portfile.exists() and portfile.read_text().strip()):
            if time.monotonic() > deadline:
                raise RuntimeError("the upstream stub did not start")
            time.sleep(0.01)
        up_port = int(portfile.read_text())
        args = [str(ROOT / "target/release/rl-gateway"), "--policy", str(policy), "--store", redis_url,
                "--listen", listen, "--upstream", f"http://127.0.0.1:{up_port}", "--admin", listen]
        faces_wanted = 2
    else:
        raise ValueError(kind)
    started = time.monotonic()
    with open(stderr_path, "wb") as err:
        proc = _spawn(args, stdout=subprocess.PIPE, stderr=err, env=env, cwd=str(ROOT))
    try:
        faces = _read_listening(proc, faces_wanted, within)
    except Exception:
        reap(proc)
        for p in extra:
            reap(p)
        raise
    took = time.monotonic() - started
    if kind == "rl-gateway":
        g = Gateway(kind, proc, faces["proxy"], faces["admin"], stderr_path, extra)
        g.upstream_port = up_port
    else:
        port = faces["http"]
        g = Gateway(kind, proc, port, port, stderr_path, extra)
    return g, took


def warm(g: Gateway, within=10.0):
    """Waits until the gateway knows the store's mode (it decides by the store from then on)."""
    http(g.port, "GET", "/status")
    http(g.port, "POST", "/checkout", [("x-tenant", "warm"), ("x-user", "warm")])
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if g.metrics().get('rl_gateway_store_mode{mode="module"}') == 1:
            return True
        time.sleep(0.05)
    return False


def upstream_counts(g: Gateway) -> dict:
    a = http(g.upstream_port, "GET", "/__count")
    return json.loads(a.body) if a.status == 200 else {}


def start_delay_proxy(target_port: int, delay_ms: int, workdir: Path):
    """`rerun.py --delay-proxy` in front of `target_port`: (its process, the port it listens on)."""
    port = free_port()
    with open(workdir / "delay-proxy.stderr", "ab") as proxy_err:
        proc = _spawn([sys.executable, str(RERUN), "--delay-proxy", str(port), str(target_port),
                       str(delay_ms)], stdout=subprocess.DEVNULL, stderr=proxy_err)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        time.sleep(0.02)
    raise RuntimeError("delay proxy did not start")


# --------------------------------------------------------------------------------------------
# Socket options of another process's sockets (pidfd_getfd, Linux 5.6+)
# --------------------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
SYS_pidfd_getfd = 438  # x86_64 and aarch64


def tcp_sockets(pid: int):
    """(local port, peer port, TCP_NODELAY) of each connected TCP socket of `pid`."""
    out = []
    pidfd = os.pidfd_open(pid)
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    continue
            got = _libc.syscall(SYS_pidfd_getfd, pidfd, int(fd), 0)
            if got < 0:
                continue
            s = socket.socket(fileno=got)
            try:
                if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                try:
                    peer = s.getpeername()
                except OSError:
                    continue  # a listener
                out.append((s.getsockname()[1], peer[1],
                            bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))))
            finally:
                s.close()
    finally:
        os.close(pidfd)
    return out


# --------------------------------------------------------------------------------------------
# What a check gets, and what it returns
# --------------------------------------------------------------------------------------------

class Ctx:
    def __init__(self, kind, redis: Redis, policy: Path, workdir: Path):
        self.kind, self.redis, self.policy, self.workdir = kind, redis, policy, workdir
        self.gateways: list[Gateway] = []

    def ensure_redis(self):
        if self.redis.proc is None or self.redis.proc.poll() is not None:
            self.redis.start()
        with contextlib.suppress(Exception):
            self.redis.cont()
        self.redis.client().flushall()

    def gateway(self, redis_url=None, policy=None, variant=None) -> Gateway:
        g, _ = start_gateway(self.kind, redis_url or self.redis.url, policy or self.policy,
                             self.workdir, variant=variant)
        self.gateways.append(g)
        warm(g)
        return g

    def cleanup(self):
        for g in self.gateways:
            g.stop()
        self.gateways.clear()


def result(now: str, ok: bool | None, detail: str = "") -> dict:
    return {"now": now, "pass": ok, "detail": detail}


def info_field(r, key: str, field: str):
    """A field of RL.INFO (RESP2 pairs or a RESP3 map), None for a missing key."""
    info = r.execute_command("RL.INFO", key)
    if not info:
        return None
    if not isinstance(info, dict):
        info = dict(zip(info[::2], info[1::2]))
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in info.items()}.get(field)


def fill_reservations(r, key: str, n=10_000):
    """`n` reservations held on `key`: the most a key keeps."""
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.execute_command("RL.ADMIT", key, 1_000_000_000, "1h", "RESERVE", f"held-{i}")
    pipe.execute()
