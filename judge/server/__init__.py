"""The loop-judge HTTP sidecar: one tracker per session, behind a small JSON API.

Install with ``pip install 'loop-judge[serve]'`` and run ``loop-judge serve``. Nothing here
is imported by ``import judge``: FastAPI, uvicorn and redis load only when a server or a
store is built, so agents that embed the library never pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.server.app import create_app
    from judge.server.settings import ServerSettings
    from judge.server.store import MemoryStore, RedisStore, SessionStore

__all__ = ["MemoryStore", "RedisStore", "ServerSettings", "SessionStore", "create_app"]

_HOMES = {
    "create_app": "judge.server.app",
    "ServerSettings": "judge.server.settings",
    "MemoryStore": "judge.server.store",
    "RedisStore": "judge.server.store",
    "SessionStore": "judge.server.store",
}


def __getattr__(name: str) -> Any:
    # Lazy re-exports (anyio's pattern): `from judge.server import create_app` works without
    # importing FastAPI for someone who only wants the settings.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'judge.server' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
