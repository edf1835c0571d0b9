"""The hook daemon: the same answers as the in-process path, and safe wherever hooks run.

Everything runs as Claude Code runs a hook: ``python -m judge.hooks claude-code`` as a new
process per event, the event's JSON on stdin, a transcript file appended to as the
session goes (`FakeClaudeCode`). The package is run from a copy in a temporary directory,
so that a daemon sees no module of its own change while a test runs (in a checkout being
edited it rightly retires, and the test would measure that instead); sockets live in a
short directory under /tmp (a Unix socket's path is at most 107 bytes), and every daemon a
test starts is stopped after it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from judge.config import ENV_PREFIX
from judge.hooks import client
from tests.hooks.test_claude_code_hook import FakeClaudeCode

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="Unix sockets and fork only"),
]

ROOT = Path(__file__).resolve().parents[2]
TRACE_PREFIX = "loop-judge hook: answered "
# Generous for a loaded 2-core machine: a daemon imports the tracker before it listens.
START_S = 60.0


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pkg")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "judge", root / "judge", ignore=skip)
    shutil.copytree(ROOT / "prompts", root / "prompts", ignore=skip)  # read beside judge/
    return root


@pytest.fixture
def sockets() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="ljt-", dir="/tmp"))
    try:
        yield directory
    finally:
        for pid_file in directory.glob("*.pid"):
            _stop(_pid(pid_file))
        shutil.rmtree(directory, ignore_errors=True)


def _pid(pid_file: Path) -> int:
    return int(pid_file.read_text())


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return state != "Z"


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


class Hooks:
    """Runs the hook command with one environment; remembers which path answered."""

    def __init__(self, package: Path, sockets: Path, cwd: Path, **extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(package / ".pycache")
        env["PYTHONPATH"] = str(package)
        env[client.SOCKET_DIR_ENV] = str(sockets)
        env[client.TRACE_ENV] = "1"
        env.update(extra)
        self.env, self.cwd, self.sockets = env, cwd, sockets
        self.how: list[str] = []

    def command(self, state_dir: Path) -> list[str]:
        return [sys.executable, "-m", "judge.hooks", "claude-code", "--state-dir", str(state_dir)]

    def split(self, proc: subprocess.CompletedProcess[bytes]) -> tuple[str, str]:
        assert proc.returncode == 0, proc.stderr
        lines = proc.stderr.decode().splitlines(keepends=True)
        assert lines and lines[-1].startswith(TRACE_PREFIX), proc.stderr
        self.how.append(lines[-1][len(TRACE_PREFIX) :].strip())
        return proc.stdout.decode(), "".join(lines[:-1])

    def __call__(self, payload: Any, state_dir: Path) -> tuple[str, str]:
        proc = subprocess.run(
            self.command(state_dir),
            input=json.dumps(payload).encode(),
            capture_output=True,
            env=self.env,
            cwd=self.cwd,
            timeout=120,
        )
        return self.split(proc)

    def pid_files(self) -> list[Path]:
        return sorted(self.sockets.glob("*.pid"))

    def start(self, state_dir: Path) -> int:
        """Start the daemon (an event no tracker needs) and wait until it listens."""
        self({"session_id": "warm-up", "hook_event_name": "Notification"}, state_dir)
        return self.wait_for_daemon()

    def wait_for_daemon(self, other_than: int | None = None) -> int:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            for pid_file in self.pid_files():
                try:
                    pid = _pid(pid_file)
                except (OSError, ValueError):
                    continue
                if pid != other_than and Path(str(pid_file)[: -len(".pid")]).exists():
                    return pid
            time.sleep(0.05)
        raise AssertionError(f"no daemon came up: {self.how}")


def _state(path: Path) -> dict[str, Any]:
    """A session's state file, less what differs between two runs of the same session:
    when it was written and what it read last (clock times), and which file its
    transcript was."""
    data: dict[str, Any] = json.loads(path.read_text())
    data.pop("updated")
    data["tracker"]["detectors"].pop("last_step_at")
    for key in ("path", "device", "inode"):
        data["transcript"].pop(key)
    return data


def _looping(cc: FakeClaudeCode) -> None:
    """A failing test run again and again (denied from the 3rd, the ladder climbing),
    the person saying it changed something (the call may run once more: an allowed
    preflight while the refusals' echoes wait), the loop again, and the stops."""
    cc.prompt("Fix the failing test in app.py")
    command = {"command": "pytest tests/test_app.py -x", "description": "Run the tests"}
    failure = "Exit code 1\nFAILED tests/test_app.py::test_total - assert 41 == 42"
    for _ in range(4):
        cc.tool("Bash", command, failure, error=True)
    cc.stop("The test still fails the same way.")
    cc.prompt("I fixed the fixture; run it again.")
    for _ in range(5):
        cc.tool("Bash", command, failure, error=True)
    cc.stop("Still failing.", active=True)


def _productive(cc: FakeClaudeCode) -> None:
    cc.prompt("Make the total include tax")
    cc.tool("Read", {"file_path": "/home/dev/app/app.py"}, "def total(x):\n    return x\n")
    for step in range(4):
        edit = {"file_path": "/home/dev/app/app.py", "old_string": f"x{step}", "new_string": "y"}
        cc.tool("Edit", edit, "The file /home/dev/app/app.py has been updated.")
        cc.tool("Bash", {"command": "pytest -q"}, f"{3 - step} failed, {step} passed", error=True)
    cc.tool("Bash", {"command": "pytest -q"}, "4 passed in 0.12s")
    cc.stop("Done: total now includes tax and all 4 tests pass.")


def _play(
    tmp: Path, runner: Callable[[Any, Path], tuple[str, str]], scenario: Callable[..., None]
) -> tuple[list[tuple[str, str]], FakeClaudeCode]:
    outputs: list[tuple[str, str]] = []

    def recording(payload: Any, state_dir: Path) -> tuple[str, str]:
        out, err = runner(payload, state_dir)
        outputs.append((out, err))
        return out, err

    tmp.mkdir()
    cc = FakeClaudeCode(tmp, recording)
    scenario(cc)
    return outputs, cc


@pytest.mark.parametrize("scenario", [_looping, _productive], ids=["looping", "productive"])
def test_daemon_and_in_process_give_the_same_answers(
    package: Path, sockets: Path, tmp_path: Path, scenario: Callable[..., None]
) -> None:
    daemon = Hooks(package, sockets, tmp_path)
    daemon.start(tmp_path / "warm-state")
    cold = Hooks(package, sockets, tmp_path, **{client.DAEMON_ENV: "off"})
    via_daemon, cc_daemon = _play(tmp_path / "d", daemon, scenario)
    in_process, cc_cold = _play(tmp_path / "c", cold, scenario)
    assert via_daemon == in_process
    assert cc_daemon.answers == cc_cold.answers
    if scenario is _looping:
        decisions = [a.get("hookSpecificOutput", {}) for a in cc_daemon.answers]
        assert sum(d.get("permissionDecision") == "deny" for d in decisions) >= 3
    else:
        assert [a for a in cc_daemon.answers if set(a) != {"event"}] == []
    assert set(cold.how) == {f"in process ({client.DAEMON_ENV} is off)"}
    assert daemon.how.count("by the daemon") >= len(daemon.how) - 2, daemon.how
    name = f"{cc_daemon.session}.json"
    assert _state(cc_daemon.state_dir / name) == _state(cc_cold.state_dir / name)


def test_a_killed_daemon_loses_no_state(package: Path, sockets: Path, tmp_path: Path) -> None:
    """The daemon killed mid-session (between two events): the next event is answered in
    process from the state file the daemon wrote, a new daemon takes over, and the whole
    session answers as the in-process path alone does."""
    daemon = Hooks(package, sockets, tmp_path)
    first = daemon.start(tmp_path / "warm-state")
    killed: list[int] = []

    def killing(payload: Any, state_dir: Path) -> tuple[str, str]:
        if len(daemon.how) == 8 and not killed:  # after the first Stop, before the prompt's
            # next call (the warm-up, two calls of two events, two denials, the Stop)
            os.kill(first, signal.SIGKILL)
            killed.append(first)
            deadline = time.monotonic() + 10
            while _alive(first) and time.monotonic() < deadline:
                time.sleep(0.02)
        return daemon(payload, state_dir)

    via_daemon, cc_daemon = _play(tmp_path / "d", killing, _looping)
    cold = Hooks(package, sockets, tmp_path, **{client.DAEMON_ENV: "off"})
    in_process, cc_cold = _play(tmp_path / "c", cold, _looping)
    assert killed and via_daemon == in_process
    assert daemon.how[8].startswith("in process (no daemon"), daemon.how
    assert daemon.how[-1] == "by the daemon"  # a successor took over
    name = f"{cc_daemon.session}.json"
    assert _state(cc_daemon.state_dir / name) == _state(cc_cold.state_dir / name)


def test_a_stale_daemon_is_replaced(package: Path, sockets: Path, tmp_path: Path) -> None:
    """A daemon of another version on the socket: the event is answered in process, the
    old daemon exits, and a new one answers the next events."""
    hooks = Hooks(package, sockets, tmp_path)
    path = client.socket_path(str(sockets), [], package=str(package / "judge"))
    old = subprocess.Popen(
        [sys.executable, "-m", "judge.hooks.daemon", "--socket", path, "--stamp", "0.0.1"],
        env=hooks.env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert hooks.wait_for_daemon() == old.pid
        payload = {"session_id": "s", "hook_event_name": "Notification"}
        assert hooks(payload, tmp_path / "state") == ("", "")
        assert hooks.how[-1] == "in process (stale daemon; started one)"
        assert old.wait(timeout=60) == 0  # it retired
        new = hooks.wait_for_daemon(other_than=old.pid)
        assert hooks(payload, tmp_path / "state") == ("", "")
        assert hooks.how[-1] == "by the daemon" and _alive(new)
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_socket_and_files_are_private(package: Path, sockets: Path, tmp_path: Path) -> None:
    hooks = Hooks(package, sockets, tmp_path)
    hooks.start(tmp_path / "state")
    assert stat.S_IMODE(sockets.stat().st_mode) == 0o700
    entries = list(sockets.iterdir())
    assert any(stat.S_ISSOCK(p.stat().st_mode) for p in entries)
    for entry in entries:
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600, entry
        assert entry.stat().st_uid == os.getuid()


def test_a_shared_socket_directory_is_not_used(
    package: Path, sockets: Path, tmp_path: Path
) -> None:
    """A socket directory others may enter (made in /tmp by someone else, or opened up):
    no daemon is asked or started there; the hook answers in process."""
    shared = Path(tempfile.mkdtemp(prefix="ljs-", dir="/tmp"))
    try:
        os.chmod(shared, 0o777)
        hooks = Hooks(package, shared, tmp_path)
        hooks({"session_id": "s", "hook_event_name": "Notification"}, tmp_path / "state")
        assert hooks.how == ["in process (no private socket directory)"]
        assert list(shared.iterdir()) == []
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_daemon_is_detached_and_exits_when_idle(
    package: Path, sockets: Path, tmp_path: Path
) -> None:
    """The hook that starts the daemon returns at once with its pipes closed (Claude Code
    reads them to their end), the daemon is no child of it (its own session, no zombie),
    and after the idle timeout it exits and removes its socket."""
    hooks = Hooks(package, sockets, tmp_path, **{client.IDLE_ENV: "3"})
    proc = subprocess.Popen(
        hooks.command(tmp_path / "state"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=hooks.env,
        cwd=tmp_path,
    )
    out, err = proc.communicate(json.dumps({"session_id": "s", "hook_event_name": "X"}).encode())
    assert proc.returncode == 0 and out == b"", err
    assert err.decode().endswith("started one)\n")
    pid = hooks.wait_for_daemon()
    stat_line = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat_line[1]) != proc.pid and int(stat_line[3]) != os.getsid(0)  # ppid, sid
    fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)}
    assert fds == {os.devnull}
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    assert not any(p.suffix == ".sock" for p in sockets.iterdir())


