"""hw3lib.experiments.plan's gates (issue 58, item 6): on a GPU a notebook whose plan exceeds $HW3_MAX_GPU_HOURS,
or whose new runs' checkpoints exceed the runs folder's free disk, stops in its plan cell with one line; `make
workbook` says the same first; off the GPU nothing changes. A stand-in GPU (monkeypatched device) and a fake
`shutil.disk_usage`."""

from __future__ import annotations

import shutil
from collections import namedtuple

import pytest
import torch

from hw3lib.core import cost, disk
from hw3lib.core.course import get_course
from hw3lib.experiments import plan as planning
from hw3lib.experiments.plan import GpuHoursError, NotebookDiskError, Plan, PlanItem, check_plan, notebook_plan

GB = 10**9
Usage = namedtuple("Usage", "total used free")
QWEN3_CHECKPOINT = 596_049_920 * 12 + 32_000_000  # float32 masters + AdamW's moments + tokenizer: 7,184,599,040


@pytest.fixture(autouse=True)
def _plain_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    for variable in ("HW3_EXTRAS", "HW3_MODEL", "HW3_MATH_MODEL", "HW3_COURSE", "HW3_REHEARSAL", "HW3_SIMULATE_GPU",
                     "HW3_MAX_GPU_HOURS"):
        monkeypatch.delenv(variable, raising=False)
    if torch.cuda.is_available():
        pytest.skip("these plans are for a machine without a GPU (a stand-in GPU is patched in)")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**13, 0, 10**13))  # 10 TB free


@pytest.fixture
def gpu(monkeypatch):
    """The plan sees an H100 (the datasheet figures the estimates use without a GPU)."""
    from hw3lib.core import preflight

    device = preflight.DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", total_bytes=80 * 2**30,
                                  capability=(9, 0), count=1)
    monkeypatch.setattr(preflight, "detect_device", lambda: device)
    monkeypatch.setattr(preflight, "accelerator_for", lambda info: cost.H100)
    return device


def toy_plan(*hours, checkpoints=()) -> Plan:
    items = tuple(PlanItem("ablations", f"grid {i}", h) for i, h in enumerate(hours))
    items += (PlanItem("ablations", "runs", None, tuple(checkpoints)),)
    return Plan("05", "full", get_course("gsm8k-qwen3"), "estimated on the detected H100", items, (), gated=True)


def test_the_hours_gate_names_the_variable_and_the_plans_total(monkeypatch):
    check_plan(toy_plan((10.0, 4.0), (6.0, 3.0)))  # 16.0 h: the default admits it
    with pytest.raises(GpuHoursError) as stopped:
        check_plan(toy_plan((10.0, 4.0), (7.5, 3.0)))  # 17.5 h (7.0 at half the budget)
    message = str(stopped.value)
    assert message == ("notebook 05's plan totals 17.5 GPU-hours (7.0 at half the token budget; estimated on the "
                       "detected H100), over HW3_MAX_GPU_HOURS=16: to start it, set HW3_MAX_GPU_HOURS=18 (or more) "
                       "and run again, or run its grids one by one (`hw3 sweep <grid>`)")
    assert stopped.value._render_traceback_() == [f"GpuHoursError: {message}"]  # a notebook shows this one line
    monkeypatch.setenv("HW3_MAX_GPU_HOURS", "18")
    check_plan(toy_plan((10.0, 4.0), (7.5, 3.0)))
    monkeypatch.setenv("HW3_MAX_GPU_HOURS", "lots")
    with pytest.raises(ValueError, match="HW3_MAX_GPU_HOURS='lots'"):
        check_plan(toy_plan((1.0, 0.5)))


def test_the_disk_gate_counts_every_new_runs_checkpoint_and_one_more(monkeypatch):
    plan = toy_plan((1.0, 0.5), checkpoints=(QWEN3_CHECKPOINT, QWEN3_CHECKPOINT))
    # two runs of 7.18 GB, 64 MB of metrics and samples each, and the second checkpoint while one is written
    assert plan.disk.needed == 3 * QWEN3_CHECKPOINT + 2 * 64_000_000 == 21_681_797_120
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 0, 21 * GB))
    monkeypatch.setattr(planning, "_prunable_bytes", lambda: 0)
    with pytest.raises(NotebookDiskError) as refused:
        check_plan(plan)
    assert str(refused.value).startswith("not enough disk for notebook 05's plan: its 2 new run(s)' checkpoints need "
                                         "about 21.7 GB and the runs folder's disk has 21.0 GB free")
    assert "\n" not in str(refused.value) and len(refused.value._render_traceback_()) == 1
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 0, 22 * GB))
    check_plan(plan)


