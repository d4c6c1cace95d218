"""The experiment grids (hw3lib.experiments.grids): definitions, noise bands by hand, divergence checks, and
the runner's reuse / resume / sharing / divergence recording on tiny 2-step runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from hw3lib.core.stats import unpaired_band
from hw3lib.experiments.compare import compare, pick_winner, read_seed_band
from hw3lib.experiments.seeds import sweep
from hw3lib.experiments.grids import (GRIDS, DivergenceCheck, Grid, GridResult, build_grid, choices_from, common_base,
                                      config_key, grid_run_name, run_grid, smoke_note)
from hw3lib.experiments.render import noise_reading
from hw3lib.core.lifecycle import RunResult
from hw3lib.grpo.config import GRPOConfig

DERIVED = ("micro_train_batch_size", "n_prompts_per_rollout_batch", "n_microbatches_per_rollout_batch",
           "optimizer_steps_per_rollout_batch", "off_policy")
CHOICES = {"top": [{"epochs_per_rollout_batch": 2, "train_batch_size": 64, "gradient_accumulation_steps": 1,
                    "loss_type": "grpo_clip"},
                   {"epochs_per_rollout_batch": 4, "loss_type": "grpo_clip"}],
           "off_policy": {"epochs_per_rollout_batch": 2, "loss_type": "grpo_clip"},
           "settings": {"learning_rate": 1e-4, "use_std_normalization": False}}
# The settings each grid is about: no config may change anything else.
OFF_POLICY = {"epochs_per_rollout_batch", "train_batch_size", "gradient_accumulation_steps", "loss_type"}
ON_POLICY = {"epochs_per_rollout_batch", "rollout_batch_size", "train_batch_size", "gradient_accumulation_steps",
             "n_grpo_steps", "eval_every", "checkpoint_every"}  # baselines in smoke: small on-policy batches
NAMED = {"learning_rate": {"learning_rate"}, "baselines": {"loss_type"} | ON_POLICY,
         "length_normalization": {"length_normalization"},
         "std_normalization": {"use_std_normalization"},
         "off_policy": OFF_POLICY, "off_policy_focused": OFF_POLICY, "clip_ablation": OFF_POLICY,
         "prompt": {"prompt", "model", "warm_start_steps"}, "sync_strategy": OFF_POLICY, "kl_drift": {"monitor_kl"},
         "leaderboard": {"learning_rate", "use_std_normalization"},
         "algorithms": {"algorithm", "loss_type", "use_std_normalization", "length_normalization", "clip_low",
                        "clip_high", "mis"}}


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def differing(a: GRPOConfig, b: GRPOConfig) -> set[str]:
    da, db = a.to_dict(), b.to_dict()
    return {k for k in da if k not in ("name", *DERIVED) and da[k] != db[k]}


# ---- grid definitions ----------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_each_config_differs_from_its_base_in_exactly_the_named_settings(profile, monkeypatch):
    # the smoke prompt grid builds its neutral warm start: CI's short setting builds the 60-step one
    # (shared with test_parallel's prompt-grid test), not the recipe's 125 steps
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "1")
    assert set(NAMED) == set(GRIDS)
    for name in GRIDS:
        grid = build_grid(name, profile, choices=CHOICES)
        assert grid.reference in grid.configs, name
        assert len(grid.configs) >= (5 if name == "learning_rate" else 1)
        for label, cfg in grid.configs.items():
            # grids derived from earlier grids' winners add a hash of the change (test_derived_run_names_...)
            pattern = f"{name}/{label}-[0-9a-f]{{8}}" if GRIDS[name].needs else f"{name}/{label}"
            assert re.fullmatch(pattern, cfg.name) and cfg.name == grid_run_name(name, label, grid.changes[label])
            changed = differing(cfg, grid.base)
            assert changed == set(grid.changes[label]), (name, label)
            assert changed <= NAMED[name], (name, label, changed)
        others = [label for label in grid.configs if label != grid.reference]
        assert all(differing(grid.configs[label], grid.configs[grid.reference]) for label in others), name


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_off_policy_keeps_the_rollout_batch_and_the_microbatch(profile):
    base = common_base(profile)
    for name in ("off_policy", "off_policy_focused", "clip_ablation"):
        grid = build_grid(name, profile, choices=CHOICES)
        for cfg in grid.configs.values():
            assert cfg.micro_train_batch_size == base.micro_train_batch_size
            assert cfg.rollout_batch_size == base.rollout_batch_size
            assert cfg.off_policy == (cfg.epochs_per_rollout_batch > 1 or cfg.train_batch_size < cfg.rollout_batch_size)
            if cfg.off_policy:
                assert cfg.loss_type in ("grpo_clip", "grpo_no_clip")
    broad = build_grid("off_policy", profile)
    points = {(c.epochs_per_rollout_batch, c.train_batch_size) for c in broad.configs.values()}
    assert points >= {(1, base.rollout_batch_size), (1, base.rollout_batch_size // 4),
                      (2, base.rollout_batch_size), (2, base.rollout_batch_size // 4)}
    if profile == "full":
        assert (4, base.rollout_batch_size) in points
        assert broad.base.n_grpo_steps < base.n_grpo_steps  # the broad sweep's runs are short
    else:  # smoke: the reward is flat for ~30 steps, so broad runs are full length and hold the base itself
        assert broad.base.n_grpo_steps == base.n_grpo_steps
        assert config_key(broad.configs["e2_b64"].to_dict()) == config_key(base.replace(name="x").to_dict())
    # sync_strategy's (B): several epochs in optimizer batches of the base's size (smoke: the base itself)
    sync = build_grid("sync_strategy", profile)
    multi = sync.configs["multi_epoch"]
    assert (multi.epochs_per_rollout_batch, multi.train_batch_size) == (
        {"full": 4, "smoke": 2}[profile], base.train_batch_size)
    assert sync.configs["one_step"].optimizer_steps_per_rollout_batch == 1
    assert build_grid("off_policy_focused", profile, choices=CHOICES).base.n_grpo_steps == base.n_grpo_steps


def test_full_versions_use_the_course_sizes():
    base = common_base("full")
    assert (base.n_grpo_steps, base.rollout_batch_size, base.group_size, base.train_batch_size,
            base.gradient_accumulation_steps, base.learning_rate, base.loss_type, base.n_eval_examples,
            base.sampling_max_tokens, base.model) == (200, 256, 8, 256, 128, 1e-5, "reinforce_with_baseline",
                                                      1024, 1024, "Qwen/Qwen3-0.6B")
    rates = sorted(c.learning_rate for c in build_grid("learning_rate", "full").configs.values())
    assert len(rates) >= 5 and 1e-5 in rates and rates[0] < 1e-5 and rates[-1] >= 1e-3  # the top one diverges


@pytest.mark.parametrize("course, dataset, model", [("gsm8k-qwen3", "gsm8k", "Qwen/Qwen3-0.6B"),
                                                    ("math-qwen2.5", "math", "Qwen/Qwen2.5-Math-1.5B")])
def test_the_leaderboard_runs_on_the_courses_data_and_model(course, dataset, model, monkeypatch):
    """Issue 41: the full leaderboard was forced onto MATH with the MATH model whatever the course, so the GSM8K
    course's notebook 05 stopped near its end without $HW3_MATH_DATA."""
    from hw3lib.experiments.grids import grid_base

    monkeypatch.setenv("HW3_COURSE", course)
    for variable in ("HW3_MODEL", "HW3_MATH_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    base = grid_base("leaderboard", "full")
    assert (base.dataset, base.model) == (dataset, model)
    assert config_key(base.to_dict()) == config_key(common_base("full").replace(name="base").to_dict())
    best = build_grid("leaderboard", "full", choices=CHOICES).configs["best"]
    assert (best.dataset, best.model) == (dataset, model)


def test_dependent_grids_need_their_choices_and_seeds_repeat_configs():
    with pytest.raises(ValueError, match="choices\\['top'\\]"):
        build_grid("off_policy_focused", "smoke")
    with pytest.raises(ValueError, match="unknown grid"):
        build_grid("nope", "smoke")
    grid = build_grid("baselines", "smoke", seeds=[0, 1])
    assert grid.groups == {"reinforce_with_baseline": ["reinforce_with_baseline",
                                                       "reinforce_with_baseline_seed1_shared_start"],
                           "no_baseline": ["no_baseline", "no_baseline_seed1_shared_start"]}
    replica = grid.configs["no_baseline_seed1_shared_start"]
    assert replica.seed == 1 and replica.warm_start_seed == 0 and grid.changes["no_baseline_seed1_shared_start"] == {
        **grid.changes["no_baseline"], "seed": 1, "warm_start_seed": 0}
    full = build_grid("baselines", "full", seeds=[0, 1])  # no warm start in the full profile: the seed alone
    assert full.changes["no_baseline_seed1"] == {**full.changes["no_baseline"], "seed": 1}


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_baselines_run_on_policy_as_the_handout_does(profile):
    grid = build_grid("baselines", profile)
    for label, cfg in grid.configs.items():
        # one optimizer step per rollout batch, each rollout used once: nothing stale without a ratio
        assert cfg.loss_type == label and cfg.epochs_per_rollout_batch == 1
        assert cfg.train_batch_size == cfg.rollout_batch_size
        # the same rollouts in all as the base's runs; validation and checkpoints at the same share of the run
        assert cfg.n_grpo_steps * cfg.rollout_batch_size == grid.base.n_grpo_steps * grid.base.rollout_batch_size
        assert cfg.n_grpo_steps // cfg.eval_every == grid.base.n_grpo_steps // grid.base.eval_every
    assert grid.steps_per_run == grid.configs["no_baseline"].n_grpo_steps
    if profile == "smoke":  # the base takes four steps per 256 rollouts: the grid runs 64 per step, four times as many
        assert (grid.configs["no_baseline"].rollout_batch_size, grid.steps_per_run) == (64, 4 * grid.base.n_grpo_steps)
    else:  # the course's schedule already is on-policy: the base's sizes
        assert grid.steps_per_run == grid.base.n_grpo_steps


# ---- noise, by hand ----------------------------------------------------------------------------------

def test_grid_specs_name_what_each_grid_needs_and_how_smoke_differs():
    assert GRIDS["leaderboard"].needs[-1] == "clip_ablation" and GRIDS["clip_ablation"].needs == ("off_policy_focused",)
    assert [name for name, spec in GRIDS.items() if spec.loss_only] == ["baselines", "clip_ablation"]
    assert "on-policy with `reinforce_with_baseline`" in smoke_note("learning_rate", "smoke")
    assert smoke_note("learning_rate", "full") == "" and smoke_note("prompt", "smoke") == ""
    assert "re-read the broad ones" in smoke_note("off_policy_focused", "smoke")


def _fake_run(cfg: GRPOConfig, start: float, end: float, n: int = 98) -> RunResult:
    evals = [{"step": 0, "grpo_step": 0, "eval/answer_reward": start, "eval/n": n, "time/elapsed_s": 1.0},
             {"step": 2, "grpo_step": 2, "eval/answer_reward": end, "eval/n": n, "time/elapsed_s": 9.0}]
    return RunResult(run_dir=None, config=cfg, metrics=evals, steps=2, optimizer_steps=2, skipped_steps=0,
                     elapsed_s=9.0, checkpoint=None)


def _fake_result(grid: Grid, values: dict[str, tuple[float, float]], diverged: dict | None = None) -> GridResult:
    records = {label: {"run": cfg.name, "status": "finished", "wall_clock_s": 9.0, "shared": False}
               for label, cfg in grid.configs.items()}
    for label, (step, reason) in (diverged or {}).items():
        records[label].update(status="diverged", stopped_at=step, reason=reason)
    results = {label: _fake_run(cfg, *values[label]) for label, cfg in grid.configs.items()}
    return GridResult(grid, results, records)


def test_the_baselines_winner_passes_on_its_loss_not_its_one_epoch_schedule():
    grid = build_grid("baselines", "smoke")
    won = choices_from(_fake_result(grid, {"reinforce_with_baseline": (0.3, 0.3), "no_baseline": (0.3, 0.9)}))
    assert won["settings"] == {"loss_type": "no_baseline"} and not won["reference_won"]
    kept = choices_from(_fake_result(grid, {"reinforce_with_baseline": (0.3, 0.5), "no_baseline": (0.3, 0.5)}))
    assert kept["settings"] == {"loss_type": "reinforce_with_baseline"} and kept["reference_won"]


def test_compare_and_reading_say_which_differences_exceed_noise():
    grid = build_grid("learning_rate", "smoke")
    ref = grid.reference  # lr_0.0002
    values = {label: (30 / 98, 49 / 98) for label in grid.configs}  # reference: 30.6% -> 50.0%, +19.4 points
    values["lr_0.0006"] = (30 / 98, 69 / 98)  # +20.4 points vs the reference
    values["lr_6e-05"] = (30 / 98, 54 / 98)  # +5.1 points
    values["lr_0.02"] = (30 / 98, 0.0)
    rows = {row["label"]: row for row in compare(_fake_result(grid, values, {"lr_0.02": (3, "train/loss = nan")}))}
    # The fake runs saved no rollouts: unpaired (Agresti-Caffo). 69/98: (69 + 1) / 100 = 0.7, variance 0.21 / 100;
    # reference 0.25 / 100: 2 * sqrt(0.0046) = 0.135647. No seed band measured: the question band alone.
    assert rows["lr_0.0006"]["band"] == pytest.approx(0.135647, rel=1e-5)
    assert rows["lr_0.0006"]["noise"] == {"diff": pytest.approx(20 / 98), "band": pytest.approx(0.135647, rel=1e-5),
                                          "paired": False, "seed_band": None, "p_value": None,
                                          "verdict": "beyond noise"}
    assert rows["lr_0.0006"]["diff"] == pytest.approx(20 / 98) and rows["lr_0.0006"]["beyond_noise"]
    assert rows["lr_0.0006"]["seed_source"] is None
    # 54/98: 0.55, variance 0.2475 / 100: 2 * sqrt(0.004975) = 0.141067 > 5/98 = 0.051: within noise.
    assert rows["lr_6e-05"]["band"] == pytest.approx(0.141067, rel=1e-5) and not rows["lr_6e-05"]["beyond_noise"]
    assert not rows[ref]["beyond_noise"] and rows[ref]["noise"] is None and rows["lr_0.02"]["status"] == "diverged"
    reading = noise_reading(list(rows.values()), ref, note="a note")
    assert f"`{ref}` went from 30.6% to 50.0% (+19.4 points: learned by the 10-point bar)" in reading
    assert ("`lr_0.0006` ends at 70.4%, +20.4 points vs `lr_0.0002`: beyond noise, band ±13.6 points (unpaired "
            "binomial, 98 questions; one seed per config and no seed band measured, so run-to-run variation is not "
            "counted).") in reading
    assert "`lr_6e-05` ends at 55.1%, +5.1 points vs `lr_0.0002`: within noise, band ±14.1 points" in reading
    assert "`lr_0.02` diverged at GRPO step 3 (train/loss = nan)" in reading
    assert reading.endswith("- Smoke setting: a note.")


def test_compare_pairs_runs_that_saved_every_question(tmp_path):
    grid = build_grid("std_normalization", "smoke")

    def saved(label: str, outcomes: list[int], questions: str = "q") -> RunResult:
        folder = tmp_path / label / "samples"
        folder.mkdir(parents=True)
        rows = [{"question": f"{questions}{i}", "answer_reward": float(a)} for i, a in enumerate(outcomes)]
        (folder / "step_0002.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        run = _fake_run(grid.configs[label if label in grid.configs else "std_off"], 0.3, sum(outcomes) / 4, n=4)
        return RunResult(tmp_path / label, run.config, run.metrics, 2, 2, 0, 9.0, None)

    result = _fake_result(grid, {"std_on": (0.3, 0.25), "std_off": (0.3, 1.0)})
    result.results.update(std_on=saved("std_on", [1, 0, 0, 0]), std_off=saved("std_off", [1, 1, 1, 1]))
    row = compare(result)[1]
    # 3 questions only std_off got right, none the other way: diff 0.75, var(d) = 3/4 - 9/16 = 3/16,
    # band 2 sqrt(3/64) = 0.4330; McNemar 2 x (1/2)^3 = 0.25.
    assert row["noise"]["paired"] and row["noise"]["band"] == pytest.approx(0.43301, abs=1e-5)
    assert row["noise"]["p_value"] == pytest.approx(0.25) and row["beyond_noise"]
    result.results["std_off"] = saved("other", [1, 1, 1, 1], questions="x")  # other questions: unpaired
    assert not compare(result)[1]["noise"]["paired"]


def test_compare_pairs_runs_from_their_kept_outcomes_when_few_rollouts_were_saved(tmp_path):
    from hw3lib.evaluation.validate import save_validation

    grid = build_grid("std_normalization", "smoke")

    def kept(label: str, outcomes: list[int]) -> RunResult:
        rows = [{"question": f"q{i}", "answer_reward": float(a)} for i, a in enumerate(outcomes)]
        save_validation(tmp_path / label, "step_0002", rows, n_saved=1)  # the default keeps a few in full
        run = _fake_run(grid.configs[label], 0.3, sum(outcomes) / 4, n=4)
        return RunResult(tmp_path / label, run.config, run.metrics, 2, 2, 0, 9.0, None)

    result = _fake_result(grid, {"std_on": (0.3, 0.25), "std_off": (0.3, 1.0)})
    result.results.update(std_on=kept("std_on", [1, 0, 0, 0]), std_off=kept("std_off", [1, 1, 1, 1]))
    row = compare(result)[1]
    assert row["noise"]["paired"] and row["noise"]["band"] == pytest.approx(0.43301, abs=1e-5)  # as above


def test_the_base_seed_band_turns_a_one_seed_difference_within_noise(monkeypatch):
    from hw3lib.core.io import atomic_write_json, runs_dir
    from hw3lib.experiments.seeds import SEED_BAND_FILE

    grid = build_grid("std_normalization", "smoke")
    values = {"std_on": (0.3, 49 / 98), "std_off": (0.3, 69 / 98)}  # +20.4 points: beyond the 13.6-point band
    assert compare(_fake_result(grid, values))[1]["beyond_noise"]
    # The base's replicas ended at 0.38, 0.40, 0.42: sd 0.02, band t(2 df) 4.526537 x 0.02 x sqrt 2 = 0.128030 < 0.204.
    stored = {"profile": "smoke", "values": [0.38, 0.40, 0.42], "mean": 0.40, "sd": 0.02, "band": 0.128030}
    atomic_write_json(runs_dir() / "seed_replicas" / SEED_BAND_FILE, stored)
    row = compare(_fake_result(grid, values))[1]
    assert (row["seed_source"], row["beyond_noise"]) == ("base replicas", True)
    assert row["noise"]["seed_band"] == pytest.approx(0.128030, abs=1e-6)
    # Replicas 0.30, 0.40, 0.50 (sd 0.1): band 4.526537 x 0.1 x sqrt 2 = 0.640149, recomputed from the values even
    # where the file holds an older z band (2 x 0.1 x sqrt 2 = 0.2828).
    atomic_write_json(runs_dir() / "seed_replicas" / SEED_BAND_FILE,
                      {**stored, "values": [0.30, 0.40, 0.50], "sd": 0.1, "band": 0.2828})
    row = compare(_fake_result(grid, values))[1]  # a wider seed band: the same difference is within noise
    assert not row["beyond_noise"] and row["noise"]["verdict"] == "within noise"
    assert row["band"] == pytest.approx(0.640149, abs=1e-6)
    atomic_write_json(runs_dir() / "seed_replicas" / SEED_BAND_FILE, {**stored, "profile": "full"})
    assert compare(_fake_result(grid, values))[1]["seed_source"] is None  # another profile's band is not used


def test_pick_winner_needs_a_finished_run_beyond_noise_above_the_reference():
    rows = [{"label": "ref", "status": "finished", "end": 0.5, "diff": 0.0, "beyond_noise": False},
            {"label": "best", "status": "diverged", "end": 0.9, "diff": 0.4, "beyond_noise": True},
            {"label": "good", "status": "finished", "end": 0.7, "diff": 0.2, "beyond_noise": True},
            {"label": "close", "status": "finished", "end": 0.55, "diff": 0.05, "beyond_noise": False}]
    pick = pick_winner(rows, "ref")
    assert pick.winner["label"] == "good" and not pick.reference_won and pick.best_other["label"] == "good"
    assert [r["label"] for r in pick.ranked] == ["good", "close", "ref"]
    assert pick_winner([rows[0], rows[3]], "ref").reference_won


def test_choices_from_the_broad_sweep_skip_diverged_runs_and_the_on_policy_reference():
    grid = build_grid("off_policy", "full")
    values = {label: (0.3, 0.5) for label in grid.configs}
    values.update({"e4_b64": (0.3, 0.9), "e2_b64": (0.3, 0.7), "e4_b256": (0.3, 0.6), "e1_b256": (0.3, 0.65)})
    picked = choices_from(_fake_result(grid, values, {"e4_b64": (4, "collapsed")}))
    assert picked["top"] == [grid.changes["e2_b64"], grid.changes["e4_b256"]]
    # e2_b64 beats the reference by 5 points on 98 questions: within noise, so the reference's settings win.
    assert picked["settings"] == grid.changes["e1_b256"] and picked["reference_won"]


# ---- divergence ----------------------------------------------------------------------------------------

def _rows(step: int, reward: float, loss: float = 0.1, grad: float = 1.0) -> list[dict]:
    return [{"step": step, "grpo_step": step, "train/reward": reward, "train/loss": loss, "train/grad_norm": grad}]


def test_divergence_check_non_finite_and_collapse():
    assert "train/grad_norm = nan" in DivergenceCheck()(_rows(1, 0.3, grad=float("nan")))
    assert "train/loss = inf" in DivergenceCheck()(_rows(1, 0.3, loss=float("inf")))
    check = DivergenceCheck(window=2, collapse_fraction=0.25)
    # The first two steps average 0.4; the last two must average below 0.25 x 0.4 = 0.1.
    assert [check(_rows(s, r)) for s, r in enumerate([0.4, 0.4, 0.15], 1)] == [None, None, None]
    assert check(_rows(4, 0.06)) is None  # (0.15 + 0.06) / 2 = 0.105: not yet
    assert check(_rows(5, 0.04)) == ("training reward collapsed: 0.050 over the last 2 GRPO steps vs 0.400 over "
                                     "the first 2 (below 0.25 x)")
    never = DivergenceCheck(window=2)
    assert [never(_rows(s, 0.01)) for s in range(1, 6)] == [None] * 5  # no reward to lose: not a collapse
    resumed = DivergenceCheck(window=2)
    resumed.seed(_rows(1, 0.4) + _rows(2, 0.4) + _rows(3, 0.0), up_to_step=2)  # step 3 is redone after a resume
    assert resumed.rewards == [0.4, 0.4]


# ---- the runner on tiny runs -----------------------------------------------------------------------------

def tiny_base(**overrides) -> GRPOConfig:
    """tests/grpo/test_loop.py's tiny settings, smaller still: 2 questions x 4 samples, 2 GRPO steps, 4 held-out
    questions."""
    settings = dict(n_grpo_steps=2, rollout_batch_size=8, group_size=4, train_batch_size=8, epochs_per_rollout_batch=1,
                    gradient_accumulation_steps=2, n_eval_examples=4, eval_every=2, checkpoint_every=1,
                    n_train_examples=256, loss_type="reinforce_with_baseline")
    settings.update(overrides)
    return GRPOConfig.for_profile("smoke", name="base", **settings)


def tiny_grid(name: str, changes: dict[str, dict]) -> Grid:
    base = tiny_base()
    configs = {label: base.replace(name=f"{name}/{label}", **change) for label, change in changes.items()}
    return Grid(name, "smoke", base, configs, changes, next(iter(changes)), "test grid",
                {label: [label] for label in changes})


def test_runner_resumes_reuses_shares_and_records_divergence(monkeypatch):
    import hw3lib.grpo.loop as train_module
    from hw3lib.core.io import runs_dir

    # 1. Interrupted in GRPO step 2, then resumed: one row per optimizer step, validations at 0 and 2.
    def interrupt(info):
        if info["grpo_step"] == 2:
            raise KeyboardInterrupt

    first = tiny_grid("g1", {"a": {}})
    with pytest.raises(KeyboardInterrupt):
        run_grid(first, callback=interrupt)
    resumed = run_grid(first)
    run = resumed.results["a"]
    assert [r["grpo_step"] for r in run.train_rows] == [1, 2] and [r["grpo_step"] for r in run.eval_rows] == [0, 2]
    assert resumed.records["a"]["status"] == "finished" and not resumed.records["a"]["shared"]

    # 2. Another grid: `a` has the same settings (shared, not retrained); `nan` gets a non-finite gradient.
    def poison(info):
        next(info["policy"].parameters()).grad.fill_(float("nan"))

    second = tiny_grid("g2", {"a": {}, "nan": {"use_std_normalization": False}})
    result = run_grid(second, callback=poison)
    assert result.records["a"] == {**resumed.records["a"], "shared": True, "changes": {}}
    assert result.records["a"]["run"] == "g1/a" and not (runs_dir() / "g2" / "a").exists()
    assert result.results["a"].metrics == run.metrics
    nan = result.records["nan"]
    assert (nan["status"], nan["stopped_at"], nan["grpo_steps"]) == ("diverged", 1, 1)
    assert "train/grad_norm = nan" in nan["reason"]
    assert json.loads((runs_dir() / "g2" / "nan" / "stopped.json").read_text())["grpo_step"] == 1
    assert [r["grpo_step"] for r in result.results["nan"].eval_rows] == [0, 1]  # validated where it stopped
    manifest = json.loads((runs_dir() / "g2" / "grid.json").read_text())
    assert manifest["configs"]["nan"]["status"] == "diverged" and manifest["configs"]["a"]["run"] == "g1/a"

    # 3. Run again: nothing is trained (finished and diverged runs are read back).
    monkeypatch.setattr(train_module, "start_run", lambda *a, **k: pytest.fail("a run was trained again"))
    again = run_grid(second)
    assert again.records["nan"]["status"] == "diverged"
    assert again.results["nan"].metrics == result.results["nan"].metrics
    assert again.results["a"].metrics == run.metrics


def test_a_run_killed_before_its_first_checkpoint_is_set_aside_and_trained_afresh(capsys):
    """A kernel that dies before a run's first checkpoint (no Ctrl-C, so no interrupt checkpoint) leaves metrics and
    no checkpoint: resuming the grid used to stop on RunExistsError. Its folder is now moved whole to
    runs/.interrupted/ (kept, byte for byte) and the config trained from scratch."""
    from hw3lib.core.io import runs_dir
    from hw3lib.core.runs import CHECKPOINTS_DIR, METRICS_FILE
    from hw3lib.experiments.runner import shared_run_name

    def die(info):  # anything but KeyboardInterrupt: nothing catches it, as when the process is killed
        if info["grpo_step"] == 1:
            raise RuntimeError("kernel died")

    grid = tiny_grid("g_killed", {"a": {"checkpoint_every": 100}})
    with pytest.raises(RuntimeError, match="kernel died"):
        run_grid(grid, callback=die)
    run_dir = runs_dir() / "g_killed" / "a"
    partial = (run_dir / METRICS_FILE).read_text()
    assert partial and not (run_dir / CHECKPOINTS_DIR).exists()

    result = run_grid(grid)
    assert result.records["a"]["status"] == "finished" and result.records["a"]["run"] == "g_killed/a"
    assert [r["grpo_step"] for r in result.results["a"].eval_rows] == [0, 2]
    kept = list((runs_dir() / ".interrupted").iterdir())
    assert [p.name.rsplit("-", 1)[0] for p in kept] == ["g_killed__a"]
    assert (kept[0] / METRICS_FILE).read_text() == partial and (kept[0] / "config.json").is_file()
    assert "stopped before its first checkpoint" in capsys.readouterr().out
    assert shared_run_name(grid.configs["a"]) == "g_killed/a"  # the set-aside copy is not a run to share


def test_derived_run_names_follow_the_derivation():
    """A grid built from earlier grids' winners names each run after its change: other winners, another run;
    the same winners, the same run (issue 23: a short sweep's leaderboard run, then a longer sweep's)."""
    def leaderboard(settings):
        return build_grid("leaderboard", "smoke", choices={"settings": settings}).configs["best"].name

    first, again = leaderboard({"loss_type": "no_baseline"}), leaderboard({"loss_type": "no_baseline"})
    other = leaderboard({"loss_type": "reinforce_with_baseline", "learning_rate": 1e-4})
    assert first == again and first != other and first.startswith("leaderboard/best-") and len(first) == 25
    assert leaderboard({}) not in (first, other)  # the base's own settings won: a name of its own too
    focused = [build_grid("off_policy_focused", "smoke", choices={"top": [top]}).configs
               for top in ({"epochs_per_rollout_batch": 2}, {"epochs_per_rollout_batch": 2, "train_batch_size": 64})]
    assert focused[0]["e1_b256"].name == focused[1]["e1_b256"].name  # the on-policy reference: same run
    clips = [build_grid("clip_ablation", "smoke", choices={"off_policy": point}).configs["grpo_clip"].name
             for point in ({"epochs_per_rollout_batch": 2}, {"epochs_per_rollout_batch": 1, "train_batch_size": 64})]
    assert clips[0] != clips[1]
    assert build_grid("baselines", "smoke").configs["no_baseline"].name == "baselines/no_baseline"  # not derived


def test_a_new_derivation_trains_a_new_run_and_the_same_one_is_reused(monkeypatch):
    """The leaderboard trained on one set of winners, then on another (resuming the first run's folder used to
    fail: "cannot resume ...: the config differs (loss_type: ...)"), then on the first again (read back)."""
    import hw3lib.experiments.grids as experiments
    import hw3lib.grpo.loop as train_module
    from hw3lib.core.io import runs_dir

    monkeypatch.setattr(experiments, "grid_base", lambda name, profile=None, steps=None: tiny_base())

    def leaderboard(loss_type):
        return run_grid(build_grid("leaderboard", "smoke", choices={"settings": {"loss_type": loss_type}}))

    first = leaderboard("no_baseline")
    second = leaderboard("grpo_clip")
    runs = [result.records["best"]["run"] for result in (first, second)]
    assert runs[0] != runs[1] and all(name.startswith("leaderboard/best-") for name in runs)
    assert [result.results["best"].config.loss_type for result in (first, second)] == ["no_baseline", "grpo_clip"]
    assert all((runs_dir() / name / "config.json").is_file() for name in runs)
    monkeypatch.setattr(train_module, "start_run", lambda *a, **k: pytest.fail("a run was trained again"))
    again = leaderboard("no_baseline")
    assert again.records["best"]["run"] == runs[0] and again.results["best"].metrics == first.results["best"].metrics


def test_a_sweep_runs_the_seed_band_and_the_grids_a_grid_needs_and_passes_on_their_winners(monkeypatch):
    import hw3lib.experiments.grids as experiments

    ends = {("learning_rate", "lr_3e-05"): 0.9,  # beyond noise: the leaderboard takes it
            ("baselines", "no_baseline"): 0.55,  # within noise: the reference's setting stays
            ("off_policy", "e4_b256"): 0.8, ("off_policy", "e2_b256"): 0.7, ("off_policy", "e1_b64"): 0.95,
            ("off_policy_focused", "e4_b256"): 0.9, ("clip_ablation", "grpo_no_clip"): 0.9}
    diverged = {("off_policy", "e1_b64"): (3, "collapsed")}
    ran = []

    def fake_run_grid(grid, check=None):
        ran.append((grid.name, sorted(grid.configs)))
        values = {label: (0.3, ends.get((grid.name, label), 0.5)) for label in grid.configs}
        return _fake_result(grid, values, {label: why for (name, label), why in diverged.items() if name == grid.name})

    monkeypatch.setattr(experiments, "run_grid", fake_run_grid)
    monkeypatch.setattr("hw3lib.experiments.seeds.run_grid", fake_run_grid)  # the seed replicas: all end at 0.5
    result = sweep("leaderboard", "full")
    names = [name for name, _ in ran]
    assert names[0] == "seed_replicas"  # the seed band, measured before any winner is picked
    assert names[-1] == "leaderboard" and names.index("off_policy") < names.index("off_policy_focused") < \
        names.index("clip_ablation")
    # Focused: the on-policy reference and the two best broad settings that did not diverge.
    assert dict(ran)["off_policy_focused"] == ["e1_b256", "e2_b256", "e4_b256"]
    best = result.grid.configs["best"]
    assert (best.learning_rate, best.loss_type, best.epochs_per_rollout_batch, best.train_batch_size,
            best.use_std_normalization) == (3e-5, "grpo_no_clip", 4, 256, True)


def test_the_leaderboard_picks_its_winners_with_the_seed_band_even_on_a_first_run(monkeypatch):
    """No seed band measured yet: the leaderboard measures it before picking, so a win within run-to-run variation
    is not taken (before, a first run picked without the band and a rerun, the band measured by then, picked
    differently and trained another config)."""
    import hw3lib.experiments.grids as experiments
    from hw3lib.core.io import runs_dir
    from hw3lib.experiments.seeds import SEED_BAND_FILE

    monkeypatch.setenv("HW3_RUNS_DIR", str(runs_dir() / "first_run_leaderboard"))
    assert read_seed_band("smoke") is None

    def fake_run_grid(grid, check=None):
        if grid.name == "seed_replicas":  # ends 0.3, 0.5, 0.7: sd 0.2, two-run band 4.526537 x 0.2 x sqrt 2 = 1.28
            return _fake_result(grid, dict(zip(grid.configs, [(0.3, 0.3), (0.3, 0.5), (0.3, 0.7)])))
        ends = {("learning_rate", "lr_6e-05"): 0.9}  # +40 points: beyond the question band, within the seed band
        return _fake_result(grid, {label: (0.3, ends.get((grid.name, label), 0.5)) for label in grid.configs})

    monkeypatch.setattr(experiments, "run_grid", fake_run_grid)
    monkeypatch.setattr("hw3lib.experiments.seeds.run_grid", fake_run_grid)
    best = sweep("leaderboard", "smoke").grid.configs["best"]
    assert best.learning_rate == build_grid("learning_rate", "smoke").base.learning_rate  # the base's rate kept
    assert read_seed_band("smoke").band == pytest.approx(1.280298, abs=1e-6)
    assert (runs_dir() / "seed_replicas" / SEED_BAND_FILE).is_file()


def test_the_algorithms_grid_runs_each_recipe_from_one_off_policy_base():
    from hw3lib.grpo.config import ALGORITHMS

    for profile in ("smoke", "full"):
        grid = build_grid("algorithms", profile)
        assert grid.reference == "grpo" and grid.base.off_policy  # ratio losses differ from REINFORCE only off-policy
        assert list(grid.configs) == [*ALGORITHMS, "grpo_mis"]
        for label, cfg in grid.configs.items():
            recipe = ALGORITHMS["grpo" if label == "grpo_mis" else label]
            assert all(getattr(cfg, k) == v for k, v in recipe.items())
            # the base holds the course's clipped GRPO, so that row is the base run itself (shared with other grids)
            assert cfg.algorithm == (None if label in ("grpo", "grpo_mis") else label)
            assert cfg.mis == ("token" if label == "grpo_mis" else None)
            # everything else is the base's
            assert cfg.learning_rate == grid.base.learning_rate and cfg.n_grpo_steps == grid.base.n_grpo_steps
    full = build_grid("algorithms", "full").base
    assert (full.epochs_per_rollout_batch, full.train_batch_size) == (2, 64)  # the course's base, made off-policy


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_both_prompts_start_from_one_policy_that_favours_neither_format(profile, monkeypatch):
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "1")  # the 60-step neutral warm start (see the test above)
    grid = build_grid("prompt", profile)
    r1_zero, question_only = grid.configs["r1_zero"], grid.configs["question_only"]
    assert (r1_zero.prompt, question_only.prompt) == ("r1_zero", "question_only")
    assert r1_zero.model == question_only.model and r1_zero.warm_start_steps == question_only.warm_start_steps
    if profile == "smoke":  # the neutral warm start, loaded by its folder (not the base's R1-Zero one)
        settings = json.loads((Path(r1_zero.model) / "warm_start.json").read_text())
        assert settings["prompt"] == "neutral" and r1_zero.warm_start_steps == 0
    else:  # the base model itself: no warm start teaches any format
        assert r1_zero.model == grid.base.model and not r1_zero.warm_start_steps


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_the_base_recipe_is_notebook_04s_run_read_back(tmp_path, monkeypatch, profile):
    """Notebook 04 trains `GRPOConfig.for_profile(profile)` into runs/<its name>/; every grid config with the base
    recipe's settings (the learning-rate grid's reference, the first seed replica) then reads that run instead of
    training the same settings again, and a config that differs in one computed setting does not."""
    from hw3lib.experiments.runner import shared_run_name
    from hw3lib.experiments.seeds import seed_grid

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path))
    notebook_04 = GRPOConfig.for_profile(profile)
    (tmp_path / notebook_04.name).mkdir()
    (tmp_path / notebook_04.name / "config.json").write_text(json.dumps(notebook_04.to_dict()))
    grid = build_grid("learning_rate", profile)
    assert grid.configs[grid.reference].n_grpo_steps == notebook_04.n_grpo_steps
    assert shared_run_name(grid.configs[grid.reference]) == notebook_04.name
    replicas = seed_grid(profile)
    first_seed, second_seed = (replicas.configs[label] for label in replicas.groups[replicas.reference][:2])
    assert shared_run_name(first_seed) == notebook_04.name
    assert shared_run_name(second_seed) == second_seed.name  # another seed computes something else
    other_rate = next(cfg for label, cfg in grid.configs.items() if label != grid.reference)
    assert shared_run_name(other_rate) == other_rate.name


def test_a_run_saved_before_a_setting_existed_is_still_shared(tmp_path, monkeypatch):
    """A grid config finds another grid's run with the same settings although that run's config.json predates a
    setting hw3lib added since (here `warm_start_seed`, left at its default): it counts as the default."""
    from hw3lib.experiments.runner import GRID_FILE, shared_run_name

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path))
    cfg = build_grid("std_normalization", "smoke").configs["std_on"]
    saved = cfg.to_dict()
    del saved["warm_start_seed"]  # what an older hw3lib wrote
    (tmp_path / "std_normalization" / "std_on").mkdir(parents=True)
    (tmp_path / "std_normalization" / "std_on" / "config.json").write_text(json.dumps(saved))
    (tmp_path / "std_normalization" / GRID_FILE).write_text("{}")
    twin = cfg.replace(name="off_policy/e2_b64")
    assert shared_run_name(twin) == "std_normalization/std_on"
    assert shared_run_name(twin.replace(warm_start_seed=1)) == "off_policy/e2_b64"  # a real difference is not shared
