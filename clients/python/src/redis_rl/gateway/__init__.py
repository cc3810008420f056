"""The gateway of clients/CONTRACT.md as ASGI middleware and a FastAPI dependency, driving the
engine of `clients/engine` (the native extension `redis_rl_engine`, distribution
`redis-rl-engine`, installed by `redis-rl[gateway]`), and the retry helper for outgoing calls."""

try:
    import redis_rl_engine  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "redis_rl.gateway needs the native engine: pip install 'redis-rl[gateway]' "
        "(from the repository, with Rust: pip install './clients/python[gateway]')"
    ) from exc

from redis_rl_engine import InvalidPolicy, StalePolicy

from .asgi import RateLimited, RateLimitMiddleware, dependency, install
from .driver import Gateway, Outcome
from .retry import AsyncRetryTransport, RetryTransport

__all__ = [
    "AsyncRetryTransport",
    "Gateway",
    "InvalidPolicy",
    "Outcome",
    "RateLimitMiddleware",
    "RateLimited",
    "RetryTransport",
    "StalePolicy",
    "dependency",
    "install",
]
