"""``python -m judge.cli``: the ``loop-judge`` command without its console script.

The tests and evals/bench_server.py start the sidecar this way, with the interpreter that
runs them, so they never depend on which ``loop-judge`` is first on PATH.
"""

import sys

from judge.cli import main

if __name__ == "__main__":
    sys.exit(main())
