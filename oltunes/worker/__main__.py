"""``python -m oltunes.worker batch|serve ...``: the worker CLI without the rest of `oltunes` (used by launchers)."""

import sys

from oltunes.cli import app

if __name__ == "__main__":
    app(["worker", *sys.argv[1:]], prog_name="python -m oltunes.worker")
