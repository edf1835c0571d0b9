"""The files in examples/ run as a user would run them, copied as they are: each in its own
interpreter, from outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge.config import ENV_PREFIX
from judge.llm._litellm import _import_litellm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The user's LOOP_JUDGE_* must not change the example (tests/conftest.py's rule), and
    # its judge server is on 127.0.0.1: no proxy may stand in between.
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1"
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # a fresh interpreter that imports litellm for its judge
def test_agent_loop_example_recovers_and_asks_the_judge(tmp_path: Path) -> None:
    done = run_example("agent_loop.py", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # The scripted agent re-runs the failing test; the third identical failure is the loop.
    assert lines[0] == (
        'turn 5: loop (warn): run_tests({"path":"test_app.py"}) called 3x in a row, the same error'
    )
    # It read the recovery message, fixed the code and finished; the judge was asked and
    # answered through the real litellm client.
    assert lines[1] == "judge calls: 1, failed: 0"
    assert lines[2] == "finished after 8 turns: The test passes now: add() adds."
    assert lines[3] == "fake judge answered 1 request(s)"


def test_every_example_is_tested() -> None:
    tested = {"agent_loop.py", "litellm_proxy.yaml"}
    assert {p.name for p in EXAMPLES.iterdir() if p.suffix in (".py", ".yaml")} == tested


def test_proxy_config_loads_as_the_litellm_proxy_loads_it() -> None:
    """examples/litellm_proxy.yaml through litellm's own parsing and guardrail loading, as
    the proxy does at startup (litellm[proxy] itself is too heavy for CI; the proxy's
    process is started in tests/integrations/test_proxy_e2e.py where it is installed)."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    yaml = pytest.importorskip("yaml")
    _import_litellm()  # first, our way: the bundled cost map, no download attempt
    from litellm.proxy.types_utils.utils import get_instance_fn
    from litellm.types.guardrails import LitellmParams
    from litellm.types.router import Deployment

    from judge.integrations.litellm_proxy import GuardrailMode, LoopJudgeGuardrail

    path = EXAMPLES / "litellm_proxy.yaml"
    config = yaml.safe_load(path.read_text("utf-8"))
    # What docs/serving.md says it needs: a model, the master key, the guardrail.
    models = [Deployment(**entry) for entry in config["model_list"]]
    assert models and all(m.litellm_params.model for m in models)
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    (guardrail,) = config["guardrails"]
    params = LitellmParams(**guardrail["litellm_params"])
    # litellm's initialize_custom_guardrail: the class by dotted path, then these arguments.
    guardrail_class = get_instance_fn(params.guardrail, config_file_path=str(path))
    skipped = ("guardrail", "mode", "default_on", "stream_scope")
    extra = {k: v for k, v in params.model_dump(exclude_none=True).items() if k not in skipped}
    instance = guardrail_class(
        guardrail_name=guardrail["guardrail_name"],
        event_hook=params.mode,
        default_on=params.default_on,
        **extra,
    )
    assert isinstance(instance, LoopJudgeGuardrail)
    assert instance.loop_judge_mode is GuardrailMode.NUDGE and instance.default_on
