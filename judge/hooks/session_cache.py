"""Hook sessions kept warm in a long-lived process, and when a warm one may be used.

Restoring a session from its state file (the parse, the tracker's restore) is most of
what an event costs in a fresh hook process. The daemon (`judge.hooks.daemon`) answers
many events in one process, so it keeps the sessions it answered in a `SessionCache`
and takes one back only while the state file is exactly what it wrote. Apart from the
session and its files because only the daemon's path has one: the in-process path
passes none, and answers exactly the same.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judge.hooks.session import HookSession

__all__ = ["SessionCache", "allowed_preflight_keeps"]


class SessionCache:
    """Sessions kept warm between events by a long-lived process (the hook daemon,
    `judge.hooks.daemon`), so an event skips the state file's parse and the tracker's
    restore: the per-event cost the in-process path pays.

    The state file stays the truth: it is still written after every event, and a session
    is taken from here only while the file holds exactly the bytes this process last
    wrote (read under the session's lock). Any other writer (the in-process path of a
    hook that could not reach the daemon, a session pruned, another daemon) makes the
    next event load the file, as the in-process path would. A session is taken out for
    one event and put back after it, so an event that fails leaves nothing half-updated
    here. ``size`` sessions at most, the least recently used dropped first.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[str, tuple[bytes, HookSession]] = OrderedDict()
        self._mutex = threading.Lock()

    def take(self, path: Path) -> HookSession | None:
        """The warm session saved at ``path``, if the file is still what it wrote."""
        with self._mutex:
            item = self._items.pop(str(path), None)
        if item is None:
            return None
        try:
            current = path.read_bytes()
        except OSError:
            return None
        return item[1] if current == item[0] else None

    def put(self, path: Path, written: bytes, session: HookSession) -> None:
        """Keep ``session``, whose state this process just wrote to ``path`` as ``written``."""
        with self._mutex:
            self._items[str(path)] = (written, session)
            self._items.move_to_end(str(path))
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def allowed_preflight_keeps(session: HookSession) -> bool:
    """Whether an allowed PreToolUse leaves the warm session as a restore from the file
    would be. The in-process path saves nothing after an allowed preflight, so whatever
    the preflight changed in memory is gone at the next event; the one thing it changes
    is the suite's record of refused calls awaiting their echo (`DetectorSuite.allowed`).
    With none waiting there is nothing to change; with some (or a suite this cannot
    read) the session is dropped and the next event restores it from the file."""
    suite = getattr(session.tracker, "_suite", None)
    echoes = getattr(suite, "_echoes", None)
    return isinstance(echoes, list) and not echoes
