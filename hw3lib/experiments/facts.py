"""The numbers the answer builders read from a grid's runs: per-run metric statistics, seconds per step, the
reward reached at a wall-clock time, and `Facts` (a grid's rows by group, group means, and the noise of any
difference between its runs, from `hw3lib.experiments.compare` and `hw3lib.core.stats`)."""

from __future__ import annotations

import dataclasses

from hw3lib.core.lifecycle import RunResult
from hw3lib.core.stats import Noise, seed_band, unpaired_band
from hw3lib.experiments.compare import group_noise, read_seed_band, seed_context
from hw3lib.experiments.plots import per_grpo_step
from hw3lib.experiments.render import render_stability
from hw3lib.experiments.runner import GridResult
from hw3lib.experiments.trends import METRIC, METRIC_NAMES, config_stability, metric_trends
from hw3lib.grpo.results import rise_noise, time_breakdown

PHASES = ("generation", "scoring", "old_logprobs", "train", "weight_sync", "eval")


def metric_stats(run: RunResult, key: str) -> dict | None:
    """First, mean and last per-GRPO-step value of `key` (finite values only), or None if not logged."""
    steps, values = per_grpo_step(run.metrics, key)
    if not steps:
        return None
    return {"first": values[0], "mean": sum(values) / len(values), "last": values[-1], "steps": len(steps)}


def seconds_per_step(run: RunResult) -> dict:
    """Mean seconds per GRPO step by phase (`hw3lib.grpo.results.time_breakdown`) and their `total`."""
    steps = time_breakdown(run.metrics)
    means = {part: sum(s[part] for s in steps) / len(steps) if steps else 0.0 for part in PHASES}
    return {**means, "total": sum(means.values())}


def reward_at(run: RunResult, seconds: float) -> float:
    """The validation answer reward the run had reached `seconds` into its wall-clock: its last
    validation logged at or before then (the first one if none was)."""
    evals = run.eval_rows
    reached = [row for row in evals if row["time/elapsed_s"] <= seconds]
    return (reached or evals[:1])[-1][METRIC]


class Facts:
    """A grid's numbers for the answer builders: compare rows by group, group means of run metrics."""

    def __init__(self, result: GridResult, rows: list[dict], earlier: dict[str, dict] | None = None):
        self.result, self.grid = result, result.grid
        self.rows = {row["label"]: row for row in rows}
        self.ref = self.rows[self.grid.reference]
        self.others = [row for row in rows if row["label"] != self.grid.reference]
        self.earlier = earlier
        """The leaderboard's contributing grids' summaries (None: read from figures/grid_<name>.json)."""
        self.seed, self.seed_source = seed_context(result)
        """The seed band one-seed differences must exceed (None: not measured) and where it comes from."""
        self._trends: dict[str, dict] = {}

    def trends(self, group: str) -> dict[str, dict]:
        """`metric_trends` of the group (seed repeats averaged per GRPO step)."""
        if group not in self._trends:
            self._trends[group] = metric_trends(self.runs(group))
        return self._trends[group]

    def trend_text(self, group: str, key: str) -> str:
        found = self.trends(group).get(key)
        return found["text"] if found else f"{METRIC_NAMES[key]}: not logged"

    def stability(self, group: str) -> dict:
        """`config_stability` of the group, with `text`: its one rendering (a list of one sentence)."""
        found = config_stability(self.runs(group), [self.result.records[label] for label in self.grid.groups[group]])
        return {**found, "text": [render_stability(group, found)]}

    def runs(self, group: str) -> list[RunResult]:
        return [self.result.results[label] for label in self.grid.groups[group]]

    def config(self, group: str):
        return self.runs(group)[0].config

    def stat(self, group: str, key: str, which: str = "mean") -> float | None:
        """`which` (first / mean / last) of a metric, averaged over the group's seed repeats."""
        stats = [metric_stats(run, key) for run in self.runs(group)]
        values = [s[which] for s in stats if s is not None]
        return sum(values) / len(values) if values else None

    def seconds(self, group: str) -> dict:
        per_run = [seconds_per_step(run) for run in self.runs(group)]
        return {part: sum(p[part] for p in per_run) / len(per_run) for part in per_run[0]}

    def wall_clock_s(self, group: str) -> float:
        """Mean wall-clock seconds at the group's last validation."""
        runs = self.runs(group)
        return sum(run.eval_rows[-1]["time/elapsed_s"] for run in runs) / len(runs)

    def reward_at(self, group: str, seconds: float) -> float:
        runs = self.runs(group)
        return sum(reward_at(run, seconds) for run in runs) / len(runs)

    def finals(self, group: str) -> list[float]:
        return [run.eval_rows[-1][METRIC] for run in self.runs(group)]

    def versus(self, a: str, b: str) -> Noise:
        """Group a's final validation reward minus group b's and its noise, as `compare` computes it against the
        reference (paired where both saved every question; the seed band of the repeats or of the base)."""
        return group_noise(self.result, a, b, self.seed)

    def rise(self, group: str) -> Noise:
        """The group's validation reward at its end minus its start (the same questions): paired where the run
        saved every question at both validations, else unpaired; with `rise_seed_band`."""
        runs, seed = self.runs(group), self.rise_seed_band(group)
        found = rise_noise(runs[0]) if len(runs) == 1 else None
        if found is not None:
            return dataclasses.replace(found, seed_band=seed)
        row = self.rows[group]
        return Noise(row["rise"], unpaired_band(row["end"], row["n"], row["start"], row["n"]), False, seed)

    def rise_seed_band(self, group: str) -> float | None:
        """The run-to-run band of the group's rise: every seed starts from the same warm start on the same
        questions, so only the end varies (`SeedBand.for_rise`: no sqrt 2 of a two-run difference). From the
        group's own seed repeats when it has them, else the base recipe's measured replicas (None when neither is
        known)."""
        runs = self.runs(group)
        band = seed_band(self.finals(group)) if len(runs) > 1 else read_seed_band(self.grid.profile)
        return band.for_rise(len(runs)) if band is not None else None

    def unpaired(self, p1: float, p2: float) -> Noise:
        """p1 - p2 for two validation rewards on the reference's questions known only as rates (e.g. at a common
        wall-clock time, reached at different validations): the unpaired band, and the seed band."""
        return Noise(p1 - p2, unpaired_band(p1, self.ref["n"], p2, self.ref["n"]), False, self.seed)

    def finished(self) -> list[dict]:
        """Rows that did not diverge, best final validation reward first."""
        return sorted((r for r in self.rows.values() if r["status"] != "diverged"), key=lambda r: -r["end"])

    def diverged(self) -> list[dict]:
        return [r for r in self.rows.values() if r["status"] == "diverged"]
