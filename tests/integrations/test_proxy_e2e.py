"""End to end through a real ``litellm`` proxy process on 127.0.0.1 with the guardrail on.

Needs the proxy's own dependencies (``pip install 'litellm[proxy]'``, ~45 packages): the
test uses the ``litellm`` next to this interpreter when they are installed, or the one
named by ``LOOP_JUDGE_TEST_LITELLM_PROXY`` (a separate venv with litellm[proxy] and
loop-judge), and skips otherwise. The model is litellm's ``mock_response``: nothing leaves
the machine.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serving import failing_repeat_history, free_port, prefixes

pytestmark = pytest.mark.slow  # starts a litellm proxy process

ENV_PROXY = "LOOP_JUDGE_TEST_LITELLM_PROXY"
# The proxy imports its whole server stack; ~10 s here, more on a loaded CI machine.
PROXY_START_TIMEOUT_S = 90.0
MASTER_KEY = "sk-loop-judge-e2e-0123456789abcdef"  # the proxy refuses weak or unset keys
CONFIG = """\
model_list:
  - model_name: agent-model
    litellm_params:
      model: openai/fake
      api_key: sk-fake
      mock_response: "I will run the tests again."

guardrails:
  - guardrail_name: loop-judge
    litellm_params:
      guardrail: judge.integrations.litellm_proxy.LoopJudgeGuardrail
      mode: pre_call
      default_on: true
      loop_judge_mode: block
"""


def _proxy_binary() -> str:
    named = os.environ.get(ENV_PROXY)
    if named:
        return named
    sibling = Path(sys.executable).with_name("litellm")
    # orjson and apscheduler come only with the proxy extra.
    if sibling.exists() and all(
        importlib.util.find_spec(m) is not None for m in ("orjson", "apscheduler")
    ):
        return str(sibling)
    pytest.skip(f"litellm[proxy] is not installed (or set {ENV_PROXY} to a litellm binary)")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _proxy_binary()
    workdir = tmp_path_factory.mktemp("proxy")
    (workdir / "config.yaml").write_text(CONFIG, encoding="utf-8")
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")},
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LOOP_JUDGE_SEMANTIC": "off",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    log = (workdir / "proxy.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            "--config",
            str(workdir / "config.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PROXY_START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{base}/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                tail = (workdir / "proxy.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"the litellm proxy did not start:\n{tail}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _chat(base: str, messages: list[dict], **extra: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    headers.update(extra.pop("headers", {}))  # type: ignore[arg-type]
    body = {"model": "agent-model", "messages": messages, **extra}
    return httpx.post(f"{base}/chat/completions", headers=headers, json=body, timeout=60)


@pytest.mark.parametrize("how", ["header", "metadata"])
def test_the_proxy_rejects_a_looping_agent(proxy: str, how: str) -> None:
    session = f"e2e-{how}"
    where: dict[str, object] = (
        {"headers": {"x-loop-judge-session": session}}
        if how == "header"
        else {"metadata": {"loop_judge_session_id": session}}
    )
    histories = prefixes(failing_repeat_history(3), 3)
    for h in histories[:2]:
        r = _chat(proxy, h, **where)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "I will run the tests again."
    r = _chat(proxy, histories[2], **where)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "loop-judge" in message and "exact_repeat" in message and "turn 3" in message


def test_requests_without_a_session_pass(proxy: str) -> None:
    for h in prefixes(failing_repeat_history(4), 4):
        assert _chat(proxy, h).status_code == 200
