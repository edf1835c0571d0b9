"""The per-user hook daemon: answers hook events with the trackers kept warm.

`judge.hooks.client` starts it on demand (``python -m judge.hooks.daemon --socket PATH``),
detached, and forwards each event to it over a Unix socket. It answers with exactly what
the in-process path prints (`judge.hooks.invocation.answer_raw`, the same code),
keeping each session's `HookSession` warm in a `SessionCache`; the state file is still
written after every event and read again whenever another process wrote it, so nothing
is lost when the daemon dies and the in-process path can take over at any event.

Lifecycle:

- one per socket path (an exclusive lock on ``PATH.lock`` held for its life: of two
  started at once, the second exits), the socket created 0600 in the client's 0700
  directory;
- stale: a request from another package, version or wire format (`client.stamp`), or any
  of its own modules changed on disk since it imported them, is answered "stale"; the
  daemon then stops taking connections, finishes the events it holds and exits, and
  the client starts a fresh one;
- idle: no event for `IDLE_EXIT_S` (``$LOOP_JUDGE_HOOK_IDLE_S``) and it exits;
- declined: a configuration with a judge model (whose checks need the agent's own
  environment: API keys, proxies) is answered in process by the client.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from judge.hooks import client

__all__ = ["IDLE_EXIT_S", "Daemon", "main"]

# How long a daemon waits for its next event before it exits: a session pauses while
# its person reads or types (minutes), and a daemon that outlived every pause would hold
# its ~100 MB for nothing. A restart costs one in-process answer (about half a second).
IDLE_EXIT_S = 15 * 60.0
# How often the accept loop looks at the clock (idle, stop): a stale daemon makes room
# for its replacement within this.
TICK_S = 0.1
# A client sends its whole request at once; one that has not within this is gone.
REQUEST_TIMEOUT_S = 5.0
# A daemon started while its predecessor still holds the lock (finishing its events
# after it was found stale) waits this long for it, then gives up.
STARTUP_LOCK_WAIT_S = 5.0
# How long a stopping daemon waits for the events it took before it exits anyway.
DRAIN_S = client.ANSWER_TIMEOUT_S


def _module_times() -> dict[str, int]:
    """The modification times of this package's loaded modules."""
    times: dict[str, int] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.startswith(client.PACKAGE_DIR):
            with contextlib.suppress(OSError):
                times[path] = os.stat(path).st_mtime_ns
    return times


class Daemon:
    """One daemon: serves ``path`` until idle, stale or stopped."""

    def __init__(self, path: str, *, stamp: bytes | None = None, idle_s: float | None = None):
        from judge.hooks import invocation
        from judge.hooks.session import HookSession
        from judge.hooks.session_cache import SessionCache

        self.path = path
        self.stamp = client.stamp() if stamp is None else stamp
        env_idle = os.environ.get(client.IDLE_ENV)
        self.idle_s = idle_s if idle_s is not None else float(env_idle or IDLE_EXIT_S)
        self.env = client.encode_env(client.config_env())
        self.config = invocation.hook_config()
        self.cache = SessionCache()
        self._answer = invocation.answer_raw
        self._stop = threading.Event()
        self._mutex = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._last = time.monotonic()
        # Warm what the first event would build: the tracker's models and detectors.
        HookSession(self.config).tracker  # noqa: B018 - built for its side effects
        self._modules = _module_times()

    def stale(self) -> bool:
        """Whether one of its modules changed on disk since it was imported (an edit, an
        upgrade in place): its answers would no longer be the in-process path's. Modules
        imported since the last look (an event that needed one) join the watch."""
        current = _module_times()
        if any(current.get(path, -1) != written for path, written in self._modules.items()):
            return True
        self._modules = current
        return False

    def stop(self) -> None:
        self._stop.set()

    def serve(self) -> int:
        """Run until idle, stale or stopped; 0, or 1 when another daemon holds the path."""
        lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not _lock(lock, STARTUP_LOCK_WAIT_S):
                return 1
            return self._serve_locked()
        finally:
            os.close(lock)  # releases the lock

    def _serve_locked(self) -> int:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a crashed predecessor's: no one listens on it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)  # created 0600: no window where others may connect
        try:
            listener.bind(self.path)
        finally:
            os.umask(old_mask)
        os.chmod(self.path, 0o600)
        ours = os.stat(self.path).st_ino
        listener.listen(128)
        listener.settimeout(TICK_S)
        self._last = time.monotonic()  # idle from now: a slow start is no idle time
        pid_path = self.path + ".pid"
        with contextlib.suppress(OSError):
            fd = os.open(pid_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, b"%d\n" % os.getpid())
            os.close(fd)
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    with self._mutex:
                        idle = not self._threads and time.monotonic() - self._last > self.idle_s
                    if idle:
                        break
                    continue
                thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
                with self._mutex:
                    self._threads.add(thread)
                    self._last = time.monotonic()
                thread.start()
        finally:
            # No new connection from here on: clients find no socket and answer in
            # process (or start a successor, which waits for our lock).
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == ours:
                    os.unlink(self.path)
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(pid_path)
            deadline = time.monotonic() + DRAIN_S
            for thread in list(self._threads):
                thread.join(max(0.0, deadline - time.monotonic()))
        return 0

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(REQUEST_TIMEOUT_S)
                fields = client._Reader(conn).fields(6)
                if len(fields) != 6:
                    return
                protocol, stamp, agent, state_dir, env, raw = fields
                if protocol != client.PROTOCOL or stamp != self.stamp or self.stale():
                    conn.sendall(client.STALE)
                    self.stop()
                    return
                known = agent.decode("utf-8", "replace") in client.AGENTS
                if env != self.env or not known or self.config.judge_enabled:
                    conn.sendall(client.DECLINED)
                    return
                conn.sendall(client.ACCEPTED)
                directory = Path(state_dir.decode("utf-8", "surrogateescape"))
                out, err = self._answer(
                    raw,
                    state_dir=directory,
                    config=self.config,
                    cache=self.cache,
                    agent=agent.decode("utf-8", "replace"),
                )
                conn.settimeout(client.ANSWER_TIMEOUT_S)
                reply = [b"%d" % client.EXIT_HOOK, out.encode("utf-8", "surrogatepass")]
                conn.sendall(client.pack([*reply, err.encode("utf-8", "surrogatepass")]))
        except Exception:
            pass
        finally:
            with self._mutex:
                self._threads.discard(threading.current_thread())
                self._last = time.monotonic()


def _lock(fd: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m judge.hooks.daemon")
    parser.add_argument("--socket", required=True, help="the socket path to serve")
    # Tests pretend to be another version with this; a stamp no client sends.
    parser.add_argument("--stamp", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # The process lives for many events, but as the hook command it scans no pydantic
    # plugins (judge.cli.run_hook) unless the environment says otherwise.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    stamp = args.stamp.encode() if args.stamp is not None else None
    daemon = Daemon(args.socket, stamp=stamp)
    # Stopped (by a test, a logout): finish the events it holds and remove its socket.
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    return daemon.serve()


if __name__ == "__main__":
    sys.exit(main())
