"""Where hook sessions are kept between invocations: one state file per session.

The hook processes of one session's parallel tool calls run at once, and each reads the
session's state, answers and writes it back; `HookSessionFiles` makes them take turns
(an exclusive lock on a side file, waited for at most `LOCK_WAIT_S`) and replaces the
file atomically, so a crash mid-write never leaves half a state. Apart from the session
(`judge.hooks.session`), which neither knows nor cares where it is kept: the Claude
Agent SDK's callbacks keep theirs in memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from judge.hooks import client as _client
from judge.hooks.messages import digest
from judge.hooks.session import SessionState

__all__ = [
    "DEFAULT_STATE_DIR_ENV",
    "LOCK_WAIT_S",
    "STATE_TTL_S",
    "HookSessionFiles",
    "default_state_dir",
]

# The variable that moves the state directory (the command's --state-dir wins over it).
DEFAULT_STATE_DIR_ENV = _client.STATE_DIR_ENV
# How long a hook waits for another hook process of the same session to release the
# lock: half of Claude Code's default 60 s per hook command. A parallel tool batch fires
# its hooks at once; each holds the lock for milliseconds, seconds only while a judge
# check runs, so a wait this long means something is stuck, and the hook gives up.
LOCK_WAIT_S = 30.0
LOCK_POLL_S = 0.005
# A session not touched for a week is forgotten (its file removed at the next Stop).
STATE_TTL_S = 7 * 24 * 3600
# Session ids become file names: anything else is hashed.
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def default_state_dir() -> Path:
    """``$LOOP_JUDGE_HOOK_STATE_DIR``, else the user's cache directory (``$XDG_CACHE_HOME``
    or ``~/.cache``; ``%LOCALAPPDATA%`` on Windows) under ``loop-judge/claude-code``
    (`judge.hooks.client.default_state_dir`, which the daemon's client resolves alone)."""
    return Path(_client.default_state_dir())


class HookSessionFiles:
    """Session states in a directory: one JSON file per session, written atomically
    (a temporary file, then ``os.replace``) under an exclusive lock on a side file, so
    the hook processes of one session's parallel tool calls take turns."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def _paths(self, key: str) -> tuple[Path, Path]:
        name = key if _SAFE_ID.fullmatch(key) else digest(key)
        return self.directory / f"{name}.json", self.directory / f"{name}.lock"

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[Path]:
        """Hold the session's lock; yields the state file's path. `TimeoutError` when
        another process holds it for longer than `LOCK_WAIT_S`."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        state_path, lock_path = self._paths(key)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock(fd)
            try:
                yield state_path
            finally:
                _unlock(fd)
        finally:
            os.close(fd)

    @staticmethod
    def load(path: Path) -> SessionState | None:
        """The saved state, or None when there is none or it cannot be read (a crash mid
        write on a filesystem without atomic rename, another version): start afresh."""
        try:
            return SessionState.model_validate_json(path.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None

    @staticmethod
    def save(path: Path, state: SessionState) -> bytes:
        """Write ``state``; returns the bytes written (`SessionCache` compares them)."""
        data = state.model_dump_json(exclude_defaults=False).encode("utf-8")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return data

    def prune(self, *, now: float | None = None) -> int:
        """Remove the files of sessions untouched for `STATE_TTL_S`; returns how many."""
        cutoff = (time.time() if now is None else now) - STATE_TTL_S
        removed = 0
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.directory):
                if not entry.name.endswith((".json", ".lock")):
                    continue
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed


def _try_lock(fd: int) -> bool:
    """One non-blocking attempt at the exclusive lock (flock; a byte range on Windows)."""
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock(fd: int) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while not _try_lock(fd):
        if time.monotonic() > deadline:
            raise TimeoutError(f"session state still locked by another hook after {LOCK_WAIT_S} s")
        time.sleep(LOCK_POLL_S)


def _unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)
