"""A session store for the integrations' tests: one that is down, as a Redis outage leaves it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from judge import LoopTracker
from judge.service.store import StoreUnavailable


class DownStore:
    """A session store that is unreachable, as a Redis outage makes it; counts the asks."""

    kind = "down"

    def __init__(self) -> None:
        self.asked = 0

    @asynccontextmanager
    async def session(
        self, session_id: str, *, readonly: bool = False
    ) -> AsyncIterator[LoopTracker]:
        self.asked += 1
        raise StoreUnavailable("redis down", session_id=session_id)
        yield  # pragma: no cover

    async def delete(self, session_id: str) -> bool:
        return False

    async def live_sessions(self) -> int:
        return 0

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
