"""The extras. `gateway` and `test` need the engine's extension (distribution `redis-rl-engine`,
built from `engine/` by maturin). Beside that source, in the repository, they name the directory
(`redis-rl-engine @ file:///.../engine`), so `pip install './clients/python[gateway]'` builds the
engine with no index holding it. A release's sdist and wheel are built from a copy without
`engine/` (scripts/package) and pin the released engine of this version instead, which is what
an index must hold."""

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
VERSION = re.search(r'^version = "([^"]+)"$', (HERE / "pyproject.toml").read_text(), re.M)[1]
ENGINE_SOURCE = HERE / "engine"
if (ENGINE_SOURCE / "pyproject.toml").is_file():
    ENGINE = f"redis-rl-engine @ {ENGINE_SOURCE.as_uri()}"
else:
    ENGINE = f"redis-rl-engine=={VERSION}"

setup(
    extras_require={
        "limits": ["limits>=3.7"],
        "gateway": ["starlette>=0.27", ENGINE],
        "prometheus": ["prometheus_client>=0.17"],
        "test": [
            ENGINE,
            "pytest>=7",
            "pytest-asyncio>=0.23",
            "limits>=3.7",
            "flask-limiter>=3.5",
            "slowapi>=0.1.9",
            "fastapi>=0.100",
            "httpx>=0.24",
            "uvicorn>=0.23",
            "prometheus_client>=0.17",
            "valkey>=6",
        ],
    }
)
