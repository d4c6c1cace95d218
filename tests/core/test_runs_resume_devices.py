"""Checkpoints resume on another machine (hw3lib.core.runs): a GPU run's optimizer state loads on a CPU
machine, and CUDA RNG states are restored only where the GPU count matches (GPU files and GPUs are
faked: this machine has neither)."""

from __future__ import annotations

import json

import pytest
import torch

from hw3lib.core import runs


def optimizer_checkpoint(tmp_path, location: str):
    """A checkpoint folder whose optimizer.pt records its tensors as living on `location` (torch.save
    writes each storage's device as a tag; here the tag is faked), with its RNG states and metrics."""
    params = [torch.nn.Parameter(torch.ones(3))]
    optimizer = torch.optim.AdamW(params, lr=0.1)
    params[0].grad = torch.full((3,), 0.5)
    optimizer.step()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: location)
        torch.save(optimizer.state_dict(), checkpoint / "optimizer.pt")
    (checkpoint / "rng.json").write_text(json.dumps(runs.rng_state()))
    (checkpoint / "state.json").write_text(json.dumps({"step": 1, "partial_step": False}))
    return checkpoint, optimizer.state_dict()


def test_a_gpu_checkpoint_resumes_on_a_cpu_machine(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks a CPU-only machine")
    checkpoint, saved = optimizer_checkpoint(tmp_path, "cuda:0")
    with pytest.raises(RuntimeError, match="CUDA"):  # what torch.load without map_location does here
        torch.load(checkpoint / "optimizer.pt", weights_only=True)
    params = [torch.nn.Parameter(torch.ones(3))]
    optimizer = torch.optim.AdamW(params, lr=0.1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert runs.load_checkpoint(checkpoint, optimizer, run_dir) == {"step": 1}
    state = optimizer.state_dict()["state"][0]
    assert state["exp_avg"].device.type == "cpu"
    torch.testing.assert_close(state["exp_avg"], saved["state"][0]["exp_avg"])


def fake_gpus(monkeypatch, count: int) -> list:
    """Pretend this machine has `count` GPUs; returns the list the CUDA RNG restores are recorded in."""
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    return restored


@pytest.mark.parametrize("gpus, restored, note", [(2, True, False), (1, False, True), (0, False, False)])
def test_cuda_rng_states_restore_only_for_the_same_gpu_count(monkeypatch, capsys, gpus, restored, note):
    """A state saved on 2 GPUs: restored on 2; skipped with a one-line note on 1 (torch would raise); ignored
    on a CPU machine. The CPU generators are restored in every case."""
    state = runs.rng_state()
    expected_cpu = torch.rand(3)
    state["cuda"] = [torch.get_rng_state().tolist()] * 2  # two GPUs' states (any byte list does)
    calls = fake_gpus(monkeypatch, gpus)
    runs.set_rng_state(state)
    torch.testing.assert_close(torch.rand(3), expected_cpu)
    assert (len(calls) == 1 and len(calls[0]) == 2) == restored and len(calls) <= 1
    printed = capsys.readouterr().out
    assert ("CUDA RNGs not restored" in printed) == note and printed.count("\n") == int(note)
