"""The four kinds of error of clients/SPEC.md section 1; only `Unavailable` may lead to a posture."""

from __future__ import annotations


class RLError(Exception):
    """Base of every error this package raises."""

    kind = "error"


class Unavailable(RLError):
    """The store did not answer: I/O error, timeout, dropped connection, or a server error other
    than the module's refusals (LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, READONLY, OOM, ...)."""

    kind = "unavailable"


class Refused(RLError):
    """The module refused the call (an ERR, WRONGTYPE or CROSSSLOT reply), text code first."""

    kind = "refused"


class UnexpectedReply(RLError):
    """A reply of another shape than commands.md documents."""

    kind = "unexpected_reply"


class InvalidRequest(RLError):
    """Refused by the client before any round trip."""

    kind = "invalid_request"


# Codes the module itself answers with: a bug in the policy or the deployment, never a posture.
_REFUSAL_CODES = {"ERR", "WRONGTYPE", "CROSSSLOT"}


def classify(exc: BaseException) -> RLError:
    """Maps an exception of redis-py (or valkey-py) to one of the four kinds."""
    if isinstance(exc, RLError):
        return exc
    name = type(exc).__name__
    text = str(exc)
    if name in ("ConnectionError", "TimeoutError", "BusyLoadingError", "ReadOnlyError",
                "AuthenticationError", "NoPermissionError", "OutOfMemoryError", "TryAgainError",
                "ClusterDownError", "MasterDownError", "MovedError", "AskError",
                "ClusterError", "RedisClusterException", "SlotNotCoveredError",
                "AuthenticationWrongNumberOfArgsError", "MaxConnectionsError"):
        return Unavailable(text or name)
    if isinstance(exc, (OSError, TimeoutError)):
        return Unavailable(text or name)
    if name == "ClusterCrossSlotError":
        return Refused(f"CROSSSLOT {text}")
    if name == "DataError":
        return InvalidRequest(text)
    if name in ("ResponseError", "ModuleError"):
        # redis-py 6 and newer strip a code they know from the text and keep it as status_code;
        # a code they do not know is still the text's first word, with status_code None (6 and
        # 7) or that word (8). Older ones strip the codes they know, ERR included, and keep
        # nothing.
        first = text.split(" ", 1)[0]
        if not hasattr(exc, "status_code"):
            if first in ("WRONGTYPE", "CROSSSLOT"):
                return Refused(text)
            if first in ("BUSY", "NOSCRIPT", "EXECABORT", "MASTERDOWN", "LOADING"):
                return Unavailable(text)
            return Refused(f"ERR {text}")
        code = exc.status_code
        if code is None:
            return Refused(text) if first in _REFUSAL_CODES else Unavailable(text)
        full = text if first == code else f"{code} {text}"
        return Refused(full) if code in _REFUSAL_CODES else Unavailable(full)
    return Unavailable(f"{name}: {text}")
