"""The redis-rl gateway engine (clients/engine): every decision a gateway makes, without I/O.

Times are Unix microseconds from a monotonic source; calls are the module's commands as lists
of bytes. `redis_rl.gateway` is the driver that does the I/O."""

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

PROBLEM_CONTENT_TYPE: str

class InvalidPolicy(Exception):
    """A policy document the engine refused; the message names the bad field's JSON path."""

class StalePolicy(InvalidPolicy):
    """A valid policy whose version is not higher than the one in force (a reload refused)."""

class Call:
    """One store call: `args`, the module's command (name first); `key`, the key that routes
    it in a cluster."""

    @property
    def args(self) -> List[bytes]: ...
    @property
    def key(self) -> bytes: ...
    def script_keys(self) -> List[bytes]:
        """The keys the command touches (none for WAIT): what a script-mode EVALSHA declares."""

class Answer:
    """A call's end that is not a reply to read: made by `timeout`, `failed`, `overloaded` and
    `error`."""

def load_policy(policy: str) -> int:
    """Validates a policy document as a gateway loads it: its version, or `InvalidPolicy`."""

def render_headers(rules: List[Dict[str, Any]], legacy: bool = False) -> List[Tuple[str, str]]:
    """`RateLimit-Policy` and `RateLimit` (and `X-RateLimit-*` when `legacy`), rendered as the
    gateway renders them, for what the typed client decided: one dict per rule, in order, with
    `name`, `limit`, `period_ms`, `capacity`, `remaining`, `reset_after_ms`, `retry_after_ms`
    (given when it refused) and `semaphore` (true: `capacity` is its slots, no period)."""

def timeout() -> Answer:
    """No reply by the step's deadline."""

def failed(message: str) -> Answer:
    """No reply at all: the store could not answer (I/O, LOADING, BUSY, ...)."""

def overloaded() -> Answer:
    """The driver could not wait for the reply, its own process being saturated (an event loop
    running late): the request is shed with 503, and the breaker does not count it."""

def error(text: str) -> Answer:
    """A server error reply that refuses the call, its code first (`ERR ...`)."""

Reply = Union[None, int, bytes, str, float, list, tuple, dict, Answer]

class Calls:
    """Send `calls` in order on one connection before `deadline`, then resume with one answer
    each (calls left unanswered count as timeouts)."""

    @property
    def calls(self) -> List[Call]: ...
    @property
    def deadline(self) -> int: ...

class Wait:
    """Another request is refilling a chunk this one needs: resume with no answers at `until`."""

    @property
    def until(self) -> int: ...

class Verdict:
    """The engine's answer for one request."""

    @property
    def status(self) -> Optional[int]:
        """None when the request goes on; otherwise 429, 503, 500 or 431."""
    @property
    def kind(self) -> str:
        """`admit`, `refuse`, `unavailable`, `error`, `reject` or `shed`."""
    @property
    def outcome(self) -> Optional[str]: ...
    @property
    def route(self) -> Optional[str]: ...
    @property
    def policy_version(self) -> int: ...
    @property
    def headers(self) -> List[Tuple[str, str]]: ...
    @property
    def problem(self) -> Optional[bytes]: ...
    @property
    def background(self) -> List[Call]: ...
    @property
    def log(self) -> List[Dict[str, Union[str, int]]]:
        """Decision records: `level` (`info`/`warn`), `message`, `reason` (`refuse:<rule>`,
        `unavailable:deny`, `unmatched`, ...), `route`, `rule`, `plan`, `policy_version`,
        `outcome`, `decision` (the request's id)."""
    @property
    def checks(self) -> List[CheckOutcome]:
        """Each keyed check's outcome, in the order `Engine.check` was given them (empty for
        a request `begin` decided)."""

class CheckOutcome:
    """What one keyed check decided (for a shadow rule: what it would have decided)."""

    @property
    def over(self) -> bool: ...
    @property
    def remaining(self) -> Optional[int]:
        """Units the key holds after this decision, when the store or a limiter told."""
    @property
    def reset_after_ms(self) -> Optional[int]: ...
    @property
    def retry_after_ms(self) -> Optional[int]:
        """When over: when the same request would pass."""
    @property
    def source(self) -> str:
        """`store`, `chunk` (a chunk leased earlier), `cache` (the negative cache), `blocked`
        (no request can pass the check: refused without a call), `fallback` (the posture's
        local limiter) or `open` (not asked)."""

Step = Union[Calls, Wait, Verdict]

# A keyed check: (rule, key) or (rule, key, cost), or a dict with "rule", "key", "cost" and
# "blocked" (True: no request passes it, as a limit of 0; refused without a store call, the
# other checks then only asked).
Check = Union[Tuple[str, Union[str, bytes]], Tuple[str, Union[str, bytes], int],
              Dict[str, Union[str, bytes, int, bool]]]

class Holdings:
    """What an admitted request holds; each method gives the calls to send."""

    def tick(self, started: int, now: int) -> List[Call]: ...
    # `now`: when the response was answered (Unix µs; default the system clock), for the
    # request's capacity slot, given back by the first of these.
    def settle(self, actual_cost: Optional[bytes] = None,
               status: Optional[int] = None, now: Optional[int] = None) -> List[Call]: ...
    def release(self) -> List[Call]: ...
    def finish(self, actual_cost: Optional[bytes] = None,
               status: Optional[int] = None, now: Optional[int] = None) -> List[Call]: ...
    @property
    def renew_every_us(self) -> Optional[int]: ...
    @property
    def empty(self) -> bool: ...

