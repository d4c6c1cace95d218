"""hw3lib.experiments.report: the answer sentences of each grid, checked on fake grid results with hand-chosen
numbers (noise bands worked by hand), the JSON summary, and report_grid's files."""

from __future__ import annotations

import json

import pytest

from hw3lib.experiments.grids import Grid, GridResult, choices_from
from hw3lib.experiments.report import (grid_summary, metric_stats, report_grid, reward_at, seconds_per_step, series,
                                       summary_choice, trend)
from hw3lib.core.lifecycle import RunResult
from hw3lib.grpo.config import GRPOConfig

N = 100  # validation questions of every fake run
PHASES = {"generation": 1.0, "scoring": 0.0, "old_logprobs": 0.0, "train": 1.0, "weight_sync": 0.0}


def _run(cfg: GRPOConfig, evals: list[tuple[int, float, float]], per_step: dict[str, list[float]] | None = None,
         seconds: dict[str, float] | None = None) -> RunResult:
    """A run's metrics: `evals` as (GRPO step, wall-clock s, answer reward); one training row per GRPO step
    with `per_step[metric][step - 1]` and `seconds` per phase."""
    per_step = per_step or {"train/grad_norm": [1.0, 1.0]}
    seconds = {**PHASES, **(seconds or {})}
    steps = max(len(values) for values in per_step.values())
    rows = [{"step": g, "grpo_step": g, "train/loss": 0.1, "train/reward": 0.3, "time/elapsed_s": 10.0 * g,
             **{f"time/{part}_s": s for part, s in seconds.items()},
             **{key: values[g - 1] for key, values in per_step.items()}} for g in range(1, steps + 1)]
    rows += [{"step": s, "grpo_step": s, "eval/answer_reward": r, "eval/n": N, "time/elapsed_s": t, "time/eval_s": 0.0}
             for s, t, r in evals]
    return RunResult(run_dir=None, config=cfg, metrics=rows, steps=steps, optimizer_steps=steps, skipped_steps=0,
                     elapsed_s=evals[-1][1], checkpoint=None)


def _grid(name: str, changes: dict[str, dict], **base_overrides) -> Grid:
    base = GRPOConfig.for_profile("smoke", name="base", n_grpo_steps=2, **base_overrides)
    configs = {label: base.replace(name=f"{name}/{label}", **change) for label, change in changes.items()}
    groups = {label: [label] for label in changes}
    return Grid(name, "smoke", base, configs, changes, next(iter(changes)), f"{name}?", groups)


def _result(grid: Grid, runs: dict[str, dict], diverged: dict | None = None) -> GridResult:
    """`runs[label]`: the keyword arguments of `_run` (the config comes from the grid)."""
    records = {label: {"run": cfg.name, "status": "finished", "wall_clock_s": runs[label]["evals"][-1][1],
                       "shared": False} for label, cfg in grid.configs.items()}
    for label, (step, reason) in (diverged or {}).items():
        records[label].update(status="diverged", stopped_at=step, reason=reason)
    return GridResult(grid, {label: _run(cfg, **runs[label]) for label, cfg in grid.configs.items()}, records)


def _starting(answers: list[str], head: str) -> str:
    """The one answer that starts with `head` (answers are asserted by content, not by position)."""
    found = [answer for answer in answers if answer.startswith(head)]
    assert len(found) == 1, (head, answers)
    return found[0]


def _ends(start: float, end: float, seconds: float = 100.0) -> dict:
    return {"evals": [(0, 1.0, start), (2, seconds, end)]}


# ---- the run-level numbers ---------------------------------------------------------------------------------

def test_metric_stats_time_and_reward_at_wall_clock():
    cfg = GRPOConfig.for_profile("smoke", name="x")
    run = _run(cfg, [(0, 1.0, 0.3), (1, 50.0, 0.4), (2, 120.0, 0.6)],
               {"train/entropy": [1.0, 0.5, 0.3], "train/grad_norm": [float("nan"), 2.0, 4.0]},
               seconds={"generation": 2.0, "train": 3.0})
    assert metric_stats(run, "train/entropy") == {"first": 1.0, "mean": pytest.approx(0.6), "last": 0.3, "steps": 3}
    assert metric_stats(run, "train/grad_norm") == {"first": 2.0, "mean": 3.0, "last": 4.0, "steps": 2}  # NaN skipped
    assert metric_stats(run, "train/kl_k3") is None
    assert seconds_per_step(run) == {**PHASES, "generation": 2.0, "train": 3.0, "eval": 0.0, "total": 5.0}
    # The last validation at or before the time: 0.4 at 50 s holds until 120 s; before the first, the first.
    assert [reward_at(run, t) for t in (0.5, 49.0, 50.0, 119.0, 500.0)] == [0.3, 0.3, 0.4, 0.4, 0.6]


# ---- the answers, grid by grid ----------------------------------------------------------------------------

