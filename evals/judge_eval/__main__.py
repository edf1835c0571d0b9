"""``python -m judge_eval``: the ``loop-judge`` command without its console script."""

import sys

from judge_eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
