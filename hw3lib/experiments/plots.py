"""Plots of an experiment grid (hw3lib.experiments.grids), one function per kind, the same for every grid.

- `plot_reward`: validation answer reward against GRPO step and against wall-clock minutes, each
  point with its binomial noise band (2 s.e.), diverged runs marked x where they stopped;
- `plot_metrics`: panels of training entropy, gradient norm, response length, clip fraction and
  KL to the initial policy, per GRPO step (a panel no run logged says so);
- `plot_time_per_step`: mean seconds per GRPO step by phase, one stacked bar per config;
- `plot_kl_drift`: KL(pi || pi_ref) estimates k1 and k3 against step, beside validation reward;
- `plot_grid`: the kinds that fit a grid, saved as `figures/<grid>_<kind>.png|pdf` (stable names,
  listed in `FIGURE_KINDS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hw3lib.core.stats import accuracy_interval
from hw3lib.experiments.runner import GridResult
from hw3lib.core.io import save_figure
from hw3lib.grpo.results import TIME_PARTS, time_breakdown

# Training panels: (metric, axis label). KL is drawn as k3 (non-negative, low variance) with k1 dashed.
PANELS = (("train/entropy", "entropy (nats/token)"), ("train/grad_norm", "gradient norm (before clipping)"),
          ("train/response_length_mean", "response length (tokens)"), ("train/clip_fraction", "clip fraction"),
          ("train/kl_k3", "KL to initial policy (k3; k1 dashed)"))
FIGURE_KINDS = ("reward", "metrics", "time_per_step", "kl")
# Grids whose figures include the time-per-step bars / the KL drift plot.
TIMED_GRIDS = ("sync_strategy", "off_policy", "off_policy_focused")
KL_GRIDS = ("kl_drift",)


def per_grpo_step(rows: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """The mean of `key` over each GRPO step's optimizer-step rows (rows without it, or NaN, skipped)."""
    sums: dict[int, list[float]] = {}
    for row in rows:
        value = row.get(key)
        if "train/loss" in row and value is not None and math.isfinite(value):
            sums.setdefault(row["grpo_step"], []).append(value)
    steps = sorted(sums)
    return steps, [sum(sums[s]) / len(sums[s]) for s in steps]


def _label(result: GridResult, label: str) -> str:
    record = result.records[label]
    if record["status"] == "diverged":
        return f"{label} (diverged @ {record['stopped_at']})"
    return label + (" (shared)" if record.get("shared") else "")


def _title(result: GridResult) -> str:
    base = result.grid.base
    return f"{result.grid.name} · {base.profile} profile · {base.model} on {base.dataset}"