def test_learning_rate_names_the_winner_its_margin_vs_noise_and_the_diverged_rate():
    grid = _grid("learning_rate", {"lr_0.0002": {}, "lr_6e-05": {"learning_rate": 6e-5},
                                   "lr_0.0006": {"learning_rate": 6e-4}, "lr_0.002": {"learning_rate": 2e-3},
                                   "lr_0.02": {"learning_rate": 2e-2}})
    runs = {"lr_0.0002": _ends(0.3, 0.5), "lr_6e-05": _ends(0.3, 0.4), "lr_0.0006": _ends(0.3, 0.7),
            "lr_0.002": _ends(0.3, 0.6), "lr_0.02": _ends(0.3, 0.9)}
    summary = grid_summary(_result(grid, runs, {"lr_0.02": (3, "train/loss = nan")}))
    answers = summary["answers"]
    # 0.7 vs 0.6 on 100 questions each (Agresti-Caffo): (71/102)(31/102)/102 + (61/102)(41/102)/102 = 0.0020741 +
    # 0.0023568, 2 sqrt(.) = 0.1331: +10 points is within noise. Against the base 0.5: 2 sqrt(0.0020741 + 0.0024510)
    # = 0.1345.
    rows = {row["label"]: row for row in summary["rows"]}
    assert rows["lr_0.0006"]["noise"]["band"] == pytest.approx(0.1345, abs=1e-4)
    assert rows["lr_0.0006"]["noise"]["verdict"] == "beyond noise" and not rows["lr_0.0006"]["noise"]["paired"]
    assert rows["lr_0.02"]["status"] == "diverged" and rows["lr_6e-05"]["noise"]["verdict"] == "within noise"
    assert summary["findings"]["winner"] == "lr_0.0006"  # the best end, lr 0.02, diverged
    assert ("Winner: lr 0.0006 ended highest, at 70.0% (from 30.0%); its margin over the next best, "
            "lr 0.002 at 60.0%, is +10.0 points, within noise, band ±13.3 points.") in answers
    assert "Against the base rate (lr 0.0002, 50.0%): +20.0 points, beyond noise, band ±13.5 points." in answers
    assert _starting(answers, "lr 0.02 diverged at GRPO step 3 (train/loss = nan)")  # the best end, but diverged
    assert ("Rise of the validation answer reward by rate: lr 6e-05: +10.0 points, lr 0.0002: +20.0 "
            "points, lr 0.0006: +40.0 points, lr 0.002: +30.0 points, lr 0.02: +60.0 points (diverged).") in answers


