"""Real servers for the tests, as the Rust harness (testkit) starts them: `RL_SERVER` (default
redis-server) with `RL_MODULE` (default the workspace's release build) on a free loopback port,
killed when the test module ends."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import redis

REPO = Path(__file__).resolve().parents[3]


def module_path() -> str:
    return os.environ.get("RL_MODULE", str(REPO / "target" / "release" / "librl.so"))


def server_binary() -> str:
    return os.environ.get("RL_SERVER", "redis-server")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port that is free, with its cluster bus port (+10000) free too."""
    for _ in range(1000):
        port = random.randrange(20000, 29000)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


class Server:
    def __init__(self, module: bool = True, extra: Optional[List[str]] = None,
                 port: Optional[int] = None):
        self.module = module
        self.extra = list(extra or [])
        self.dir = tempfile.mkdtemp(prefix="redis-rl-py-")
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--appendonly", "no",
                "--enable-debug-command", "yes", "--protected-mode", "no"]
        if self.module:
            args += ["--loadmodule", module_path()]
        args += self.extra
        self.log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.dir)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{args} exited {self.proc.returncode}: "
                                   f"{open(os.path.join(self.dir, 'server.log')).read()}")
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as r:
                    r.ping()
                return
            except redis.exceptions.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def conn(self, **kw) -> redis.Redis:
        kw.setdefault("decode_responses", True)
        return redis.Redis(port=self.port, **kw)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Sentinel:
    """A Sentinel (the server binary in --sentinel mode) watching `primary` as "rl", quorum 1."""

    NAME = "rl"

    def __init__(self, primary: Server):
        self.dir = tempfile.mkdtemp(prefix="redis-rl-py-sentinel-")
        self.port = free_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"sentinel monitor {self.NAME} 127.0.0.1 {primary.port} 1\n"
                    f"sentinel down-after-milliseconds {self.NAME} 1000\n")
        self.log = open(os.path.join(self.dir, "sentinel.log"), "ab")
        self.proc = subprocess.Popen([server_binary(), conf, "--sentinel"], stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + 20
        while True:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as r:
                    if r.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.NAME):
                        return
            except redis.exceptions.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the Sentinel did not start")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three primaries, slots split in thirds, met with CLUSTER MEET (no CLI needed)."""

    def __init__(self, module: bool = True):
        self.nodes = [Server(module=module, extra=["--cluster-enabled", "yes", "--cluster-config-file",
                                    "nodes.conf", "--cluster-node-timeout", "5000"])
                      for _ in range(3)]
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        conns = [n.conn() for n in self.nodes]
        bounds = [(0, 5460), (5461, 10922), (10923, 16383)]
        for conn, (lo, hi) in zip(conns, bounds):
            conn.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for n in self.nodes[1:]:
            conns[0].execute_command("CLUSTER", "MEET", "127.0.0.1", n.port)
        deadline = time.monotonic() + 30
        while True:
            states = [c.execute_command("CLUSTER", "INFO") for c in conns]
            ok = all("cluster_state:ok" in s and "cluster_known_nodes:3" in s for s in states)
            if ok:
                slots = [c.execute_command("CLUSTER", "SLOTS") for c in conns]
                if all(len(s) == 3 for s in slots):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not converge: {states}")
            time.sleep(0.1)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    def close(self) -> None:
        for n in self.nodes:
            n.close()