def plot_reward(result: GridResult, path_stem: str | None = None):
    """Validation answer reward vs GRPO step (left) and vs wall-clock minutes (right), each validation with its
    Wilson interval (`hw3lib.core.stats.wilson`, 2 s.e.) as a band."""
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for label, run in result.results.items():
        evals = run.eval_rows
        rewards = [row["eval/answer_reward"] for row in evals]
        bands = [accuracy_interval(p, row["eval/n"]) for p, row in zip(rewards, evals)]
        for ax, xs in ((by_step, [row["grpo_step"] for row in evals]),
                       (by_time, [row["time/elapsed_s"] / 60 for row in evals])):
            line, = ax.plot(xs, rewards, marker="o", markersize=3, label=_label(result, label))
            ax.fill_between(xs, [b.low for b in bands], [b.high for b in bands], color=line.get_color(), alpha=0.12)
            if result.diverged(label):
                ax.plot(xs[-1:], rewards[-1:], "x", color=line.get_color(), markersize=10, markeredgewidth=2)
    by_step.set(xlabel="GRPO step", ylabel="validation answer reward", title="per GRPO step")
    by_time.set(xlabel="wall-clock (minutes)", title="per wall-clock minute")
    for ax in (by_step, by_time):
        ax.grid(alpha=0.3)
    by_step.legend(fontsize=7)
    fig.suptitle(f"{_title(result)} (bands: 2 s.e., binomial)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path_stem or f"{result.grid.name}_reward")
    return fig


def plot_metrics(result: GridResult, path_stem: str | None = None):
    """Entropy, gradient norm, response length, clip fraction and KL per GRPO step, one line per config."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.6))
    for ax, (key, name) in zip(axes, PANELS):
        drawn = False
        for i, (label, run) in enumerate(result.results.items()):
            color = f"C{i}"
            steps, values = per_grpo_step(run.metrics, key)
            if steps:
                ax.plot(steps, values, color=color, label=_label(result, label))
                drawn = True
            if key == "train/kl_k3":
                steps, values = per_grpo_step(run.metrics, "train/kl_k1")
                if steps:
                    ax.plot(steps, values, "--", color=color, alpha=0.7)
        if not drawn:
            ax.text(0.5, 0.5, "not logged by these runs", ha="center", va="center", transform=ax.transAxes,
                    color="gray")
        ax.set(xlabel="GRPO step", title=name)
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(_title(result), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path_stem or f"{result.grid.name}_metrics")
    return fig


def plot_time_per_step(result: GridResult, path_stem: str | None = None):
    """Mean seconds per GRPO step by phase (generation, scoring, old log-probs, training, weight sync,
    validation), one stacked bar per config."""
    import matplotlib.pyplot as plt

    labels = list(result.results)
    means = {}
    for label in labels:
        steps = time_breakdown(result.results[label].metrics)
        means[label] = {part: sum(s[part] for s in steps) / max(1, len(steps)) for part in (*TIME_PARTS, "eval")}
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(labels) + 2), 4))
    bottom = [0.0] * len(labels)
    for part in (*TIME_PARTS, "eval"):
        heights = [means[label][part] for label in labels]
        ax.bar(labels, heights, bottom=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    for x, total in enumerate(bottom):
        ax.annotate(f"{total:.1f}s", (x, total), ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="seconds per GRPO step (mean)", title=_title(result))
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, path_stem or f"{result.grid.name}_time_per_step")
    return fig


def plot_kl_drift(result: GridResult, path_stem: str | None = None):
    """KL(pi || pi_ref) k1 and k3 per GRPO step (left axis) with validation answer reward (right axis)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    reward_ax = ax.twinx()
    for i, (label, run) in enumerate(result.results.items()):
        for key, style in (("train/kl_k3", "-"), ("train/kl_k1", "--")):
            steps, values = per_grpo_step(run.metrics, key)
            if steps:
                ax.plot(steps, values, style, color=f"C{i}", label=f"{label} {key.split('_')[-1]}")
        evals = run.eval_rows
        reward_ax.plot([r["grpo_step"] for r in evals], [r["eval/answer_reward"] for r in evals], ":o",
                       color=f"C{i}", markersize=3, alpha=0.8, label=f"{label} validation reward")
    ax.set(xlabel="GRPO step", ylabel="KL to the initial policy (nats/token)", title=_title(result))
    ax.title.set_fontsize(9)
    reward_ax.set_ylabel("validation answer reward")
    handles = ax.get_legend_handles_labels()
    more = reward_ax.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path_stem or f"{result.grid.name}_kl")
    return fig


def plot_grid(result: GridResult) -> dict[str, str]:
    """Every plot kind that fits the grid, saved as `figures/<grid>_<kind>`; `{kind: stem}`."""
    import matplotlib.pyplot as plt

    name = result.grid.name
    kinds = {"reward": plot_reward, "metrics": plot_metrics}
    if name in TIMED_GRIDS:
        kinds["time_per_step"] = plot_time_per_step
    if name in KL_GRIDS:
        kinds["kl"] = plot_kl_drift
    stems = {}
    for kind, function in kinds.items():
        stems[kind] = f"{name}_{kind}"
        plt.close(function(result, stems[kind]))
    return stems
