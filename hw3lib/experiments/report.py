"""Report of one experiment grid: a JSON summary of its findings and the course's written answers, from its runs.

`report_grid(result)` (notebook 05, once per grid after `run_sweep`) draws the grid's figures
(`hw3lib.experiments.plots.plot_grid`), writes `figures/grid_<name>.json` atomically and returns the summary;
the writeup (`writeup/grids.typ`) reads that file. `grid_summary(result)` is the summary alone. The ideas live in
their own modules -- this one only assembles them:

- `hw3lib.experiments.compare`: `rows` (final validation answer reward, rise, difference from the reference and its
  `noise`: paired on the shared questions where the runs saved them, the seed band of repeats or of the base's
  measured replicas, the verdict), and `pick_winner`;
- `hw3lib.experiments.trends`: `trends` (every logged metric, first vs last third of the GRPO steps, with its band)
  and `stability` (skipped steps, divergence, gradient-norm spike, reward drop, KL spike), and the KL drift;
- `hw3lib.experiments.selection`: `selection` (leaderboard only, else empty): how its preset was chosen;
- `hw3lib.experiments.answers`: `answers`, the sentences answering the grid's written question(s)
  (`GridSpec.answer`);
- `hw3lib.experiments.render`: every sentence's wording -- `reading` (each difference against its noise),
  `trend_sentences`, the rows' `text`, the one rendering of stability -- from the findings above.

`findings` holds the numbers and verdicts the sentences word: the seed band used (and where from), the smoke note
(`GridSpec.smoke_differs`, printed beside the verdicts in smoke), the winner and, for kl_drift, the KL drift.
"""

from __future__ import annotations

import math

from hw3lib.core.writeup_keys import config_settings, write_result
from hw3lib.experiments import answers as answer_builders
from hw3lib.experiments.compare import compare, pick_winner
from hw3lib.experiments.facts import Facts, metric_stats, reward_at, seconds_per_step  # noqa: F401 (public)
from hw3lib.experiments.grids import GRIDS, smoke_note
from hw3lib.experiments.render import noise_reading, row_text, trend_sentence
from hw3lib.experiments.runner import GridResult
from hw3lib.experiments.selection import leaderboard_selection, summary_choice  # noqa: F401 (public)
from hw3lib.experiments.trends import METRIC, METRICS, kl_drift, series, trend  # noqa: F401 (public)


def _finite(value):
    """JSON for the writeup: Typst cannot read NaN/inf, so those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _config_summary(result: GridResult, label: str) -> dict:
    run, record = result.results[label], result.records[label]
    return {"status": record["status"], "run": record.get("run"), "shared": record.get("shared", False),
            "changes": result.grid.changes[label], "loss_type": run.config.loss_type, "grpo_steps": run.grpo_steps,
            "wall_clock_s": run.elapsed_s,
            "metrics": {key: stats for key in METRICS if (stats := metric_stats(run, key)) is not None},
            "seconds_per_step": seconds_per_step(run),
            "eval": [{"grpo_step": e["grpo_step"], "elapsed_s": e["time/elapsed_s"], "answer_reward": e[METRIC]}
                     for e in run.eval_rows]}


def grid_findings(facts: Facts, rows: list[dict]) -> dict:
    """The grid-level findings: the seed band its verdicts used and where it came from, the smoke note, the
    winner (`pick_winner`) and, for a grid that logs KL, the KL drift of each config."""
    grid = facts.grid
    pick = pick_winner(rows, grid.reference)
    found = {"seed_band": facts.seed, "seed_source": facts.seed_source,
             "one_seed_per_config": all(len(labels) == 1 for labels in grid.groups.values()),
             "smoke_differs": smoke_note(grid.name, grid.profile),
             "winner": pick.winner["label"], "reference_won": pick.reference_won}
    if grid.name == "kl_drift":
        found["kl_drift"] = [kl_drift(facts, row) for row in rows]
    return found


def _answers(facts: Facts, note: str) -> list[str]:
    spec = GRIDS.get(facts.grid.name)
    builder = getattr(answer_builders, spec.answer if spec else "answer_generic")
    return builder(facts) + ([f"Smoke setting: {note}."] if note else [])


def grid_summary(result: GridResult, earlier: dict[str, dict] | None = None) -> dict:
    """The grid's findings, its noise reading, the trends and stability of its logged metrics and the answers
    to its written questions (JSON-able). `earlier`: for the leaderboard, the summaries of the grids it takes
    its settings from (default: read from figures/grid_<name>.json)."""
    grid = result.grid
    missing = [label for label in grid.configs if label not in result.results]
    if missing:
        raise ValueError(f"grid {grid.name!r}: no result for {', '.join(missing)}; run the grid (run_sweep) first")
    if any(not run.eval_rows for run in result.results.values()):
        raise ValueError(f"grid {grid.name!r}: a run has no validation rows; finish or resume it first")
    rows = compare(result)
    facts = Facts(result, rows, earlier)
    findings = grid_findings(facts, rows)
    trends = {group: facts.trends(group) for group in grid.groups}
    return _finite({
        "grid": grid.name, "profile": grid.profile, "model": grid.base.model, "dataset": grid.base.dataset,
        "settings": config_settings(grid.base),
        "question": grid.question, "reference": grid.reference, "n_grpo_steps": grid.steps_per_run,
        "n_eval": facts.ref["n"],
        "rows": [{**row, "text": row_text(row, grid.reference)} for row in rows],
        "findings": findings,
        "reading": noise_reading(rows, grid.reference, note=findings["smoke_differs"]),
        "configs": {label: _config_summary(result, label) for label in grid.configs},
        "answers": _answers(facts, findings["smoke_differs"]),
        "trends": trends,
        "trend_sentences": [trend_sentence(group, found) for group, found in trends.items()],
        "stability": {group: facts.stability(group) for group in grid.groups},
        "rationale": grid.rationale,
        "selection": leaderboard_selection(facts) if grid.name == "leaderboard" else [],
    })


def report_grid(result: GridResult) -> dict:
    """Plot the grid (`plot_grid`), then write `figures/grid_<name>.json` (the summary plus `figures`, the
    PNG names of its figures, `<grid>_<kind>.png`) atomically; returns the summary."""
    from hw3lib.experiments.plots import plot_grid

    summary = grid_summary(result)
    stems = plot_grid(result)
    summary["figures"] = [f"{stem}.png" for stem in stems.values()]
    write_result(f"grid_{result.grid.name}", summary)
    return summary
