"""Trends and stability of a grid's runs, as findings (numbers and verdicts; `hw3lib.experiments.render` words them).

- `trend(values)`: a logged metric's mean over the first third of the GRPO steps against the last third, with the
  band of that difference from the per-step spread (`hw3lib.core.stats.spread_band`, Welch's s.e. times Student's
  t): "rose"/"fell" only
  beyond it, else "flat";
- `config_stability(runs, records)`: skipped non-finite steps, divergence, the largest gradient norm against the
  median, the largest step-to-step drop of the training reward (against its binomial band over the rollout batch)
  and the largest one-step rise of KL k3 (and whether k1 agrees there);
- `kl_drift(facts, row)`: KL k1/k3 at the end against the reward's rise, and their correlation with its interval.
"""

from __future__ import annotations

import math
import statistics

from hw3lib.core.lifecycle import RunResult
from hw3lib.core.stats import Noise, correlation, spread_band, unpaired_band
from hw3lib.experiments.plots import per_grpo_step
from hw3lib.experiments.render import SPIKE_FACTOR, trend_text

METRIC = "eval/answer_reward"
# Logged training metrics summarised per run (a run that does not log one, e.g. KL without
# `monitor_kl`, simply has no entry for it).
METRICS = ("train/reward", "train/format_reward", "train/entropy", "train/grad_norm", "train/response_length_mean",
           "train/clip_fraction", "train/ratio_mean", "train/kl_k1", "train/kl_k3")
METRIC_NAMES = {"train/reward": "training reward", "train/format_reward": "training format reward",
                "train/entropy": "entropy", "train/grad_norm": "gradient norm",
                "train/response_length_mean": "response length", "train/clip_fraction": "clip fraction",
                "train/ratio_mean": "importance ratio", "train/kl_k1": "KL k1", "train/kl_k3": "KL k3"}
# k1 and k3 estimate the same KL on tokens sampled from the policy; at a k3 spike, a k1 below k3 / this factor
# says the two disagree, so the spike is k3's heavy tail (a few tokens), not a jump of the KL itself.
ESTIMATOR_DISAGREEMENT = 10.0


def series(runs: list[RunResult], key: str) -> list[float]:
    """Per-GRPO-step values of `key` (`per_grpo_step`), averaged over `runs` (seed repeats) step by step."""
    per_run = [dict(zip(*per_grpo_step(run.metrics, key))) for run in runs]
    steps = sorted(set().union(*per_run))
    return [sum(values) / len(values) for values in
            ([mine[s] for mine in per_run if s in mine] for s in steps)]


def trend(values: list[float], what: str) -> dict:
    """Mean over the first third of `values` (one per GRPO step) vs the last third, their difference and
    its noise band (`spread_band`: Welch's s.e. of the difference of the two means, from the per-step spread in
    each third, times Student's t),
    with `text` in words: "rose"/"fell" only beyond the band, else "flat within noise"; fewer than 2 steps
    per third: "too few steps"."""
    n = len(values)
    window = n // 3
    if window < 2:
        return {"steps": n, "window": window, "text": trend_text({"steps": n}, what)}
    first, last = values[:window], values[-window:]
    mean_first, mean_last = statistics.fmean(first), statistics.fmean(last)
    change = Noise(mean_last - mean_first, spread_band(last, first))
    word = "flat" if not change.beyond else "rose" if change.diff > 0 else "fell"
    found = {"steps": n, "window": window, "first_third": mean_first, "last_third": mean_last, "diff": change.diff,
             "band": change.band, "direction": word, "verdict": change.verdict.value}
    return {**found, "text": trend_text(found, what)}


def metric_trends(runs: list[RunResult]) -> dict[str, dict]:
    """`trend` of every logged metric of `METRICS` (seed repeats averaged per step)."""
    return {key: trend(values, METRIC_NAMES[key]) for key in METRICS if (values := series(runs, key))}


def _grad_spike(run: RunResult) -> dict | None:
    """The largest optimizer-step gradient norm against the run's median one."""
    rows = [row for row in run.train_rows if math.isfinite(row.get("train/grad_norm", math.nan))]
    if not rows:
        return None
    top = max(rows, key=lambda row: row["train/grad_norm"])
    median = statistics.median(row["train/grad_norm"] for row in rows)
    ratio = top["train/grad_norm"] / median if median > 0 else None
    return {"max": top["train/grad_norm"], "median": median, "ratio": ratio, "grpo_step": top["grpo_step"],
            "spike": ratio is not None and ratio > SPIKE_FACTOR}


