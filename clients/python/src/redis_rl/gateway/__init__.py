"""The gateway of clients/CONTRACT.md: policy, negative cache, posture, metrics, retry helper,
problem bodies, and the ASGI middleware and FastAPI dependency around them."""

from .asgi import RateLimited, RateLimitMiddleware, dependency, install
from .core import Gateway, Outcome
from .metrics import Metrics
from .policy import Policy, PolicyError, PolicySource, parse_policy
from .retry import AsyncRetryTransport, RetryTransport

__all__ = ["RateLimited", "RateLimitMiddleware", "dependency", "install", "Gateway", "Outcome",
           "Metrics", "Policy", "PolicyError", "PolicySource", "parse_policy",
           "AsyncRetryTransport", "RetryTransport"]