class Pending:
    """A request being decided."""

    def holdings(self) -> Holdings: ...
    def abandon(self) -> List[Call]: ...
    @property
    def durable(self) -> bool: ...

class Report:
    """One report for the home store (RL.ALLOCATE), handed back to `Engine.allocated`."""
    @property
    def rule(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def terms(self) -> Dict[str, int]:
        """limit, reserve, regions, lease_ms."""
    @property
    def demand(self) -> int: ...
    @property
    def held(self) -> int: ...
    @property
    def sent(self) -> int:
        """Unix µs: the answer's lease counts from here."""

class Engine:
    """One per process and store, shared by every request."""

    def __init__(self, policy: str, *, legacy_headers: bool = False, log_sample: float = 0.001,
                 log_per_second: int = 100, seed: Optional[int] = None,
                 metrics_hook: Optional[Callable[[str, Dict[str, str], float], Any]] = None,
                 table_bytes: Optional[int] = None, now: Optional[int] = None,
                 region: Optional[str] = None) -> None:
        """`metrics_hook(name, labels, value)`: every metrics event (`decision`, `store_call`,
        `grant_refill`, `breaker_state`, `policy_version`, `route_mode`, `store_mode`,
        `unknown_plan`, `unmatched`, `decision_records_dropped`, `policy_rejected`,
        `capacity_shed` with `route`, `capacity` and `class`). `log_sample`: the share of
        admissions recorded (every other decision is); `log_per_second`: the most decision
        records a second, the rest counted. `table_bytes` bounds each local table in bytes (32 MiB by default).
        `now` (Unix microseconds) is when the policy is loaded, by default the system clock's:
        an override may expire at most 90 days after it."""
    def begin(self, method: str, path: str, headers: List[Tuple[bytes, bytes]],
              peer: Optional[str], now: int, user: Optional[str] = None,
              tenant: Optional[str] = None,
              case_insensitive: bool = False) -> Tuple[Pending, Step]: ...
    def check(self, route: str, checks: Iterable[Check], now: int) -> Tuple[Pending, Step]:
        """Keyed checks under the route named `route` (its posture, its name in metrics and
        records; one the policy lacks is answered 500): each a rule of the policy in force by
        name (one it lacks raises ValueError, and nothing is decided), the key it counts on
        (str, or UTF-8 bytes), the units it takes (1 when not given; 0 only asks whether one
        unit would pass). The verdict's `checks` give each one's outcome."""
    def resume(self, pending: Pending, answers: List[Any], now: int) -> Step: ...
    def missed(self, window_us: int, late_us: int) -> Answer:
        """How a call that missed its deadline ended: `overloaded()` when the driver's loop ran
        late since the call was sent by `late_us`, against the `window_us` the call had (the
        gateway's own overload), else `timeout()`."""
    def saturated(self, stalled_us: int) -> bool:
        """Whether a new request is shed before it is decided (`shed`): the loop's tick now
        due is overdue by `stalled_us`, two store timeouts or more."""
    def shed(self, method: str, path: str, headers: List[Tuple[bytes, bytes]],
             peer: Optional[str], now: int, user: Optional[str] = None,
             tenant: Optional[str] = None, case_insensitive: bool = False) -> Verdict:
        """A request shed before it is decided (the process is saturated): 503, counted
        `shed`, no store call; a request no route matches passes when the default has no rules."""
    def policy_published(self, at: int) -> None:
        """When the snapshot in force was published (Unix µs), for a gateway following a
        store: the metrics then show `rl_gateway_policy_age_seconds`."""
    def policy_rejected(self) -> None:
        """A published snapshot the follower refused: counted in
        `rl_gateway_policy_rejected_total`."""
    def reload(self, policy: str, now: Optional[int] = None) -> int:
        """Puts the document in force and returns its version; raises `StalePolicy` for a
        version not higher than the one in force, `InvalidPolicy` for an invalid document."""
    def allocation_reports(self, now: int) -> List[Report]:
        """The global rules' reports due at `now` (Unix µs), for the home store."""
    def allocated(self, report: Report, answer: Optional[Any] = None) -> None:
        """The home's answer to `report` (an object with `allocation`, `lease_ms`,
        `region_demand`, `total_demand`), or None when it did not answer."""
    @property
    def policy_version(self) -> int: ...
    @property
    def store_timeout_us(self) -> int: ...
    @property
    def warnings(self) -> List[str]:
        """What the policy in force holds that is legal but worth a log line."""
    def render_metrics(self, now: Optional[int] = None) -> str:
        """Overrides are counted active or expired at `now` (Unix microseconds; by default
        the system clock's)."""
    def store_mode(self, mode: str) -> None: ...
    def tables(self) -> Dict[str, Tuple[int, int]]:
        """(entries, bytes) of "negative_cache", "chunks" and "fallback"."""

class MemoryStore:
    """Answers the engine's calls in memory with the module's own arithmetic."""

    def __init__(self) -> None: ...
    def call(self, args: List[bytes], now: int) -> Reply: ...
