"""Reading a GRPO run back: per-phase time breakdown, summaries and saved samples (the result type,
`RunResult`, is every run's: hw3lib.core.lifecycle).

Used by the notebooks, the ablations and the writeup; never loads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hw3lib.core.io import read_jsonl
from hw3lib.core.lifecycle import RunResult
from hw3lib.core.runs import SAMPLES_DIR
from hw3lib.core.stats import Noise, compare_outcomes, noise_words
from hw3lib.core.writeup_keys import config_settings

TIME_PARTS = ("generation", "scoring", "old_logprobs", "train", "weight_sync")


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


def rise_noise(result: RunResult) -> Noise | None:
    """The run's validation answer reward at its last validation minus its first, with its noise: the same
    questions, so paired (exact McNemar) when both validations kept every question's outcome, else the unpaired
    band of the two rates; None before a second validation."""
    from hw3lib.evaluation.validate import paired_outcomes

    evals = result.eval_rows
    if len(evals) < 2:
        return None
    first, last = evals[0], evals[-1]
    return compare_outcomes(*paired_outcomes(result, result, -1, 0), last["eval/answer_reward"], last["eval/n"],
                            first["eval/answer_reward"], first["eval/n"])


def run_summary(result: RunResult) -> dict:
    """Key numbers of a run for the writeup: validation before/after, rise (with its noise verdict), wall-clock,
    mean step time."""
    evals, rows = result.eval_rows, result.train_rows
    rise = rise_noise(result)
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
        "eval_answer_reward_rise_noise": rise.to_dict() if rise else None,
        "eval_answer_reward_rise_words": noise_words(rise) if rise else None,
        "eval_format_reward_end": evals[-1]["eval/format_reward"] if evals else None,
        "train_reward_first": rows[0]["train/reward"] if rows else None,
        "train_reward_last": rows[-1]["train/reward"] if rows else None,
        "wall_clock_s": result.elapsed_s,
        "mean_step_seconds_by_phase": mean_parts,
        "mean_tokens_per_s": float(np.mean([r["time/tokens_per_s"] for r in rows])) if rows else None,
        "example_rollouts": rollouts_over_time(result),
        "settings": config_settings(result.config),
    }


def learning_sentence(summary: dict, result: RunResult) -> str:
    """Notebook 04's headline, in Markdown: the validation answer reward at the run's start and end, the rise with
    its noise verdict (`rise_noise`, as `run_summary` stored it), the wall-clock and the run's size."""
    from hw3lib.evaluation.validate import validation_label

    verdict = summary.get("eval_answer_reward_rise_words")
    rise = f"{100 * summary['eval_answer_reward_rise']:+.1f} points" + (f": {verdict}" if verdict else "")
    cfg = result.config
    return (f"Validation answer reward went from **{summary['eval_answer_reward_start']:.1%}** to "
            f"**{summary['eval_answer_reward_end']:.1%}** ({rise}) in {summary['wall_clock_s'] / 60:.1f} minutes of "
            f"training ({result.grpo_steps} GRPO steps, {result.optimizer_steps} optimizer steps, "
            f"{len(result.eval_rows)} validations on {cfg.n_eval_examples} held-out questions, "
            f"{validation_label(cfg)}).")


def rollouts_over_time(result: RunResult, questions: int = 2, moments: int = 3, max_chars: int = 240) -> list[dict]:
    """A few validation rollouts followed through training (the handouts ask for examples over time).

    For each of the first `questions` saved validation questions, its rollout at `moments` validated
    GRPO steps spread over the run (first, middle, last): the response (its last `max_chars`
    characters, where the answer is) and its rewards. Steps whose samples file is missing are skipped.
    """
    steps = sorted({row["grpo_step"] for row in result.eval_rows if "grpo_step" in row})
    if not steps:
        return []
    picked = sorted({steps[round(i * (len(steps) - 1) / max(moments - 1, 1))] for i in range(moments)})
    saved = {}
    for step in picked:
        try:
            saved[step] = load_samples(result.run_dir, step)
        except FileNotFoundError:
            continue
    examples = []
    for q in range(questions):
        over_time = [{"grpo_step": step, "response": rows[q]["response"][-max_chars:],
                      "answer_reward": rows[q]["answer_reward"], "format_reward": rows[q]["format_reward"]}
                     for step, rows in saved.items() if q < len(rows)]
        if over_time:
            first = saved[over_time[0]["grpo_step"]][q]
            examples.append({"question": first["question"], "gold": first["gold"], "steps": over_time})
    return examples


def load_samples(run_dir: str | Path, grpo_step: int) -> list[dict]:
    """The validation rollouts saved at `grpo_step` (samples/step_XXXX.jsonl)."""
    return read_jsonl(Path(run_dir) / SAMPLES_DIR / f"step_{grpo_step:04d}.jsonl")
