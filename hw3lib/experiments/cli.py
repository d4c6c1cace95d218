"""`hw3 sweep NAME`: run one experiment grid (hw3lib.experiments.grids) and print its reading.

Examples:

    hw3 sweep --list                                  # the grids and what each asks
    hw3 sweep baselines --profile smoke               # runs/baselines/<config>/, figures/baselines_*.png|pdf
    hw3 sweep learning_rate --profile full            # the course's sizes, 200 GRPO steps per run
    hw3 sweep clip_ablation --profile smoke --steps 10   # runs off_policy, off_policy_focused, the seed replicas first
    hw3 sweep all --profile smoke --workers 2         # every grid, two at a time (hw3lib.experiments.parallel)
    hw3 sweep all --profile full                      # every grid, one per visible GPU (CUDA_VISIBLE_DEVICES)

Finished runs are reused, interrupted ones resumed, identical configs shared between grids;
diverged runs stop early and are reported as such (see hw3lib.experiments.grids). A shorter `--steps`
than a grid's runs already have is refused (runs only grow); use another HW3_RUNS_DIR to keep both.
"""

from __future__ import annotations

from typing import Optional

import typer


def sweep_command(
    name: Optional[str] = typer.Argument(None, help="Grid name (see --list), or `all`."),
    profile: Optional[str] = typer.Option(None, help="smoke or full (default: $HW3_PROFILE, else full on a GPU)."),
    steps: Optional[int] = typer.Option(None, min=1, help="GRPO steps per run (default: the profile's; the broad "
                                        "off-policy sweep runs a fraction of it)."),
    seeds: Optional[list[int]] = typer.Option(None, "--seed", help="Repeat every config with these seeds "
                                              "(repeatable; default: the profile's seed only)."),
    list_grids: bool = typer.Option(False, "--list", help="List the grids and exit."),
    plots: bool = typer.Option(True, help="Save figures/<grid>_*.png|pdf and figures/grid_<grid>.json (the writeup's)."),
    workers: Optional[int] = typer.Option(None, min=1, help="With `all`: grids run at a time (default: smoke 2, each "
                                          "on its share of the cores; full one per visible GPU, never more)."),
) -> None:
    """Run an experiment grid; print a table of its runs and which differences exceed noise."""
    from hw3lib.experiments.grids import GRIDS

    if list_grids or name is None:
        for grid, spec in GRIDS.items():
            typer.echo(f"{grid:22s} {spec.question}")
        if name is None and not list_grids:
            raise typer.Exit(2)
        return
    if name not in (*GRIDS, "all"):
        raise typer.BadParameter(f"unknown grid {name!r}: choose one of {', '.join(GRIDS)} or all", param_hint="NAME")
    if name == "all" and seeds:
        raise typer.BadParameter("--seed repeats one grid at a time: name the grid", param_hint="--seed")
    # A run folder holding other settings, a shorter --steps than the runs have, a grid worker that failed
    # (SweepWorkerError names its log): one line each (hw3lib.cli).
    if name == "all":
        from hw3lib.experiments.parallel import run_grids_parallel

        results = run_grids_parallel(profile, steps, workers=workers)
    else:
        from hw3lib.experiments.seeds import sweep  # run_sweep, the seed band first where the grid picks winners

        results = {name: sweep(name, profile, steps, seeds or None)}
    for result in results.values():
        _print_grid(result, plots)


def _print_grid(result, plots: bool) -> None:
    from hw3lib.experiments.compare import compare
    from hw3lib.experiments.grids import smoke_note
    from hw3lib.experiments.render import noise_reading

    name = result.grid.name
    typer.echo(f"\n{name}: {result.grid.question} ({result.grid.profile} profile, {result.grid.base.model})")
    rows = compare(result)
    for row in rows:
        typer.echo(f"  {row['label']:24s} {row['status']:9s} start {row['start']:6.1%}  end {row['end']:6.1%}  "
                   f"vs reference {100 * row['diff']:+6.1f} ± {100 * row['band']:.1f} points  "
                   f"{row['wall_clock_s'] / 60:5.1f} min  ({result.records[row['label']]['run']})")
    typer.echo(noise_reading(rows, result.grid.reference, note=smoke_note(result.grid.name, result.grid.profile)))
    if plots:  # the figures and figures/grid_<name>.json, which the writeup reads
        from hw3lib.experiments.report import report_grid

        report = report_grid(result)
        typer.echo("figures: " + ", ".join(f"figures/{name}" for name in report["figures"]))


def register(app: typer.Typer, name: str) -> None:
    """Add the sweep command to the `hw3` app as `hw3 <name>`."""
    app.command(name=name, help=__doc__)(sweep_command)
