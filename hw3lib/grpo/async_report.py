"""Synchronous vs asynchronous GRPO side by side: run the schedules, break down their time, plot, read.

    results = run_schedules(cfg, {"sync": None, "one_behind": AsyncConfig(), "replay": AsyncConfig(mode="replay")})
    rows = schedule_table(results)            # steps/min, time per step by component, validation
    plot_schedule_times(results, "async_time"); plot_schedule_rewards(results, "async_reward")
    text = schedule_reading(rows)             # the course's questions, answered from these numbers

Every schedule trains the same config (its own run name `<cfg.name>_<schedule>`), so differences
come from the schedule alone. Time per GRPO step is split per worker: the *generator* side
(generating and scoring rollouts) and the *learner* side (log-probs, loss, backward, optimizer),
each busy or idle; weight sync counts for both. In the synchronous loop one process does both
halves in turn, so each half is idle while the other runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hw3lib.grpo.async_loop import REPLAY_FILE, TIMINGS_FILE, AsyncConfig, train_async
from hw3lib.core.io import read_json, read_jsonl, save_figure
from hw3lib.core.lifecycle import RunResult
from hw3lib.core.writeup_keys import config_settings
from hw3lib.core.stats import Noise, compare_outcomes, noise_words
from hw3lib.evaluation.validate import read_outcomes
from hw3lib.grpo.results import time_breakdown
from hw3lib.grpo.loop import train
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.local_ray import start_local_ray


# Off-policyness bounds of the replay schedules: each group trained up to twice, at most this many policy
# versions after the one that sampled it (the comparison's three lags).
REPLAY_LAGS = (1, 2, 4)
REPLAY_MAX_USES = 2


# The full profile's engine shares tried, largest first, when both actors share one GPU (`one_gpu_settings`), each
# without and then with gradient checkpointing.
ASYNC_ONE_GPU_SHARES = (0.35, 0.3, 0.25, 0.2)


def one_gpu_settings(cfg: GRPOConfig) -> dict:
    """The engine share (and gradient checkpointing) under which `cfg`'s asynchronous run fits one GPU by the memory
    model -- the generator's engine awake beside the training learner, within the plan's headroom -- on the card here
    (a simulated one in the rehearsal), else an 80 GB card: the largest share of `ASYNC_ONE_GPU_SHARES`, without
    checkpointing where that fits. Planned at the data's longest prompt as the tables estimate it
    (`preflight.expected_prompt_tokens`, an upper bound; the run then measures its own and its preflight checks
    that). On 79.2 GiB: Qwen3-0.6B 0.35; Qwen2.5-Math-1.5B 0.25 with checkpointing; OLMo-2-0425-1B 0.25. None
    fitting: the first (the preflight then names what would)."""
    from hw3lib.core import preflight

    shape, _ = preflight.resolve_shape(cfg.model)
    candidates = [{"gpu_memory_utilization": share, "gradient_checkpointing": checkpointing}
                  for share in ASYNC_ONE_GPU_SHARES for checkpointing in (False, True)]
    if shape is None:
        return candidates[0]
    info = preflight.detect_device()
    card, free = (info.total_bytes, info.free_bytes) if info.kind == "cuda" else (int(79.2 * preflight.GiB), 0)
    expected = cfg.replace(prompt_tokens=preflight.expected_prompt_tokens(cfg))
    for changes in candidates:
        if preflight.plan_for(expected.replace(**changes), "async", shape, card, free).fits:
            return changes
    return candidates[0]


def schedule_comparison(profile: str | None = None, **overrides) -> tuple[GRPOConfig, dict[str, AsyncConfig | None]]:
    """The notebook's comparison: a config on which the synchronous loop learns and generation and training
    take similar time, and the schedules -- sync, one-behind, and replay with each group trained up to
    `REPLAY_MAX_USES` times at most `lag` policy versions old, for each lag in `REPLAY_LAGS` (a buffer of
    max(2, lag) rollout batches).

    smoke: the warm-started tiny model on the MATH course's generated task (under either course: its ~55-token
    worked answers make generation about half of a step, where the arithmetic task's ~19 tokens leave
    generation a third and overlap gains nothing; measured 0.88x), 200 GRPO steps of 64 rollouts (8 questions
    x 8), one `grpo_clip` optimizer step per rollout batch at lr 2e-4, validation sampled on 512 problems.
    Measured synchronously: 0.430 -> 0.545 in 200 steps (0.605 in 400), 2 standard errors of the difference
    ~6 points; bench/bench_async.py times the schedules at this setting. full: the profile's own model and
    sizes for 50 steps (on one GPU both actors share it; see hw3lib.grpo.async_loop).
    """
    from hw3lib.core.profile import get_profile

    name = get_profile(profile).name
    if name == "smoke":
        settings = dict(dataset="math-synthetic", n_grpo_steps=200, rollout_batch_size=64, group_size=8,
                        train_batch_size=64, gradient_accumulation_steps=2, epochs_per_rollout_batch=1, eval_every=50,
                        checkpoint_every=50, learning_rate=2e-4)
    else:  # one GPU holds the generator's engine awake beside the training learner (and its sleeping validation
        # engine): the share (and checkpointing) the memory model fits on this card (`one_gpu_settings`)
        settings = dict(n_grpo_steps=50, eval_every=10, checkpoint_every=10)
    cfg = GRPOConfig.for_profile(name, name=f"async_{name}", loss_type="grpo_clip", **{**settings, **overrides})
    if name == "full" and not {"gpu_memory_utilization", "gradient_checkpointing"} & set(overrides):
        cfg = cfg.replace(**one_gpu_settings(cfg))
    schedules: dict[str, AsyncConfig | None] = {"sync": None,
                                                "one_behind": AsyncConfig(mode="one_behind", max_staleness=1)}
    for lag in REPLAY_LAGS:
        schedules[f"replay_lag{lag}"] = AsyncConfig(mode="replay", max_staleness=lag, max_uses=REPLAY_MAX_USES,
                                                    buffer_batches=max(2, lag))
    return cfg, schedules


def run_schedules(cfg: GRPOConfig, schedules: Mapping[str, AsyncConfig | None], resume: bool = True,
                  sync_threads: int | None = None) -> dict[str, RunResult]:
    """Train `cfg` once per schedule (None: the synchronous loop with `sync_threads` torch threads, by default
    as many as an async run's two actors use together, within `hw3lib.core.devices.cpu_threads`);
    finished runs are reused, interrupted ones resumed. One local Ray instance serves all async runs."""
    import ray
    import torch

    from hw3lib.core.devices import cpu_threads

    if sync_threads is None:
        actors = AsyncConfig()
        sync_threads = min(actors.generator_threads + actors.learner_threads, cpu_threads())

    results: dict[str, RunResult] = {}
    started_ray = False
    try:
        for name, async_cfg in schedules.items():
            run_cfg = cfg.replace(name=f"{cfg.name}_{name}")
            if async_cfg is None:
                threads = torch.get_num_threads()
                torch.set_num_threads(sync_threads)
                try:
                    results[name] = train(run_cfg, resume=resume)
                finally:
                    torch.set_num_threads(threads)
            else:
                if not ray.is_initialized():
                    start_local_ray(num_cpus=2)
                    started_ray = True
                results[name] = train_async(run_cfg, async_cfg, resume=resume)
    finally:
        if started_ray:
            ray.shutdown()
    return results


def step_times(result: RunResult) -> list[dict]:
    """Seconds per GRPO step: wall-clock, and each side's busy time (`generation`, `training`,
    `weight_sync`) -- from async_timings.jsonl for async runs, metrics.jsonl for the synchronous loop
    (validation excluded on both)."""
    timings_file = result.run_dir / TIMINGS_FILE
    if timings_file.is_file():
        return [{"grpo_step": t["grpo_step"], "wall": t["step_s"], "generation": t["generation_s"],
                 "training": t["train_s"], "weight_sync": t["weight_sync_s"]} for t in read_jsonl(timings_file)]
    rows = []
    for parts in time_breakdown(result.metrics):
        generation = parts["generation"] + parts["scoring"]
        training = parts["old_logprobs"] + parts["train"]
        rows.append({"grpo_step": parts["grpo_step"], "wall": generation + training + parts["weight_sync"],
                     "generation": generation, "training": training, "weight_sync": parts["weight_sync"]})
    return rows


def _outcomes(result: RunResult, eval_row: dict) -> list[int] | None:
    """The validation's per-question answer rewards, when the run kept them (else None: only the rate is known,
    and comparisons fall back to the unpaired band)."""
    if result.run_dir is None:
        return None
    found = read_outcomes(result.run_dir, f"step_{eval_row['grpo_step']:04d}", eval_row["eval/n"])
    return list(found.answer_rewards) if found is not None else None


def uses_per_group(result: RunResult) -> float:
    """Mean number of times each trained rollout group was trained on: 1.0 when every rollout is used once
    (sync, one-behind), up to `max_uses` for replay (from the run's replay.json)."""
    replay_file = result.run_dir / REPLAY_FILE
    if not replay_file.is_file():
        return 1.0
    uses = read_json(replay_file)["uses"]  # one (group uid, its version, learner version) per use
    return len(uses) / max(1, len({uid for uid, _, _ in uses}))


def schedule_table(results: Mapping[str, RunResult]) -> list[dict]:
    """One row per schedule: steps per minute, mean seconds per step by component and idle time of
    each side, validation answer reward at the start and the end, and training stability signals."""
    table = []
    for name, result in results.items():
        times = step_times(result)
        mean = {key: float(np.mean([t[key] for t in times])) for key in ("wall", "generation", "training",
                                                                         "weight_sync")}
        rows = result.train_rows
        evals = result.eval_rows
        table.append({
            "schedule": name, "steps_per_minute": 60.0 / mean["wall"], "step_s": mean["wall"],
            "generation_s": mean["generation"], "training_s": mean["training"], "weight_sync_s": mean["weight_sync"],
            "generator_idle_s": max(0.0, mean["wall"] - mean["generation"] - mean["weight_sync"]),
            "learner_idle_s": max(0.0, mean["wall"] - mean["training"] - mean["weight_sync"]),
            "eval_start": evals[0]["eval/answer_reward"], "eval_end": evals[-1]["eval/answer_reward"],
            "outcomes_start": _outcomes(result, evals[0]), "outcomes_end": _outcomes(result, evals[-1]),
            "n_eval": evals[-1]["eval/n"], "grpo_steps": result.grpo_steps,
            "mean_staleness": float(np.mean([r.get("async/staleness", 0) for r in rows])),
            "uses_per_group": uses_per_group(result),
            "eval_curve": [[e["grpo_step"], e["eval/answer_reward"]] for e in evals],
            "grad_norm_mean": float(np.mean([r["train/grad_norm"] for r in rows])),
            "grad_norm_max": float(np.max([r["train/grad_norm"] for r in rows])),
            "clip_fraction_mean": float(np.mean([r.get("train/clip_fraction", 0.0) for r in rows])),
            "skipped_steps": rows[-1]["train/skipped_steps"] if rows else 0,
            "minutes": sum(t["wall"] for t in times) / 60,
        })
    return table


def validation_noise(a: dict, b: dict, a_key: str = "eval_end", b_key: str = "eval_end") -> Noise:
    """`Noise` of row a's `a_key` validation minus row b's `b_key` (both on the same held-out questions): paired
    when both rows carry that validation's per-question outcomes (`outcomes_start` / `outcomes_end`: only when
    the run saved every validation rollout), else the unpaired band of the two rates."""
    def outcomes(row: dict, key: str):
        return row.get("outcomes_" + key.removeprefix("eval_"))

    noise = compare_outcomes(outcomes(a, a_key), outcomes(b, b_key), a[a_key], a["n_eval"], b[b_key], b["n_eval"])
    return noise


def schedule_findings(table: list[dict]) -> dict[str, dict]:
    """The reading's verdicts as data: the synchronous run's rise (end vs start) and each schedule's final
    validation against the synchronous run's (`Noise.to_dict`), keyed `sync_rise` and the schedule names."""
    sync = next((row for row in table if row["schedule"] == "sync"), None)
    if sync is None:
        return {}
    found = {"sync_rise": validation_noise(sync, sync, "eval_end", "eval_start").to_dict()}
    found.update({row["schedule"]: validation_noise(row, sync).to_dict() for row in table if row is not sync})
    return found


def overlap_ceiling(sync_step_s: float, generation_s: float, training_s: float) -> float:
    """One-behind's best speed-up over sync: overlap hides at most the shorter half of a step, so a step can
    take no less than the slower actor's busy time (each actor has one core; sync's halves use both)."""
    return sync_step_s / max(generation_s, training_s)


def schedule_reading(table: list[dict]) -> str:
    """The course's questions about asynchronous GRPO, answered in words from `schedule_table`'s numbers."""
    by_name = {row["schedule"]: row for row in table}
    sync = by_name.get("sync")
    lines = []
    if sync is not None:
        dominant = "generation" if sync["generation_s"] >= sync["training_s"] else "training"
        share = sync[f"{dominant}_s"] / sync["step_s"]
        lines.append(f"**Which component dominates?** In the synchronous loop {dominant} takes {share:.0%} of a "
                     f"step ({sync['generation_s']:.2f} s generating and scoring, {sync['training_s']:.2f} s "
                     f"training, {sync['weight_sync_s']:.3f} s weight sync per step).")
        gain = validation_noise(sync, sync, "eval_end", "eval_start")
        lines.append(f"**Does the synchronous loop learn here?** Validation answer reward {sync['eval_start']:.1%} -> "
                     f"{sync['eval_end']:.1%} ({100 * gain.diff:+.1f} points over {sync['grpo_steps']} GRPO steps; "
                     f"{noise_words(gain)}).")
    for row in table:
        if row["schedule"] == "sync" or sync is None:
            continue
        versus = validation_noise(row, sync)
        lines.append(
            f"**{row['schedule']}**: {row['steps_per_minute'] / sync['steps_per_minute']:.2f}x the synchronous "
            f"loop's GRPO steps per minute ({row['steps_per_minute']:.1f} vs {sync['steps_per_minute']:.1f}); "
            f"mean staleness {row['mean_staleness']:.2f} policy versions, each rollout group trained on "
            f"{row['uses_per_group']:.2f} times on average; final validation answer reward "
            f"{row['eval_end']:.1%} vs {sync['eval_end']:.1%} ({100 * versus.diff:+.1f} points, "
            f"{noise_words(versus)}). Gradient norm mean {row['grad_norm_mean']:.3f} (max "
            f"{row['grad_norm_max']:.3f}) vs {sync['grad_norm_mean']:.3f} ({sync['grad_norm_max']:.3f}); "
            f"clip fraction {row['clip_fraction_mean']:.3f} vs {sync['clip_fraction_mean']:.3f}.")
    if sync is not None and len(table) > 1:
        stable = all(not validation_noise(r, sync).beyond and r["skipped_steps"] == 0 for r in table)
        asyncs = [r for r in table if r["schedule"] != "sync"]
        by_staleness = sorted(table, key=lambda r: r["mean_staleness"])
        trend = "; ".join(f"{r['schedule']} {r['mean_staleness']:.2f} versions: validation {r['eval_end']:.1%}, "
                          f"clip fraction {r['clip_fraction_mean']:.3f}, gradient norm max {r['grad_norm_max']:.2f}"
                          for r in by_staleness)
        lines.append("**How does off-policyness affect stability?** By mean staleness: " + trend + ". " + (
            "At these staleness bounds the clipped ratio absorbs it: no skipped step, and every schedule's validation "
            "stays within noise of the synchronous run." if stable else
            "Here it shows: a validation difference beyond noise or skipped steps (see the rows above)."))
        fresh = _per_fresh_rollout(sync, [r for r in asyncs if r["uses_per_group"] > 1.05])
        if fresh:
            lines.append("**Does reusing rollouts pay?** At the same number of fresh rollouts (the synchronous run's "
                         "validation at the step where it had generated as many): " + fresh + ".")
        one = by_name.get("one_behind")
        if one is not None:
            ceiling = overlap_ceiling(sync["step_s"], one["generation_s"], one["training_s"])
            lines.append(
                f"**What limits one-behind's speed-up?** Overlap can at most hide the shorter half of a step: on one "
                f"core each, generating and scoring took {one['generation_s']:.2f} s and training "
                f"{one['training_s']:.2f} s per step, against {sync['generation_s']:.2f} s and "
                f"{sync['training_s']:.2f} s on both cores in the synchronous loop, so a perfect overlap would "
                f"reach {ceiling:.2f}x here (measured {one['steps_per_minute'] / sync['steps_per_minute']:.2f}x; the "
                f"rest is the actors waiting on each other and Ray's hand-offs). Reusing rollouts (replay, "
                f"max_uses > 1) cuts the generation per step instead: more steps per minute, fewer fresh rollouts "
                f"per step.")
        idle_gen = float(np.mean([r["generator_idle_s"] for r in asyncs]))
        idle_learn = float(np.mean([r["learner_idle_s"] for r in asyncs]))
        waiting = "generator" if idle_gen > idle_learn else "learner"
        lines.append(
            f"**How to overlap better?** In the async runs the {waiting} waits most ({idle_gen:.2f} s generator vs "
            f"{idle_learn:.2f} s learner idle per step): " + (
                "give generation less of the machine (or the learner more), or let the generator run further ahead "
                "(a larger staleness bound or replay buffer)." if waiting == "generator" else
                "give the generator more of the machine (more engines or cores), or let the learner reuse rollouts "
                "(replay with max_uses > 1)."))
    return "\n\n".join(lines)


def _per_fresh_rollout(sync: dict, reusing: list[dict]) -> str:
    """Each reusing schedule's final validation against sync's at the step with as many fresh rollouts (its
    steps / uses per group, rounded down to a validated step); '' when sync has no validation that early."""
    parts = []
    for row in reusing:
        fresh_steps = row["grpo_steps"] / row["uses_per_group"]
        earlier = [(step, reward) for step, reward in sync.get("eval_curve", []) if step <= fresh_steps]
        if not earlier or earlier[-1][0] == 0:
            continue
        step, reward = earlier[-1]
        # sync's curve keeps only rates at that step: the unpaired band
        versus = validation_noise(row, {"earlier": reward, "n_eval": row["n_eval"]}, "eval_end", "earlier")
        parts.append(f"{row['schedule']} ({fresh_steps:.0f} steps' worth of fresh rollouts) {row['eval_end']:.1%} vs "
                     f"sync at step {step} {reward:.1%} ({100 * versus.diff:+.1f} points, {noise_words(versus)})")
    return "; ".join(parts)


def plot_schedule_times(results: Mapping[str, RunResult], stem: str, table: list[dict] | None = None):
    """Stacked bars: mean seconds per GRPO step of each side (generator, learner) per schedule; pass the
    `schedule_table(results)` you already have as `table` to skip reading the runs again."""
    import matplotlib.pyplot as plt

    table = schedule_table(results) if table is None else table
    fig, ax = plt.subplots(figsize=(8, 3.8))
    labels, x = [], 0
    colors = {"generation": "tab:blue", "training": "tab:orange", "weight sync": "tab:green", "idle": "lightgrey"}
    for row in table:
        for side, busy_key, idle_key in (("generator", "generation_s", "generator_idle_s"),
                                         ("learner", "training_s", "learner_idle_s")):
            parts = [(busy_key.split("_")[0], row[busy_key]), ("weight sync", row["weight_sync_s"]),
                     ("idle", row[idle_key])]
            bottom = 0.0
            for part, seconds in parts:
                ax.bar(x, seconds, bottom=bottom, color=colors[part], width=0.8,
                       label=part if part not in ax.get_legend_handles_labels()[1] else None)
                bottom += seconds
            labels.append(f"{row['schedule']}\n{side}")
            x += 1
        x += 0.5
    positions = [i + 0.5 * (i // 2) for i in range(len(labels))]
    ax.set_xticks(positions, labels, fontsize=8)
    ax.set(ylabel="seconds per GRPO step", title="where each GRPO step's time goes, per side and schedule")
    ax.legend(fontsize=8, ncol=4, loc="upper right")
    fig.tight_layout()
    save_figure(fig, stem, dpi=150)
    return fig


def plot_schedule_rewards(results: Mapping[str, RunResult], stem: str):
    """Validation answer reward against GRPO step and against wall-clock minutes, one line per schedule."""
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for name, result in results.items():
        evals = result.eval_rows
        times = {t["grpo_step"]: t["wall"] for t in step_times(result)}
        minutes = [sum(v for k, v in times.items() if k <= row["grpo_step"]) / 60 for row in evals]
        steps = [row["grpo_step"] for row in evals]
        rewards = [row["eval/answer_reward"] for row in evals]
        by_step.plot(steps, rewards, "o-", label=name)
        by_time.plot(minutes, rewards, "o-", label=name)
    by_step.set(xlabel="GRPO step", ylabel="validation answer reward", title="per step")
    by_time.set(xlabel="minutes of training (validation excluded)", title="per wall-clock")
    by_step.legend()
    fig.tight_layout()
    save_figure(fig, stem, dpi=150)
    return fig


def async_result(cfg, table: list[dict], reading: str) -> dict:
    """The writeup's `async_grpo` result (hw3lib.core.writeup_keys): the shared config, `schedule_table`'s
    rows and `schedule_reading`'s text."""
    return {"profile": cfg.profile, "model": cfg.model, "dataset": cfg.dataset, "n_grpo_steps": cfg.n_grpo_steps,
            "rollout_batch_size": cfg.rollout_batch_size, "rows": table, "reading": reading,
            "findings": schedule_findings(table) if table and "eval_end" in table[0] else {},
            "settings": config_settings(cfg)}
