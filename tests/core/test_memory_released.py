"""The real loops hand their memory back when they return (issue 58, item 4): at `torch.cuda.empty_cache` (recorded,
with CUDA reported in use) the policy the loop trained is garbage -- nothing in hw3lib (a learner, an engine wrapping
the policy, a cache, a closure) still holds it. Tiny smoke runs on the CPU, one step each."""

from __future__ import annotations

import weakref

import pytest
import torch

import hw3lib.core.lifecycle as lifecycle


@pytest.fixture
def released(monkeypatch, tmp_path):
    """`state.policies`: weak references to every policy the callbacks saw; `state.alive_at_empty_cache`: how many
    were still alive at each empty_cache."""
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    state = type("State", (), {"policies": [], "alive_at_empty_cache": []})()
    monkeypatch.setattr(lifecycle, "cuda_in_use", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: state.alive_at_empty_cache.append(
        sum(ref() is not None for ref in state.policies)))
    state.callback = lambda info: state.policies.append(weakref.ref(info["policy"]))
    return state


def test_train_returns_with_the_policy_released(released):
    from hw3lib.grpo.loop import train
    from tests.grpo.test_loop import tiny_cfg

    train(tiny_cfg("released_grpo", model="tiny-sft", warm_start_steps=0, n_grpo_steps=1, rollout_batch_size=8,
                   train_batch_size=8, eval_every=1, checkpoint_every=1, n_eval_examples=2, sampling_max_tokens=8),
          callback=released.callback)
    assert released.policies and released.alive_at_empty_cache[-1:] == [0]


def test_train_sft_returns_with_the_policy_released(released):
    from hw3lib.sft.loop import train_sft
    from tests.sft.test_loop import tiny_cfg

    train_sft(tiny_cfg("released_sft", n_sft_steps=1, eval_every=1, checkpoint_every=1, n_eval_examples=2,
                       sampling_max_tokens=8), callback=released.callback)
    assert released.policies and released.alive_at_empty_cache[-1:] == [0]


def test_expert_iteration_returns_with_the_policy_released(released):
    from hw3lib.sft.expert_iteration import expert_iteration
    from tests.sft.test_expert_iteration import tiny_cfg

    expert_iteration(tiny_cfg("released_ei", n_ei_steps=1, questions_per_round=4, n_eval_examples=2,
                              sampling_max_tokens=8), callback=released.callback)
    assert released.policies and released.alive_at_empty_cache[-1:] == [0]