def test_concurrent_hooks_of_one_session_take_turns(
    package: Path, sockets: Path, tmp_path: Path
) -> None:
    """A parallel tool batch through the daemon: eight PostToolUse hooks at once on one
    session, each fed once, the state file valid, as with the in-process path's lock."""
    hooks = Hooks(package, sockets, tmp_path)
    state_dir = tmp_path / "state"
    hooks.start(state_dir)
    transcript = tmp_path / "t.jsonl"
    prompt = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "go"}}
    transcript.write_text(json.dumps(prompt) + "\n")
    results: list[tuple[str, str]] = []

    def one(i: int) -> None:
        payload = {
            "session_id": "parallel",
            "transcript_path": str(transcript),
            "hook_event_name": "PostToolUse",
            "tool_name": "Read",
            "tool_input": {"file_path": f"/src/module_{i}.py"},
            "tool_use_id": f"toolu_par_{i}",
            "tool_response": {"type": "text", "file": {"content": f"# module {i}"}},
        }
        results.append(hooks(payload, state_dir))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert results == [("", "")] * 8
    assert hooks.how.count("by the daemon") >= 6, hooks.how
    state = json.loads((state_dir / "parallel.json").read_text())
    assert sorted(state["done_ids"]) == sorted(f"toolu_par_{i}" for i in range(8))
    assert state["fed"] == 1 + 2 * 8
    assert sorted(p.name for p in state_dir.iterdir() if "parallel" in p.name) == [
        "parallel.json",
        "parallel.lock",
    ]


