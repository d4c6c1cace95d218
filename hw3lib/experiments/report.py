"""Report of one experiment grid: a JSON summary with the course's written answers, computed from its runs.

`report_grid(result)` (notebook 05, once per grid after `run_sweep`) draws the grid's figures
(`hw3lib.experiments.plots.plot_grid`), writes `figures/grid_<name>.json` atomically and returns the summary;
the writeup (`writeup/grids.typ`) reads that file. `grid_summary(result)` is the summary alone:

- who produced it: grid, profile, model, dataset, GRPO steps per run, validation questions;
- `rows`: `hw3lib.experiments.grids.compare` (final validation answer reward, rise, difference from the
  reference and its noise band), each with `text`: the same numbers formatted once, as the table
  and the sentences print them;
- `reading`: `noise_reading` (which differences exceed noise, in words);
- `configs`: per run, the first / mean / last per-GRPO-step value of the other logged metrics
  (`METRICS`, where logged), seconds per GRPO step by phase and the validation curve;
- `answers`: sentences answering the course's written question(s) for that grid, built from the
  numbers above by `ANSWERS[grid]` (a grid not listed gets one noise sentence per config);
- `trends` (config -> metric -> numbers and `text`) and `trend_sentences`: every logged metric's mean
  over the first third of the GRPO steps against the last third, with a 2-s.e. noise band (`trend`:
  "rose"/"fell" only beyond it);
- `stability` (config -> numbers and `text`): skipped non-finite steps, divergence, the largest gradient
  norm against the median, the largest step-to-step drop of the training reward, KL spikes;
- `rationale`: why the grid's ranges (`Grid.rationale`; empty for most grids);
- `selection` (leaderboard only, else empty): how its preset was chosen, step by step
  (`leaderboard_selection`): each contributing grid's winner, which later choice overrides which, the preset.

Every comparison of final validation rewards carries its noise band (2 s.e.; binomial over the
validation questions, seed spread too when a group has repeats) and says "within noise" when the
difference does not exceed it. Per-wall-clock comparisons read each run's validation reward at a
common wall-clock time: the last validation logged at or before it (what the run had reached then).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable

from hw3lib.core import io as core_io  # figures_dir looked up at call time (tests point it elsewhere)
from hw3lib.core.writeup_keys import config_settings, write_result
from hw3lib.experiments.grids import (GRIDS, LOSS_ONLY_GRIDS, GridResult, binomial_band, compare, difference_band,
                                      noise_reading, seed_band)
from hw3lib.experiments.plots import per_grpo_step
from hw3lib.core.lifecycle import RunResult
from hw3lib.grpo.results import time_breakdown

METRIC = "eval/answer_reward"
# Logged training metrics summarised per run (a run that does not log one, e.g. KL without
# `monitor_kl`, simply has no entry for it).
METRICS = ("train/reward", "train/format_reward", "train/entropy", "train/grad_norm", "train/response_length_mean",
           "train/clip_fraction", "train/ratio_mean", "train/kl_k1", "train/kl_k3")
METRIC_NAMES = {"train/reward": "training reward", "train/format_reward": "training format reward",
                "train/entropy": "entropy", "train/grad_norm": "gradient norm",
                "train/response_length_mean": "response length", "train/clip_fraction": "clip fraction",
                "train/ratio_mean": "importance ratio", "train/kl_k1": "KL k1", "train/kl_k3": "KL k3"}
# A gradient norm (or a one-step rise of KL) above this multiple of the run's median is called a spike.
SPIKE_FACTOR = 5.0
# k1 and k3 estimate the same KL on tokens sampled from the policy; at a k3 spike, a k1 below k3 / this factor
# says the two disagree, so the spike is k3's heavy tail (a few tokens), not a jump of the KL itself.
ESTIMATOR_DISAGREEMENT = 10.0
# The learning-rate deliverable: the course handout asks for a model reaching at least 25% validation accuracy
# (stated for the full profile: MATH with the course's Qwen model; the smoke profile's tiny model on its toy task
# is not expected to meet it, but the sentence still says met / not met with the value).
VALIDATION_ACCURACY_TARGET = 0.25
PHASES = ("generation", "scoring", "old_logprobs", "train", "weight_sync", "eval")


# ---- formatting: one place, so the table, the answers and the tests print numbers the same way ------------

def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def points(diff: float) -> str:
    return f"{100 * diff:+.1f} points"


def noise(diff: float, band: float) -> str:
    """Whether a difference exceeds its noise band: `beyond noise, band ±x points` / `within noise, band ...`."""
    return f"{'beyond' if abs(diff) > band else 'within'} noise, band ±{100 * band:.1f} points"


def compared(value: float, other: float) -> str:
    """`larger`, `smaller` or `about the same` (within 0.5% of `other`)."""
    if abs(value - other) <= 0.005 * abs(other):
        return "about the same"
    return "larger" if value > other else "smaller"


def num(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}"


# ---- numbers read from the runs ------------------------------------------------------------------------

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


def _finite(value):
    """JSON for the writeup: Typst cannot read NaN/inf, so those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# ---- trends of the logged metrics, and stability ---------------------------------------------------------

def series(runs: list[RunResult], key: str) -> list[float]:
    """Per-GRPO-step values of `key` (`per_grpo_step`), averaged over `runs` (seed repeats) step by step."""
    per_run = [dict(zip(*per_grpo_step(run.metrics, key))) for run in runs]
    steps = sorted(set().union(*per_run))
    return [sum(values) / len(values) for values in
            ([mine[s] for mine in per_run if s in mine] for s in steps)]


