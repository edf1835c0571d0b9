"""``python -m judge.hooks <agent> [--state-dir DIR]``: the hook command without the
console script (the form to put in an agent's settings with the virtual environment's
absolute interpreter path, which works whatever the agent's PATH is)."""

import sys

from judge.hooks.client import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
