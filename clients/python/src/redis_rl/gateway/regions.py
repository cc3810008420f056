"""One limit across regions (clients/CONTRACT.md section 15): this gateway's reports to the home
store, as rl-gateway's reporter (`clients/gateway/src/regions.rs`) sends them.

Every TICK the engine is asked for the reports due; each goes to the home store as RL.ALLOCATE
with the key's demand and what this gateway enforces, within a fifth of its lease, and the
answer (or None when the home did not answer) goes back to the engine, which decides the key by
it on the regional store. Requests never wait for the home store."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
from typing import Any, Optional

import redis_rl_engine as engine

from ..client import AsyncClient
from ..errors import RLError

log = logging.getLogger("redis_rl.gateway")

# How often the engine is asked for the reports due: well under the shortest `every`.
TICK = 0.025


def default_reporter() -> str:
    """The host's name and this process's id: unique among a host's workers. A name stable
    across restarts (`reporter=`) lets the home replace a restarted gateway's record at once
    instead of waiting for the old one to age out."""
    return f"{socket.gethostname()}:{os.getpid()}"


def home_client(home: Any) -> AsyncClient:
    """The home store as the package's client: an AsyncClient as given, or a redis:// URL."""
    if isinstance(home, AsyncClient):
        return home
    if isinstance(home, str):
        import redis.asyncio
        return AsyncClient(redis.asyncio.Redis.from_url(home))
    raise TypeError(f"home must be an AsyncClient or a redis:// URL, not {type(home).__name__}")


class Reporter:
    """Reports for one engine until `stop`."""

    def __init__(self, eng: engine.Engine, now_us: Any, home: AsyncClient, region: str,
                 name: str):
        self.engine, self.now_us, self.home = eng, now_us, home
        self.region, self.name = region, name
        self._task: Optional[asyncio.Task] = None
        self._failing = False

    def start(self) -> None:
        """Starts the loop on the running event loop, unless it runs already."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            reports = self.engine.allocation_reports(self.now_us())
            if not reports:
                continue
            answers = await asyncio.gather(*(self._send(r) for r in reports))
            failed = None
            for report, (answer, error) in zip(reports, answers):
                self.engine.allocated(report, answer)
                if error is not None and failed is None:
                    failed = (report, error)
            # One line when the home stops answering and one when it answers again, not one
            # per report.
            if failed is not None and not self._failing:
                report, error = failed
                log.warning("the home store did not answer a report of rule %s (%s): each key "
                            "keeps its allocation until its lease ends", report.rule, error)
                self._failing = True
            elif failed is None and self._failing:
                log.info("the home store answers reports again")
                self._failing = False

    async def _send(self, report: engine.Report) -> tuple[Any, Optional[str]]:
        """One report's answer within a fifth of its lease (a tenth of a second at least): a
        late answer would still be safe, but one stuck on a dead connection must not hold the
        next report back."""
        terms = report.terms
        wait = max(terms["lease_ms"] // 5, 100) / 1000
        lease = datetime.timedelta(milliseconds=terms["lease_ms"])
        call = self.home.allocate(report.key, terms["limit"], self.region, self.name,
                                  report.demand, report.held, reserve=terms["reserve"],
                                  regions=terms["regions"], lease=lease)
        try:
            return await asyncio.wait_for(call, wait), None
        except asyncio.TimeoutError:
            return None, f"no answer within {wait:g} s"
        except (RLError, OSError) as exc:
            return None, str(exc)
