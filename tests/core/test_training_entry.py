"""hw3lib.core.lifecycle.training_entry, the wrapper of `train`, `train_sft` and `expert_iteration` (issue 58, items 3
and 4): on a GPU with vLLM a run that will train goes to its own process (a finished one is read back in place); any
other runs here, and when it returns or raises, what it held is garbage before torch's cache is emptied (recorded
here: `cuda_in_use` reported true, `gc.collect` and `torch.cuda.empty_cache` recording)."""

from __future__ import annotations

import gc
import os
import weakref

import pytest
import torch

import hw3lib.core.lifecycle as lifecycle
from hw3lib.core.lifecycle import training_entry
from hw3lib.grpo.config import GRPOConfig


class Held:
    """Stands for the learner: the policy, its AdamW state and working copy, which must be gone at empty_cache."""


@pytest.fixture
def gpu(monkeypatch):
    """CUDA reported in use; `events` records gc.collect and empty_cache, each with whether `state.held` was alive."""
    state = type("State", (), {"events": [], "held": None})()
    real_collect = gc.collect

    def collect(*args):
        found = real_collect(*args)
        state.events.append(("collect", state.held is not None and state.held() is not None))
        return found

    monkeypatch.setattr(lifecycle, "cuda_in_use", lambda: True)
    monkeypatch.setattr(lifecycle.gc, "collect", collect)
    monkeypatch.setattr(torch.cuda, "empty_cache",
                        lambda: state.events.append(("empty_cache", state.held() is not None)))
    return state


def stand_in_loop(state, fail: type[BaseException] | None = None):
    """A training loop whose frame holds a `Held` in a reference cycle (as a learner and its closures do)."""
    @training_entry
    def loop(cfg, resume: bool = False, overwrite: bool = False, callback=None):
        learner = Held()
        learner.cycle = learner
        state.held = weakref.ref(learner)
        state.pid = os.getpid()
        if fail is not None:
            raise fail("stopped")
        return "result"

    return loop


def test_a_run_returns_with_its_memory_released(gpu):
    assert stand_in_loop(gpu)(GRPOConfig.for_profile("smoke")) == "result"
    assert gpu.pid == os.getpid()  # CPU config: in-process, as ever
    # Without the release nothing is recorded; without gc.collect the cycle would keep the learner alive.
    assert gpu.events == [("collect", False), ("empty_cache", False)]


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_run_releases_what_its_traceback_held(gpu, error):
    """After Ctrl-C the caller (a notebook: sys.last_traceback) keeps the exception; its frames must not keep the
    learner's tensors on the card."""
    with pytest.raises(error) as caught:
        stand_in_loop(gpu, fail=error)(GRPOConfig.for_profile("smoke"))
    assert caught.value.__traceback__ is not None  # still held here, as a kernel holds it
    assert gpu.events == [("collect", False), ("empty_cache", False)]


def test_on_cpu_nothing_is_collected_or_emptied(monkeypatch):
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("empty_cache on CPU"))
    monkeypatch.setattr(lifecycle.gc, "collect", lambda *a: pytest.fail("gc.collect on CPU"))
    assert not lifecycle.cuda_in_use()
    state = type("State", (), {})()
    assert stand_in_loop(state)(GRPOConfig.for_profile("smoke")) == "result"


def test_a_cuda_vllm_run_goes_to_its_own_process_unless_finished(monkeypatch, gpu):
    calls = []
    monkeypatch.setattr(lifecycle, "run_in_own_process", lambda fn, *a, **k: calls.append((fn, a, k)) or "child's")
    loop = stand_in_loop(gpu)
    cfg = GRPOConfig(name="gpu_run")  # vLLM on cuda:0
    assert loop(cfg, True) == "child's" and gpu.held is None  # nothing built here
    assert calls == [(loop, (cfg, True, False, None), {})]  # the entry itself, every argument bound
    monkeypatch.setattr(lifecycle, "run_finished", lambda cfg, overwrite=False: True)
    assert loop(cfg) == "result" and gpu.pid == os.getpid()  # read back here: no engine, no process


def test_the_three_loops_are_entry_points():
    from hw3lib.grpo.loop import train
    from hw3lib.sft.expert_iteration import expert_iteration
    from hw3lib.sft.loop import train_sft

    for entry in (train, train_sft, expert_iteration):
        assert entry.__wrapped__.__name__ == entry.__name__  # wrapped by training_entry
        assert entry.__code__ is training_entry(lambda cfg: None).__code__


def write_run(run_dir, cfg, done: int) -> None:
    """A run folder as the loop leaves it: config.json, a checkpoint at `done` steps, its validation row."""
    import json

    checkpoint = run_dir / "checkpoints" / f"step_{done:06d}"
    checkpoint.mkdir(parents=True)
    for folder in (run_dir, checkpoint):
        (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    (checkpoint / "state.json").write_text(json.dumps({cfg.COUNTER: done, "elapsed_s": 1.0}))
    (run_dir / "checkpoints" / "latest").write_text(checkpoint.name)
    (run_dir / "metrics.jsonl").write_text(json.dumps({cfg.COUNTER: done, "eval/answer_reward": 0.5}) + "\n")


def test_only_a_run_that_will_train_gets_a_process(monkeypatch, tmp_path):
    """A finished GPU run is read back here (notebook 05's read-back of every grid: no process per run), with the
    memory plan it recorded (`PLAN_FIELDS`: None in the caller's config); an unfinished one, or overwrite, trains."""
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path))
    cfg = GRPOConfig(name="done", n_grpo_steps=2)
    planned = cfg.replace(**{key: 19 for key in lifecycle.PLAN_FIELDS})
    write_run(tmp_path / "done", planned, done=2)
    assert lifecycle.run_finished(cfg) and lifecycle.run_finished(planned)
    assert not lifecycle.run_finished(cfg, overwrite=True)
    assert not lifecycle.run_finished(cfg.replace(learning_rate=1e-4))  # other settings: the child reports it
    write_run(tmp_path / "half", planned.replace(name="half"), done=1)
    assert not lifecycle.run_finished(cfg.replace(name="half"))  # a resume: it trains
    assert not lifecycle.run_finished(cfg.replace(name="never"))  # nothing there


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lent device machine)")
@pytest.mark.parametrize("fail", [None, KeyboardInterrupt])
def test_on_a_gpu_the_caching_allocator_holds_nothing_after_a_run(fail):
    @training_entry
    def loop(cfg, resume: bool = False, overwrite: bool = False):
        policy = torch.nn.Linear(4096, 4096, device="cuda")
        optimizer = torch.optim.AdamW(policy.parameters(), fused=True)
        policy(torch.randn(512, 4096, device="cuda")).square().mean().backward()
        optimizer.step()
        if fail is not None:
            raise fail()
        return torch.cuda.memory_reserved()

    cfg, workspaces = GRPOConfig.for_profile("smoke"), 64 << 20  # cuBLAS keeps its workspaces in torch's cache
    if fail is None:
        assert loop(cfg) > 4 * 4096 * 4096 * 4  # weights, gradients, two moments at least, while it ran
    else:
        with pytest.raises(fail) as caught:
            loop(cfg)
        assert caught.value.__traceback__ is not None  # held, as a notebook holds its last traceback
    assert torch.cuda.memory_allocated() < workspaces and torch.cuda.memory_reserved() < workspaces
