"""Notebook 05's view of the experiment grids: what each config changes, and one grid's results shown
(table, figures, the reading computed from the numbers) after `hw3lib.experiments.report.report_grid` has saved
its figures and the JSON the writeup reads -- or, for a grid the notebook skipped as an extra for the course
(`show_grid_if_run`), one line saying so and how to opt in."""

from __future__ import annotations

from hw3lib.experiments.grids import Grid, GridResult


def describe_changes(grid: Grid) -> list[str]:
    """One line per config: its label and the settings it changes from the grid's base. A model given as a
    local folder (the prompt grid's neutral warm start) is named by what it is, not by its path, so the
    lines read the same on every machine."""
    lines = []
    for label, changes in grid.changes.items():
        shown = {key: (_model_shown(value) if key == "model" else value) for key, value in changes.items()}
        lines.append(f"{grid.name}/{label:16s} {shown if shown else '(the base)'}")
    return lines


def _model_shown(model: str) -> str:
    """A model setting as `describe_changes` prints it: a warm start's folder by its recipe, another local folder
    as such, a hub id or name as it is."""
    import json
    from pathlib import Path

    recipe = Path(model) / "warm_start.json"
    if recipe.is_file():
        settings = json.loads(recipe.read_text(encoding="utf-8"))
        return f"<warm start: {settings['prompt']} format, {settings['steps']} SFT steps>"
    return "<a local model folder>" if Path(model).is_absolute() else model


def show_grid(result: GridResult) -> dict:
    """Report the grid (figures/<grid>_*.png and figures/grid_<grid>.json) and display its table, figures,
    reading and answers; returns the report."""
    import pandas as pd
    from IPython.display import Image, Markdown, display

    from hw3lib.experiments.report import report_grid
    from hw3lib.core.io import figures_dir

    report = report_grid(result)
    grid = result.grid
    display(Markdown(f"**{grid.name}** ({grid.profile} profile, `{grid.base.model}` on `{grid.base.dataset}`, "
                     f"{grid.steps_per_run} GRPO steps per run): {grid.question}"))
    table = pd.DataFrame([{"config": row["label"], "status": row["status"], "start": row["start"], "end": row["end"],
                           "vs reference": row["diff"], "noise band (±)": row["band"],
                           "beyond noise": row["beyond_noise"], "minutes": row["wall_clock_s"] / 60}
                          for row in report["rows"]]).set_index("config")
    display(table.round(3))
    for name in report["figures"]:
        display(Image(filename=str(figures_dir() / name)))
    answers = "\n".join(f"- {answer}" for answer in report.get("answers", []))
    display(Markdown(f"**Reading (computed from the runs).** {seed_line(report['findings'])}\n\n"
                     f"{report['reading']}\n\n{answers}"))
    return report


def seed_line(findings: dict) -> str:
    """Which run-to-run variation the grid's verdicts count, in one sentence (from `grid_summary`'s findings)."""
    if findings["seed_source"] == "repeats":
        return "Run-to-run variation: each config's seed repeats."
    if findings["seed_band"] is not None:
        return (f"One seed per config: every difference must also exceed the base recipe's measured seed band, "
                f"±{100 * findings['seed_band']:.1f} points.")
    return ("One seed per config and no seed band measured yet (`hw3lib.experiments.seeds.measure_seed_band`): "
            "run-to-run variation is not counted in these verdicts.")


def show_grid_if_run(results: dict[str, GridResult], name: str, course=None) -> dict | None:
    """`show_grid(results[name])` if the notebook ran grid `name`; else (skipped as an extra for `course`, see
    hw3lib.core.course.sections_to_run) print one line saying so and how to opt in, and return None."""
    if name in results:
        return show_grid(results[name])
    from hw3lib.experiments.parallel import GRID_SECTIONS
    from hw3lib.experiments.plan import skipped_note

    print(skipped_note(GRID_SECTIONS[name], course))
    return None
