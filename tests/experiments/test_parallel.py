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
        assert set(GRIDS[name].needs) <= set(ORDER[:i]), name


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


def test_a_failing_grid_raises_with_its_log(monkeypatch):
    import hw3lib.experiments.parallel as parallel

    with pytest.raises(ValueError, match="unknown profile 'no_such_profile'"):  # the parent's preflight, first
        run_grids_parallel("no_such_profile", steps=1, grids=("baselines",))
    monkeypatch.setattr(parallel, "check_grids_fit", lambda *args: None)  # so that the worker meets the error
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


# ---- where the grids run: one per GPU in full, CPU shares in smoke (issue 41) ----------------------------------

class FakeProcess:
    """A worker that exits with `status` after `polls` calls of poll()."""

    def __init__(self, polls: int = 3, status: int = 0):
        self.polls, self.status, self.returncode = polls, status, None

    def poll(self):
        self.polls -= 1
        if self.polls <= 0:
            self.returncode = self.status
        return self.returncode

    def terminate(self):
        self.returncode = -15

    def wait(self):
        return self.returncode


def record_starts(monkeypatch):
    """Replace the worker processes with FakeProcesses; returns the list of (grid, slot env, grids running then)."""
    import io

    import hw3lib.experiments.parallel as parallel

    starts, running = [], {}

    def fake_start(name, profile, steps, logs, slot):
        busy = [gpu for process, gpu in running.values() if process.returncode is None]
        process = FakeProcess()
        starts.append((name, dict(slot), len(busy) + 1, busy))
        running[name] = (process, slot.get("CUDA_VISIBLE_DEVICES"))
        return process, io.StringIO()

    monkeypatch.setattr(parallel, "_start", fake_start)
    monkeypatch.setattr(parallel, "run_sweep", lambda name, profile, steps: name)  # the read-back
    return starts


@pytest.mark.parametrize("gpus", [["0"], ["3", "5"]])
def test_full_profile_runs_at_most_one_grid_per_gpu(gpus, monkeypatch):
    """Two grids on one GPU each start a colocated vLLM at gpu_memory_utilization 0.5 beside a float32 trainer:
    the second engine refused to start. One worker per visible GPU, each seeing only its own."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(gpus))
    starts = record_starts(monkeypatch)
    results = run_grids_parallel("full", grids=ORDER, poll_s=0)
    assert list(results) == list(ORDER) and [name for name, *_ in starts] != []
    for name, slot, concurrent, busy in starts:
        assert slot["CUDA_VISIBLE_DEVICES"] in gpus and slot["CUDA_VISIBLE_DEVICES"] not in busy, name
        assert concurrent <= len(gpus)
    assert max(concurrent for _, _, concurrent, _ in starts) == len(gpus)  # every GPU is used
    assert {slot["CUDA_VISIBLE_DEVICES"] for _, slot, _, _ in starts} == set(gpus)


def test_smoke_profile_keeps_two_cpu_workers_without_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")  # ignored: smoke runs on the CPU
    # the parent's preflight builds the prompt grid's neutral warm start: CI's short setting builds the 60-step one
    # that test_grids and the prompt-grid test above share (the recipe's 125 steps took this test 70 s)
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "1")
    starts = record_starts(monkeypatch)
    run_grids_parallel("smoke", grids=ORDER[:6], poll_s=0)
    assert max(concurrent for _, _, concurrent, _ in starts) == 2
    assert all("CUDA_VISIBLE_DEVICES" not in slot and slot["OMP_NUM_THREADS"] for _, slot, _, _ in starts)


def test_grid_workers_one_slot_per_gpu_in_full_and_shares_of_the_cores_in_smoke():
    from hw3lib.experiments.parallel import grid_workers

    assert grid_workers("full", ["0"], cpus=16) == [
        {"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "16", "MKL_NUM_THREADS": "16"}]
    two = grid_workers("full", ["2", "7"], cpus=16)
    assert [w["CUDA_VISIBLE_DEVICES"] for w in two] == ["2", "7"] and all(w["OMP_NUM_THREADS"] == "8" for w in two)
    assert grid_workers("full", ["2", "7"], workers=1, cpus=16)[0]["CUDA_VISIBLE_DEVICES"] == "2"  # never more than asked
    assert grid_workers("full", ["2", "7"], workers=5, cpus=16) == two  # never more than one per GPU
    assert grid_workers("full", [], cpus=4) == [{"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}]  # no GPU: one
    assert grid_workers("smoke", cpus=2) == [{"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}] * 2
    assert len(grid_workers("smoke", workers=3, cpus=2)) == 3


def test_visible_gpus_from_cuda_visible_devices_else_torch(monkeypatch):
    import torch

    from hw3lib.experiments.parallel import visible_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1, 3")
    assert visible_gpus() == ["1", "3"]
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert visible_gpus() == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert visible_gpus() == ["0", "1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU: the rehearsal's simulated cards, or none
    monkeypatch.delenv("HW3_SIMULATE_GPU", raising=False)
    assert visible_gpus() == []
    monkeypatch.setenv("HW3_SIMULATE_GPU", "2xH100-80GB")
    assert visible_gpus() == ["0", "1"]


def test_a_worker_process_sees_only_its_gpu(tmp_path, monkeypatch):
    import subprocess

    import hw3lib.experiments.parallel as parallel

    seen = {}

    def fake_popen(command, stdout, stderr, env):
        seen.update(command=command, env=env)
        return FakeProcess()

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    _process, log = parallel._start("kl_drift", "full", None, tmp_path, {"CUDA_VISIBLE_DEVICES": "1"})
    log.close()
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "1" and seen["command"][-4:] == ["--grid", "kl_drift", "--profile",
                                                                                   "full"]
    assert "CUDA_VISIBLE_DEVICES=1" in (tmp_path / "kl_drift.log").read_text()


def test_grids_to_run_follow_the_sections():
    from hw3lib.core.course import SECTIONS, get_course
    from hw3lib.experiments.parallel import GRID_SECTIONS, grids_to_run

    assert set(GRID_SECTIONS) == set(ORDER) and set(GRID_SECTIONS.values()) - {None} <= set(SECTIONS)
    gsm8k = grids_to_run(get_course("gsm8k-qwen3").sections)
    assert "leaderboard" not in gsm8k and "kl_drift" not in gsm8k and "algorithms" not in gsm8k
    assert {"learning_rate", "baselines", "clip_ablation", "prompt", "sync_strategy"} <= set(gsm8k)
    cse, cs336 = grids_to_run(get_course("cse599o-a3").sections), grids_to_run(get_course("cs336-a5").sections)
    assert set(cse) == set(ORDER) - {"algorithms", "leaderboard"} and list(cse) == [n for n in ORDER if n in cse]
    assert set(cs336) == set(ORDER) - {"algorithms", "kl_drift"}
    assert grids_to_run(SECTIONS) == ORDER  # extras: every grid, the one beyond the handouts too
