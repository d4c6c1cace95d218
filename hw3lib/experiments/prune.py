"""`hw3 runs prune-optimizer [--yes] [--keep NAME]`: free the AdamW state of finished runs, only when asked.

A finished run is read back, never trained again, yet its checkpoint keeps AdamW's two float32 moments: 8 of its
12 bytes per parameter (4.8 GB of a Qwen3-0.6B run's 7.2 GB, 12.3 of a Qwen2.5-Math-1.5B run's 18.5;
hw3lib.core.disk). Without `--yes` the command only lists what it would free. It never touches:

- a run that is not finished (interrupted, or mid-step): it resumes from those moments;
- a run a grid extends (`extended_runs`): grid runs are found by name whatever their length
  (hw3lib.experiments.grids.grid_run_name), so a grid whose runs now have more steps than a finished run (a run
  made with a shorter `hw3 sweep --steps`, or the smoke `baselines` runs' scaled length) resumes it -- and needs
  its moments;
- the runs named with `--keep` (one you mean to extend by hand: `hw3 train --resume --steps N`).

A pruned checkpoint keeps `optimizer.pruned.json` beside the weights, saying when and why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from hw3lib.core import disk


def _finished_steps(run_dir: Path) -> int | None:
    """The GRPO steps of the run's latest checkpoint, or None without one."""
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    try:
        state = json.loads((pointer.parent / pointer.read_text().strip() / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return state.get("grpo_step")


def _grid_steps(grid: str, profile: str) -> int:
    from hw3lib.experiments.grids import grid_base

    return grid_base(grid, profile).n_grpo_steps  # the grid's runs' length now (no config is built: no warm start)


def extended_runs(root: Path | None = None, profile: str | None = None) -> set[str]:
    """Run names (relative to `root`, the runs folder) that a grid would train further: every run a grid's
    `grid.json` records, or that lies in a grid's folder, with fewer GRPO steps than the grid's runs now have
    (the config's own `n_grpo_steps` change where the grid makes one)."""
    from hw3lib.core.io import runs_dir
    from hw3lib.core.profile import default_profile_name
    from hw3lib.experiments.grids import GRID_FILE, GRID_NAMES  # (grids fills the runner's GRID_NAMES in)

    root, profile = Path(root or runs_dir()), profile or default_profile_name()
    planned: dict[str, int] = {}
    for grid in sorted(GRID_NAMES):
        folder = root / grid
        if not folder.is_dir():
            continue
        steps = _grid_steps(grid, profile)
        for pointer in folder.rglob("checkpoints/latest"):  # runs in the grid's folder
            planned[pointer.parent.parent.relative_to(root).as_posix()] = steps
        manifest = folder / GRID_FILE
        records = json.loads(manifest.read_text()).get("configs", {}) if manifest.is_file() else {}
        for record in records.values():  # where each config's run lives (maybe another grid's, or notebook 04's)
            run = record.get("run")
            if run:
                planned[run] = max(planned.get(run, 0), record.get("changes", {}).get("n_grpo_steps", steps))
    extended = set()
    for run, steps in planned.items():
        done = _finished_steps(root / run)
        if done is not None and done < steps:
            extended.add(run)
    return extended


def prunable_runs(root: Path | None = None, keep: set[str] | None = None) -> list[disk.Prunable]:
    """The finished runs whose optimizer state may go: hw3lib.core.disk.prunable, less `extended_runs` and `keep`."""
    from hw3lib.core.io import runs_dir

    root = Path(root or runs_dir())
    if not root.is_dir():
        return []
    return disk.prunable(root, extended_runs(root) | set(keep or ()))


def prune_command(
    yes: bool = typer.Option(False, "--yes", help="Delete the listed optimizer states (without it: only list them)."),
    keep: Optional[list[str]] = typer.Option(None, "--keep", help="A run to leave whole (repeatable): one you will "
                                             "extend by hand with --resume --steps N."),
) -> None:
    """List (and with --yes delete) the AdamW state of finished runs that nothing extends."""
    from hw3lib.core.io import runs_dir, shown_path

    entries = prunable_runs(keep=set(keep or ()))
    if not entries:
        typer.echo(f"nothing to prune under {shown_path(runs_dir())}: no finished run holds optimizer state that "
                   "no grid extends")
        return
    for entry in entries:
        typer.echo(f"  {entry.run:48s} {disk.size(entry.bytes):>9s}  {shown_path(entry.optimizer)}")
    total = disk.size(sum(entry.bytes for entry in entries))
    if not yes:
        typer.echo(f"{len(entries)} finished run(s) hold {total} of optimizer state; nothing deleted: run "
                   "`hw3 runs prune-optimizer --yes` to delete it (those runs can then be read back, not extended)")
        return
    typer.echo(f"deleted {disk.size(disk.prune(entries))} of optimizer state from {len(entries)} finished run(s)")


def register(app: typer.Typer, name: str) -> None:
    """Add `hw3 <name> prune-optimizer` to the `hw3` app."""
    runs = typer.Typer(add_completion=False, no_args_is_help=True, help="Run folders: what they keep on disk.")
    runs.command(name="prune-optimizer", help=__doc__)(prune_command)
    app.add_typer(runs, name=name)
