"""The `hw3` command line: `hw3 eval ...`, `hw3 train ...`, `hw3 sft ...`, `hw3 expert-iteration ...`,
`hw3 kissing ...`, `hw3 keyword ...`, `hw3 sweep ...`, `hw3 doctor` (run it first on a new GPU).

Each sub-command is a thin wrapper over a library function; sub-apps live next to the code they
drive and are registered here.
"""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def _register() -> None:
    # Sub-apps register themselves lazily so `hw3 --help` stays fast and one broken optional
    # dependency does not take down the other commands.
    import importlib

    for module_name, name in (("hw3lib.evaluation.cli", "eval"), ("hw3lib.grpo.cli", "train"),
                              ("hw3lib.sft.cli", "sft"), ("hw3lib.kissing.cli", "kissing"),
                              ("hw3lib.keywords.cli", "keyword"),
                              ("hw3lib.experiments.cli", "sweep"), ("hw3lib.generation.doctor", "doctor")):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(app, name)


_register()

if __name__ == "__main__":
    app()
