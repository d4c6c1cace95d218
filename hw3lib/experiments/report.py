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
  numbers above by `ANSWERS[grid]` (a grid not listed gets one noise sentence per config).

Every comparison of final validation rewards carries its noise band (2 s.e.; binomial over the
validation questions, seed spread too when a group has repeats) and says "within noise" when the
difference does not exceed it. Per-wall-clock comparisons read each run's validation reward at a
common wall-clock time: the last validation logged at or before it (what the run had reached then).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hw3lib.core.writeup_keys import write_result
from hw3lib.experiments.grids import GridResult, compare, difference_band, noise_reading, seed_band
from hw3lib.experiments.plots import per_grpo_step
from hw3lib.core.lifecycle import RunResult
from hw3lib.grpo.results import time_breakdown

METRIC = "eval/answer_reward"
# Logged training metrics summarised per run (a run that does not log one, e.g. KL without
# `monitor_kl`, simply has no entry for it).
METRICS = ("train/reward", "train/entropy", "train/grad_norm", "train/response_length_mean", "train/clip_fraction",
           "train/ratio_mean", "train/kl_k1", "train/kl_k3")
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


class Facts:
    """A grid's numbers for the answer builders: compare rows by group, group means of run metrics."""

    def __init__(self, result: GridResult, rows: list[dict]):
        self.result, self.grid = result, result.grid
        self.rows = {row["label"]: row for row in rows}
        self.ref = self.rows[self.grid.reference]
        self.others = [row for row in rows if row["label"] != self.grid.reference]

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
    return answers


def _reward_answer(facts: Facts, row: dict) -> str:
    return (f"`{row['label']}` ended at {pct(row['end'])} vs {pct(facts.ref['end'])} for `{facts.grid.reference}` "
            f"({points(row['diff'])}): {noise(row['diff'], row['band'])}.")


def _answer_baselines(facts: Facts) -> list[str]:
    ref = facts.grid.reference
    answers = []
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        for key, what, unit in (("train/entropy", "Entropy", "nats/token"), ("train/grad_norm", "Gradient norm", ""),
                                ("train/response_length_mean", "Response length", "tokens")):
            sentence = _contrast(facts, row["label"], ref, key, what, unit)
            answers.append(sentence or f"{what}: not logged by these runs.")
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
        sentence = _contrast(facts, row["label"], facts.grid.reference, "train/grad_norm", "Gradient norm")
        if sentence:
            answers.append(sentence)
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
        sentence = _contrast(facts, row["label"], facts.grid.reference, "train/response_length_mean",
                             "Response length", "tokens")
        if sentence:
            answers.append(sentence)
    return answers + _diverged_sentences(facts)


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
    return answers + _diverged_sentences(facts)


def _answer_leaderboard(facts: Facts) -> list[str]:
    answers = []
    for row in facts.rows.values():
        changes = facts.grid.changes[row["label"]]
        cfg = facts.config(row["label"])
        settings = (", ".join(f"{key} = {value}" for key, value in changes.items()) if changes
                    else "none (no grid beat the base recipe beyond noise)")
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
            "changes": result.grid.changes[label], "grpo_steps": run.grpo_steps, "wall_clock_s": run.elapsed_s,
            "metrics": {key: stats for key in METRICS if (stats := metric_stats(run, key)) is not None},
            "seconds_per_step": seconds_per_step(run),
            "eval": [{"grpo_step": e["grpo_step"], "elapsed_s": e["time/elapsed_s"], "answer_reward": e[METRIC]}
                     for e in run.eval_rows]}


def grid_summary(result: GridResult) -> dict:
    """The grid's numbers, its noise reading and the answers to its written questions (JSON-able)."""
    grid = result.grid
    missing = [label for label in grid.configs if label not in result.results]
    if missing:
        raise ValueError(f"grid {grid.name!r}: no result for {', '.join(missing)}; run the grid (run_sweep) first")
    if any(not run.eval_rows for run in result.results.values()):
        raise ValueError(f"grid {grid.name!r}: a run has no validation rows; finish or resume it first")
    rows = compare(result)
    facts = Facts(result, rows)
    answers = ANSWERS.get(grid.name, _answer_generic)(facts)
    return _finite({
        "grid": grid.name, "profile": grid.profile, "model": grid.base.model, "dataset": grid.base.dataset,
        "question": grid.question, "reference": grid.reference, "n_grpo_steps": grid.base.n_grpo_steps,
        "n_eval": facts.ref["n"],
        "rows": [{**row, "text": _row_text(row, grid.reference)} for row in rows],
        "reading": noise_reading(result, rows),
        "configs": {label: _config_summary(result, label) for label in grid.configs},
        "answers": answers,
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
