"""The built wheel ships rl.lua (a symlink to clients/scripts/rl.lua in the source tree, which
setuptools follows), the pure parts work without the native engine, and valkey-py's clients
are drop-ins."""

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import redis_rl
from redis_rl.client import load_script

HERE = Path(__file__).resolve().parents[1]


def test_the_wheel_contains_the_script(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(HERE)], check=True)
    wheel = next(tmp_path.glob("redis_rl-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read("redis_rl/rl.lua")
    source = (HERE.parent / "scripts" / "rl.lua").read_bytes()
    assert shipped == source
    assert hashlib.sha1(load_script()).hexdigest() == hashlib.sha1(source).hexdigest()
    # installed by pip (into a directory of its own), the package finds its script
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True)
    out = subprocess.run(
        [sys.executable, "-c", "import redis_rl.client as c, hashlib; "
         "print(c.__file__); print(hashlib.sha1(c.load_script()).hexdigest())"],
        env={"PYTHONPATH": str(target)}, cwd=str(tmp_path),
        capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith(str(target))
    assert out[1] == hashlib.sha1(source).hexdigest()


def test_the_pure_parts_need_no_native_engine(server):
    # A process where the extension cannot be imported, as after `pip install redis-rl`.
    code = (
        "import sys; sys.modules['redis_rl_engine'] = None\n"
        "import redis, redis_rl, redis_rl.limits, limits\n"
        f"rl = redis_rl.Client(redis.Redis(port={server.port}))\n"
        "assert rl.admit('pure:k', 2, 3600).allowed\n"
        f"storage = limits.storage.storage_from_string('rl://127.0.0.1:{server.port}')\n"
        "assert limits.strategies.MovingWindowRateLimiter(storage).hit(limits.parse('2/hour'))\n"
        "try:\n"
        "    import redis_rl.gateway\n"
        "except ImportError as exc:\n"
        "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "needs the native engine" in out


def test_the_stubs_cover_the_extension():
    import ast
    import inspect

    engine = pytest.importorskip("redis_rl_engine")
    stubs = ast.parse((HERE / "engine" / "redis_rl_engine.pyi").read_text())
    declared = {n.name for n in stubs.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    declared |= {t.id for n in stubs.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])}
    # maturin's package holds the extension as a submodule of the same name.
    exported = {name for name in dir(engine)
                if not name.startswith("_") and not inspect.ismodule(getattr(engine, name))}
    assert exported <= declared, exported - declared
    for cls in (n for n in stubs.body if isinstance(n, ast.ClassDef)):
        methods = {m.name for m in cls.body if isinstance(m, ast.FunctionDef)}
        public = {m for m in vars(getattr(engine, cls.name)) if not m.startswith("_")}
        assert public <= methods, (cls.name, public - methods)


def test_valkey_py_clients_are_drop_ins(server):
    valkey = pytest.importorskip("valkey")
    client = redis_rl.Client(valkey.Valkey(port=server.port, protocol=3))
    first = client.admit("valkey-py:k", 2, 3600)
    assert first.allowed and first.remaining == 1
    with pytest.raises(redis_rl.Refused) as info:
        client.admit("valkey-py:k", 2, 3600, algo="window")
    assert str(info.value).startswith("ERR key holds an ALGO gcra limiter")


async def test_valkey_py_asyncio(server):
    valkey = pytest.importorskip("valkey.asyncio")
    conn = valkey.Valkey(port=server.port)
    try:
        client = redis_rl.AsyncClient(conn)
        d = await client.multi([redis_rl.Rule("a", "{vk}:a", 1, 3600),
                                redis_rl.Rule("b", "{vk}:b", 1, 3600)])
        assert d.allowed and [r.remaining for r in d.rules] == [0, 0]
    finally:
        await conn.aclose()


def test_valkey_py_cluster_is_a_drop_in(cluster):
    valkey_cluster = pytest.importorskip("valkey.cluster")
    rc = valkey_cluster.ValkeyCluster(host="127.0.0.1", port=cluster.port)
    try:
        client = redis_rl.Client(rc)
        for i in range(6):
            d = client.multi([redis_rl.Rule("a", f"{{v{i}}}:a", 2, 3600),
                              redis_rl.Rule("b", f"{{v{i}}}:b", 2, 3600)])
            assert d.allowed and [r.remaining for r in d.rules] == [1, 1]
    finally:
        rc.close()
