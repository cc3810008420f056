"""redis-rl: typed commands of the redis-rl module over redis-py, sync and asyncio."""

from .client import MODULE, SCRIPT, AsyncClient, Client
from .commands import (Acquire, Admit, Allocate, Grant, Info, Multi, Raw, Release, Renew, Request, Rule, Settle,
                       Throttle, duration_arg, key_slot)
from .errors import InvalidRequest, Refused, RLError, Unavailable, UnexpectedReply
from .replies import (Acquisition, Admission, Allotment, GrantDecision, KeyInfo, MultiDecision, RuleOutcome,
                      Settlement, ThrottleDecision)

__all__ = [
    "MODULE", "SCRIPT", "AsyncClient", "Client",
    "Acquire", "Admit", "Allocate", "Grant", "Info", "Multi", "Raw", "Release", "Renew", "Request", "Rule", "Settle",
    "Throttle", "duration_arg", "key_slot",
    "InvalidRequest", "Refused", "RLError", "Unavailable", "UnexpectedReply",
    "Acquisition", "Admission", "Allotment", "GrantDecision", "KeyInfo", "MultiDecision", "RuleOutcome",
    "Settlement", "ThrottleDecision",
]
