"""The SFT and expert-iteration experiments of notebook 05: configs, runs, summaries, plots, noise band.

- `sft_size_configs(base, sizes)`: one SFT run per number of unique examples (`None`: all), plus
  `filtered` (the traces whose final answer is graded correct), all else equal to `base`;
- `ei_variant_configs(base, variants)`: expert-iteration runs that each change G, SFT epochs per
  round or questions per round;
- `run_all(function, configs)`: run each in turn (`resume=True`: finished runs are read back);
- `sft_summary`, `ei_summary`: one row per run; `plot_sft`, `plot_ei`: the curves (saved to figures/);
- `versus(a, b)`: run a's validation minus run b's with its noise (`hw3lib.core.stats`): paired over the held-out
  questions from the generations both runs wrote, the noise a gap must exceed before it counts;
- `sft_ei_reading(...)`: the notebook's reading of sections 5-7, computed from the runs: the SFT and EI
  paragraphs and the summary that notebook 05 writes to `figures/sft_ei.json` for writeup/sft.typ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hw3lib.sft.config import EIConfig, SFTConfig
from hw3lib.core.lifecycle import RunResult
from hw3lib.core.io import read_jsonl
from hw3lib.core.stats import Noise, compare_outcomes, noise_words, question_outcomes, unpaired_band
from hw3lib.core.writeup_keys import config_settings
from hw3lib.evaluation.validate import validation_label
from hw3lib.sft.loop import GENERATIONS_DIR, trace_summary

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
    """Run each config in turn with `function` (train_sft or expert_iteration; on a GPU with vLLM each run trains in
    a process of its own, hw3lib.core.own_process, so the notebook's kernel never holds a second engine)."""
    results = {}
    for label, cfg in configs.items():
        print(f"=== {label}", flush=True)
        results[label] = function(cfg, resume=resume)
    return results


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


def _generations(result: RunResult, which: int) -> list[dict]:
    """The rows of the run's first (`which=0`) or last (-1) validation's generations file ([] where none)."""
    if result.run_dir is None:
        return []
    files = sorted((Path(result.run_dir) / GENERATIONS_DIR).glob("*.jsonl"))
    return read_jsonl(files[which]) if files else []


def validation_outcomes(result: RunResult, which: int = -1) -> list[int] | None:
    """Per-question answer rewards of the run's first (`which=0`) or last (-1) validation, from the generations it
    wrote (`generations/<counter>_XXXX.jsonl`, every held-out question); None where none were written."""
    rows = _generations(result, which)
    return question_outcomes(rows, len(rows)) if rows else None


def versus(a: RunResult, b: RunResult, which_a: int = -1, which_b: int = -1) -> Noise:
    """Run a's validation answer reward minus run b's (`which`: first 0 / last -1 validation) and its noise: paired
    over the held-out questions when both wrote their generations for the same prompts in the same order, else
    unpaired."""
    row_a, row_b = a.eval_rows[which_a], b.eval_rows[which_b]
    gen_a, gen_b = _generations(a, which_a), _generations(b, which_b)
    same = bool(gen_a) and [g.get("prompt") for g in gen_a] == [g.get("prompt") for g in gen_b]
    outcomes_a = question_outcomes(gen_a, len(gen_a)) if same else None
    outcomes_b = question_outcomes(gen_b, len(gen_b)) if same else None
    return compare_outcomes(outcomes_a, outcomes_b, row_a["eval/answer_reward"], row_a["eval/n"],
                            row_b["eval/answer_reward"], row_b["eval/n"])


@dataclass(frozen=True)
class SFTFindings:
    """The SFT reading's numbers: the size gap (largest minus smallest run), filtered minus all, and whether the
    held-out trace NLL falls with every larger size and the small runs' training loss ends lower."""

    smallest: str
    largest: str
    size_gap: Noise
    filter_gap: Noise
    nll_falls: bool
    memorizes: bool

    def to_dict(self) -> dict:
        return {"smallest": self.smallest, "largest": self.largest, "size_gap": self.size_gap.to_dict(),
                "filter_gap": self.filter_gap.to_dict(), "nll_falls": self.nll_falls, "memorizes": self.memorizes}


def sft_findings(sft_results: dict[str, RunResult], sft_rows: list[dict]) -> SFTFindings:
    """`SFTFindings` of the SFT runs (`sft_summary`'s rows, sizes in order, then `filtered`)."""
    by_size = [r for r in sft_rows if r["run"] != "filtered"]
    smallest, largest = by_size[0], by_size[-1]
    return SFTFindings(
        smallest["run"], largest["run"], versus(sft_results[largest["run"]], sft_results[smallest["run"]]),
        versus(sft_results["filtered"], sft_results["all"]),
        all(b["heldout_trace_nll_end"] < a["heldout_trace_nll_end"] for a, b in zip(by_size, by_size[1:])),
        smallest["train_loss_end"] < largest["train_loss_end"])


def sft_ei_reading(sft_results: dict[str, RunResult], ei_results: dict[str, RunResult], grpo=None,
                   grpo_rollouts_per_step: int = 0, section_seconds: float | None = None) -> tuple[str, str, dict]:
    """`(SFT paragraph, EI paragraph, summary)` for notebook 05's reading cell, all computed from the runs.

    `sft_results` must hold the `all` and `filtered` runs of `sft_size_configs` (the sizes in order);
    `grpo` is a GRPO `RunResult` on the same held-out questions (or None) and `grpo_rollouts_per_step`
    its rollout batch size. Every gap between two validations is compared on the shared held-out questions
    (`versus`: paired over the generations each run wrote, else the unpaired band). The summary holds the keys
    writeup/sft.typ reads, and `findings` (the numbers and verdicts the paragraphs word).
    """
    sft_rows, ei_rows = sft_summary(sft_results), ei_summary(ei_results)
    sft_base = sft_results["all"].config
    n_eval = sft_results["all"].eval_rows[-1]["eval/n"]
    found = sft_findings(sft_results, sft_rows)
    all_row = next(r for r in sft_rows if r["run"] == "all")
    filtered = next(r for r in sft_rows if r["run"] == "filtered")
    sft_reading = _sft_paragraph(sft_base, sft_rows, found)
    ei_found = {r["run"]: ei_run_findings(ei_results[r["run"]], r) for r in ei_rows}
    ei_reading = _ei_paragraph(ei_rows, ei_results, ei_found)
    findings = {"sft": found.to_dict(), "ei": {run: {k: v.to_dict() for k, v in f.items()} for run, f in
                                               ei_found.items()}}
    if ei_rows:
        best = max(ei_rows, key=lambda r: r["eval_answer_end"])
        gap = versus(ei_results[best["run"]], sft_results["all"])
        findings["ei_versus_sft"] = {"run": best["run"], **gap.to_dict()}
        ei_reading += " " + _ei_versus_sft(best, all_row, gap)
    thresholds = _thresholds(all_row, ei_rows, sft_base.profile)
    summary = {
        "profile": sft_base.profile, "dataset": sft_base.dataset, "sft_model": sft_base.model,
        "arithmetic_max_operand": sft_base.arithmetic_max_operand,
        "ei_model": next(iter(ei_results.values())).config.model if ei_results else None,
        "sft_steps": sft_base.n_sft_steps, "sft_batch_size": sft_base.train_batch_size, "n_eval": n_eval,
        "validation": validation_label(sft_base),
        "trace_noise": sft_base.trace_noise, "noise_band": found.size_gap.band, "pool_size": all_row["unique_examples"],
        "filtered_size": filtered["unique_examples"], "sft_rows": sft_rows, "ei_rows": ei_rows,
        "sft_reading": sft_reading, "section_seconds": section_seconds, "thresholds": thresholds,
        "settings": config_settings(sft_base), "findings": findings}
    if grpo is not None:
        text, grpo_summary = _grpo_comparison(grpo, sft_base, grpo_rollouts_per_step)
        ei_reading += text
        summary.update(grpo_summary)
    summary["ei_reading"] = ei_reading
    return sft_reading, ei_reading, summary


def _sft_paragraph(sft_base, sft_rows: list[dict], found: SFTFindings) -> str:
    """`SFTFindings` in words."""
    by_size = [r for r in sft_rows if r["run"] != "filtered"]
    smallest, largest = by_size[0], by_size[-1]
    all_row = next(r for r in sft_rows if r["run"] == "all")
    filtered = next(r for r in sft_rows if r["run"] == "filtered")
    per_size = ", ".join(f"{r['run']}: {r['eval_answer_end']:.1%} (NLL {r['heldout_trace_nll_end']:.3f}, "
                         f"train loss {r['train_loss_end']:.3f})" for r in by_size)
    return (
        f"After {sft_base.n_sft_steps} steps of {sft_base.train_batch_size} traces, final validation accuracy and "
        f"held-out trace NLL per number of unique examples: {per_size}. From {smallest['unique_examples']} to "
        f"{largest['unique_examples']} unique examples accuracy moved {100 * found.size_gap.diff:+.1f} points, "
        f"{noise_words(found.size_gap)}; the held-out trace NLL "
        + ("falls with every doubling of the data" if found.nll_falls else "does not fall monotonically with the data")
        + (" while the small runs drive their training loss far lower: they memorize their few traces instead of "
           "learning the task" if found.memorizes else "")
        + f". The filtered run ({filtered['unique_examples']} of {all_row['unique_examples']} traces kept) ended at "
        f"{filtered['eval_answer_end']:.1%} against {all_row['eval_answer_end']:.1%} for all traces "
        f"({100 * found.filter_gap.diff:+.1f} points, {noise_words(found.filter_gap)}).")


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


def _ei_versus_sft(best: dict, all_row: dict, gap: Noise) -> str:
    """The handout's comparison in words: the best EI run against SFT on the full set of teacher traces."""
    relation = "within noise of" if not gap.beyond else "above" if gap.diff > 0 else "below"
    return (f"Against SFT: the best EI run ({best['run']}) ended at {best['eval_answer_end']:.1%}, {relation} SFT on "
            f"all {all_row['unique_examples']} teacher traces ({all_row['eval_answer_end']:.1%}; "
            f"{100 * gap.diff:+.1f} points, {noise_words(gap)}), learning only from {best['rollouts']} rollouts of "
            f"its own, filtered by the reward, with no teacher traces.")


def ei_run_findings(result: RunResult, row: dict) -> dict[str, Noise]:
    """One EI run's two gaps: `validation` (last minus first validation, on the same held-out questions) and
    `train` (the last round's sampled reward minus the first's: fresh questions each round, so unpaired, counted
    in questions, not rollouts -- a question's rollouts are correlated, so this is conservative)."""
    q = result.config.questions_per_round
    train = Noise(row["train_reward_last"] - row["train_reward_first"],
                  unpaired_band(row["train_reward_last"], q, row["train_reward_first"], q))
    return {"validation": versus(result, result, -1, 0), "train": train}


def _ei_paragraph(ei_rows: list[dict], ei_results: dict[str, RunResult], found: dict[str, dict[str, Noise]]) -> str:
    """The EI sentence per run: validation curve and gap, rollouts, optimizer steps, the rounds' own reward and
    entropy, each gap worded with its noise (`ei_run_findings`)."""
    ei_parts = []
    for r in ei_rows:
        curve = [row["eval/answer_reward"] for row in ei_results[r["run"]].eval_rows]
        cfg = ei_results[r["run"]].config
        gaps = found[r["run"]]
        ei_parts.append(
            f"EI {r['run']}: {' -> '.join(f'{x:.1%}' for x in curve)} over {r['rounds']} rounds "
            f"({100 * gaps['validation'].diff:+.1f} points, {noise_words(gaps['validation'])}) with {r['rollouts']} "
            f"rollouts and {r['optimizer_steps']} optimizer steps; the reward of the round's own sampled rollouts "
            f"(temperature {cfg.sampling_temperature:g}, {cfg.rollouts_per_round} per round on fresh questions) went "
            f"{r['train_reward_first']:.1%} -> {r['train_reward_last']:.1%} ({100 * gaps['train'].diff:+.1f} points, "
            f"{noise_words(gaps['train'])}, counted in questions), rollout entropy "
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
