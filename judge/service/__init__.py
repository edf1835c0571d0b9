"""The loop-judge HTTP sidecar: one tracker per session, behind a small JSON API.

Install with ``pip install 'loop-judge[serve]'`` and run ``loop-judge serve``. Nothing here
is imported by ``import judge``: FastAPI, uvicorn and redis load only when a server or a
store is built, so agents that embed the library never pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.service.app import create_app
    from judge.service.collector import tune_collector
    from judge.service.metrics import Metrics
    from judge.service.settings import ServerSettings
    from judge.service.store import (
        MemoryStore,
        RedisStore,
        ServedStore,
        SessionStore,
        StoreError,
        StoreFull,
        store_from_settings,
    )
    from judge.service.turns import run_store_turn
    from judge.service.worker import TurnOverBudget, TurnRunner, bridge_judge

# The service's public front: what the CLI and the integrations build on, so none of them
# reaches into its modules.
__all__ = [
    "MemoryStore",
    "Metrics",
    "RedisStore",
    "ServedStore",
    "ServerSettings",
    "SessionStore",
    "StoreError",
    "StoreFull",
    "TurnOverBudget",
    "TurnRunner",
    "bridge_judge",
    "create_app",
    "run_store_turn",
    "store_from_settings",
    "tune_collector",
]

_HOMES = {
    "create_app": "judge.service.app",
    "ServerSettings": "judge.service.settings",
    "MemoryStore": "judge.service.store",
    "RedisStore": "judge.service.store",
    "ServedStore": "judge.service.store",
    "SessionStore": "judge.service.store",
    "StoreError": "judge.service.store",
    "StoreFull": "judge.service.store",
    "TurnOverBudget": "judge.service.worker",
    "TurnRunner": "judge.service.worker",
    "bridge_judge": "judge.service.worker",
    "run_store_turn": "judge.service.turns",
    "store_from_settings": "judge.service.store",
    "Metrics": "judge.service.metrics",
    "tune_collector": "judge.service.collector",
}


def __getattr__(name: str) -> Any:
    # Lazy re-exports (anyio's pattern): `from judge.service import create_app` works without
    # importing FastAPI for someone who only wants the settings.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'judge.service' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
