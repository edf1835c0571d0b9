"""Known-loop memory: a local SQLite file of loop fingerprints (opt-in, ``memory_path``).

A pattern that looped in an earlier session raises suspicion earlier in a new one. Only
fingerprints are stored, never raw content or argument values, so secrets in a call's
arguments or a tool's output are never persisted:

- ``fingerprint``: keyed BLAKE2b of the detector's pattern (which quotes the call);
- ``tool``: the tool's name (a name the agent's developer chose, not user data);
- ``args_hash``: keyed BLAKE2b of the canonical (normalized) arguments;
- ``error_hash``: keyed BLAKE2b of the error's masked signature (numbers, ids, times and
  paths masked, as the detectors compare errors);
- the detector, loop kind, outcome ("error" or "same_result"), counts and times.

The hash key is random per store and kept in it: it stops precomputed tables, not a
person who holds the file and guesses an argument; keep the file as private as logs.
Each operation opens and closes its own connection, so no handle outlives a call and
several trackers (or processes) can share one file.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from judge.detectors.base import Finding
from judge.detectors.outcome import classify, result_key

# 16 bytes: collisions between distinct loops are negligible at any realistic store size.
DIGEST_BYTES = 16
KEY_BYTES = 32  # BLAKE2b's maximum key length
# A locked file (another process writing) is waited for this long before giving up.
BUSY_TIMEOUT_S = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fingerprints (
    fingerprint TEXT PRIMARY KEY,
    detector TEXT NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT,
    args_hash TEXT,
    error_hash TEXT,
    outcome TEXT NOT NULL,
    loops INTEGER NOT NULL DEFAULT 0,
    recoveries INTEGER NOT NULL DEFAULT 0,
    failed_recoveries INTEGER NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL
);
"""


class MemoryEntry(BaseModel):
    """One remembered loop pattern, as stored."""

    # Built when the first entry is read, not at import: a fresh process answers sooner.
    model_config = ConfigDict(defer_build=True)

    fingerprint: str
    detector: str
    kind: str
    tool: str | None
    args_hash: str | None
    error_hash: str | None
    outcome: str
    loops: int
    recoveries: int
    failed_recoveries: int
    first_seen: float
    last_seen: float


def _tool_name(finding: Finding) -> str | None:
    tool = finding.details.get("tool")
    if isinstance(tool, str):
        return tool
    calls = finding.details.get("calls")
    if isinstance(calls, list | tuple) and calls:
        return str(calls[0]).split("(", 1)[0]  # "name(args)": keep the name only
    return None


class LoopMemory:
    """Fingerprints of loops seen before, in the SQLite file at ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE name = 'key'").fetchone()
            if row is None:
                key = os.urandom(KEY_BYTES).hex()
                db.execute("INSERT INTO meta (name, value) VALUES ('key', ?)", (key,))
            else:
                key = row[0]
            known = db.execute("SELECT fingerprint FROM fingerprints WHERE loops > 0")
            self._known = {r[0] for r in known}
        self._key = bytes.fromhex(key)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)) as db, db:
            yield db

    def _hash(self, text: str) -> str:
        return hashlib.blake2b(
            text.encode("utf-8", "surrogatepass"), key=self._key, digest_size=DIGEST_BYTES
        ).hexdigest()

    def fingerprint(self, pattern: str) -> str:
        """The stored identity of a detector's pattern."""
        return self._hash("pattern\0" + pattern)

    def knows(self, pattern: str) -> bool:
        """Whether this pattern looped before (in any session that used this file)."""
        return self.fingerprint(pattern) in self._known

    def record_loop(self, finding: Finding) -> None:
        """Remember that ``finding``'s pattern looped; stores hashes and counts only."""
        details = finding.details
        arguments = details.get("arguments")
        result = details.get("result")
        failing = bool(details.get("failing"))
        args_hash = self._hash("args\0" + arguments) if isinstance(arguments, str) else None
        error_hash = None
        if failing and isinstance(result, str):
            error_hash = self._hash("error\0" + result_key(result, classify(result)))
        fingerprint = self.fingerprint(finding.pattern)
        now = time.time()
        with self._connect() as db:
            db.execute(
                """INSERT INTO fingerprints (fingerprint, detector, kind, tool, args_hash,
                       error_hash, outcome, loops, first_seen, last_seen)
                   VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)
                   ON CONFLICT (fingerprint) DO UPDATE SET
                       loops = loops + 1, outcome = excluded.outcome,
                       last_seen = excluded.last_seen""",
                (
                    fingerprint,
                    finding.detector,
                    finding.kind.value,
                    _tool_name(finding),
                    args_hash,
                    error_hash,
                    "error" if failing else "same_result",
                    now,
                    now,
                ),
            )
        self._known.add(fingerprint)

    def record_recovery(self, pattern: str, *, succeeded: bool) -> None:
        """Count an escape from (or a relapse into) a remembered loop."""
        column = "recoveries" if succeeded else "failed_recoveries"
        with self._connect() as db:
            db.execute(
                f"UPDATE fingerprints SET {column} = {column} + 1, last_seen = ? "
                "WHERE fingerprint = ?",
                (time.time(), self.fingerprint(pattern)),
            )

    def entries(self) -> list[MemoryEntry]:
        """Everything stored, most recently seen first (for inspection and tests)."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM fingerprints ORDER BY last_seen DESC").fetchall()
        return [MemoryEntry(**dict(row)) for row in rows]
