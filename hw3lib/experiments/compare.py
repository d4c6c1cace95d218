"""A grid's runs against its reference: final values, differences, their noise, and one pick of the winner.

`compare(result)` gives one row per config group: start, end, rise, the difference from the reference and its
`Noise` (`hw3lib.core.stats`) --

- question sampling: paired over the shared held-out questions when both runs kept every question's outcome at
  their last validation (`paired_outcomes`; runs keep them since `save_validation`), else the unpaired band of the
  two rates (the row says which);
- run-to-run variation: with seed repeats in the grid, the spread of the repeats (`spread_band`); with one seed per
  config, the seed band measured on the base recipe's seed replicas (`hw3lib.experiments.seeds`), when it has been
  measured for the profile (`seed_source` says which, or None).

A difference is beyond noise only when it exceeds both. `pick_winner(rows, reference)` is the one choice of a
grid's winner, used by `choices_from` (the next grids' settings) and by the leaderboard's selection (read back
from the grids' summaries).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from hw3lib.core.io import runs_dir
from hw3lib.core.stats import Noise, SeedBand, compare_outcomes, seed_band, spread_band, unpaired_band
from hw3lib.evaluation.validate import paired_outcomes
from hw3lib.experiments.runner import GridResult

METRIC = "eval/answer_reward"
SEED_GRID = "seed_replicas"
"""The base recipe's seed replicas (`hw3lib.experiments.seeds`), under runs/<SEED_GRID>/."""
SEED_BAND_FILE = "seed_band.json"


def read_seed_band(profile: str) -> SeedBand | None:
    """The base recipe's measured seed band for `profile` (runs/seed_replicas/seed_band.json, written by
    `hw3lib.experiments.seeds.measure_seed_band`), or None where it has not been measured for that profile."""
    path = runs_dir() / SEED_GRID / SEED_BAND_FILE
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    if stored.get("profile") != profile:
        return None
    return seed_band(stored["values"])  # recomputed: a file from before the t multiplier holds a z band


def group_noise(result: GridResult, group: str, other: str, seed_band: float | None = None,
                metric: str = METRIC) -> Noise:
    """Noise of group `group`'s mean final value minus group `other`'s: paired when each group is one run and both
    saved every question, else unpaired over all their runs' questions; the seed band of the repeats' spread when
    both groups have repeats, else `seed_band` (the base's, or None)."""
    runs = {g: [result.results[label] for label in result.grid.groups[g]] for g in (group, other)}
    finals = {g: [run.eval_rows[-1][metric] for run in rs] for g, rs in runs.items()}
    n = {g: rs[0].eval_rows[-1]["eval/n"] * len(rs) for g, rs in runs.items()}
    mean = {g: statistics.fmean(values) for g, values in finals.items()}
    spread = spread_band(finals[group], finals[other])
    seed = spread if spread is not None else seed_band
    if len(runs[group]) == 1 and len(runs[other]) == 1:
        outcomes = paired_outcomes(runs[group][0], runs[other][0])
        return compare_outcomes(*outcomes, mean[group], n[group], mean[other], n[other], seed)
    return Noise(mean[group] - mean[other], unpaired_band(mean[group], n[group], mean[other], n[other]), False, seed)


def seed_context(result: GridResult) -> tuple[float | None, str | None]:
    """(the seed band one-seed differences must exceed, where it comes from): `repeats` when the grid has seed
    repeats (each comparison uses its own), `base replicas` when the base's measured band is known for the
    profile, else (None, None)."""
    if all(len(labels) > 1 for labels in result.grid.groups.values()):
        return None, "repeats"
    measured = read_seed_band(result.grid.profile)
    return (measured.band, "base replicas") if measured is not None else (None, None)


def compare(result: GridResult, metric: str = METRIC) -> list[dict]:
    """One row per config group: its final validation value (mean over seed repeats), start, rise, the difference
    from the reference, its noise (`noise`: `Noise.to_dict`; `band`: the larger of the question and seed bands,
    the one the difference must exceed) and the verdict (`beyond_noise`)."""
    grid = result.grid
    seed, source = seed_context(result)
    ref_end = statistics.fmean(result.results[label].eval_rows[-1][metric] for label in grid.groups[grid.reference])
    rows = []
    for group, labels in grid.groups.items():
        evals = [result.results[label].eval_rows for label in labels]
        end = statistics.fmean(e[-1][metric] for e in evals)
        start = statistics.fmean(e[0][metric] for e in evals)
        noise = group_noise(result, group, grid.reference, seed, metric) if group != grid.reference else None
        record = result.records[labels[0]]
        rows.append({
            "label": group, "status": "diverged" if any(result.diverged(label) for label in labels) else "finished",
            "reason": record.get("reason"), "stopped_at": record.get("stopped_at"), "start": start, "end": end,
            "rise": end - start, "seeds": len(labels), "n": evals[0][-1]["eval/n"],
            "diff": end - ref_end,
            "band": max(noise.band, noise.seed_band or 0.0) if noise else 0.0,
            "noise": noise.to_dict() if noise else None, "seed_source": source,
            "beyond_noise": bool(noise and noise.beyond),
            "wall_clock_s": sum(result.records[label]["wall_clock_s"] for label in labels) / len(labels)})
    return rows


def row_noise(row: dict) -> Noise:
    """The `Noise` of a `compare` row (as stored in a summary)."""
    found = row["noise"]
    return Noise(found["diff"], found["band"], found["paired"], found["seed_band"], found["p_value"])


@dataclass(frozen=True)
class Winner:
    """A grid's pick: `winner` (a row), whether the reference stands, the finished rows best first and the best
    row other than the reference."""

    winner: dict
    reference_won: bool
    ranked: list[dict]
    best_other: dict | None


def pick_winner(rows: list[dict], reference: str) -> Winner:
    """The best-ending config that did not diverge if it beats the reference beyond noise, else the reference."""
    ref = next(row for row in rows if row["label"] == reference)
    ranked = sorted((row for row in rows if row["status"] != "diverged"), key=lambda row: -row["end"])
    winner = next((row for row in ranked if row["beyond_noise"] and row["diff"] > 0), ref)
    return Winner(winner, winner is ref, ranked, next((row for row in ranked if row["label"] != reference), None))
