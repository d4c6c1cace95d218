"""hw3lib.core.disk: a run's checkpoint bytes by hand, a plan's disk against a fake `shutil.disk_usage`, and which
finished runs' optimizer state may be pruned (issue 58, item 6)."""

from __future__ import annotations

import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from hw3lib.core import disk
from hw3lib.core.memory import COURSE_SHAPES, Shape

GiB = 2**30
# One GiB of parameters; and LoRA's toy (tests/core/test_cost.py): width 1,024, 8 query heads and 2 KV heads of
# 128, MLP 2,048, 2 layers.
ROUND = Shape("round", params=GiB, layers=1, hidden=1, vocab=0, kv_heads=1, head_dim=1)
LORA_TOY = Shape("lora-toy", params=400_000_000, layers=2, hidden=1024, vocab=151936, kv_heads=2, head_dim=128,
                 heads=8, intermediate=2048)
Usage = namedtuple("Usage", "total used free")


def fake_disk(monkeypatch, free: int) -> list[Path]:
    asked = []

    def usage(path):
        asked.append(Path(path))
        return Usage(10 * free, 9 * free, free)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    return asked


def test_a_checkpoint_holds_float32_masters_and_adamw_moments_or_the_adapter_only():
    assert disk.checkpoint_bytes(ROUND) == 12 * GiB + 32_000_000  # 4 + 8 bytes per parameter, plus the tokenizer
    assert disk.optimizer_bytes(ROUND) == 8 * GiB
    # Qwen3-0.6B: 596,049,920 x 12 = 7,152,599,040 (+ 32 MB) -- the 7.2 GB; Qwen2.5-Math-1.5B 18.5 GB
    assert disk.checkpoint_bytes(COURSE_SHAPES["Qwen/Qwen3-0.6B"]) == 7_184_599_040
    assert disk.size(disk.checkpoint_bytes(COURSE_SHAPES["Qwen/Qwen2.5-Math-1.5B"])) == "18.6 GB"
    # LoRA rank 8 on all seven projections: per layer (1024+1024) + 2 x (1024+256) + (1024+1024) + 3 x (1024+2048)
    # = 15,872 inputs+outputs, x 8 x 2 layers = 253,952 adapter parameters, 12 bytes each
    assert disk.checkpoint_bytes(LORA_TOY, lora_rank=8) == 12 * 253_952 + 32_000_000
    assert disk.optimizer_bytes(LORA_TOY, lora_rank=8) == 8 * 253_952


def test_a_plans_disk_is_each_runs_checkpoint_plus_one_more_while_it_is_written(monkeypatch, tmp_path):
    plan = disk.disk_plan([10 * GiB, 30 * GiB])
    assert (plan.runs, plan.kept_bytes, plan.transient_bytes) == (2, 40 * GiB + 128_000_000, 30 * GiB)
    assert plan.needed == 70 * GiB + 128_000_000
    assert disk.disk_plan([]).needed == 0
    asked = fake_disk(monkeypatch, free=80 * GiB)
    assert disk.check_disk(plan, "grid `x`", tmp_path / "runs" / "not" / "made") == 80 * GiB
    assert asked == [tmp_path.resolve()]  # a runs folder not made yet: its nearest existing parent
    fake_disk(monkeypatch, free=70 * GiB)  # 128 MB short
    with pytest.raises(disk.DiskSpaceError) as refused:
        disk.check_disk(plan, "grid `x`", tmp_path, prunable_bytes=lambda: 5 * 10**9)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("not enough disk for grid `x`: its 2 new run(s)' checkpoints "
                                                      "need about 75.3 GB and the runs folder's disk has 75.2 GB free")
    assert "HW3_RUNS_DIR" in message and "free 5.0 GB of finished runs' optimizer state" in message
    assert "prune-optimizer --yes" in message
    with pytest.raises(disk.DiskSpaceError, match=r"`hw3 runs prune-optimizer` lists it"):
        disk.check_disk(plan, "grid `x`", tmp_path)
    assert "free 5.0" not in disk.disk_words(plan, 70 * GiB) and "75.2 GB free" in disk.disk_words(plan, 70 * GiB)


def make_run(root: Path, name: str, steps: int, total: int, optimizer_bytes: int = 1000, **state) -> Path:
    """A run folder as hw3lib.core.runs.save_checkpoint leaves it, with an `optimizer.pt` of that many bytes."""
    checkpoint = root / name / "checkpoints" / f"step_{steps:06d}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "optimizer.pt").write_bytes(b"\0" * optimizer_bytes)
    (checkpoint / "state.json").write_text(json.dumps({"grpo_step": steps, **state}))
    (checkpoint / "config.json").write_text(json.dumps({"n_grpo_steps": total}))
    (checkpoint.parent / "latest").write_text(checkpoint.name + "\n")
    return checkpoint


def test_only_finished_runs_optimizer_state_is_prunable_and_pruning_leaves_a_note(tmp_path):
    done = make_run(tmp_path, "grid/done", 10, 10, 1000)
    make_run(tmp_path, "grid/halfway", 4, 10)  # resumes from its moments
    make_run(tmp_path, "grid/cut", 10, 10, partial_step=True)  # Ctrl-C mid-step: redone on resume
    make_run(tmp_path, "grid/kept", 10, 10)
    diverged = make_run(tmp_path, "grid/diverged", 3, 10, 500)  # stopped at its checkpoint: never trained again
    (diverged.parent.parent / "stopped.json").write_text(json.dumps({"grpo_step": 3, "reason": "nan"}))
    resumed = make_run(tmp_path, "grid/resumed_past_stop", 5, 10)  # a stale stopped.json: resumed by hand since
    (resumed.parent.parent / "stopped.json").write_text(json.dumps({"grpo_step": 3, "reason": "nan"}))
    sft = tmp_path / "sft_run" / "checkpoints" / "step_000008"
    sft.mkdir(parents=True)
    (sft / "optimizer.pt").write_bytes(b"\0" * 7)
    (sft / "state.json").write_text(json.dumps({"step": 8}))
    (sft / "config.json").write_text(json.dumps({"n_sft_steps": 8}))
    (sft.parent / "latest").write_text(sft.name)
    entries = disk.prunable(tmp_path, keep={"grid/kept"})
    assert [(e.run, e.bytes) for e in entries] == [("grid/diverged", 500), ("grid/done", 1000), ("sft_run", 7)]
    assert disk.prune(entries[1:2]) == 1000
    assert not (done / "optimizer.pt").exists() and (done / "state.json").is_file()
    assert json.loads((done / disk.PRUNED_FILE).read_text())["bytes"] == 1000
    assert [e.run for e in disk.prunable(tmp_path, keep={"grid/kept"})] == ["grid/diverged", "sft_run"]


def test_the_run_counters_are_the_config_classes():
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.sft.config import EIConfig, SFTConfig

    assert disk.RUN_COUNTERS == tuple((c.TOTAL_FIELD, c.COUNTER) for c in (GRPOConfig, SFTConfig, EIConfig))
    from hw3lib.grpo.loop import STOPPED_FILE

    assert disk.STOPPED_FILE == STOPPED_FILE


def test_a_pruned_run_refuses_to_resume_in_one_line(tmp_path):
    import torch

    from hw3lib.core.runs import load_checkpoint

    checkpoint = make_run(tmp_path, "done", 10, 10)
    disk.prune(disk.prunable(tmp_path))
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    with pytest.raises(ValueError, match="optimizer state was pruned .* read back but not extended"):
        load_checkpoint(checkpoint, optimizer, tmp_path / "done")