def _sample_variance(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def trend(values: list[float], what: str) -> dict:
    """Mean over the first third of `values` (one per GRPO step) vs the last third, their difference and
    its noise band (2 s.e. of the difference of the two means, from the per-step spread in each third),
    with `text` in words: "rose"/"fell" only beyond the band, else "flat within noise"; fewer than 2 steps
    per third: "too few steps"."""
    n = len(values)
    window = n // 3
    if window < 2:
        return {"steps": n, "window": window,
                "text": f"{what}: too few steps ({n} GRPO steps; each third needs at least 2)"}
    first, last = values[:window], values[-window:]
    mean_first, mean_last = sum(first) / window, sum(last) / window
    band = 2 * math.sqrt(_sample_variance(first) / window + _sample_variance(last) / window)
    diff = mean_last - mean_first
    word = "rose" if diff > band else "fell" if diff < -band else None
    text = (f"{what} {word}: {num(mean_first)} -> {num(mean_last)} ({diff:+.3g}, beyond ±{num(band)})" if word
            else f"{what} flat within noise (±{num(band)}): {num(mean_first)} -> {num(mean_last)}")
    return {"steps": n, "window": window, "first_third": mean_first, "last_third": mean_last, "diff": diff,
            "band": band, "direction": word or "flat", "text": text}


def metric_trends(runs: list[RunResult]) -> dict[str, dict]:
    """`trend` of every logged metric of `METRICS` (seed repeats averaged per step)."""
    return {key: trend(values, METRIC_NAMES[key]) for key in METRICS if (values := series(runs, key))}


def trend_sentence(label: str, trends: dict[str, dict]) -> str:
    """One sentence: every logged metric's trend of config `label` (first vs last third of its GRPO steps)."""
    if not trends:
        return f"`{label}` logged none of the training metrics."
    if all("diff" not in t for t in trends.values()):
        steps = max(t["steps"] for t in trends.values())
        return f"`{label}`: too few GRPO steps ({steps}) for a trend: each third needs at least 2."
    return f"`{label}`: " + "; ".join(t["text"] for t in trends.values()) + "."


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
    band = difference_band(values[i - 1], n, values[i], n)
    drop = values[i - 1] - values[i]
    return {"from": values[i - 1], "to": values[i], "drop": drop, "grpo_step": steps[i], "band": band,
            "n": n, "beyond_noise": drop > band}


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
    k1_by_step = dict(zip(*per_grpo_step(run.metrics, "train/kl_k1")))
    return {"rise": changes[i], "grpo_step": steps[i + 1], "median_change": median, "ratio": ratio, "spike": spike,
            "k3": values[i + 1], "k1": k1_by_step.get(steps[i + 1])}


def _k3_tail(kl: dict) -> str:
    """At a k3 spike: do k1 and k3 (two estimators of the same KL) agree at that step? "" when they do."""
    k1, k3 = kl.get("k1"), kl["k3"]
    if k1 is None or k3 <= 0 or abs(k1) * ESTIMATOR_DISAGREEMENT >= k3:
        return ""
    return (f" -- at that step k1 was {num(k1)} against k3 {num(k3)}: on tokens sampled from the policy both estimate "
            f"the same KL, so a k3 this far above k1 comes from a few tokens the policy now finds far less likely than "
            f"the reference did (k3 grows with the exponential of their log-ratio), not from a jump of the KL itself")


def config_stability(runs: list[RunResult], records: list[dict]) -> dict:
    """A config's stability over its seed repeats (the worst of them): optimizer steps skipped for a
    non-finite loss or gradient norm, divergence, the largest gradient norm against the median, the largest
    step-to-step drop of the training reward and (when logged) the largest one-step rise of KL; `text`: one
    sentence each."""
    def worst(items: list[dict | None], key: str) -> dict | None:
        found = [item for item in items if item is not None and item[key] is not None]
        return max(found, key=lambda item: item[key]) if found else next((i for i in items if i), None)

    stopped = next((r for r in records if r["status"] == "diverged"), None)
    result = {"skipped_steps": sum(run.skipped_steps for run in runs), "diverged": stopped is not None,
              "reason": stopped and stopped.get("reason"), "stopped_at": stopped and stopped.get("stopped_at"),
              "grad_norm": worst([_grad_spike(run) for run in runs], "ratio"),
              "reward_drop": worst([_reward_drop(run) for run in runs], "drop"),
              "kl": worst([_kl_spike(run) for run in runs], "ratio")}
    return {**result, "text": _stability_text(result)}


def _stability_text(s: dict) -> list[str]:
    skipped = s["skipped_steps"]
    text = [f"{skipped} optimizer step{'s' if skipped != 1 else ''} skipped for a non-finite loss or gradient norm."
            if skipped else "No optimizer step was skipped for a non-finite loss or gradient norm.",
            f"It diverged at GRPO step {s['stopped_at']} ({s['reason']})." if s["diverged"] else
            "It did not diverge (no non-finite loss or gradient norm, no collapsed training reward)."]
    grad, drop, kl = s["grad_norm"], s["reward_drop"], s["kl"]
    if grad is not None:
        times = f"{grad['ratio']:.1f}x" if grad["ratio"] is not None else "against"
        text.append(f"Largest gradient norm {num(grad['max'])} (GRPO step {grad['grpo_step']}), {times} the median "
                    f"{num(grad['median'])}: {'a spike' if grad['spike'] else 'no spike'} (the bar: "
                    f"{SPIKE_FACTOR:g}x the median).")
    if drop is not None:
        text.append("The training reward never fell from one GRPO step to the next." if drop["drop"] <= 0 else
                    f"Largest step-to-step drop in training reward: {num(drop['from'])} -> {num(drop['to'])} at GRPO "
                    f"step {drop['grpo_step']} ({points(-drop['drop'])}), {noise(drop['drop'], drop['band'])} "
                    f"(binomial, {drop['n']} rollouts per step).")
    if kl is not None:
        times = f"{kl['ratio']:.1f}x" if kl["ratio"] is not None else "against"
        text.append(f"Largest one-step rise of KL k3: {num(kl['rise'])} (to GRPO step {kl['grpo_step']}), {times} the "
                    f"median one-step change {num(kl['median_change'])}: {'a spike' if kl['spike'] else 'no spike'} "
                    f"(the bar: {SPIKE_FACTOR:g}x).")
    return text


class Facts:
    """A grid's numbers for the answer builders: compare rows by group, group means of run metrics."""

    def __init__(self, result: GridResult, rows: list[dict], earlier: dict[str, dict] | None = None):
        self.result, self.grid = result, result.grid
        self.rows = {row["label"]: row for row in rows}
        self.ref = self.rows[self.grid.reference]
        self.others = [row for row in rows if row["label"] != self.grid.reference]
        self.earlier = earlier
        """The leaderboard's contributing grids' summaries (None: read from figures/grid_<name>.json)."""
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
        return config_stability(self.runs(group), [self.result.records[label] for label in self.grid.groups[group]])

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

    def pair(self, a: str, b: str) -> tuple[float, float]:
        """Final validation reward of group `a` minus `b`, and the noise band of that difference
        (as `compare` computes it against the reference)."""
        fa, fb = self.finals(a), self.finals(b)
        ea, eb = sum(fa) / len(fa), sum(fb) / len(fb)
        band = difference_band(ea, self.rows[a]["n"] * len(fa), eb, self.rows[b]["n"] * len(fb))
        spread = seed_band(fa, fb)
        return ea - eb, max(band, spread) if spread is not None else band

    def band_of(self, p1: float, p2: float) -> float:
        """Noise band of two validation rewards measured on the reference's questions (one run each)."""
        return difference_band(p1, self.ref["n"], p2, self.ref["n"])

    def finished(self) -> list[dict]:
        """Rows that did not diverge, best final validation reward first."""
        return sorted((r for r in self.rows.values() if r["status"] != "diverged"), key=lambda r: -r["end"])

    def diverged(self) -> list[dict]:
        return [r for r in self.rows.values() if r["status"] == "diverged"]

    def versus_reference(self, row: dict) -> str:
        return f"{points(row['diff'])} vs `{self.grid.reference}`, {noise(row['diff'], row['band'])}"


def _contrast(facts: Facts, a: str, b: str, key: str, what: str, unit: str = "", digits: int = 3) -> str | None:
    """`what`: group a's mean over its GRPO steps (and last step) vs group b's, with their ratio; None if
    either did not log it."""
    mean_a, mean_b = facts.stat(a, key), facts.stat(b, key)
    if mean_a is None or mean_b is None:
        return None
    last_a, last_b = facts.stat(a, key, "last"), facts.stat(b, key, "last")
    unit = f" {unit}" if unit else ""
    if mean_b == 0:
        relation = "the same" if mean_a == 0 else "higher"
    else:
        ratio = mean_a / mean_b
        relation = f"{ratio:.2f}x, " + ("higher" if ratio > 1.005 else "lower" if ratio < 0.995 else "about the same")
    return (f"{what}: `{a}` averaged {num(mean_a, digits)}{unit} over its GRPO steps (last step "
            f"{num(last_a, digits)}) vs {num(mean_b, digits)}{unit} (last {num(last_b, digits)}) for `{b}` "
            f"({relation}).")


def _diverged_sentences(facts: Facts, name: Callable[[dict], str] = lambda r: f"`{r['label']}`") -> list[str]:
    return [f"{name(r)} diverged at GRPO step {r['stopped_at']} ({r['reason']}); it is kept in the table and "
            f"plots, ending at {pct(r['end'])}." for r in facts.diverged()]


def _ends(row: dict) -> str:
    return f"{pct(row['start'])} -> {pct(row['end'])}"


# ---- the leaderboard's selection, step by step --------------------------------------------------------------

def summary_choice(summary: dict) -> dict:
    """What `hw3lib.experiments.grids.choices_from` picks, read from a grid's summary (`grid_summary`): the
    best-ending config that did not diverge if it beats the reference beyond noise, else the reference;
    its changes are the settings it contributes (`LOSS_ONLY_GRIDS`: only its loss type)."""
    rows, reference = summary["rows"], summary["reference"]
    ref = next(row for row in rows if row["label"] == reference)
    ranked = sorted((row for row in rows if row["status"] != "diverged"), key=lambda row: -row["end"])
    winner = next((row for row in ranked if row["beyond_noise"] and row["diff"] > 0), ref)
    config = summary["configs"][winner["label"]]
    settings = dict(config["changes"])
    if summary["grid"] in LOSS_ONLY_GRIDS:
        settings = {"loss_type": config.get("loss_type", winner["label"])}
    return {"winner": winner, "reference_won": winner is ref, "settings": settings,
            "best_other": next((row for row in ranked if row["label"] != reference), None)}


def _earlier_summaries(facts: Facts) -> dict[str, dict | None]:
    """The summaries of the grids the leaderboard takes its settings from (in `run_sweep`'s order):
    `facts.earlier`, else `figures/grid_<name>.json`; None where missing or from another profile."""
    found = {}
    for name in GRIDS["leaderboard"][3]:
        if facts.earlier is not None:
            summary = facts.earlier.get(name)
        else:
            path = core_io.figures_dir() / f"grid_{name}.json"
            summary = json.loads(path.read_text()) if path.is_file() else None
        found[name] = summary if summary is not None and summary.get("profile") == facts.grid.profile else None
    return found


def _settings_text(settings: dict) -> str:
    return ", ".join(f"{key} = {value}" for key, value in settings.items())


def _selection_step(name: str, summary: dict, pick: dict, overrides: list[str]) -> dict:
    winner, reference = pick["winner"], summary["reference"]
    if not pick["reference_won"]:
        head = (f"`{name}`: winner `{winner['label']}`, {points(winner['diff'])} vs `{reference}` "
                f"({noise(winner['diff'], winner['band'])})")
    else:
        other = pick["best_other"]
        head = f"`{name}`: no config beat `{reference}` beyond noise" + (
            f" (best other: `{other['label']}`, {points(other['diff'])}, {noise(other['diff'], other['band'])})"
            if other else "") + f", so `{reference}` stands"
    head += (f"; it contributes {_settings_text(pick['settings'])}" if pick["settings"]
             else "; it contributes nothing (its settings are the base's)")
    return {"grid": name, "winner": winner["label"], "reference": reference, "diff": winner["diff"],
            "band": winner["band"], "beyond_noise": not pick["reference_won"], "settings": pick["settings"],
            "overrides": overrides, "text": head + "".join(f"; {o}" for o in overrides) + "."}


def _override(key: str, value, name: str, pick: dict, earlier: tuple[str, object, dict]) -> str:
    grid, old, old_pick = earlier
    text = f"its {key} = {value} overrides `{grid}`'s choice {key} = {old}"
    if not old_pick["reference_won"]:
        w = old_pick["winner"]
        text += (f", dropping `{w['label']}`, which beat `{old_pick['reference']}` by {points(w['diff'])} beyond "
                 f"noise (band ±{100 * w['band']:.1f} points)")
        if pick["reference_won"]:
            text += f" -- replaced by `{name}`'s reference, which beat nothing beyond noise"
    return text


def leaderboard_selection(facts: Facts) -> list[dict]:
    """How the leaderboard's preset was chosen (`run_sweep`): one step per contributing grid in order -- its
    winner (diff ± band vs its reference, beyond noise or not), the settings it contributes and which earlier
    choice each overrides -- then the final preset, checked against the settings the leaderboard run used."""
    summaries, picks, steps = _earlier_summaries(facts), {}, []
    chosen: dict[str, tuple[str, object, dict]] = {}  # setting -> (grid, value, its pick), the latest wins
    for name, summary in summaries.items():
        if summary is None:
            steps.append({"grid": name, "text": f"`{name}`: not reported yet for the {facts.grid.profile} profile "
                                                f"(no figures/grid_{name}.json), so its choice is unknown here."})
            continue
        pick = picks[name] = {**summary_choice(summary), "reference": summary["reference"]}
        if name == "clip_ablation" and picks.get("off_policy_focused", {}).get("reference_won"):
            steps.append({"grid": name, "text": "`clip_ablation`: not used: on-policy (the reference of "
                                                "`off_policy_focused`) won, so the clip setting does not apply."})
            continue
        overrides = [_override(key, value, name, pick, chosen[key]) for key, value in pick["settings"].items()
                     if key in chosen and chosen[key][1] != value]
        chosen.update({key: (name, value, pick) for key, value in pick["settings"].items()})
        steps.append(_selection_step(name, summary, pick, overrides))
    return steps + [_final_step(facts, chosen, picks, [n for n, s in summaries.items() if s is None])]


def _final_step(facts: Facts, chosen: dict, picks: dict, missing: list[str]) -> dict:
    def plain(value):
        return json.loads(json.dumps(value))  # tuples -> lists, as in the summaries

    base = facts.grid.base
    final = {key: value for key, (_, value, _) in chosen.items()}
    preset = {key: value for key, value in final.items() if plain(getattr(base, key, None)) != plain(value)}
    as_base = {key: value for key, value in final.items() if key not in preset}
    used = {key: value for key, value in facts.grid.changes[facts.grid.reference].items() if key != "seed"}
    text = f"Final preset: {_settings_text(preset) or 'the base recipe unchanged'}"
    if as_base:
        text += f" ({_settings_text(as_base)}: the base recipe's own value, so no change)"
    dropped = [f"`{p['winner']['label']}` (`{name}`)" for name, p in picks.items() if not p["reference_won"]
               and any(key in chosen and chosen[key][1] != value for key, value in p["settings"].items())]
    if dropped:
        text += f". Beyond-noise winners overridden by a later grid's choice: {', '.join(dropped)}"
    if missing:
        text += f". Incomplete: {', '.join(f'`{m}`' for m in missing)} not reported yet"
    text += (". The leaderboard run used exactly these settings." if plain(preset) == plain(used) else
             f". The leaderboard run used {_settings_text(used) or 'the base recipe unchanged'}, not these: the "
             "earlier grids' reports changed after it ran (rerun `leaderboard`).")
    return {"grid": "final", "settings": preset, "used": used, "dropped": dropped, "text": text}


# ---- the answers, one builder per grid --------------------------------------------------------------------

def _answer_learning_rate(facts: Facts) -> list[str]:
    def lr(row: dict) -> str:
        return f"lr {facts.config(row['label']).learning_rate:g}"

    answers, ranked = [], facts.finished()
    if not ranked:
        answers.append("Every learning rate diverged, so none won.")
    else:
        best = ranked[0]
        sentence = f"Winner: {lr(best)} ended highest, at {pct(best['end'])} (from {pct(best['start'])})"
        if len(ranked) > 1:
            second = ranked[1]
            diff, band = facts.pair(best["label"], second["label"])
            sentence += (f"; its margin over the next best, {lr(second)} at {pct(second['end'])}, is "
                         f"{points(diff)}, {noise(diff, band)}")
        answers.append(sentence + ".")
        if best["label"] == facts.grid.reference:
            answers.append(f"That is the base recipe's rate ({lr(best)}).")
        else:
            answers.append(f"Against the base rate ({lr(facts.ref)}, {pct(facts.ref['end'])}): "
                           f"{points(best['diff'])}, {noise(best['diff'], best['band'])}.")
    answers += _diverged_sentences(facts, lambda r: lr(r))
    if not facts.diverged():
        top = max(facts.rows.values(), key=lambda r: facts.config(r["label"]).learning_rate)
        sentence = f"No rate diverged within {facts.grid.base.n_grpo_steps} GRPO steps"
        if top is not facts.ref:
            sentence += f"; the largest, {lr(top)}, ended at {pct(top['end'])} ({facts.versus_reference(top)})"
        answers.append(sentence + ".")
    by_rate = sorted(facts.rows.values(), key=lambda r: facts.config(r["label"]).learning_rate)
    answers.append("Rise of the validation answer reward by rate: " + ", ".join(
        f"{lr(r)}: {points(r['rise'])}" + (" (diverged)" if r["status"] == "diverged" else "") for r in by_rate) + ".")
    return answers + [_accuracy_target(facts, ranked, lr)] + _other_metrics(facts, ranked)


def _accuracy_target(facts: Facts, ranked: list[dict], name: Callable[[dict], str]) -> str:
    """The handout's learning-rate deliverable, `VALIDATION_ACCURACY_TARGET`, checked on the best finished run."""
    target = VALIDATION_ACCURACY_TARGET
    head = (f"The handout asks for a validation accuracy of at least {pct(target)} (stated for the full profile, "
            f"MATH with the course's model")
    head += ("; this is the smoke profile, a tiny model on its toy task, not expected to meet it)"
             if facts.grid.profile == "smoke" else ")")
    if not ranked:
        return head + ": every run diverged -> not met."
    best = ranked[0]
    band = binomial_band(best["end"], best["n"] * best["seeds"])
    return (f"{head}: best run {name(best)} at {pct(best['end'])} (±{100 * band:.1f} points, 2 s.e.) -> "
            f"{'met' if best['end'] >= target else 'not met'}.")


def _other_metrics(facts: Facts, ranked: list[dict]) -> list[str]:
    """Entropy, gradient norm and response length of the winner against the reference (the runner-up when
    the reference won)."""
    if not ranked:
        return []
    best = ranked[0]
    other = facts.ref if best is not facts.ref else (ranked[1] if len(ranked) > 1 else None)
    if other is None:
        return []
    return _contrasts(facts, best["label"], other["label"], tuple(k for k, _, _ in CONTRASTED))


def _reward_answer(facts: Facts, row: dict) -> str:
    return (f"`{row['label']}` ended at {pct(row['end'])} vs {pct(facts.ref['end'])} for `{facts.grid.reference}` "
            f"({points(row['diff'])}): {noise(row['diff'], row['band'])}.")


CONTRASTED = (("train/entropy", "Entropy", "nats/token"), ("train/grad_norm", "Gradient norm", ""),
              ("train/response_length_mean", "Response length", "tokens"))


def _contrasts(facts: Facts, a: str, b: str, keys: tuple[str, ...]) -> list[str]:
    """`_contrast` of group a against b for each of `keys` (from `CONTRASTED`); "not logged" where missing."""
    return [_contrast(facts, a, b, key, what, unit) or f"{what}: not logged by these runs."
            for key, what, unit in CONTRASTED if key in keys]


def _answer_baselines(facts: Facts) -> list[str]:
    answers = []
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        answers += _contrasts(facts, row["label"], facts.grid.reference, tuple(k for k, _, _ in CONTRASTED))
    return answers + _diverged_sentences(facts)


def _answer_length_normalization(facts: Facts) -> list[str]:
    answers = [_reward_answer(facts, row) for row in facts.others]
    per_response = next((r["label"] for r in facts.rows.values()
                         if facts.config(r["label"]).length_normalization == "masked_mean"), None)
    constant = next((r["label"] for r in facts.rows.values()
                     if facts.config(r["label"]).length_normalization == "constant"), None)
    if per_response is None or constant is None:
        return answers + _diverged_sentences(facts)
    cfg = facts.config(constant)
    budget = cfg.length_normalization_constant or cfg.sampling_max_tokens
    length = {g: (facts.stat(g, "train/response_length_mean", "first"), facts.stat(g, "train/response_length_mean"),
                  facts.stat(g, "train/response_length_mean", "last")) for g in (per_response, constant)}
    grad = {g: facts.stat(g, "train/grad_norm") for g in (per_response, constant)}
    if None in (*length[per_response], *length[constant], *grad.values()):
        return answers + ["Response lengths or gradient norms were not logged, so the trade-off is not measured."]
    answers.append(
        f"`{per_response}` (each response's loss divided by its own length): pro -- every response counts the same "
        f"whatever its length, so the update's size does not depend on how long the responses are (mean gradient "
        f"norm {num(grad[per_response])}); con -- a token of a long response weighs less than a token of a short one, "
        f"so a long wrong response is penalised less per token (a length bias): its mean response length went "
        f"{num(length[per_response][0])} -> {num(length[per_response][2])} tokens.")
    ratio = length[constant][1] / budget
    answers.append(
        f"`{constant}` (the token sum divided by the budget, {budget:g} tokens): pro -- every token weighs the same, "
        f"with no length bias (Dr. GRPO); con -- the update shrinks by the mean length over the budget: at "
        f"{num(length[constant][1])} tokens on average that is {ratio:.2f} of the budget, and its mean gradient norm "
        f"was {num(grad[constant])} vs {num(grad[per_response])} ({grad[constant] / grad[per_response]:.2f}x), so its "
        f"effective step size is {compared(grad[constant], grad[per_response])} and "
        f"changes as responses lengthen (its mean length went {num(length[constant][0])} -> "
        f"{num(length[constant][2])} tokens).")
    return answers + _diverged_sentences(facts)


def _answer_std_normalization(facts: Facts) -> list[str]:
    answers = []
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        for key, what, unit in (("train/grad_norm", "Gradient norm", ""), ("train/entropy", "Entropy", "nats/token")):
            sentence = _contrast(facts, row["label"], facts.grid.reference, key, what, unit)
            if sentence:
                answers.append(sentence)
    answers.append("Dividing by the group std gives every group unit spread: a question whose rollouts nearly all "
                   "agree (almost all right or all wrong) is pushed as hard as a contested one, which is what the "
                   "gradient norms above measure.")
    return answers + _diverged_sentences(facts)


def _answer_off_policy(facts: Facts) -> list[str]:
    ref, answers = facts.ref, []
    ranked = facts.finished()
    if not ranked:
        return ["Every setting diverged."] + _diverged_sentences(facts)
    best = ranked[0]
    if best is ref:
        runner_up = next((r for r in ranked if r is not ref), None)
        answers.append(f"Per GRPO step the on-policy run `{ref['label']}` ended highest, at {pct(ref['end'])}"
                       + (f"; the best off-policy setting, `{runner_up['label']}`, ended at {pct(runner_up['end'])} "
                          f"({points(runner_up['diff'])}, {noise(runner_up['diff'], runner_up['band'])})."
                          if runner_up else "."))
    else:
        answers.append(f"Per GRPO step `{best['label']}` ended highest, at {pct(best['end'])}: "
                       f"{facts.versus_reference(best)}.")
    horizon = facts.wall_clock_s(ref["label"])
    reached = {r["label"]: facts.reward_at(r["label"], horizon) for r in ranked}
    fastest = max(reached, key=reached.get)
    ref_reached = reached.get(ref["label"], ref["end"])
    answers.append(f"Per wall-clock second, at the on-policy run's end ({horizon / 60:.1f} minutes) the runs had "
                   f"reached: " + ", ".join(f"`{label}` {pct(value)}" for label, value in reached.items()) + ".")
    if fastest == ref["label"]:
        answers.append(f"So per wall-clock second the on-policy run is best ({pct(ref_reached)} by then).")
    else:
        band = facts.band_of(reached[fastest], ref_reached)
        answers.append(f"So per wall-clock second `{fastest}` is best: {points(reached[fastest] - ref_reached)} vs "
                       f"on-policy at the same time, {noise(reached[fastest] - ref_reached, band)}.")
    def per_minute(row: dict) -> float:
        return 100 * row["rise"] / max(facts.wall_clock_s(row["label"]) / 60, 1e-9)

    answers.append("Seconds per GRPO step and validation-reward rise per wall-clock minute: " + ", ".join(
        f"`{r['label']}` {facts.seconds(r['label'])['total']:.1f} s, {per_minute(r):+.1f} points/min"
        for r in facts.rows.values()) + ".")
    answers += [f"`{label}`, first vs last third of its GRPO steps (±2 s.e.): "
                f"{facts.trend_text(label, 'train/entropy')}; {facts.trend_text(label, 'train/response_length_mean')}."
                for label in facts.rows]
    return answers + _diverged_sentences(facts)


def _answer_clip_ablation(facts: Facts) -> list[str]:
    answers = []
    for row in facts.rows.values():
        label = row["label"]
        clip, ratio = facts.stat(label, "train/clip_fraction"), facts.stat(label, "train/ratio_mean")
        if clip is not None:
            answers.append(f"`{label}` clipped {pct(clip)} of the tokens' ratios on average over its GRPO steps "
                           f"(last step {pct(facts.stat(label, 'train/clip_fraction', 'last'))}); it ended at "
                           f"{pct(row['end'])}.")
        else:
            answers.append(f"`{label}` does not clip (no clip fraction); mean importance ratio "
                           f"{num(ratio) if ratio is not None else 'not logged'}; it ended at {pct(row['end'])}.")
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        answers += _contrasts(facts, row["label"], facts.grid.reference,
                              ("train/grad_norm", "train/entropy", "train/response_length_mean"))
    return answers + _diverged_sentences(facts)


def _answer_prompt(facts: Facts) -> list[str]:
    from hw3lib.tasks.prompt_table import reward_fn_for

    answers = []
    for row in facts.rows.values():
        prompt = facts.config(row["label"]).prompt
        answers.append(f"`{row['label']}` (prompt `{prompt}`, trained and validated with its own "
                       f"`{reward_fn_for(prompt).__name__}`): {_ends(row)} ({points(row['rise'])}).")
    for row in facts.others:
        answers.append(f"The end values differ by {points(row['diff'])} (`{row['label']}` minus "
                       f"`{facts.grid.reference}`), {noise(row['diff'], row['band'])}; each is measured with its own "
                       "reward function, so this compares each prompt by its own yardstick, not the same grading.")
        answers += _contrasts(facts, row["label"], facts.grid.reference,
                              ("train/response_length_mean", "train/entropy", "train/grad_norm"))
        answers.append(_prompt_explanation(facts, row))
    return answers + _diverged_sentences(facts)


EXPLAINING = ("train/response_length_mean", "train/entropy", "train/grad_norm", "train/format_reward")


def _format_rates(facts: Facts, label: str) -> str | None:
    """The validation format reward at the first and last validation, where logged."""
    evals = [e for e in facts.runs(label)[0].eval_rows if "eval/format_reward" in e]
    if not evals:
        return None
    return f"`{label}` {pct(evals[0]['eval/format_reward'])} -> {pct(evals[-1]['eval/format_reward'])}"


def _prompt_explanation(facts: Facts, row: dict) -> str:
    """An attempted explanation from the numbers: the logged metrics whose trends (first vs last third, beyond
    noise) differ between the two prompts' runs, and the validation format rates."""
    label, ref = row["label"], facts.grid.reference
    differing = []
    for key in EXPLAINING:
        mine, theirs = facts.trends(label).get(key), facts.trends(ref).get(key)
        if mine and theirs and "diff" in mine and "diff" in theirs and mine["direction"] != theirs["direction"]:
            differing.append(f"{METRIC_NAMES[key]} ({mine['direction']} for `{label}`: {num(mine['first_third'])} -> "
                             f"{num(mine['last_third'])}; {theirs['direction']} for `{ref}`: "
                             f"{num(theirs['first_third'])} -> {num(theirs['last_third'])})")
    gap = ("there is no gap beyond noise to explain" if not row["beyond_noise"]
           else f"the gap of {points(row['diff'])} goes with " + ("these differences" if differing else
                                                                  "no difference in the logged metrics' trends"))
    sentence = "Attempted explanation, from the logged metrics: "
    sentence += ("the runs moved differently in " + "; ".join(differing) if differing else
                 "no logged metric moved differently between the two runs beyond noise (first vs last third)")
    rates = [r for r in (_format_rates(facts, ref), _format_rates(facts, label)) if r]
    if rates:
        sentence += "; validation format reward " + ", ".join(rates)
    return f"{sentence}; {gap}."


def _answer_sync_strategy(facts: Facts) -> list[str]:
    a = facts.ref
    answers = []
    for b in facts.others:
        ta, tb = facts.seconds(a["label"]), facts.seconds(b["label"])
        answers.append(f"Time per GRPO step: (A) `{a['label']}` {ta['total']:.1f} s (training {ta['train']:.1f} s, "
                       f"generation {ta['generation']:.1f} s) vs (B) `{b['label']}` {tb['total']:.1f} s (training "
                       f"{tb['train']:.1f} s, generation {tb['generation']:.1f} s): B takes "
                       f"{tb['total'] / ta['total']:.2f}x A's time per step.")
        wa, wb = facts.wall_clock_s(a["label"]), facts.wall_clock_s(b["label"])
        answers.append(f"At the end: A {pct(a['end'])} after {wa / 60:.1f} minutes, B {pct(b['end'])} after "
                       f"{wb / 60:.1f} minutes ({points(b['diff'])} for B, {noise(b['diff'], b['band'])}).")
        horizon = min(wa, wb)
        ra, rb = facts.reward_at(a["label"], horizon), facts.reward_at(b["label"], horizon)
        band = facts.band_of(ra, rb)
        verdict = ("neither is ahead beyond noise" if abs(rb - ra) <= band
                   else f"{'B' if rb > ra else 'A'} is ahead per wall-clock second")
        answers.append(f"At the same wall-clock ({horizon / 60:.1f} minutes): A had {pct(ra)}, B {pct(rb)} "
                       f"({points(rb - ra)} for B, {noise(rb - ra, band)}): {verdict}.")
    tags = {a["label"]: "A", **{b["label"]: "B" for b in facts.others}}
    answers += [f"Stability of ({tag}) `{label}`: " + " ".join(facts.stability(label)["text"])
                for label, tag in tags.items()]
    return answers + _diverged_sentences(facts)


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def _answer_kl_drift(facts: Facts) -> list[str]:
    answers = []
    for row in facts.rows.values():
        label = row["label"]
        k3, k1 = facts.stat(label, "train/kl_k3", "last"), facts.stat(label, "train/kl_k1", "last")
        rise_band = facts.band_of(row["start"], row["end"])
        if k3 is None or k1 is None:
            answers.append(f"`{label}` logged no KL (run it with `monitor_kl=True`).")
            continue
        answers.append(f"`{label}`: at its last GRPO step the KL to the initial policy was k3 = {num(k3)} and k1 = "
                       f"{num(k1)} nats/token (first step: k3 = {num(facts.stat(label, 'train/kl_k3', 'first'))}, "
                       f"k1 = {num(facts.stat(label, 'train/kl_k1', 'first'))}); the validation answer reward went "
                       f"{_ends(row)} ({points(row['rise'])}, {noise(row['rise'], rise_band)}).")
        # KL at each validated step (0 at step 0: the policy is the reference there) against the reward there.
        run = facts.runs(label)[0]
        steps, values = per_grpo_step(run.metrics, "train/kl_k3")
        kl_at = {0: 0.0, **dict(zip(steps, values))}
        pairs = [(kl_at[e["grpo_step"]], e[METRIC]) for e in run.eval_rows if e["grpo_step"] in kl_at]
        r = _pearson([p[0] for p in pairs], [p[1] for p in pairs])
        grew = k3 > (facts.stat(label, "train/kl_k3", "first") or 0.0)
        grew_words = "grew" if grew else "did not grow"
        if len(pairs) < 3:
            answers.append(f"Too few validated steps with KL ({len(pairs)}) to correlate KL with reward; k3 "
                           f"{grew_words} over the run.")
        elif r is None:
            answers.append(f"Does KL grow with reward? Not measurable here: the validation reward (or KL) stayed "
                           f"constant across the {len(pairs)} validated steps, while k3 {grew_words} over the run.")
        else:
            together = grew and r > 0 and row["rise"] > 0
            answers.append(f"Does KL grow with reward? {'Yes' if together else 'No'}: k3 {grew_words} over the run and "
                           f"its correlation with the validation reward across {len(pairs)} validated steps (step 0 "
                           f"at KL 0) is r = {r:+.2f}.")
        answers.append(_instability(label, facts.stability(label)))
    return answers + _diverged_sentences(facts)


def _times(ratio: float | None) -> str:
    return f"{ratio:.1f}x" if ratio is not None else "(median 0)"


def _instability(label: str, s: dict) -> str:
    """Does the run show instability -- skipped non-finite steps, divergence, a gradient-norm spike, a drop of
    the training reward beyond noise, a KL spike? The signs found, then what was checked and clear."""
    kl, grad, drop, skipped = s["kl"], s["grad_norm"], s["reward_drop"], s["skipped_steps"]
    checks = [(skipped > 0, f"{skipped} optimizer steps skipped for a non-finite loss or gradient norm" if skipped
               else "no optimizer step skipped for a non-finite loss or gradient norm"),
              (s["diverged"], f"it diverged at GRPO step {s['stopped_at']} ({s['reason']})" if s["diverged"]
               else "no divergence")]
    if grad is not None:
        checks.append((grad["spike"], f"the gradient norm spiked to {num(grad['max'])} at GRPO step "
                                      f"{grad['grpo_step']} ({_times(grad['ratio'])} the median)" if grad["spike"]
                       else f"no gradient-norm spike (largest {_times(grad['ratio'])} the median)"))
    if drop is not None:
        checks.append((drop["beyond_noise"],
                       f"the training reward dropped {num(drop['from'])} -> {num(drop['to'])} at GRPO step "
                       f"{drop['grpo_step']}, beyond noise (band ±{100 * drop['band']:.1f} points)"
                       if drop["beyond_noise"] else "the training reward never fell from one GRPO step to the next"
                       if drop["drop"] <= 0 else f"no drop of the training reward beyond noise (largest "
                       f"{points(-drop['drop'])}, band ±{100 * drop['band']:.1f} points)"))
    checks.append((kl is not None and kl["spike"],
                   "KL spikes: fewer than 3 GRPO steps with KL, too few to tell" if kl is None else
                   f"KL k3 spiked: +{num(kl['rise'])} to GRPO step {kl['grpo_step']} ({_times(kl['ratio'])} the "
                   f"median one-step change){_k3_tail(kl)}" if kl["spike"] else
                   f"no KL spike (largest one-step rise {_times(kl['ratio'])} the median change)"))
    signs, clear = [w for bad, w in checks if bad], [w for bad, w in checks if not bad]
    head = f"Instability in `{label}`: " + "; ".join(signs) + "." if signs else f"No sign of instability in `{label}`."
    return head + (f" Checked and clear: {'; '.join(clear)}." if clear else "")


def _answer_leaderboard(facts: Facts) -> list[str]:
    answers = []
    for row in facts.rows.values():
        changes = facts.grid.changes[row["label"]]
        cfg = facts.config(row["label"])
        settings = (", ".join(f"{key} = {value}" for key, value in changes.items()) if changes
                    else "none (how each grid's choice was kept or overridden: the selection steps)")
        band = facts.band_of(row["start"], row["end"])
        answers.append(f"Settings changed from the base recipe: {settings}. With `{cfg.model}` on `{cfg.dataset}` for "
                       f"{cfg.n_grpo_steps} GRPO steps the validation answer reward went {_ends(row)} "
                       f"({points(row['rise'])}, {noise(row['rise'], band)}) in "
                       f"{facts.wall_clock_s(row['label']) / 60:.1f} minutes.")
    return answers + _diverged_sentences(facts)


def _answer_generic(facts: Facts) -> list[str]:
    return [_reward_answer(facts, row) for row in facts.others] + _diverged_sentences(facts)


ANSWERS: dict[str, Callable[[Facts], list[str]]] = {
    "learning_rate": _answer_learning_rate, "baselines": _answer_baselines,
    "length_normalization": _answer_length_normalization, "std_normalization": _answer_std_normalization,
    "off_policy": _answer_off_policy, "off_policy_focused": _answer_off_policy, "clip_ablation": _answer_clip_ablation,
    "prompt": _answer_prompt, "sync_strategy": _answer_sync_strategy, "kl_drift": _answer_kl_drift,
    "leaderboard": _answer_leaderboard, "algorithms": _answer_generic,
}


# ---- the summary and the report --------------------------------------------------------------------------

def _row_text(row: dict, reference: str) -> dict:
    is_reference = row["label"] == reference
    return {"start": pct(row["start"]), "end": pct(row["end"]),
            "diff": "(reference)" if is_reference else f"{100 * row['diff']:+.1f} ± {100 * row['band']:.1f}",
            "beyond_noise": "-" if is_reference else ("yes" if row["beyond_noise"] else "no (within noise)"),
            "status": row["status"] if row["status"] != "diverged" else f"diverged @ {row['stopped_at']}"}


def _config_summary(result: GridResult, label: str) -> dict:
    run, record = result.results[label], result.records[label]
    return {"status": record["status"], "run": record.get("run"), "shared": record.get("shared", False),
            "changes": result.grid.changes[label], "loss_type": run.config.loss_type, "grpo_steps": run.grpo_steps,
            "wall_clock_s": run.elapsed_s,
            "metrics": {key: stats for key in METRICS if (stats := metric_stats(run, key)) is not None},
            "seconds_per_step": seconds_per_step(run),
            "eval": [{"grpo_step": e["grpo_step"], "elapsed_s": e["time/elapsed_s"], "answer_reward": e[METRIC]}
                     for e in run.eval_rows]}


def grid_summary(result: GridResult, earlier: dict[str, dict] | None = None) -> dict:
    """The grid's numbers, its noise reading, the trends and stability of its logged metrics and the answers
    to its written questions (JSON-able). `earlier`: for the leaderboard, the summaries of the grids it takes
    its settings from (default: read from figures/grid_<name>.json)."""
    grid = result.grid
    missing = [label for label in grid.configs if label not in result.results]
    if missing:
        raise ValueError(f"grid {grid.name!r}: no result for {', '.join(missing)}; run the grid (run_sweep) first")
    if any(not run.eval_rows for run in result.results.values()):
        raise ValueError(f"grid {grid.name!r}: a run has no validation rows; finish or resume it first")
    rows = compare(result)
    facts = Facts(result, rows, earlier)
    answers = ANSWERS.get(grid.name, _answer_generic)(facts)
    trends = {group: facts.trends(group) for group in grid.groups}
    return _finite({
        "grid": grid.name, "profile": grid.profile, "model": grid.base.model, "dataset": grid.base.dataset,
        "settings": config_settings(grid.base),
        "question": grid.question, "reference": grid.reference, "n_grpo_steps": grid.steps_per_run,
        "n_eval": facts.ref["n"],
        "rows": [{**row, "text": _row_text(row, grid.reference)} for row in rows],
        "reading": noise_reading(result, rows),
        "configs": {label: _config_summary(result, label) for label in grid.configs},
        "answers": answers,
        "trends": trends,
        "trend_sentences": [trend_sentence(group, found) for group, found in trends.items()],
        "stability": {group: facts.stability(group) for group in grid.groups},
        "rationale": grid.rationale,
        "selection": leaderboard_selection(facts) if grid.name == "leaderboard" else [],
    })


def report_grid(result: GridResult) -> dict:
    """Plot the grid (`plot_grid`), then write `figures/grid_<name>.json` (the summary plus `figures`, the
    PNG names of its figures, `<grid>_<kind>.png`) atomically; returns the summary."""
    from hw3lib.experiments.plots import plot_grid

    summary = grid_summary(result)
    stems = plot_grid(result)
    summary["figures"] = [f"{stem}.png" for stem in stems.values()]
    write_result(f"grid_{result.grid.name}", summary)
    return summary