def test_on_a_gpu_notebook_05_stops_in_its_plan_cell_and_notebook_04_starts(gpu, monkeypatch):
    with pytest.raises(GpuHoursError, match=r"^notebook 05's plan totals \d+\.\d GPU-hours .*HW3_MAX_GPU_HOURS=16"):
        notebook_plan("05", "full", "gsm8k-qwen3")
    monkeypatch.setenv("HW3_MAX_GPU_HOURS", "1000")  # a deliberate act
    five = notebook_plan("05", "full", "gsm8k-qwen3")
    assert five.total[0] > planning.DEFAULT_MAX_GPU_HOURS and five.gated
    assert "Disk: about" in five.text() and "10000.0 GB free" not in five.text() and "10.0 TB free" in five.text()
    monkeypatch.delenv("HW3_MAX_GPU_HOURS")
    for course in ("gsm8k-qwen3", "cs336-a5", "cs336-a5-2026"):  # one course run fits the default
        assert notebook_plan("04", "full", course, extras=False).total[0] <= planning.DEFAULT_MAX_GPU_HOURS
    with pytest.raises(GpuHoursError):
        notebook_plan("05", "full", "cs336-a5")


def test_a_notebooks_disk_is_checked_on_a_gpu_and_runs_on_disk_are_not_counted_again(gpu, monkeypatch):
    from hw3lib.core.io import runs_dir
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 0, 10 * GB))
    with pytest.raises(NotebookDiskError, match=r"need about 14\.4 GB and the runs folder's disk has 10\.0 GB free"):
        notebook_plan("04", "full", "gsm8k-qwen3", extras=False)  # one Qwen3-0.6B run: 2 x 7.18 GB + 64 MB
    latest = runs_dir() / GRPOConfig.for_profile("full", course="gsm8k-qwen3").name / "checkpoints" / "latest"
    latest.parent.mkdir(parents=True)
    latest.write_text("step_000200\n")  # that run is on disk already
    assert notebook_plan("04", "full", "gsm8k-qwen3", extras=False).disk.runs == 0


def test_off_the_gpu_nothing_stops_and_the_smoke_line_is_unchanged(monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 0, 1))  # a full disk
    plan = notebook_plan("05", "full", "gsm8k-qwen3")  # no GPU: the plan is printed, nothing starts
    assert not plan.gated and plan.total[0] > planning.DEFAULT_MAX_GPU_HOURS
    from hw3lib.core import command_times

    monkeypatch.delenv("HW3_NOTEBOOK_SHORT", raising=False)
    monkeypatch.setattr(command_times, "load", lambda path=None: {})
    assert notebook_plan("05", "smoke", "gsm8k-qwen3", extras=True).text() == "smoke profile: CPU only, no GPU work."


def test_make_workbook_checks_every_notebooks_plan_first(gpu, monkeypatch, capsys):
    monkeypatch.setenv("HW3_PROFILE", "full")
    assert planning.main([]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("make workbook: notebook 05's plan totals ") and "HW3_MAX_GPU_HOURS=16" in line
    monkeypatch.setenv("HW3_MAX_GPU_HOURS", "1000")
    assert planning.main([]) == 0


def test_a_grids_disk_preflight_is_megabytes_in_smoke_and_refuses_a_full_disk(monkeypatch):
    from hw3lib.experiments.disk_check import check_disk_for, run_checkpoint_bytes
    from hw3lib.grpo.config import GRPOConfig

    smoke = [GRPOConfig.for_profile("smoke", name=f"g/{i}") for i in range(3)]
    tiny = run_checkpoint_bytes(smoke[0])
    assert tiny < 50 * 10**6  # the tiny model: 525,056 parameters x 12 + 32 MB
    assert check_disk_for(smoke[:1], "grid `g`") == 2 * tiny + 64_000_000  # one run: the same settings thrice
    assert check_disk_for([c.replace(seed=i) for i, c in enumerate(smoke)], "grid `g`") == 4 * tiny + 192_000_000
    full = [GRPOConfig.for_profile("full", name=f"g/{lr}", learning_rate=lr) for lr in (1e-6, 3e-6)]
    assert run_checkpoint_bytes(full[0]) == QWEN3_CHECKPOINT
    assert run_checkpoint_bytes(full[0].replace(lora_rank=16)) < 10**9  # the adapter only
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 0, 20 * GB))
    with pytest.raises(disk.DiskSpaceError, match=r"^not enough disk for grid `g`: its 2 new run\(s\)' checkpoints "
                                                   r"need about 21\.7 GB"):
        check_disk_for(full, "grid `g`")
