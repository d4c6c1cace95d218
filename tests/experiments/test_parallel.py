"""hw3lib.experiments.parallel: grids run side by side in worker processes, a config two grids share is trained
once (the per-settings lock), prerequisites run first, and a failing grid raises with its log."""

from __future__ import annotations

import json

import pytest

from hw3lib.experiments.grids import build_grid
from hw3lib.experiments.notebook import describe_changes
from hw3lib.experiments.parallel import ORDER, SweepWorkerError, run_grids_parallel


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def test_order_starts_every_grid_after_its_prerequisites():
    from hw3lib.experiments.grids import GRIDS

    assert sorted(ORDER) == sorted(GRIDS)
    for i, name in enumerate(ORDER):
        assert set(GRIDS[name][3]) <= set(ORDER[:i]), name


def test_prompt_grid_starts_both_prompts_from_the_same_neutral_weights(monkeypatch):
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "1")  # CI's short setting: a 60-step neutral warm start to build, not 125
    prompt = build_grid("prompt", "smoke")
    r1_zero, question_only = prompt.configs["r1_zero"], prompt.configs["question_only"]
    from hw3lib.models.load import initial_policy_source

    neutral = initial_policy_source(prompt.base, warm_start_prompt="neutral")
    assert r1_zero.model == question_only.model == neutral != initial_policy_source(prompt.base)
    assert r1_zero.warm_start_steps == question_only.warm_start_steps == 0
    lines = describe_changes(prompt)
    shown = f"<warm start: neutral format, {prompt.base.warm_start_steps} SFT steps>"
    assert all(line.startswith(f"prompt/{label}") and shown in line and neutral not in line
               for line, label in zip(lines, ("r1_zero", "question_only")))


def test_two_grids_side_by_side_train_their_shared_base_once():
    from hw3lib.core.io import runs_dir

    results = run_grids_parallel("smoke", steps=1, grids=("std_normalization", "length_normalization"))
    std, length = results["std_normalization"], results["length_normalization"]
    # The base is std_on in one grid and masked_mean in the other: one run, the other grid reads it.
    base_runs = {std.records["std_on"]["run"], length.records["masked_mean"]["run"]}
    assert len(base_runs) == 1
    assert std.records["std_on"]["shared"] != length.records["masked_mean"]["shared"]
    trained = sorted(p.parent.relative_to(runs_dir()).as_posix() for p in runs_dir().glob("*/*/config.json"))
    assert trained == sorted([*base_runs, "std_normalization/std_off", "length_normalization/constant"])
    for result in results.values():
        assert all(r["status"] == "finished" and r["grpo_steps"] == 1 for r in result.records.values())
        manifest = json.loads((runs_dir() / result.grid.name / "grid.json").read_text())
        assert set(manifest["configs"]) == set(result.grid.configs)
    assert (runs_dir() / "sweep_logs" / "std_normalization.log").is_file()


def test_a_failing_grid_raises_with_its_log():
    with pytest.raises(SweepWorkerError, match="grid baselines exited with status") as info:
        run_grids_parallel("no_such_profile", steps=1, grids=("baselines",))
    assert "no_such_profile" in str(info.value)  # the worker's own error, from the end of its log


def test_cli_refuses_unknown_grids_and_seeds_with_all():
    from typer.testing import CliRunner

    from hw3lib.cli import app

    unknown = CliRunner().invoke(app, ["sweep", "no_such_grid"])
    assert unknown.exit_code == 2 and "no_such_grid" in unknown.output and "all" in unknown.output
    seeded = CliRunner().invoke(app, ["sweep", "all", "--seed", "1"])
    assert seeded.exit_code == 2 and "--seed" in seeded.output
