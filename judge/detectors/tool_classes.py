"""Which tools may repeat how often: read-only exploration, modifying, or other.

Agents name their tools differently (``read_file``, ``view``, ``str_replace_editor``,
``execute_bash``), so membership is by name patterns matched against the whole name and
against its parts (split on ``_ - . : /`` and camelCase), case-insensitively.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from enum import Enum
from fnmatch import fnmatchcase
from functools import lru_cache

# The default patterns (read-only tools, tools with side effects) are settings' defaults,
# declared with the other settings.
from judge.config import DEFAULT_EXPLORE_PATTERNS, DEFAULT_MODIFY_PATTERNS


class ToolClass(str, Enum):
    EXPLORE = "explore"
    MODIFY = "modify"
    OTHER = "other"


# The limit of a tool that may repeat successfully any number of times (``tool_limits``
# value 0). A number, not None, so that callers keep comparing ``count <= limit``.
UNLIMITED = sys.maxsize

_SPLIT = re.compile(r"[_\-.:/\s]+|(?<=[a-z])(?=[A-Z])")


def _parts(name: str) -> list[str]:
    parts = [p.lower() for p in _SPLIT.split(name) if p]
    return [name.lower(), *parts]


@lru_cache(maxsize=4096)
def _classify(name: str, explore: tuple[str, ...], modify: tuple[str, ...]) -> ToolClass:
    parts = _parts(name)
    # Whole-name matches decide first; then parts, side effects winning over reading
    # ("read_and_write" modifies).
    whole = parts[0]
    if any(fnmatchcase(whole, p) for p in modify):
        return ToolClass.MODIFY
    if any(fnmatchcase(whole, p) for p in explore):
        return ToolClass.EXPLORE
    if any(fnmatchcase(part, p) for part in parts[1:] for p in modify):
        return ToolClass.MODIFY
    if any(fnmatchcase(part, p) for part in parts[1:] for p in explore):
        return ToolClass.EXPLORE
    return ToolClass.OTHER


def classify_tool(
    name: str,
    explore: Sequence[str] = DEFAULT_EXPLORE_PATTERNS,
    modify: Sequence[str] = DEFAULT_MODIFY_PATTERNS,
) -> ToolClass:
    if explore is DEFAULT_EXPLORE_PATTERNS and modify is DEFAULT_MODIFY_PATTERNS:
        # The detectors ask with the defaults on every step: lowering ~40 patterns and
        # hashing them for each ask would cost far more than the answer.
        return _classify_default(name)
    return _classify(name, tuple(p.lower() for p in explore), tuple(p.lower() for p in modify))


# The default patterns as `_classify` takes them, lowered once.
_DEFAULTS_LOWERED = (
    tuple(p.lower() for p in DEFAULT_EXPLORE_PATTERNS),
    tuple(p.lower() for p in DEFAULT_MODIFY_PATTERNS),
)


@lru_cache(maxsize=4096)
def _classify_default(name: str) -> ToolClass:
    """`_classify` with the default patterns, cached by the name alone."""
    return _classify(name, *_DEFAULTS_LOWERED)


def repeat_limit(
    name: str,
    *,
    limits: Mapping[ToolClass, int],
    overrides: Mapping[str, int],
    explore: Sequence[str],
    modify: Sequence[str],
) -> int:
    """How many identical successful calls in a row are allowed before the next is a loop.

    An override of 0 means unlimited (`UNLIMITED`); failures keep the failure limit.
    """
    if name in overrides:
        return overrides[name] or UNLIMITED
    return limits[classify_tool(name, explore, modify)]
