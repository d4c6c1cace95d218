"""The SFT and expert-iteration experiments of notebook 05: configs, runs, summaries, plots, noise band.

- `sft_size_configs(base, sizes)`: one SFT run per number of unique examples (`None`: all), plus
  `filtered` (the traces whose final answer is graded correct), all else equal to `base`;
- `ei_variant_configs(base, variants)`: expert-iteration runs that each change G, SFT epochs per
  round or questions per round;
- `run_all(function, configs)`: run each in turn (`resume=True`: finished runs are read back);
- `sft_summary`, `ei_summary`: one row per run; `plot_sft`, `plot_ei`: the curves (saved to figures/);
- `difference_band(p, n)`: two standard errors of the difference of two accuracies on n questions,
  the noise a gap must exceed before it counts;
- `sft_ei_reading(...)`: the notebook's reading of sections 5-7, computed from the runs: the SFT and EI
  paragraphs and the summary that notebook 05 writes to `figures/sft_ei.json` for writeup/sft.typ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hw3lib.sft.config import EIConfig, SFTConfig
from hw3lib.core.lifecycle import RunResult
from hw3lib.core.writeup_keys import config_settings
from hw3lib.evaluation.validate import validation_label
from hw3lib.sft.loop import trace_summary

SFT_SIZES = (128, 256, 512, 1024, None)  # the MATH handout's sizes (None: the full set)
# The MATH handout's expert-iteration runs: n_ei_steps = 5 (EIConfig's default), question batch D_b in
# {512, 1024, 2048}, and G and the SFT epochs per round varied (from D_b = 512).
EI_VARIANTS = {
    "Db512": {}, "Db1024": {"questions_per_round": 1024}, "Db2048": {"questions_per_round": 2048},
    "Db512_G4": {"group_size": 4}, "Db512_epochs2": {"sft_epochs": 2},
}
# The MATH handouts' thresholds (stated for the full profile, Qwen2.5-Math-1.5B on MATH): SFT on the full set and
# expert iteration should each reach at least 15% validation accuracy. The reading states met / not met with the value
# in every profile; a tiny smoke model is not expected to meet them.
SFT_FULL_THRESHOLD = 0.15
EI_THRESHOLD = 0.15
# The smoke profile's sizes: each run needs 300 steps on 2 CPU cores before size matters (hw3lib.sft.config), so CI
# runs three sizes spanning the range rather than five.
SMOKE_SFT_SIZES = (128, 512, None)


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


def run_all(function: Callable[..., RunResult], configs: dict, resume: bool = True) -> dict[str, RunResult]:
    """Run each config in turn with `function` (train_sft or expert_iteration)."""
    results = {}
    for label, cfg in configs.items():
        print(f"=== {label}", flush=True)
        results[label] = function(cfg, resume=resume)
    return results


def difference_band(p: float, n: int) -> float:
    """Two standard errors of the difference of two independent accuracies near `p` on `n` questions each."""
    return 2 * math.sqrt(2 * p * (1 - p) / n)


def sft_summary(results: dict[str, RunResult]) -> list[dict]:
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


def ei_summary(results: dict[str, RunResult]) -> list[dict]:
    """One row per EI run: its settings, validation answer reward start/end, rollouts, steps, entropy first/last."""
    rows = []
    for label, result in results.items():
        cfg, evals = result.config, result.eval_rows
        rounds = [row for row in result.metrics if "ei/kept" in row]
        rows.append({"run": label, "G": cfg.group_size, "sft_epochs": cfg.sft_epochs,
                     "questions_per_round": cfg.questions_per_round, "rounds": result.steps,
                     "eval_answer_start": evals[0]["eval/answer_reward"], "eval_answer_end": evals[-1]["eval/answer_reward"],
                     "rollouts": rounds[-1]["rollouts"], "optimizer_steps": rounds[-1]["step"],
                     "train_reward_first": rounds[0]["train/reward"], "train_reward_last": rounds[-1]["train/reward"],
                     "kept_fraction_first": rounds[0]["ei/kept_fraction"], "kept_fraction_last": rounds[-1]["ei/kept_fraction"],
                     "entropy_first": rounds[0]["train/entropy"], "entropy_last": rounds[-1]["train/entropy"],
                     "minutes": result.elapsed_s / 60})
    return rows


def plot_sft(results: dict[str, RunResult], path_stem: str = "sft_sizes"):
    """Validation answer reward (left) and held-out trace NLL (right) against optimizer step, one line per run."""
    import matplotlib.pyplot as plt

    from hw3lib.core.io import save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for label, result in results.items():
        evals = result.eval_rows
        steps = [row["step"] for row in evals]
        line, = left.plot(steps, [row["eval/answer_reward"] for row in evals], marker="o", label=label)
        right.plot(steps, [row["eval/trace_nll"] for row in evals], marker="o", color=line.get_color(), label=label)
    first = next(iter(results.values()), None)
    how = validation_label(first.config) if first is not None else ""
    left.set(xlabel="optimizer step", ylabel="validation answer reward", title=f"held-out questions ({how})")
    right.set(xlabel="optimizer step", ylabel="NLL per token", title="held-out reference traces")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8, title="unique examples")
    fig.tight_layout()
    save_figure(fig, path_stem)
    return fig


def plot_ei(ei: dict[str, RunResult], sft: RunResult | None = None, grpo=None, grpo_rollouts_per_step: int = 0,
            path_stem: str = "expert_iteration"):
    """Validation answer reward per optimizer step and per rollout generated (EI runs, an SFT run, a GRPO
    run), and the entropy of each round's rollouts."""
    import matplotlib.pyplot as plt

    from hw3lib.core.io import save_figure

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


