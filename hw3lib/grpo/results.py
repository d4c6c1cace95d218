"""Reading a training run back: `RunResult`, per-phase time breakdown, summaries and saved samples.

Used by the notebooks, the ablations and the writeup; never loads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hw3lib.core.io import read_jsonl
from hw3lib.core.runs import SAMPLES_DIR, latest_checkpoint, metrics_rows
from hw3lib.grpo.config import GRPOConfig

TIME_PARTS = ("generation", "scoring", "old_logprobs", "train", "weight_sync")


@dataclass
class RunResult:
    """What a finished (or resumed-and-finished) run leaves behind."""

    run_dir: Path
    config: GRPOConfig
    metrics: list[dict]
    """Every row of metrics.jsonl (training rows have `train/loss`; validation rows `eval/answer_reward`)."""
    grpo_steps: int
    optimizer_steps: int
    skipped_steps: int
    elapsed_s: float
    """Wall-clock seconds of the loop (across resumes; excludes model loading and the warm start)."""
    checkpoint: Path | None

    @property
    def train_rows(self) -> list[dict]:
        return [row for row in self.metrics if "train/loss" in row]

    @property
    def eval_rows(self) -> list[dict]:
        return [row for row in self.metrics if "eval/answer_reward" in row]


def run_result(run_dir: Path, cfg: GRPOConfig, state: dict) -> RunResult:
    """The RunResult of `run_dir` as its files and the step counters `state` describe it."""
    return RunResult(run_dir=run_dir, config=cfg, metrics=metrics_rows(run_dir), grpo_steps=state["grpo_step"],
                     optimizer_steps=state["optimizer_step"], skipped_steps=state["skipped_steps"],
                     elapsed_s=state["elapsed_s"], checkpoint=latest_checkpoint(run_dir))


def validation_logged(rows: Sequence[dict], grpo_step: int) -> bool:
    """Whether the validation after `grpo_step` is in `rows` (a Ctrl-C during a validation leaves
    the step's checkpoint without its validation row)."""
    return any("eval/answer_reward" in row and row["grpo_step"] == grpo_step for row in rows)


def time_breakdown(metrics: Sequence[dict]) -> list[dict]:
    """Seconds per GRPO step by phase (`generation`, `scoring`, `old_logprobs`, `train`, `weight_sync`,
    `eval`): each rollout batch's optimizer-step rows summed, its validation (if any) added."""
    steps: dict[int, dict] = {}
    for row in metrics:
        step = row.get("grpo_step", 0)
        if step == 0:
            continue
        parts = steps.setdefault(step, {"grpo_step": step, **{part: 0.0 for part in (*TIME_PARTS, "eval")}})
        if "train/loss" in row:
            for part in TIME_PARTS:
                parts[part] += row[f"time/{part}_s"]
        if "time/eval_s" in row:
            parts["eval"] += row["time/eval_s"]
    return [steps[k] for k in sorted(steps)]


def run_summary(result: RunResult) -> dict:
    """Key numbers of a run for the writeup: validation before/after, rise, wall-clock, mean step time."""
    evals, rows = result.eval_rows, result.train_rows
    breakdown = time_breakdown(result.metrics)
    mean_parts = {part: float(np.mean([b[part] for b in breakdown])) if breakdown else 0.0
                  for part in (*TIME_PARTS, "eval")}
    return {
        "profile": result.config.profile, "model": result.config.model, "dataset": result.config.dataset,
        "loss_type": result.config.loss_type, "grpo_steps": result.grpo_steps,
        "optimizer_steps": result.optimizer_steps, "skipped_steps": result.skipped_steps,
        "eval_answer_reward_start": evals[0]["eval/answer_reward"] if evals else None,
        "eval_answer_reward_end": evals[-1]["eval/answer_reward"] if evals else None,
        "eval_answer_reward_rise": evals[-1]["eval/answer_reward"] - evals[0]["eval/answer_reward"] if evals else None,
        "eval_format_reward_end": evals[-1]["eval/format_reward"] if evals else None,
        "train_reward_first": rows[0]["train/reward"] if rows else None,
        "train_reward_last": rows[-1]["train/reward"] if rows else None,
        "wall_clock_s": result.elapsed_s,
        "mean_step_seconds_by_phase": mean_parts,
        "mean_tokens_per_s": float(np.mean([r["time/tokens_per_s"] for r in rows])) if rows else None,
    }


def load_samples(run_dir: str | Path, grpo_step: int) -> list[dict]:
    """The validation rollouts saved at `grpo_step` (samples/step_XXXX.jsonl)."""
    return read_jsonl(Path(run_dir) / SAMPLES_DIR / f"step_{grpo_step:04d}.jsonl")