def test_baselines_report_reward_vs_noise_and_what_no_baseline_did_to_the_other_metrics():
    grid = _grid("baselines", {"reinforce_with_baseline": {"loss_type": "reinforce_with_baseline"},
                               "no_baseline": {"loss_type": "no_baseline"}})
    runs = {"reinforce_with_baseline": {**_ends(0.3, 0.5), "per_step": {
                "train/entropy": [1.0, 0.9], "train/grad_norm": [1.0, 1.5],
                "train/response_length_mean": [20.0, 22.0]}},
            "no_baseline": {**_ends(0.3, 0.55), "per_step": {
                "train/entropy": [1.0, 0.5], "train/grad_norm": [4.0, 6.0],
                "train/response_length_mean": [20.0, 40.0]}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    # 0.55 vs 0.5: 2 sqrt((56/102)(46/102)/102 + (51/102)(51/102)/102) = 2 sqrt(0.0024760 + 0.0024510) = 0.1404.
    assert ("`no_baseline` ended at 55.0% vs 50.0% for `reinforce_with_baseline` (+5.0 points): "
            "within noise, band ±14.0 points.") in answers
    assert ("Entropy: `no_baseline` averaged 0.75 nats/token over its GRPO steps (last step 0.5) vs "
            "0.95 nats/token (last 0.9) for `reinforce_with_baseline` (0.79x, lower).") in answers
    assert ("Gradient norm: `no_baseline` averaged 5 over its GRPO steps (last step 6) vs 1.25 "
            "(last 1.5) for `reinforce_with_baseline` (4.00x, higher).") in answers
    assert ("Response length: `no_baseline` averaged 30 tokens over its GRPO steps (last step 40) vs "
            "21 tokens (last 22) for `reinforce_with_baseline` (1.43x, higher).") in answers


def test_length_normalization_states_pros_and_cons_with_the_measured_lengths_and_gradients():
    grid = _grid("length_normalization", {"masked_mean": {}, "constant": {"length_normalization": "constant"}})
    assert grid.base.sampling_max_tokens == 32  # the constant normalizer: the smoke generation budget
    runs = {"masked_mean": {**_ends(0.3, 0.6), "per_step": {"train/grad_norm": [2.0, 2.0],
                                                            "train/response_length_mean": [10.0, 14.0]}},
            "constant": {**_ends(0.3, 0.5), "per_step": {"train/grad_norm": [0.5, 0.5],
                                                         "train/response_length_mean": [8.0, 8.0]}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert _starting(answers, "`constant` ended at 50.0% vs 60.0% for `masked_mean` (-10.0 points): within noise")
    per_response, constant = _starting(answers, "`masked_mean` (each"), _starting(answers, "`constant` (the token")
    assert "pro -- every response counts the same" in per_response and "mean gradient norm 2)" in per_response
    assert per_response.endswith("its mean response length went 10 -> 14 tokens.")
    # Mean length 8 of a 32-token budget: 0.25; gradient norm 0.5 vs 2: 0.25x, a smaller effective step.
    assert ("con -- the update shrinks by the mean length over the budget: at 8 tokens on average that is 0.25 of "
            "the budget, and its mean gradient norm was 0.5 vs 2 (0.25x), so its effective step size is smaller"
            in constant)
    assert "(the token sum divided by the budget, 32 tokens)" in constant


def test_std_normalization_reports_reward_and_gradient_norm():
    grid = _grid("std_normalization", {"std_on": {}, "std_off": {"use_std_normalization": False}})
    runs = {"std_on": {**_ends(0.3, 0.5), "per_step": {"train/grad_norm": [2.0, 2.0]}},
            "std_off": {**_ends(0.3, 0.8), "per_step": {"train/grad_norm": [1.0, 1.0]}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    # 0.8 vs 0.5: 2 sqrt((81/102)(21/102)/102 + (51/102)(51/102)/102) = 2 sqrt(0.0016029 + 0.0024510) = 0.1273.
    assert ("`std_off` ended at 80.0% vs 50.0% for `std_on` (+30.0 points): beyond noise, band ±12.7 "
            "points.") in answers
    assert "(0.50x, lower)" in _starting(answers, "Gradient norm:")


def test_off_policy_compares_per_step_and_per_wall_clock_second():
    grid = _grid("off_policy", {"e1_b256": {}, "e2_b64": {}, "e4_b256": {}})
    runs = {"e1_b256": {"evals": [(0, 1.0, 0.3), (1, 100.0, 0.4), (2, 200.0, 0.5)]},  # on-policy: ends at 200 s
            "e2_b64": {"evals": [(0, 1.0, 0.3), (1, 150.0, 0.6), (2, 300.0, 0.8)]},  # best per step, but slow
            "e4_b256": {"evals": [(0, 1.0, 0.3), (1, 80.0, 0.55), (2, 160.0, 0.7)]}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("Per GRPO step `e2_b64` ended highest, at 80.0%: +30.0 points vs `e1_b256`, beyond noise, "
            "band ±12.7 points.") in answers
    # At 200 s (3.3 minutes): e2_b64 had reached 0.6 (its 150-s validation), e4_b256 0.7 (finished at 160 s).
    assert ("Per wall-clock second, at the on-policy run's end (3.3 minutes) the runs had reached: "
            "`e2_b64` 60.0%, `e4_b256` 70.0%, `e1_b256` 50.0%.") in answers
    assert ("So per wall-clock second `e4_b256` is best: +20.0 points vs on-policy at the same time, "
            "beyond noise, band ±13.5 points.") in answers
    # Rise per minute: e1 20 points / (200/60) min = +6.0, e2 50 / 5 = +10.0, e4 40 / (160/60) = +15.0.
    assert ("Seconds per GRPO step and validation-reward rise per wall-clock minute: `e1_b256` 2.0 s, "
            "+6.0 points/min, `e2_b64` 2.0 s, +10.0 points/min, `e4_b256` 2.0 s, +15.0 points/min.") in answers


def test_off_policy_says_so_when_on_policy_wins_within_noise():
    grid = _grid("off_policy_focused", {"e1_b256": {}, "e2_b64": {}})
    runs = {"e1_b256": _ends(0.3, 0.6, seconds=100.0), "e2_b64": _ends(0.3, 0.55, seconds=300.0)}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("Per GRPO step the on-policy run `e1_b256` ended highest, at 60.0%; the best off-policy "
            "setting, `e2_b64`, ended at 55.0% (-5.0 points, within noise, band ±13.8 points).") in answers
    assert "So per wall-clock second the on-policy run is best (60.0% by then)." in answers


def test_clip_ablation_reports_clip_fraction_and_reward():
    grid = _grid("clip_ablation", {"grpo_clip": {}, "grpo_no_clip": {"loss_type": "grpo_no_clip"}})
    runs = {"grpo_clip": {**_ends(0.3, 0.6), "per_step": {"train/clip_fraction": [0.1, 0.3],
                                                          "train/ratio_mean": [1.0, 1.02]}},
            "grpo_no_clip": {**_ends(0.3, 0.2), "per_step": {"train/ratio_mean": [1.0, 1.5]}}}
    answers = grid_summary(_result(grid, runs, {"grpo_no_clip": (2, "training reward collapsed")}))["answers"]
    assert ("`grpo_clip` clipped 20.0% of the tokens' ratios on average over its GRPO steps (last step "
            "30.0%); it ended at 60.0%.") in answers
    assert ("`grpo_no_clip` does not clip (no clip fraction); mean importance ratio 1.25; it ended at "
            "20.0%.") in answers
    assert _starting(answers, "`grpo_no_clip` ended at 20.0% vs 60.0% for `grpo_clip` (-40.0 points): beyond noise")
    assert _starting(answers, "`grpo_no_clip` diverged at GRPO step 2 (training reward collapsed)")


def test_prompt_reports_each_prompt_with_its_own_reward():
    grid = _grid("prompt", {"r1_zero": {}, "question_only": {"prompt": "question_only"}}, warm_start_steps=0)
    answers = grid_summary(_result(grid, {"r1_zero": _ends(0.2, 0.5), "question_only": _ends(0.4, 0.6)}))["answers"]
    assert ("`r1_zero` (prompt `r1_zero`, trained and validated with its own `r1_zero_reward_fn`): "
            "20.0% -> 50.0% (+30.0 points).") in answers
    assert ("`question_only` (prompt `question_only`, trained and validated with its own "
            "`question_only_reward_fn`): 40.0% -> 60.0% (+20.0 points).") in answers
    assert _starting(answers, "The end values differ by +10.0 points (`question_only` minus `r1_zero`), within "
                                 "noise, band ±13.9 points")


def test_sync_strategy_reports_time_per_step_and_reward_against_wall_clock():
    grid = _grid("sync_strategy", {"one_step": {}, "multi_epoch": {"epochs_per_rollout_batch": 2}})
    runs = {"one_step": {"evals": [(0, 1.0, 0.3), (2, 60.0, 0.4)], "seconds": {"generation": 10.0, "train": 5.0}},
            "multi_epoch": {"evals": [(0, 1.0, 0.3), (1, 45.0, 0.6), (2, 90.0, 0.7)],
                            "seconds": {"generation": 10.0, "train": 20.0}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("Time per GRPO step: (A) `one_step` 15.0 s (training 5.0 s, generation 10.0 s) vs (B) "
            "`multi_epoch` 30.0 s (training 20.0 s, generation 10.0 s): B takes 2.00x A's time per step.") in answers
    assert _starting(answers, "At the end: A 40.0% after 1.0 minutes, B 70.0% after 1.5 minutes (+30.0 points for B,"
                                 " beyond noise")
    # At A's end (60 s) B had its 45-s validation, 0.6: +20 points vs 0.4, band 2 sqrt(...) = 0.1370.
    assert ("At the same wall-clock (1.0 minutes): A had 40.0%, B 60.0% (+20.0 points for B, beyond "
            "noise, band ±13.7 points): B is ahead per wall-clock second.") in answers


def test_kl_drift_reports_kl_at_the_end_against_the_reward_rise():
    grid = _grid("kl_drift", {"kl": {"monitor_kl": True}})
    runs = {"kl": {"evals": [(0, 1.0, 0.3), (1, 20.0, 0.4), (2, 40.0, 0.6)],
                   "per_step": {"train/kl_k3": [0.03, 0.04], "train/kl_k1": [0.035, 0.05]}}}
    summary = grid_summary(_result(grid, runs))
    drift = summary["findings"]["kl_drift"][0]
    assert (drift["k3"], drift["k1"], drift["k3_first"], drift["k1_first"]) == (0.04, 0.05, 0.03, 0.035)
    # Rise 0.3 -> 0.6 on the same 100 questions, no rollouts saved: unpaired, 2 sqrt((61/102)(41/102)/102 +
    # (31/102)(71/102)/102) = 0.1331: beyond noise.
    assert drift["rise"]["diff"] == pytest.approx(0.3) and drift["rise"]["band"] == pytest.approx(0.1331, abs=1e-4)
    assert drift["rise"]["verdict"] == "beyond noise" and not drift["rise"]["paired"]
    # (KL, reward) = (0, .3), (.03, .4), (.04, .6): means .02333, .43333; cross-product sum .005667, sums of
    # squares .0008667 and .04667: r = .005667 / sqrt(.0008667 * .04667) = 0.891; 3 pairs: no Fisher interval.
    assert drift["pairs"] == 3 and drift["r"]["r"] == pytest.approx(0.891, abs=1e-3) and drift["r"]["low"] is None
    assert drift["grew"] and drift["together"]
    answers = summary["answers"]  # the renderer's words for these findings
    assert ("`kl`: at its last GRPO step the KL to the initial policy was k3 = 0.04 and k1 = 0.05 "
            "nats/token (first step: k3 = 0.03, k1 = 0.035); the validation answer reward went 30.0% -> "
            "60.0% (+30.0 points, beyond noise, band ±13.3 points).") in answers
    assert ("Does KL grow with reward? Yes: k3 grew over the run and its correlation with the validation "
            "reward across 3 validated steps (step 0 at KL 0) is r = +0.89 (too few steps for an interval).") in answers


def test_a_single_runs_rise_needs_the_seed_band_of_one_end_not_of_a_two_run_difference(monkeypatch, tmp_path):
    from hw3lib.core.io import atomic_write_json
    from hw3lib.experiments.seeds import SEED_BAND_FILE

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path))
    # The base's replicas ended at 0.40, 0.50, 0.60: sd 0.1, t(2 df) 4.526537. Two single runs differ by chance up to
    # 4.526537 x 0.1 x sqrt 2 = 0.640149, but a run's rise from the warm start every seed shares varies only at its
    # end: 4.526537 x 0.1 = 0.452654. A +50-point rise clears the second and not the first.
    atomic_write_json(tmp_path / "seed_replicas" / SEED_BAND_FILE, {"profile": "smoke", "values": [0.4, 0.5, 0.6]})
    grid = _grid("kl_drift", {"kl": {"monitor_kl": True}})
    runs = {"kl": {"evals": [(0, 1.0, 0.2), (2, 40.0, 0.7)],
                   "per_step": {"train/kl_k3": [0.03, 0.04], "train/kl_k1": [0.035, 0.05]}}}
    rise = grid_summary(_result(grid, runs))["findings"]["kl_drift"][0]["rise"]
    assert rise["seed_band"] == pytest.approx(0.452654, abs=1e-6) and rise["verdict"] == "beyond noise"
    # Three seeds of one config: their own spread, for the mean of three ends (0.7, 0.6, 0.8 from 0.2: sd 0.1,
    # 4.526537 x 0.1 / sqrt 3 = 0.261340).
    grid = _grid("kl_drift", {"kl": {"monitor_kl": True}})
    grid.configs.update({f"kl_s{i}": grid.configs["kl"].replace(name=f"kl_drift/kl_s{i}", seed=i) for i in (1, 2)})
    grid.changes.update(kl_s1={"seed": 1}, kl_s2={"seed": 2})
    grid.groups["kl"] = ["kl", "kl_s1", "kl_s2"]
    runs = {"kl": runs["kl"], "kl_s1": {**runs["kl"], "evals": [(0, 1.0, 0.2), (2, 40.0, 0.6)]},
            "kl_s2": {**runs["kl"], "evals": [(0, 1.0, 0.2), (2, 40.0, 0.8)]}}
    rise = grid_summary(_result(grid, runs))["findings"]["kl_drift"][0]["rise"]
    assert rise["seed_band"] == pytest.approx(0.261340, abs=1e-6) and rise["diff"] == pytest.approx(0.5)


def test_render_kl_drift_words_the_correlation_interval_and_missing_kl():
    from hw3lib.experiments.render import render_kl_drift

    rise = {"diff": 0.1, "band": 0.05, "paired": True, "seed_band": 0.08, "p_value": 0.01, "verdict": "beyond noise"}
    found = {"label": "kl", "k3": 0.2, "k1": 0.1, "k3_first": 0.0, "k1_first": 0.0, "start": 0.3, "end": 0.4,
             "rise": rise, "pairs": 5, "r": {"r": 0.7746, "n": 5, "low": -0.3649, "high": 0.9851}, "grew": True,
             "together": True}
    assert render_kl_drift(found)[0].endswith("went 30.0% -> 40.0% (+10.0 points, beyond noise, paired band ±5.0 "
                                              "points (McNemar p = 0.01), seed band ±8.0 points).")
    assert render_kl_drift(found)[1].endswith("is r = +0.77, interval [-0.36, +0.99].")
    assert render_kl_drift({**found, "k3": None}) == ["`kl` logged no KL (run it with `monitor_kl=True`)."]


def test_kl_drift_with_a_flat_reward_says_the_correlation_is_not_measurable():
    grid = _grid("kl_drift", {"kl": {"monitor_kl": True}})
    runs = {"kl": {"evals": [(0, 1.0, 0.3), (1, 20.0, 0.3), (2, 40.0, 0.3)],
                   "per_step": {"train/kl_k3": [0.01, 0.02], "train/kl_k1": [0.01, 0.02]}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("Does KL grow with reward? Not measurable here: the validation reward (or KL) stayed "
            "constant across the 3 validated steps, while k3 grew over the run.") in answers


def test_leaderboard_states_the_chosen_settings_and_result():
    grid = _grid("leaderboard", {"best": {"learning_rate": 6e-4}})
    answers = grid_summary(_result(grid, {"best": _ends(0.3, 0.7, seconds=600.0)}), earlier={})["answers"]
    assert answers == ["Settings changed from the base recipe: learning_rate = 0.0006. With `tiny` on `arithmetic` for "
                       "2 GRPO steps the validation answer reward went 30.0% -> 70.0% (+40.0 points, beyond noise, "
                       "band ±12.9 points) in 10.0 minutes."]


# ---- the summary and the report ----------------------------------------------------------------------------

def test_summary_is_strict_json_and_states_who_produced_it():
    grid = _grid("baselines", {"reinforce_with_baseline": {}, "no_baseline": {"loss_type": "no_baseline"}})
    runs = {"reinforce_with_baseline": _ends(0.3, 0.5),
            "no_baseline": {**_ends(0.3, 0.1), "per_step": {"train/grad_norm": [1.0, float("nan")],
                                                            "train/loss": [0.1, float("inf")]}}}
    summary = grid_summary(_result(grid, runs, {"no_baseline": (2, "train/loss = inf")}))
    json.dumps(summary, allow_nan=False)  # Typst cannot read NaN: it must not be there
    who = {key: summary[key] for key in ("grid", "profile", "model", "dataset", "reference", "n_grpo_steps", "n_eval")}
    assert who == {"grid": "baselines", "profile": "smoke", "model": "tiny", "dataset": "arithmetic",
                   "reference": "reinforce_with_baseline", "n_grpo_steps": 2, "n_eval": N}
    rows = {row["label"]: row for row in summary["rows"]}
    assert rows["no_baseline"]["text"] == {"start": "30.0%", "end": "10.0%", "diff": "-40.0 ± 11.7",
                                           "beyond_noise": "yes", "status": "diverged @ 2"}
    assert rows["reinforce_with_baseline"]["text"]["diff"] == "(reference)"
    assert summary["configs"]["no_baseline"]["metrics"]["train/grad_norm"] == {"first": 1.0, "mean": 1.0, "last": 1.0,
                                                                               "steps": 1}
    assert summary["configs"]["no_baseline"]["seconds_per_step"]["total"] == 2.0
    assert "`no_baseline` diverged at GRPO step 2 (train/loss = inf)" in summary["reading"]


def test_summary_refuses_a_grid_with_a_missing_run():
    grid = _grid("baselines", {"reinforce_with_baseline": {}, "no_baseline": {"loss_type": "no_baseline"}})
    result = _result(grid, {"reinforce_with_baseline": _ends(0.3, 0.5), "no_baseline": _ends(0.3, 0.5)})
    del result.results["no_baseline"]
    with pytest.raises(ValueError, match="no result for no_baseline"):
        grid_summary(result)


def test_report_grid_writes_the_summary_and_names_its_figures(tmp_path, monkeypatch):
    import matplotlib

    import hw3lib.core.io

    matplotlib.use("Agg")
    monkeypatch.setattr(hw3lib.core.io, "figures_dir", lambda: tmp_path)
    grid = _grid("kl_drift", {"kl": {"monitor_kl": True}})
    runs = {"kl": {"evals": [(0, 1.0, 0.3), (2, 40.0, 0.6)], "per_step": {
        "train/entropy": [1.0, 0.9], "train/kl_k3": [0.01, 0.04], "train/kl_k1": [0.012, 0.05]}}}
    summary = report_grid(_result(grid, runs))
    assert summary["figures"] == ["kl_drift_reward.png", "kl_drift_metrics.png", "kl_drift_kl.png"]
    assert json.loads((tmp_path / "grid_kl_drift.json").read_text()) == summary
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in summary["figures"])


# ---- trends of the logged metrics, stability, the handout's threshold, the leaderboard's selection -----------

RISING = [1.0, 2.0, 1.0, 2.0, 5.0, 5.0, 5.0, 5.0, 3.0, 4.0, 3.0, 4.0]


def test_trend_compares_the_first_and_last_thirds_against_their_noise_band():
    # 12 steps, thirds of 4: means 1.5 and 3.5, each third's sample variance (4 x 0.25) / 3 = 1/3, so Welch's s.e. is
    # sqrt(1/3 / 4 + 1/3 / 4) = sqrt(1/6) = 0.408248 with (equal variances and sizes) 2 x 3 = 6 degrees of freedom:
    # t(6) at 2 s.e.'s coverage is 2.516524, the band 2.516524 x 0.408248 = 1.027367: +2 is beyond it.
    rose = trend(RISING, "entropy")
    assert (rose["first_third"], rose["last_third"], rose["window"]) == (1.5, 3.5, 4)
    assert rose["band"] == pytest.approx(1.027367, abs=1e-6)
    assert rose["text"] == "entropy rose: 1.5 -> 3.5 (+2, beyond noise, band ±1.03)"
    assert trend(RISING[::-1], "entropy")["text"] == "entropy fell: 3.5 -> 1.5 (-2, beyond noise, band ±1.03)"
    # Thirds [1, 3, 1, 3] and [1.5, 3.5, 1.5, 3.5]: means 2 and 2.5, variances 4/3 each, s.e. sqrt(2/3) = 0.816497,
    # 6 degrees of freedom: band 2.516524 x 0.816497 = 2.054733.
    flat = trend([1.0, 3.0, 1.0, 3.0, 0.0, 0.0, 0.0, 0.0, 1.5, 3.5, 1.5, 3.5], "gradient norm")
    assert flat["direction"] == "flat" and flat["band"] == pytest.approx(2.054733, abs=1e-6)
    assert flat["text"] == "gradient norm flat (within noise, band ±2.05): 2 -> 2.5"
    assert trend([1.0] * 5, "KL k3") == {"steps": 5, "window": 1,
                                         "text": "KL k3: too few steps (5 GRPO steps; each third needs at least 2)"}


def test_trends_average_seed_repeats_step_by_step_and_appear_in_the_summary():
    cfg = GRPOConfig.for_profile("smoke", name="x")
    runs = [_run(cfg, [(0, 1.0, 0.3)], {"train/entropy": [1.0, 2.0]}), _run(cfg, [(0, 1.0, 0.3)],
                                                                             {"train/entropy": [3.0, 4.0]})]
    assert series(runs, "train/entropy") == [2.0, 3.0]
    grid = _grid("baselines", {"reinforce_with_baseline": {}, "no_baseline": {"loss_type": "no_baseline"}})
    summary = grid_summary(_result(grid, {"reinforce_with_baseline": _ends(0.3, 0.5),
                                          "no_baseline": {**_ends(0.3, 0.5), "per_step": {"train/entropy": RISING}}}))
    assert summary["trends"]["no_baseline"]["train/entropy"]["direction"] == "rose"
    assert summary["trend_sentences"][0] == ("`reinforce_with_baseline`: too few GRPO steps (2) for a trend: each "
                                             "third needs at least 2.")
    # The fake rows log a constant training reward 0.3: flat, band 0.
    assert summary["trend_sentences"][1] == ("`no_baseline`: training reward flat (within noise, band ±0): 0.3 -> "
                                             "0.3; entropy rose: 1.5 -> 3.5 (+2, beyond noise, band ±1.03).")


def test_learning_rate_checks_the_handouts_25_percent_target():
    grid = _grid("learning_rate", {"lr_0.0002": {}, "lr_0.0006": {"learning_rate": 6e-4}})
    met = grid_summary(_result(grid, {"lr_0.0002": _ends(0.1, 0.2), "lr_0.0006": _ends(0.1, 0.7)}))["answers"]
    # 70 of 100, Wilson at z = 2: centre (0.7 + 0.02) / 1.04 = 0.6923, half 2 sqrt(0.0021 + 0.0001) / 1.04 = 0.0902.
    assert ("The handout asks for a validation accuracy of at least 25.0% (stated for the full profile, MATH with the "
            "course's model; this is the smoke profile, a tiny model on its toy task, not expected to meet it): best "
            "run lr 0.0006 at 70.0% (Wilson interval 60.2% to 78.3%, 2 s.e.) -> met.") in met
    assert ("Gradient norm: `lr_0.0006` averaged 1 over its GRPO steps (last step 1) vs 1 (last 1) for `lr_0.0002` "
            "(1.00x, about the same).") in met  # the winner's other logged metrics against the base rate
    not_met = grid_summary(_result(grid, {"lr_0.0002": _ends(0.1, 0.2), "lr_0.0006": _ends(0.1, 0.15)}))["answers"]
    # 20 of 100: centre 0.22 / 1.04 = 0.2115, half 2 sqrt(0.0016 + 0.0001) / 1.04 = 0.0793.
    assert any(a.endswith("best run lr 0.0002 at 20.0% (Wilson interval 13.2% to 29.1%, 2 s.e.) -> not met.")
               for a in not_met)


SPIKY = {"train/grad_norm": [1.0, 1.0, 1.0, 10.0, 1.0, 1.0], "train/reward": [0.5, 0.5, 0.5, 0.1, 0.5, 0.5],
         "train/kl_k3": [0.01, 0.02, 0.03, 0.5, 0.51, 0.52], "train/kl_k1": [0.01] * 6}


def test_stability_finds_a_gradient_norm_spike_and_a_reward_drop_and_kl_drift_calls_it_instability():
    grid = _grid("kl_drift", {"kl": {"monitor_kl": True}})
    summary = grid_summary(_result(grid, {"kl": {"evals": [(0, 1.0, 0.3), (6, 40.0, 0.4)], "per_step": SPIKY}}))
    stability = summary["stability"]["kl"]
    assert stability["grad_norm"] == {"max": 10.0, "median": 1.0, "ratio": 10.0, "grpo_step": 4, "spike": True}
    # 0.5 -> 0.1 over 256 rollouts each: 2 sqrt((129/258)(129/258)/258 + (26.6/258)(231.4/258)/258) = 0.0729.
    drop = stability["reward_drop"]
    assert (drop["drop"], drop["grpo_step"], drop["n"], drop["beyond_noise"]) == (pytest.approx(0.4), 4, 256, True)
    assert drop["band"] == pytest.approx(0.0729, abs=1e-4)
    kl = stability["kl"]
    assert (kl["rise"], kl["ratio"], kl["spike"], kl["k3_tail"]) == (pytest.approx(0.47), pytest.approx(47.0), True,
                                                                      True)
    assert (stability["skipped_steps"], stability["diverged"]) == (0, False)
    # Rendered once: the stability table and the kl_drift answer say the same sentence.
    sentence = (
        "Instability in `kl`: the gradient norm spiked to 10 at GRPO step 4 (10.0x the median; the bar: 5x); the "
        "training reward dropped 0.5 -> 0.1 at GRPO step 4, beyond noise, band ±7.3 points (binomial, 256 rollouts "
        "per step); KL k3 spiked: +0.47 to GRPO step 4 (47.0x the median one-step change) -- at that step k1 was 0.01 "
        "against k3 0.5: on tokens sampled from the policy both estimate the same KL, so a k3 this far above k1 comes "
        "from a few tokens the policy now finds far less likely than the reference did (k3 grows with the exponential "
        "of their log-ratio), not from a jump of the KL itself. Checked and clear: no optimizer step skipped for a "
        "non-finite loss or gradient norm; no divergence.")
    assert stability["text"] == [sentence] and sentence in summary["answers"]
    # The same spike with k1 rising alongside k3 (the estimators agree: 0.5 vs 0.5): the KL itself jumped.
    agreeing = {**SPIKY, "train/kl_k1": SPIKY["train/kl_k3"]}
    found = grid_summary(_result(grid, {"kl": {"evals": [(0, 1.0, 0.3), (6, 40.0, 0.4)],
                                               "per_step": agreeing}}))["stability"]["kl"]
    assert not found["kl"]["k3_tail"] and "k1 was" not in found["text"][0]
    calm_steps = {**SPIKY, "train/grad_norm": [1.0] * 6, "train/reward": [0.5] * 6,
                  "train/kl_k3": [0.01 * k for k in range(6)]}
    calm = grid_summary(_result(grid, {"kl": {"evals": [(0, 1.0, 0.3), (6, 40.0, 0.4)], "per_step": calm_steps}}))
    # KL 0, .01, ..., .05: every one-step rise is the median one (1.0x); the reward never fell.
    assert calm["stability"]["kl"]["reward_drop"]["drop"] == 0.0 and not calm["stability"]["kl"]["kl"]["spike"]
    assert (
        "No sign of instability in `kl`. Checked and clear: no optimizer step skipped for a non-finite loss or "
        "gradient norm; no divergence; no gradient-norm spike (largest 1.0x the median); the training reward never "
        "fell from one GRPO step to the next; no KL spike (largest one-step rise 1.0x the median change)."
    ) in calm["answers"]


def test_sync_strategy_states_each_strategys_stability():
    grid = _grid("sync_strategy", {"one_step": {}, "multi_epoch": {"epochs_per_rollout_batch": 2}})
    runs = {"one_step": _ends(0.3, 0.4), "multi_epoch": {**_ends(0.3, 0.4), "per_step": SPIKY}}
    summary = grid_summary(_result(grid, runs, {"multi_epoch": (6, "train/grad_norm = nan")}))
    assert summary["stability"]["multi_epoch"]["diverged"] and not summary["stability"]["one_step"]["diverged"]
    answers = summary["answers"]
    assert _starting(answers, "Stability of (A) `one_step`: No sign of instability in `one_step`.")
    stability_b = _starting(answers, "Stability of (B) `multi_epoch`")
    assert "it diverged at GRPO step 6 (train/grad_norm = nan)" in stability_b
    assert "the gradient norm spiked to 10 at GRPO step 4 (10.0x the median" in stability_b


def test_clip_and_prompt_answers_add_entropy_length_and_an_explanation_from_the_trends():
    grid = _grid("clip_ablation", {"grpo_clip": {}, "grpo_no_clip": {"loss_type": "grpo_no_clip"}})
    runs = {"grpo_clip": {**_ends(0.3, 0.6), "per_step": {"train/entropy": [1.0, 1.0]}},
            "grpo_no_clip": {**_ends(0.3, 0.6), "per_step": {"train/entropy": [2.0, 2.0]}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("Entropy: `grpo_no_clip` averaged 2 nats/token over its GRPO steps (last step 2) vs 1 nats/token (last 1) "
            "for `grpo_clip` (2.00x, higher).") in answers
    assert "Response length: not logged by these runs." in answers
    grid = _grid("prompt", {"r1_zero": {}, "question_only": {"prompt": "question_only"}}, warm_start_steps=0)
    runs = {"r1_zero": {**_ends(0.2, 0.3), "per_step": {"train/response_length_mean": [10.0] * 6}},
            "question_only": {**_ends(0.2, 0.6), "per_step": {"train/response_length_mean": [10.0] * 4 + [20.0] * 2}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("Attempted explanation, from the logged metrics: the runs moved differently in "
                           "response length (rose for `question_only`: 10 -> 20; flat for `r1_zero`: 10 -> 10); the "
                           "gap of +30.0 points goes with these differences.") in answers


def test_off_policy_states_entropy_and_length_trends_and_the_grids_rationale():
    from hw3lib.experiments.grids import build_grid

    grid = _grid("off_policy", {"e1_b256": {}, "e2_b64": {}})
    runs = {"e1_b256": _ends(0.3, 0.5), "e2_b64": {**_ends(0.3, 0.5), "per_step": {"train/entropy": RISING[::-1]}}}
    answers = grid_summary(_result(grid, runs))["answers"]
    assert ("`e2_b64`, first vs last third of its GRPO steps (Welch band, Student's t): entropy fell: 3.5 -> 1.5 "
            "(-2, beyond noise, band ±1.03); response length: not logged.") in answers
    rationale = build_grid("off_policy", "full").rationale  # from the grid's own configs
    assert ("epochs_per_rollout_batch takes {1, 2, 4} and train_batch_size {256, 128, 64} (the rollout batch / "
            "{1, 2, 4})") in rationale and "1 to 16 optimizer steps per rollout batch" in rationale
    assert rationale.endswith("Runs are 40 of the full 200 GRPO steps, under the handout's 50.")
    assert build_grid("learning_rate", "full").rationale == ""


def _two(name: str, ref: str, other: str, change: dict, ends: tuple[float, float], ref_change: dict | None = None):
    grid = _grid(name, {ref: ref_change or {}, other: change})
    result = _result(grid, {ref: _ends(0.3, ends[0]), other: _ends(0.3, ends[1])})
    return result, {**grid_summary(result, earlier={}), "figures": []}


def test_leaderboard_selection_says_which_later_choice_overrides_a_beyond_noise_winner():
    # baselines runs on the handout's one-epoch schedule: those settings are the comparison's, not the choice's
    on_policy = {"rollout_batch_size": 64, "n_grpo_steps": 200}
    baselines, baselines_summary = _two("baselines", "reinforce_with_baseline", "no_baseline",
                                        {**on_policy, "loss_type": "no_baseline"}, (0.3, 0.675),
                                        ref_change={**on_policy, "loss_type": "reinforce_with_baseline"})
    clip, clip_summary = _two("clip_ablation", "grpo_clip", "grpo_no_clip", {"loss_type": "grpo_no_clip"}, (0.5, 0.45))
    for result, summary in ((baselines, baselines_summary), (clip, clip_summary)):  # the same pick as run_sweep's
        assert summary_choice(summary)["settings"] == choices_from(result)["settings"]
    earlier = {"learning_rate": _two("learning_rate", "lr_0.0002", "lr_0.0006", {"learning_rate": 6e-4},
                                     (0.5, 0.52))[1],
               "baselines": baselines_summary,
               "length_normalization": _two("length_normalization", "masked_mean", "constant",
                                            {"length_normalization": "constant"}, (0.5, 0.5))[1],
               "std_normalization": _two("std_normalization", "std_on", "std_off",
                                         {"use_std_normalization": False}, (0.5, 0.5))[1],
               "off_policy_focused": _two("off_policy_focused", "e1_b256", "e4_b64", {"epochs_per_rollout_batch": 4},
                                          (0.3, 0.7))[1],
               "clip_ablation": clip_summary}
    grid = _grid("leaderboard", {"best": {"epochs_per_rollout_batch": 4}})
    summary = grid_summary(_result(grid, {"best": _ends(0.3, 0.7)}), earlier=earlier)
    steps = [step["text"] for step in summary["selection"]]
    assert [step["grid"] for step in summary["selection"]] == [*earlier, "final"]
    assert steps[1].startswith("`baselines`: winner `no_baseline`, +37.5 points vs `reinforce_with_baseline` (beyond "
                               "noise, band ±13.0 points); it contributes loss_type = no_baseline.")
    assert steps[0].startswith("`learning_rate`: no config beat `lr_0.0002` beyond noise (best other: `lr_0.0006`, "
                               "+2.0 points, within noise")
    assert ("it contributes loss_type = grpo_clip; its loss_type = grpo_clip overrides `baselines`'s choice "
            "loss_type = no_baseline, dropping `no_baseline`, which beat `reinforce_with_baseline` by +37.5 points "
            "(beyond noise, band ±13.0 points) -- replaced by `clip_ablation`'s reference, which beat nothing beyond "
            "noise.") in steps[5]
    assert steps[6] == ("Final preset: epochs_per_rollout_batch = 4 (loss_type = grpo_clip: the base recipe's own "
                        "value, so no change). Beyond-noise winners overridden by a later grid's choice: `no_baseline` "
                        "(`baselines`). The leaderboard run used exactly these settings.")
    # On-policy winning off_policy_focused leaves clip_ablation out, as run_sweep does; a missing report is named.
    earlier["off_policy_focused"] = _two("off_policy_focused", "e1_b256", "e4_b64", {"epochs_per_rollout_batch": 4},
                                         (0.5, 0.5))[1]
    del earlier["learning_rate"]
    steps = [s["text"] for s in grid_summary(_result(grid, {"best": _ends(0.3, 0.7)}), earlier=earlier)["selection"]]
    assert steps[0].startswith("`learning_rate`: not reported yet for the smoke profile")
    assert steps[5].startswith("`clip_ablation`: not used: on-policy")
    assert steps[6] == ("Final preset: loss_type = no_baseline. Incomplete: `learning_rate` not reported yet. The "
                        "leaderboard run used epochs_per_rollout_batch = 4, not these: the earlier grids' reports "
                        "changed after it ran (rerun `leaderboard`).")


def test_findings_carry_the_seed_band_the_winner_and_how_smoke_differs(tmp_path, monkeypatch):
    from hw3lib.core.io import atomic_write_json
    from hw3lib.experiments.seeds import SEED_BAND_FILE

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    grid = _grid("std_normalization", {"std_on": {}, "std_off": {"use_std_normalization": False}})
    runs = {"std_on": _ends(0.3, 0.5), "std_off": _ends(0.3, 0.8)}
    summary = grid_summary(_result(grid, runs))
    found = summary["findings"]
    assert (found["winner"], found["reference_won"], found["seed_band"], found["one_seed_per_config"]) == \
        ("std_off", False, None, True)
    assert "on-policy with `reinforce_with_baseline`" in found["smoke_differs"]
    assert summary["answers"][-1] == f"Smoke setting: {found['smoke_differs']}."
    assert summary["reading"].endswith(f"- Smoke setting: {found['smoke_differs']}.")
    # The base's replicas 0.40, 0.45, 0.50 (sd 0.05) measure a seed band of 4.526537 x 0.05 x sqrt 2 = 0.320074:
    # the +30-point difference is now within noise, and the winner falls back to the reference.
    atomic_write_json(tmp_path / "runs" / "seed_replicas" / SEED_BAND_FILE,
                      {"profile": "smoke", "values": [0.40, 0.45, 0.50], "mean": 0.45, "sd": 0.05, "band": 0.320074})
    summary = grid_summary(_result(grid, runs))
    assert summary["findings"]["seed_source"] == "base replicas"
    assert summary["findings"]["seed_band"] == pytest.approx(0.320074, abs=1e-6)
    assert summary["findings"]["reference_won"] and not summary["rows"][1]["beyond_noise"]
    assert ("`std_off` ended at 80.0% vs 50.0% for `std_on` (+30.0 points): within noise, band ±12.7 points, seed "
            "band ±32.0 points.") in summary["answers"]
    assert "the seed band measured on the base recipe's replicas (one seed per config here)" in summary["reading"]