def _verdict(gap: float, band: float) -> str:
    return "beyond" if abs(gap) > band else "within"


def sft_ei_reading(sft_results: dict[str, RunResult], ei_results: dict[str, RunResult], grpo=None,
                   grpo_rollouts_per_step: int = 0, section_seconds: float | None = None) -> tuple[str, str, dict]:
    """`(SFT paragraph, EI paragraph, summary)` for notebook 05's reading cell, all computed from the runs.

    `sft_results` must hold the `all` and `filtered` runs of `sft_size_configs` (the sizes in order);
    `grpo` is a GRPO `RunResult` on the same held-out questions (or None) and `grpo_rollouts_per_step`
    its rollout batch size. Every gap is compared with `difference_band` at the mean of the two
    accuracies on the `eval/n` held-out questions. The summary holds the keys writeup/sft.typ reads.
    """
    sft_rows, ei_rows = sft_summary(sft_results), ei_summary(ei_results)
    sft_base = sft_results["all"].config
    n_eval = sft_results["all"].eval_rows[-1]["eval/n"]

    def band_for(*accuracies: float) -> float:
        p = sum(accuracies) / len(accuracies)
        return difference_band(min(max(p, 0.01), 0.99), n_eval)

    all_row = next(r for r in sft_rows if r["run"] == "all")
    filtered = next(r for r in sft_rows if r["run"] == "filtered")
    by_size = [r for r in sft_rows if r["run"] != "filtered"]
    smallest, largest = by_size[0], by_size[-1]
    gap = largest["eval_answer_end"] - smallest["eval_answer_end"]
    band = band_for(smallest["eval_answer_end"], largest["eval_answer_end"])
    filter_gap = filtered["eval_answer_end"] - all_row["eval_answer_end"]
    nll_falls = all(b["heldout_trace_nll_end"] < a["heldout_trace_nll_end"] for a, b in zip(by_size, by_size[1:]))
    per_size = ", ".join(f"{r['run']}: {r['eval_answer_end']:.1%} (NLL {r['heldout_trace_nll_end']:.3f}, "
                         f"train loss {r['train_loss_end']:.3f})" for r in by_size)
    sft_reading = (
        f"After {sft_base.n_sft_steps} steps of {sft_base.train_batch_size} traces, final validation accuracy and "
        f"held-out trace NLL per number of unique examples: {per_size}. From {smallest['unique_examples']} to "
        f"{largest['unique_examples']} unique examples accuracy moved {100 * gap:+.1f} points, "
        f"{_verdict(gap, band)} the {100 * band:.1f}-point noise band; the held-out trace NLL "
        + ("falls with every doubling of the data" if nll_falls else "does not fall monotonically with the data")
        + (" while the small runs drive their training loss far lower: they memorize their few traces instead of "
           "learning the task" if smallest["train_loss_end"] < largest["train_loss_end"] else "")
        + f". The filtered run ({filtered['unique_examples']} of {all_row['unique_examples']} traces kept) ended at "
        f"{filtered['eval_answer_end']:.1%} against {all_row['eval_answer_end']:.1%} for all traces "
        f"({100 * filter_gap:+.1f} points, {_verdict(filter_gap, band_for(filtered['eval_answer_end'], all_row['eval_answer_end']))} "
        f"the noise band).")

    ei_reading = _ei_paragraph(ei_rows, ei_results, band_for)
    if ei_rows:
        ei_reading += " " + _ei_versus_sft(ei_rows, all_row, band_for)
    thresholds = _thresholds(all_row, ei_rows, sft_base.profile)
    summary = {
        "profile": sft_base.profile, "dataset": sft_base.dataset, "sft_model": sft_base.model,
        "arithmetic_max_operand": sft_base.arithmetic_max_operand,
        "ei_model": next(iter(ei_results.values())).config.model if ei_results else None,
        "sft_steps": sft_base.n_sft_steps, "sft_batch_size": sft_base.train_batch_size, "n_eval": n_eval,
        "validation": validation_label(sft_base),
        "trace_noise": sft_base.trace_noise, "noise_band": band, "pool_size": all_row["unique_examples"],
        "filtered_size": filtered["unique_examples"], "sft_rows": sft_rows, "ei_rows": ei_rows,
        "sft_reading": sft_reading, "section_seconds": section_seconds, "thresholds": thresholds,
        "settings": config_settings(sft_base)}
    if grpo is not None:
        text, grpo_summary = _grpo_comparison(grpo, sft_base, grpo_rollouts_per_step)
        ei_reading += text
        summary.update(grpo_summary)
    summary["ei_reading"] = ei_reading
    return sft_reading, ei_reading, summary

