"""Read prompt and schema files shipped in ``prompts/``.

In a wheel they live at ``judge/prompts`` (hatch force-include); in a source checkout they
are the repository's top-level ``prompts/`` folder. Files are read once and cached.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

_SOURCE_TREE_PROMPTS = Path(__file__).resolve().parent.parent / "prompts"


def _prompt_dir() -> Path:
    packaged = resources.files("judge") / "prompts"
    if packaged.is_dir():
        return Path(str(packaged))
    return _SOURCE_TREE_PROMPTS


@cache
def read_text(name: str) -> str:
    """The text of ``prompts/<name>``; raises FileNotFoundError naming the path tried."""
    path = _prompt_dir() / name
    return path.read_text(encoding="utf-8")


@cache
def read_json(name: str) -> Any:
    return json.loads(read_text(name))
