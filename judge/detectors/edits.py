"""Which calls change the files an agent works on.

Coding agents debug in a loop that is progress: edit, re-run the same test, read the same
error, edit again. Re-running a test (or seeing an error come back) is a repeat only if
nothing *new* was changed in between; re-applying an edit already made, or restoring the
same backup again, is not new. Detectors compare steps of the same "edit epoch" for that
(`judge.detectors.steps.Step.edits`).

Two shapes are recognised, both by reading a bounded head of the arguments (linear, no
backtracking-prone patterns):

- an editor tool: a name with an editing verb (``str_replace``, ``create_file``,
  ``write``, ``edit``, ``apply_patch``...) whose arguments name a file (``path``,
  ``file_path``...). A file argument keeps business tools (``create_reservation``) out.
- a shell command that writes: ``sed -i``, ``perl -i``, ``tee``, ``patch``, ``git
  apply/checkout/restore/stash/reset``, ``mv``, ``cp``, ``rm``, ``touch``, ``mkdir``, an
  output redirection to a file, or Python's ``.write(``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from judge.history import ToolCall

# Editing verbs, matched against the tool name's parts (split on _ - . and camelCase).
_EDIT_VERBS = frozenset(
    {"write", "edit", "create", "replace", "insert", "apply", "patch", "delete", "remove",
     "rename", "move", "append", "overwrite", "undo", "save"}
)  # fmt: skip
# Argument names that point at a file.
_FILE_KEYS = ("path", "file_path", "file", "filepath", "filename", "target_file")
# Argument names that hold a shell command.
_COMMAND_KEYS = ("command", "cmd", "script", "code")
# Commands are read up to here: the write sits at the start of any real command line, and
# a heredoc body after it need not be scanned.
COMMAND_HEAD_CHARS = 4000
_NAME_SPLIT = re.compile(r"[_\-.:/\s]+|(?<=[a-z])(?=[A-Z])")
_SHELL_WRITE = re.compile(
    r"\bsed\b[^|;&\n]{0,40}?\s-[a-zA-Z]{0,4}i"
    r"|\bperl\s+-[a-zA-Z]{0,4}i"
    r"|\btee\b|\bpatch\b"
    r"|\bgit\s+(?:apply|checkout|restore|stash|reset|am|cherry-pick|revert)\b"
    r"|(?:^|[\s;&|(])(?:mv|cp|rm|touch|mkdir|truncate)\s"
    r"|(?<![<>&0-9=-])>{1,2}[ \t]{0,4}(?!/dev/null)(?=[A-Za-z_./~\"'$])"
    r"|\.write(?:_text|_bytes)?\("
)


def _command(parsed: Any, canonical: str) -> str | None:
    if isinstance(parsed, dict):
        for key in _COMMAND_KEYS:
            value = parsed.get(key)
            if isinstance(value, str):
                return value
        return None
    if parsed is None:  # raw shell text sent as the arguments
        return canonical
    return None


def edited_file(call: ToolCall) -> str | None:
    """The file an editor tool call changes, if it is one (the first shape above)."""
    parsed = call.parsed
    if not isinstance(parsed, dict):
        return None
    path = next((parsed[k] for k in _FILE_KEYS if isinstance(parsed.get(k), str)), None)
    if path is None:
        return None
    command = parsed.get("command")
    # str_replace_editor(command="view" | "str_replace", path=...): the sub-command
    # decides, not the tool's name.
    verb = command if isinstance(command, str) and len(command) < 40 else call.name
    return path if _is_edit_verb(verb) else None


@lru_cache(maxsize=4096)
def _is_edit_verb(name: str) -> bool:
    """Cached: an agent uses a handful of tool names and sub-commands, on every step."""
    return bool({p.lower() for p in _NAME_SPLIT.split(name) if p} & _EDIT_VERBS)


def modifies_files(call: ToolCall) -> bool:
    """Whether ``call`` changes files (see the module docstring)."""
    if edited_file(call) is not None:
        return True
    parsed = call.parsed
    command = _command(parsed, call.canonical)
    return command is not None and _SHELL_WRITE.search(command[:COMMAND_HEAD_CHARS]) is not None
