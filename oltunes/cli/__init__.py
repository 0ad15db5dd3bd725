"""`oltunes` command line. Each area registers its own commands from a module of this package."""

from __future__ import annotations

import typer

from oltunes.cli import demo, rltune, services, simulate, tuner, worker, zoo
from oltunes.cli.worker import clean_errors
from oltunes.config import apply_offline_env, get_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help="OLTunes: online-tuned DL inference.")

for _module in (zoo, worker, tuner, simulate, rltune, demo, services):
    _module.register(app)


@app.callback()
def _main() -> None:
    apply_offline_env()
    with clean_errors():  # a bad OLTUNES_* setting: one line naming it, before any command runs
        get_settings()
