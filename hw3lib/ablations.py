"""The standard GRPO ablations: one change each from a base config, run in turn, then compared.

Each entry of `ABLATIONS` is a function of the base `GRPOConfig` returning the settings it
changes, so an ablation stays valid whatever batch sizes the profile uses:

- `baseline`: the base config (`reinforce_with_baseline`, std normalization, masked-mean length
  normalization, on-policy: one epoch, one optimizer step per rollout batch);
- `no_baseline`: REINFORCE on raw rewards (no group mean subtracted);
- `no_std_normalization`: advantages are reward minus group mean, not divided by the group std
  (Dr. GRPO's choice);
- `constant_length_normalization`: per-sequence sums divided by the generation budget instead of
  each response's own length (Dr. GRPO);
- `grpo_clip_off_policy`: the clipped importance-ratio loss with two epochs over each rollout
  batch in two optimizer steps per epoch (four updates per batch: off-policy after the first);
- `grpo_no_clip_off_policy`: the same off-policy schedule without clipping.

`ablation_base(profile)` gives the common starting point: the profile's GRPO settings with the
course's baseline objective (the `smoke` profile's own recipe trains `grpo_clip` off-policy, so it
is switched back to `reinforce_with_baseline` with one optimizer step per rollout batch).

Every ablation starts from the same initial policy (the profile's model or its cached SFT warm
start) and the same seed, so differences come from the change alone. Runs are named
`<base name>_<ablation>` under `runs/`; `run_ablations(..., resume=True)` reuses finished runs and
continues interrupted ones from their checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hw3lib.results import RunResult
from hw3lib.train import train
from hw3lib.train_config import GRPOConfig


def _off_policy(loss_type: str) -> Callable[[GRPOConfig], dict]:
    def changes(base: GRPOConfig) -> dict:
        half = base.rollout_batch_size // 2
        # Keep the microbatch size: accumulation steps shrink with the optimizer batch.
        accumulation = max(1, half // base.micro_train_batch_size)
        return {"loss_type": loss_type, "epochs_per_rollout_batch": 2, "train_batch_size": half,
                "gradient_accumulation_steps": accumulation}
    return changes


ABLATIONS: dict[str, Callable[[GRPOConfig], dict]] = {
    "baseline": lambda base: {},
    "no_baseline": lambda base: {"loss_type": "no_baseline"},
    "no_std_normalization": lambda base: {"use_std_normalization": False},
    "constant_length_normalization": lambda base: {"length_normalization": "constant"},
    "grpo_clip_off_policy": _off_policy("grpo_clip"),
    "grpo_no_clip_off_policy": _off_policy("grpo_no_clip"),
}


def ablation_base(profile: str | None = None, **overrides) -> GRPOConfig:
    """The profile's GRPO config turned into the ablations' baseline, then `overrides` applied.

    Baseline: `reinforce_with_baseline`, one epoch, one optimizer step over the whole rollout batch
    (on-policy), keeping the profile's microbatch size (accumulation = rollout batch / microbatch).
    The `full` profile's config already is this (the course's defaults).
    """
    cfg = GRPOConfig.for_profile(profile)
    accumulation = max(1, cfg.rollout_batch_size // cfg.micro_train_batch_size)
    baseline = cfg.replace(loss_type="reinforce_with_baseline", epochs_per_rollout_batch=1,
                           train_batch_size=cfg.rollout_batch_size, gradient_accumulation_steps=accumulation)
    return baseline.replace(**overrides) if overrides else baseline


def ablation_configs(base: GRPOConfig, names: Sequence[str] | None = None) -> dict[str, GRPOConfig]:
    """The config of each named ablation (default: all), derived from `base`."""
    names = list(names) if names is not None else list(ABLATIONS)
    unknown = [name for name in names if name not in ABLATIONS]
    if unknown:
        raise ValueError(f"unknown ablations {unknown}: choose from {', '.join(ABLATIONS)}")
    return {name: base.replace(name=f"{base.name}_{name}", **ABLATIONS[name](base)) for name in names}


def run_ablations(base: GRPOConfig, names: Sequence[str] | None = None, resume: bool = True) -> dict[str, RunResult]:
    """Train each ablation in turn; with `resume`, finished runs are reused and broken ones continued."""
    results = {}
    for name, cfg in ablation_configs(base, names).items():
        print(f"=== ablation {name}", flush=True)
        results[name] = train(cfg, resume=resume)
    return results


def summarize(results: dict[str, RunResult]) -> list[dict]:
    """One row per ablation: validation answer reward at the start, the end and its best, and time."""
    rows = []
    for name, result in results.items():
        evals = result.eval_rows
        if not evals:
            raise ValueError(f"ablation {name}: run {result.run_dir} has no validation rows")
        rewards = [row["eval/answer_reward"] for row in evals]
        train_rows = result.train_rows
        rows.append({
            "ablation": name,
            "eval_answer_start": rewards[0],
            "eval_answer_end": rewards[-1],
            "eval_answer_best": max(rewards),
            "gain_points": 100 * (rewards[-1] - rewards[0]),
            "train_reward_mean": sum(r["train/reward"] for r in train_rows) / max(1, len(train_rows)),
            "optimizer_steps": result.optimizer_steps,
            "minutes": result.elapsed_s / 60,
        })
    return rows


def plot_ablations(results: dict[str, RunResult], path_stem: str = "ablations"):
    """Validation answer reward (left) and training reward per GRPO step (right) of every ablation,
    against GRPO step; saved as PDF and PNG."""
    import matplotlib.pyplot as plt

    from hw3lib.io import save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for name, result in results.items():
        evals = result.eval_rows
        line, = left.plot([row["grpo_step"] for row in evals], [row["eval/answer_reward"] for row in evals],
                          marker="o", label=name)
        # Every optimizer-step row of a rollout batch carries that batch's reward: one point per GRPO step.
        per_step = {row["grpo_step"]: row["train/reward"] for row in result.train_rows}
        right.plot(list(per_step), list(per_step.values()), color=line.get_color(), alpha=0.8, label=name)
    left.set(xlabel="GRPO step", ylabel="validation answer reward", title="held-out questions (greedy)")
    right.set(xlabel="GRPO step", ylabel="training reward", title="rollouts (sampled)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path_stem)
    return fig