def _thresholds(all_row: dict, ei_rows: list[dict], profile: str) -> list[dict]:
    """The handouts' 15% checks: SFT on the full set (run `all`) and the best EI run, met or not, with the value."""
    checks = [("SFT on the full set (run `all`)", all_row["eval_answer_end"], SFT_FULL_THRESHOLD)]
    if ei_rows:
        best = max(ei_rows, key=lambda r: r["eval_answer_end"])
        checks.append((f"expert iteration (best run, `{best['run']}`)", best["eval_answer_end"], EI_THRESHOLD))
    return [{"what": what, "value": value, "threshold": threshold, "met": value >= threshold,
             "text": f"{what}: {value:.1%} against the handout's {threshold:.0%}: "
                     + ("met" if value >= threshold else "not met")
                     + (" (the threshold is for the full profile's model; this is the smoke profile)"
                        if profile == "smoke" else "") + "."}
            for what, value, threshold in checks]


def _ei_versus_sft(ei_rows: list[dict], all_row: dict, band_for) -> str:
    """The handout's comparison: expert iteration against SFT on the full set of teacher traces."""
    best = max(ei_rows, key=lambda r: r["eval_answer_end"])
    gap = best["eval_answer_end"] - all_row["eval_answer_end"]
    band = band_for(best["eval_answer_end"], all_row["eval_answer_end"])
    verdict = ("within noise of" if abs(gap) <= band else "above" if gap > 0 else "below")
    return (f"Against SFT: the best EI run ({best['run']}) ended at {best['eval_answer_end']:.1%}, {verdict} SFT on all "
            f"{all_row['unique_examples']} teacher traces ({all_row['eval_answer_end']:.1%}; {100 * gap:+.1f} points, "
            f"band {100 * band:.1f}), learning only from {best['rollouts']} rollouts of its own, filtered by the "
            f"reward, with no teacher traces.")


