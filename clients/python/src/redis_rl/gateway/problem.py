"""Problem bodies (SPEC gateway section 6), application/problem+json."""

from __future__ import annotations

import json
from typing import Sequence

CONTENT_TYPE = "application/problem+json"


def too_many_requests(rules: Sequence[str], retry_after_s: int) -> bytes:
    return json.dumps({
        "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "title": "Too Many Requests",
        "status": 429,
        "detail": f"Rate limit exceeded; retry after {retry_after_s} s.",
        "violated-policies": list(rules),
    }).encode()


def unavailable(retry_after_s: int) -> bytes:
    return json.dumps({
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": 503,
        "detail": f"The rate limiter is unavailable; retry after {retry_after_s} s.",
    }).encode()


def misconfigured() -> bytes:
    """The module refused the route's calls (a policy or deployment bug, such as the module
    not loaded): neither a 429 nor an admit."""
    return json.dumps({
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": "The rate limiter refused this route's rules; the gateway's log says why.",
    }).encode()
