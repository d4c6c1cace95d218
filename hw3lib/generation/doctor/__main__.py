"""`python -m hw3lib.generation.doctor`: the same check as `hw3 doctor` (hw3lib.generation.doctor)."""

from __future__ import annotations

import typer

from hw3lib.generation.doctor import register

_app = typer.Typer(add_completion=False)
register(_app, "doctor")
_app()
