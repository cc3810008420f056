import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from servers import Cluster, Server  # noqa: E402


@pytest.fixture(scope="module")
def server():
    """The server the tests decide on: with the module, or without it (the client then runs in
    script mode) when RL_MODE=script."""
    s = Server(module=os.environ.get("RL_MODE") != "script")
    yield s
    s.close()


@pytest.fixture(scope="module")
def plain_server():
    """A server without the module: the client runs in script mode."""
    s = Server(module=False)
    yield s
    s.close()


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.close()