def _reward_drop(run: RunResult) -> dict | None:
    """The largest fall of the training reward from one GRPO step to the next, with its binomial noise band
    (over the rollout batch)."""
    steps, values = per_grpo_step(run.metrics, "train/reward")
    if len(values) < 2:
        return None
    i = max(range(1, len(values)), key=lambda j: values[j - 1] - values[j])
    n = run.config.rollout_batch_size
    # different rollouts at each step: the unpaired band over the rollout batch
    fell = Noise(values[i - 1] - values[i], unpaired_band(values[i - 1], n, values[i], n))
    return {"from": values[i - 1], "to": values[i], "drop": fell.diff, "grpo_step": steps[i], "band": fell.band,
            "n": n, "beyond_noise": fell.diff > 0 and fell.beyond}


def _kl_spike(run: RunResult) -> dict | None:
    """The largest one-step rise of KL k3 against the median one-step change (None below 3 steps)."""
    steps, values = per_grpo_step(run.metrics, "train/kl_k3")
    if len(values) < 3:
        return None
    changes = [b - a for a, b in zip(values, values[1:])]
    i = max(range(len(changes)), key=changes.__getitem__)
    median = statistics.median(abs(c) for c in changes)
    ratio = changes[i] / median if median > 0 else None
    spike = ratio > SPIKE_FACTOR if ratio is not None else changes[i] > 0
    k1 = dict(zip(*per_grpo_step(run.metrics, "train/kl_k1"))).get(steps[i + 1])
    k3 = values[i + 1]
    # k1 and k3 estimate the same KL; a k3 far above k1 at the spike is k3's heavy tail (a few tokens)
    tail = k1 is not None and k3 > 0 and abs(k1) * ESTIMATOR_DISAGREEMENT < k3
    return {"rise": changes[i], "grpo_step": steps[i + 1], "median_change": median, "ratio": ratio, "spike": spike,
            "k3": k3, "k1": k1, "k3_tail": tail}


def config_stability(runs: list[RunResult], records: list[dict]) -> dict:
    """A config's stability over its seed repeats (the worst of them): optimizer steps skipped for a
    non-finite loss or gradient norm, divergence, the largest gradient norm against the median, the largest
    step-to-step drop of the training reward and (when logged) the largest one-step rise of KL; `text`: the one
    rendering of them (`render.render_stability`, a list of one sentence)."""
    def worst(items: list[dict | None], key: str) -> dict | None:
        found = [item for item in items if item is not None and item[key] is not None]
        return max(found, key=lambda item: item[key]) if found else next((i for i in items if i), None)

    stopped = next((r for r in records if r["status"] == "diverged"), None)
    result = {"skipped_steps": sum(run.skipped_steps for run in runs), "diverged": stopped is not None,
              "reason": stopped and stopped.get("reason"), "stopped_at": stopped and stopped.get("stopped_at"),
              "grad_norm": worst([_grad_spike(run) for run in runs], "ratio"),
              "reward_drop": worst([_reward_drop(run) for run in runs], "drop"),
              "kl": worst([_kl_spike(run) for run in runs], "ratio")}
    return result


def kl_drift(facts, row: dict) -> dict:
    """The KL drift of group `row["label"]` as findings: k1 and k3 at the first and last GRPO step, the validation
    reward's rise and its noise (`facts.rise`), whether k3 grew, and the correlation of KL with the validation
    reward across the validated steps (KL 0 at step 0: the policy is the reference there) with its Fisher interval;
    `render.render_kl_drift` words it."""
    label = row["label"]
    k3, k1 = facts.stat(label, "train/kl_k3", "last"), facts.stat(label, "train/kl_k1", "last")
    found = {"label": label, "k3": k3, "k1": k1, "k3_first": facts.stat(label, "train/kl_k3", "first"),
             "k1_first": facts.stat(label, "train/kl_k1", "first"), "start": row["start"], "end": row["end"],
             "rise": facts.rise(label).to_dict()}
    if k3 is None or k1 is None:
        return {**found, "k3": None, "pairs": 0, "r": None, "grew": False, "together": False}
    run = facts.runs(label)[0]
    steps, values = per_grpo_step(run.metrics, "train/kl_k3")
    kl_at = {0: 0.0, **dict(zip(steps, values))}
    pairs = [(kl_at[e["grpo_step"]], e[METRIC]) for e in run.eval_rows if e["grpo_step"] in kl_at]
    r = correlation([p[0] for p in pairs], [p[1] for p in pairs])
    grew = k3 > (found["k3_first"] or 0.0)
    together = bool(grew and r is not None and r.r > 0 and row["rise"] > 0)
    r = None if r is None else {"r": r.r, "n": r.n, "low": r.low, "high": r.high}
    return {**found, "pairs": len(pairs), "r": r, "grew": grew, "together": together}