def _ei_paragraph(ei_rows: list[dict], ei_results: dict[str, RunResult], band_for) -> str:
    """The EI sentence per run: validation curve and gap, rollouts, optimizer steps, the rounds' own
    reward and entropy, each gap against its noise band (`band_for(*accuracies)`)."""
    ei_parts = []
    for r in ei_rows:
        curve = [row["eval/answer_reward"] for row in ei_results[r["run"]].eval_rows]
        ei_gap = r["eval_answer_end"] - r["eval_answer_start"]
        cfg = ei_results[r["run"]].config
        n_round = cfg.rollouts_per_round
        train_gap = r["train_reward_last"] - r["train_reward_first"]
        # Rollouts of one question are correlated, so the band counts questions, not rollouts (conservative).
        p_train = min(max((r["train_reward_first"] + r["train_reward_last"]) / 2, 0.01), 0.99)
        train_band = difference_band(p_train, cfg.questions_per_round)
        ei_parts.append(
            f"EI {r['run']}: {' -> '.join(f'{x:.1%}' for x in curve)} over {r['rounds']} rounds "
            f"({100 * ei_gap:+.1f} points, {_verdict(ei_gap, band_for(r['eval_answer_start'], r['eval_answer_end']))} "
            f"the {100 * band_for(r['eval_answer_start'], r['eval_answer_end']):.1f}-point band) with {r['rollouts']} "
            f"rollouts and {r['optimizer_steps']} optimizer steps; the reward of the round's own sampled rollouts "
            f"(temperature {cfg.sampling_temperature:g}, {n_round} per round on fresh questions) went "
            f"{r['train_reward_first']:.1%} -> {r['train_reward_last']:.1%} ({100 * train_gap:+.1f} points, "
            f"{_verdict(train_gap, train_band)} its {100 * train_band:.1f}-point band), rollout entropy "
            f"{r['entropy_first']:.3f} -> {r['entropy_last']:.3f} nats")
    return "; ".join(ei_parts) + "."


def _grpo_comparison(grpo: RunResult, sft_base, grpo_rollouts_per_step: int) -> tuple[str, dict]:
    """The sentence comparing a GRPO run with EI (same held-out questions or not), and its summary keys."""
    grpo_evals = grpo.eval_rows
    same_task = all(getattr(grpo.config, key) == getattr(sft_base, key)
                    for key in ("dataset", "arithmetic_max_operand", "n_eval_examples", "seed"))
    text = (f" GRPO ({grpo.config.name}): {grpo_evals[0]['eval/answer_reward']:.1%} -> "
            f"{grpo_evals[-1]['eval/answer_reward']:.1%} with {grpo.grpo_steps * grpo_rollouts_per_step} rollouts and "
            f"{grpo.optimizer_steps} optimizer steps"
            + ("" if same_task else " (on its own task settings, so not the same held-out questions)") + ".")
    return text, {"grpo_run": grpo.config.name, "grpo_start": grpo_evals[0]["eval/answer_reward"],
                  "grpo_end": grpo_evals[-1]["eval/answer_reward"], "grpo_steps": grpo.grpo_steps,
                  "grpo_rollouts": grpo.grpo_steps * grpo_rollouts_per_step,
                  "grpo_optimizer_steps": grpo.optimizer_steps, "grpo_same_questions": same_task}
