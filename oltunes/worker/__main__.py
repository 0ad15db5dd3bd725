"""``python -m oltunes.worker batch|serve ...``: the worker CLI without the rest of `oltunes` (used by launchers)."""

import sys

from oltunes.cli import app
from oltunes.lifeline import watch_parent

if __name__ == "__main__":
    watch_parent()  # started by a launcher: die with it, even where the kernel's parent-death signal is missing
    app(["worker", *sys.argv[1:]], prog_name="python -m oltunes.worker")
