"""The hook process an agent starts for every event: ask the warm daemon, else answer here.

Claude Code waits for the hook on every PreToolUse and PostToolUse. Answering in process
costs the imports of the tracker and its pydantic models and a state restore (0.4-0.6 s a
call on a quiet 2-core machine against 0.01 s for ``python -c pass``); the daemon
(`judge.hooks.daemon`) keeps all of that warm, so this module imports only the standard
library modules the interpreter has loaded anyway (``os``, ``sys``) and ``_socket``.

The request is agent-neutral: the agent's name, the state directory, the ``LOOP_JUDGE_*``
settings and the raw payload bytes; the daemon dispatches on the name. The daemon's answer
is the exit code and the exact stdout and stderr text the in-process path would print.

Whatever goes wrong with the daemon ends in the in-process path (`judge.cli.hook.main`, the
command as it was before the daemon), within the hook's budget:

- none listening (never started, crashed, idle-exited): start one, detached, and answer
  in process this time;
- stale (another package path or version: its reply says so, and it exits): the same;
- busy or wedged (no word within `ACCEPT_TIMEOUT_S`): answer in process, start nothing;
- declined (a configuration it does not serve): answer in process.

Once the daemon has said it takes the event it holds the session's lock, so the client
waits for its answer (up to `ANSWER_TIMEOUT_S`) rather than answer the event twice.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = [
    "AGENTS",
    "DAEMON_ENV",
    "SOCKET_DIR_ENV",
    "ask_daemon",
    "config_env",
    "default_state_dir",
    "main",
    "socket_dir",
    "socket_path",
    "stamp",
]

# The agents a daemon answers for (judge.hooks.daemon has one handler each).
AGENTS = ("claude-code", "gemini", "codex", "cursor")
# The wire format's name and version: a client and a daemon of different formats never
# talk past each other (the daemon answers "stale" to anything else).
PROTOCOL = b"loop-judge-hook/1"

# "off" answers every event in process: no socket, no daemon.
DAEMON_ENV = "LOOP_JUDGE_HOOK_DAEMON"
# Where the per-user sockets live (default: $XDG_RUNTIME_DIR/loop-judge, else
# /tmp/loop-judge-<uid>). Tests point it at a short temporary directory.
SOCKET_DIR_ENV = "LOOP_JUDGE_HOOK_SOCKET_DIR"
# Seconds a daemon waits for its next event before it exits (judge.hooks.daemon).
IDLE_ENV = "LOOP_JUDGE_HOOK_IDLE_S"
# Set (to anything but ""), the hook says on stderr which path answered and why: one line
# after its answer, for "why is my hook slow?" (Claude Code shows a hook's stderr only in
# its verbose mode when the hook exits 0).
TRACE_ENV = "LOOP_JUDGE_HOOK_TRACE"
# The state directory's variable (also judge.hooks.session_files.DEFAULT_STATE_DIR_ENV).
STATE_DIR_ENV = "LOOP_JUDGE_HOOK_STATE_DIR"
# Settings of the hook machinery itself, not of the tracker: left out of the configuration
# a daemon is chosen by.
CONTROL_VARS = frozenset({DAEMON_ENV, SOCKET_DIR_ENV, IDLE_ENV, STATE_DIR_ENV, TRACE_ENV})
CONFIG_PREFIX = "LOOP_JUDGE_"

# How long a live daemon may take to accept the connection and say whether it takes the
# event. It answers from a ready thread in well under a millisecond, or a few at load 7;
# a daemon that says nothing within this is stopped, swapped out or hung, and the event is
# answered in process instead (about half a second), inside Claude Code's 60 s per hook.
ACCEPT_TIMEOUT_S = 1.0
# How long to wait for the answer to an event the daemon took: its lock wait (the same
# 30 s as the in-process path's, judge.hooks.session_files.LOCK_WAIT_S) plus a judge
# check's margin. Answering in process after it took the event could feed it twice.
ANSWER_TIMEOUT_S = 45.0
# A daemon that fails to come up is not started again by every hook: at most once in
# this many seconds (a marker file's age says when the last try was). A daemon that is
# up, or still importing, holds its lock file, and then none is started at all.
SPAWN_BACKOFF_S = 2.0
# Hook payloads above this go to the in-process path, which refuses them by the same
# limit (judge.hooks.invocation.MAX_PAYLOAD_BYTES).
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
# The hook's only exit code (judge.hooks.invocation.EXIT_HOOK): 0, "go on".
EXIT_HOOK = 0
# A Unix socket's path is at most this many bytes with its final NUL (sun_path, Linux).
MAX_SOCKET_PATH = 108
# Reply codes of the daemon's first byte.
ACCEPTED, STALE, DECLINED = b"A", b"S", b"D"

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- where things are ---------------------------------------------------------------------


def default_state_dir() -> str:
    """``$LOOP_JUDGE_HOOK_STATE_DIR``, else the user's cache directory (``$XDG_CACHE_HOME``
    or ``~/.cache``; ``%LOCALAPPDATA%`` on Windows) under ``loop-judge/claude-code``."""
    chosen = os.environ.get(STATE_DIR_ENV)
    if chosen:
        return os.path.expanduser(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or (
        os.environ.get("LOCALAPPDATA") if os.name == "nt" else None
    )
    root = base if base else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "loop-judge", "claude-code")


def socket_dir() -> str | None:
    """The user's private socket directory, created 0700; None when it cannot be made or
    is not the user's own and private (another user could then answer our hooks)."""
    chosen = os.environ.get(SOCKET_DIR_ENV)
    if chosen:
        path = chosen
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = os.path.join(os.environ["XDG_RUNTIME_DIR"], "loop-judge")
    else:
        path = os.path.join("/tmp", f"loop-judge-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    # A directory someone else made (or made readable) in /tmp is not ours to trust.
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not os.path.isdir(path):
        return None
    return path


def config_env() -> list[tuple[str, str]]:
    """The ``LOOP_JUDGE_*`` settings the tracker's configuration is read from, sorted."""
    return sorted(
        (k, v)
        for k, v in os.environ.items()
        if k.startswith(CONFIG_PREFIX) and k not in CONTROL_VARS
    )


def _fnv64(data: bytes) -> int:
    # FNV-1a: a stable name for a configuration without importing hashlib or zlib.
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def socket_path(
    directory: str, env: Sequence[tuple[str, str]] | None = None, *, package: str = PACKAGE_DIR
) -> str:
    """The socket of the daemon for this package and configuration: one daemon per user
    for each installation and set of ``LOOP_JUDGE_*`` settings, since a daemon answers
    with the configuration it started with (two virtual environments, or two agents set
    up differently, each get theirs instead of replacing each other's)."""
    pairs = config_env() if env is None else env
    key = "\0".join([package, *(f"{k}={v}" for k, v in pairs)]).encode("utf-8", "surrogateescape")
    return os.path.join(directory, f"hook-{_fnv64(key):016x}.sock")


def stamp() -> bytes:
    """What a daemon must share with the client to answer for it: the wire format, the
    package's path, and the time this file was written (a reinstall or an upgrade writes
    it anew). A daemon also notices its own modules changing (judge.hooks.daemon)."""
    try:
        written = os.stat(os.path.abspath(__file__)).st_mtime_ns
    except OSError:
        written = 0
    return b"|".join([PROTOCOL, PACKAGE_DIR.encode("utf-8", "surrogateescape"), b"%d" % written])


# -- the wire format ----------------------------------------------------------------------


def pack(fields: Sequence[bytes]) -> bytes:
    """Fields as a count, then each as its length and bytes (4-byte big-endian lengths)."""
    out = [len(fields).to_bytes(4, "big")]
    for item in fields:
        out.append(len(item).to_bytes(4, "big"))
        out.append(item)
    return b"".join(out)


class _Reader:
    """Reads exact byte counts from a socket, each read under the socket's own timeout."""

    def __init__(self, sock: object) -> None:
        self._sock = sock
        self._buffer = b""

    def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self._sock.recv(max(65536, size - len(self._buffer)))  # type: ignore[attr-defined]
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def fields(self, limit: int = 16) -> list[bytes]:
        count = int.from_bytes(self.exactly(4), "big")
        if count > limit:
            raise ValueError(f"{count} fields")
        return [self.exactly(int.from_bytes(self.exactly(4), "big")) for _ in range(count)]


def encode_env(env: Sequence[tuple[str, str]]) -> bytes:
    return "\0".join(f"{k}={v}" for k, v in env).encode("utf-8", "surrogateescape")


# -- asking the daemon --------------------------------------------------------------------


class Unanswered(Exception):
    """The daemon did not take the event; ``start`` says whether to start one, and
    ``stale`` that it replaces one that is on its way out."""

    def __init__(self, why: str, *, start: bool, stale: bool = False) -> None:
        super().__init__(why)
        self.start = start
        self.stale = stale


class Lost(Exception):
    """The daemon took the event and gave no answer (it died, or hung past
    `ANSWER_TIMEOUT_S`). The event is not answered again in process: the daemon may have
    recorded it already, and one it did not is read from the transcript at the next."""


def ask_daemon(path: str, agent: str, state_dir: str, raw: bytes) -> tuple[int, str, str]:
    """The daemon's answer to one event: (exit code, stdout, stderr). `Unanswered` when
    it gave none (see the module doc for what follows)."""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(ACCEPT_TIMEOUT_S)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise Unanswered(f"no daemon ({type(exc).__name__})", start=True) from exc
        except OSError as exc:  # a timeout: a backlog that full is a busy daemon
            raise Unanswered(f"daemon unreachable ({type(exc).__name__})", start=False) from exc
        env = config_env()
        request = [PROTOCOL, stamp(), agent.encode(), state_dir.encode("utf-8", "surrogateescape")]
        request += [encode_env(env), raw]
        reader = _Reader(sock)
        try:
            sock.sendall(pack(request))
            reply = reader.exactly(1)
        except OSError as exc:
            raise Unanswered(f"daemon silent ({type(exc).__name__})", start=False) from exc
        except ConnectionError as exc:  # closed at once: it died or is exiting
            raise Unanswered("daemon gone", start=True) from exc
        if reply == STALE:
            raise Unanswered("stale daemon", start=True, stale=True)
        if reply != ACCEPTED:
            raise Unanswered("declined", start=False)
        try:
            sock.settimeout(ANSWER_TIMEOUT_S)
            code, out, err = reader.fields(3)
            return (
                int(code),
                out.decode("utf-8", "surrogatepass"),
                err.decode("utf-8", "surrogatepass"),
            )
        except (OSError, ValueError) as exc:  # ConnectionError is an OSError
            raise Lost(f"{type(exc).__name__}") from exc
    finally:
        sock.close()


def spawn_daemon(path: str, *, replacing: bool = False) -> bool:
    """Start the daemon for ``path`` detached from this process: its own session, stdin,
    stdout and stderr on /dev/null (Claude Code reads the hook's pipes until every holder
    closes them), no other descriptor inherited, reaped by init rather than by us (double
    fork: no zombie). Not while a daemon holds the path's lock (it is up or starting)
    unless ``replacing`` a stale one (which is exiting: the new one waits for its lock),
    and at most once per `SPAWN_BACKOFF_S`. True when one was started."""
    import fcntl
    import time

    try:
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        if not replacing:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: a daemon is serving or starting
    finally:
        os.close(fd)  # released at once: the daemon takes it
    marker = path + ".spawn"
    try:
        if time.time() - os.stat(marker).st_mtime < SPAWN_BACKOFF_S:
            return False
    except OSError:
        pass
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.utime(marker)
    except OSError:
        return False
    env = dict(os.environ)
    # The daemon imports this very package, wherever the agent's working directory is.
    parent = os.path.dirname(PACKAGE_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (parent, env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "judge.hooks.daemon", "--socket", path]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's lines run in another process
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.chdir("/")
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 1 << 16)
            os.execve(sys.executable, argv, env)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return True


# -- the command --------------------------------------------------------------------------


def _parse(argv: Sequence[str]) -> tuple[str, str | None] | None:
    """``<agent> [--state-dir DIR]``; None for anything else (help, an unknown agent, a
    typo), which the full command line parses and answers as it always did."""
    if not argv or argv[0] not in AGENTS:
        return None
    rest = list(argv[1:])
    if not rest:
        return argv[0], None
    if len(rest) == 2 and rest[0] == "--state-dir" and not rest[1].startswith("-"):
        return argv[0], rest[1]
    if len(rest) == 1 and rest[0].startswith("--state-dir="):
        return argv[0], rest[0].partition("=")[2]
    return None


def _in_process(argv: Sequence[str], raw: bytes | None) -> int:
    from judge.cli import hook

    return hook.main(["hook", *argv], raw=raw)


def _write(out: str, err: str) -> None:
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except Exception as exc:  # as the in-process path: a failed write is one stderr line
        err = (
            f"loop-judge hook: ignored ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})\n"
        )
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """``loop-judge hook <agent> [--state-dir DIR]`` (``argv`` without ``hook``): the
    daemon's answer when it gives one, else the in-process path's. Never raises."""
    args = list(sys.argv[1:] if argv is None else argv)
    code, how = _main(args)
    if os.environ.get(TRACE_ENV):
        sys.stderr.write(f"loop-judge hook: answered {how}\n")
    return code


def _main(args: list[str]) -> tuple[int, str]:
    parsed = _parse(args)
    if parsed is None:
        return _in_process(args, None), "in process (arguments for the full command line)"
    if os.environ.get(DAEMON_ENV, "").lower() in ("off", "0", "false", "no"):
        return _in_process(args, None), f"in process ({DAEMON_ENV} is off)"
    if not hasattr(os, "fork"):
        return _in_process(args, None), "in process (no Unix sockets here)"
    agent, chosen = parsed
    raw: bytes | None = None
    try:
        raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        answered = _via_daemon(agent, chosen, raw)
    except Exception as exc:  # the daemon's side broke somewhere: the in-process path answers
        answered = f"{type(exc).__name__}"
    if isinstance(answered, str):
        return _in_process(args, raw), f"in process ({answered})"
    return answered, "by the daemon"


def _via_daemon(agent: str, chosen: str | None, raw: bytes) -> int | str:
    """The daemon's exit code after printing its answer, or why the event is still to be
    answered (in process)."""
    directory = socket_dir()
    if directory is None:
        return "no private socket directory"
    if len(raw) > MAX_PAYLOAD_BYTES:
        return "payload too large"
    # The daemon runs elsewhere: the state directory goes to it as an absolute path.
    state_dir = os.path.abspath(chosen if chosen is not None else default_state_dir())
    path = socket_path(directory)
    if len(os.fsencode(path)) >= MAX_SOCKET_PATH:
        return "socket path too long"
    try:
        code, out, err = ask_daemon(path, agent, state_dir, raw)
    except Unanswered as why:
        started = why.start and spawn_daemon(path, replacing=why.stale)
        return f"{why}; started one" if started else str(why)
    except Lost as why:
        _write("", f"loop-judge hook: ignored (the daemon lost the event: {why})\n")
        return EXIT_HOOK
    _write(out, err)
    return code