def test_arguments_it_does_not_know_go_to_the_full_command_line(
    package: Path, sockets: Path, tmp_path: Path
) -> None:
    hooks = Hooks(package, sockets, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "judge.hooks", "claude-code", "--bogus"],
        input=b"{}",
        capture_output=True,
        env=hooks.env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2 and b"unrecognized arguments: --bogus" in proc.stderr
    assert hooks.pid_files() == []


def test_the_client_parses_what_claude_code_passes() -> None:
    assert client._parse(["claude-code"]) == ("claude-code", None)
    assert client._parse(["claude-code", "--state-dir", "/s"]) == ("claude-code", "/s")
    assert client._parse(["claude-code", "--state-dir=/s"]) == ("claude-code", "/s")
    assert client._parse(["gemini"]) == ("gemini", None)
    assert client._parse(["codex", "--state-dir", "/s"]) == ("codex", "/s")
    assert client._parse(["cursor", "--state-dir=/s"]) == ("cursor", "/s")
    for other in ([], ["windsurf"], ["claude-code", "-h"], ["claude-code", "--state-dir"]):
        assert client._parse(other) is None
    # One daemon per installation and configuration: settings change the socket.
    assert client.socket_path("/d", []) != client.socket_path("/d", [("LOOP_JUDGE_X", "1")])
    assert len(client.socket_path("/tmp/loop-judge-12345", [])) < 100
