"""The SFT and expert-iteration experiments of notebook 05: configs, runs, summaries, plots, noise band.

- `sft_size_configs(base, sizes)`: one SFT run per number of unique examples (`None`: all), plus
  `filtered` (the traces whose final answer is graded correct), all else equal to `base`;
- `ei_variant_configs(base, variants)`: expert-iteration runs that each change G, SFT epochs per
  round or questions per round;
- `run_all(function, configs)`: run each in turn (`resume=True`: finished runs are read back);
- `sft_summary`, `ei_summary`: one row per run; `plot_sft`, `plot_ei`: the curves (saved to figures/);
- `difference_band(p, n)`: two standard errors of the difference of two accuracies on n questions,
  the noise a gap must exceed before it counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hw3lib.sft_config import EIConfig, SFTConfig
from hw3lib.sft_train import LoopResult, trace_summary

SFT_SIZES = (128, 256, 512, 1024, None)


def size_label(n_examples: int | None) -> str:
    return "all" if n_examples is None else str(n_examples)


def sft_size_configs(base: SFTConfig, sizes: Sequence[int | None] = SFT_SIZES,
                     filtered: bool = True) -> dict[str, SFTConfig]:
    """`{label: config}`: one run per size (label `128`, ..., `all`) and, with `filtered`, the filtered run."""
    configs = {size_label(n): base.replace(name=f"{base.name}_{size_label(n)}", n_examples=n) for n in sizes}
    if filtered:
        configs["filtered"] = base.replace(name=f"{base.name}_filtered", n_examples=None, filter_correct=True)
    return configs


def ei_variant_configs(base: EIConfig, variants: dict[str, dict]) -> dict[str, EIConfig]:
    """`{label: config}`: `base` changed by each variant's settings (e.g. `{"G4": {"group_size": 4}}`)."""
    return {label: base.replace(name=f"{base.name}_{label}", **changes) for label, changes in variants.items()}


def run_all(function: Callable[..., LoopResult], configs: dict, resume: bool = True) -> dict[str, LoopResult]:
    """Run each config in turn with `function` (train_sft or expert_iteration)."""
    results = {}
    for label, cfg in configs.items():
        print(f"=== {label}", flush=True)
        results[label] = function(cfg, resume=resume)
    return results


def difference_band(p: float, n: int) -> float:
    """Two standard errors of the difference of two independent accuracies near `p` on `n` questions each."""
    return 2 * math.sqrt(2 * p * (1 - p) / n)


def sft_summary(results: dict[str, LoopResult]) -> list[dict]:
    """One row per SFT run: traces used, validation answer reward start/end/best, held-out trace NLL, train loss."""
    rows = []
    for label, result in results.items():
        evals, traces = result.eval_rows, trace_summary(result.run_dir)
        rewards = [row["eval/answer_reward"] for row in evals]
        rows.append({"run": label, "unique_examples": traces["n_used"], "noisy_traces": traces["n_noisy_used"],
                     "eval_answer_start": rewards[0], "eval_answer_end": rewards[-1], "eval_answer_best": max(rewards),
                     "heldout_trace_nll_end": evals[-1]["eval/trace_nll"],
                     "train_loss_end": result.train_rows[-1]["train/loss"],
                     "eval_entropy_end": evals[-1]["eval/entropy"], "minutes": result.elapsed_s / 60})
    return rows


def ei_summary(results: dict[str, LoopResult]) -> list[dict]:
    """One row per EI run: its settings, validation answer reward start/end, rollouts, steps, entropy first/last."""
    rows = []
    for label, result in results.items():
        cfg, evals = result.config, result.eval_rows
        rounds = [row for row in result.metrics if "ei/kept" in row]
        rows.append({"run": label, "G": cfg.group_size, "sft_epochs": cfg.sft_epochs,
                     "questions_per_round": cfg.questions_per_round, "rounds": result.steps,
                     "eval_answer_start": evals[0]["eval/answer_reward"], "eval_answer_end": evals[-1]["eval/answer_reward"],
                     "rollouts": rounds[-1]["rollouts"], "optimizer_steps": rounds[-1]["step"],
                     "kept_fraction_first": rounds[0]["ei/kept_fraction"], "kept_fraction_last": rounds[-1]["ei/kept_fraction"],
                     "entropy_first": rounds[0]["train/entropy"], "entropy_last": rounds[-1]["train/entropy"],
                     "minutes": result.elapsed_s / 60})
    return rows


def plot_sft(results: dict[str, LoopResult], path_stem: str = "sft_sizes"):
    """Validation answer reward (left) and held-out trace NLL (right) against optimizer step, one line per run."""
    import matplotlib.pyplot as plt

    from hw3lib.io import save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for label, result in results.items():
        evals = result.eval_rows
        steps = [row["step"] for row in evals]
        line, = left.plot(steps, [row["eval/answer_reward"] for row in evals], marker="o", label=label)
        right.plot(steps, [row["eval/trace_nll"] for row in evals], marker="o", color=line.get_color(), label=label)
    left.set(xlabel="optimizer step", ylabel="validation answer reward", title="held-out questions (greedy)")
    right.set(xlabel="optimizer step", ylabel="NLL per token", title="held-out reference traces")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8, title="unique examples")
    fig.tight_layout()
    save_figure(fig, path_stem)
    return fig


def plot_ei(ei: dict[str, LoopResult], sft: LoopResult | None = None, grpo=None, grpo_rollouts_per_step: int = 0,
            path_stem: str = "expert_iteration"):
    """Validation answer reward per optimizer step and per rollout generated (EI runs, an SFT run, a GRPO
    run), and the entropy of each round's rollouts."""
    import matplotlib.pyplot as plt

    from hw3lib.io import save_figure

    fig, (by_step, by_rollout, entropy) = plt.subplots(1, 3, figsize=(15, 4))
    for label, result in ei.items():
        evals = result.eval_rows
        line, = by_step.plot([r["step"] for r in evals], [r["eval/answer_reward"] for r in evals], marker="o",
                             label=f"EI {label}")
        by_rollout.plot([r["rollouts"] for r in evals], [r["eval/answer_reward"] for r in evals], marker="o",
                        color=line.get_color(), label=f"EI {label}")
        rounds = [r for r in result.metrics if "ei/kept" in r]
        entropy.plot([r["round"] for r in rounds], [r["train/entropy"] for r in rounds], marker="o",
                     color=line.get_color(), label=f"EI {label}")
    if grpo is not None:
        evals = grpo.eval_rows
        by_step.plot([r["step"] for r in evals], [r["eval/answer_reward"] for r in evals], "k--", marker="s",
                     label="GRPO")
        by_rollout.plot([r["grpo_step"] * grpo_rollouts_per_step for r in evals],
                        [r["eval/answer_reward"] for r in evals], "k--", marker="s", label="GRPO")
    if sft is not None:
        evals = sft.eval_rows
        by_step.plot([r["step"] for r in evals], [r["eval/answer_reward"] for r in evals], ":", color="gray",
                     marker="^", label="SFT (traces, no rollouts)")
    by_step.set(xlabel="optimizer step", ylabel="validation answer reward", title="per optimizer step")
    by_rollout.set(xlabel="rollouts generated", ylabel="validation answer reward", title="per rollout generated")
    entropy.set(xlabel="EI round", ylabel="mean token entropy (nats)", title="entropy of the round's rollouts")
    for ax in (by_step, by_rollout, entropy):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path_stem)
    return fig
