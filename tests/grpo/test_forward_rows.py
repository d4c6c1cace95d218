"""Training microbatches sized by memory (hw3lib.core.memory.training_micro_batch, hw3lib.grpo.memory_plan): the
size follows the memory model, never below the course's microbatch, and the optimizer step's update does not depend on it (the course's accumulation arithmetic stays exact)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hw3lib.core import memory
from hw3lib.grpo.config import GRPOConfig
from tests.grpo.test_step_variants import _cfg, _step_inputs

GiB = 2**30
QWEN3 = memory.COURSE_SHAPES["Qwen/Qwen3-0.6B"]


def test_the_largest_microbatch_whose_peak_fits_by_hand():
    """A budget that holds the course's state and exactly 5 microbatch rows' activations gives 5; a budget below
    the course's microbatch still gives it (the preflight's concern, not this function's); the step caps it."""
    trainer = memory.Trainer(micro_batch=2, prompt_tokens=200, response_tokens=1024)
    peak = {rows: memory.trainer_peak(dataclasses.replace(trainer, micro_batch=rows).parts(QWEN3))
            for rows in range(1, 9)}
    assert all(peak[rows + 1] > peak[rows] for rows in range(1, 8))  # more rows, more activations and logits

    def under(budget):
        return lambda t: memory.trainer_peak(t.parts(QWEN3)) <= budget

    assert memory.training_micro_batch(trainer, 256, under(peak[5])) == 5
    assert memory.training_micro_batch(trainer, 256, under(peak[5] - 1)) == 4
    assert memory.training_micro_batch(trainer, 256, under(peak[1])) == 2  # never below the course's microbatch
    assert memory.training_micro_batch(trainer, 3, under(10**15)) == 3  # never beyond the optimizer step


def test_cpu_budget_counts_the_engine_beside_the_trainer():
    """On a 48 GiB CPU with half of it for training: Qwen3-0.6B's state (18 bytes per parameter and the head's
    gradient, ~11 GiB) leaves room for ~20 sequences of 200 + 64 tokens (the real-width benchmark's); the
    transformers engine's own bf16 copy (1.1 GiB) beside it leaves fewer."""
    trainer = memory.Trainer(micro_batch=2, prompt_tokens=200, response_tokens=64)
    alone = memory.training_micro_batch(trainer, 256, memory.cpu_fits(
        QWEN3, memory.Engine("transformers", wraps_policy=True, dtype="float32", batch=0), 48 * GiB))
    beside = memory.training_micro_batch(trainer, 256, memory.cpu_fits(
        QWEN3, memory.Engine("transformers", batch=0), 48 * GiB))
    state = memory.trainer_peak(dataclasses.replace(trainer, micro_batch=0).parts(QWEN3))
    per_row = memory.trainer_peak(dataclasses.replace(trainer, micro_batch=1).parts(QWEN3)) - state
    assert alone == (24 * GiB - state) // per_row  # by hand: what half the memory leaves, in rows
    assert 15 <= alone <= 25
    assert beside == (24 * GiB - state - 2 * QWEN3.params) // per_row < alone


def test_the_plan_of_a_tiny_and_an_unknown_model(tmp_path):
    from hw3lib.grpo.memory_plan import planned

    smoke = GRPOConfig.for_profile("smoke", gradient_accumulation_steps=4)
    assert smoke.micro_train_batch_size < smoke.train_batch_size
    assert planned(smoke).forward_rows == smoke.train_batch_size  # megabytes: one forward per step
    # A model the memory model cannot read: the course's microbatch, as before.
    unknown = smoke.replace(model=str(tmp_path / "no_such_model"))
    assert planned(unknown).forward_rows == smoke.micro_train_batch_size


@pytest.mark.parametrize("forward_rows", [3, 8])
def test_the_update_does_not_depend_on_the_forward_size(forward_rows):
    """One grpo_clip step of the tiny model (8 rollouts, the course's 4 microbatches of 2) in forwards of 3 rows
    (3 + 3 + 2: sizes need not divide the step) or 8: the same loss, gradients and clip fraction."""
    from hw3lib.grpo.step import optimizer_step
    from hw3lib.models.load import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer("tiny-sft")
    packed, engine_lp, adv, prefix = _step_inputs(policy, tokenizer)
    torch.manual_seed(0)
    old = engine_lp + 0.3 * torch.randn_like(engine_lp)
    cfg = _cfg(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=4,
               dtype="float32", loss_type="grpo_clip")

    def step(rows):
        grads = {}
        stats = optimizer_step(policy, torch.optim.SGD(policy.parameters(), lr=0.0), list(policy.parameters()), cfg,
                               dict(packed), torch.arange(8), raw_rewards=adv, advantages=adv, old_log_probs=old,
                               ref_log_probs=None, engine_log_probs=engine_lp, shared_prefix=prefix, learning_rate=0.0,
                               measure_mismatch=False, forward_rows=rows,
                               before_update=lambda m: grads.update({n: p.grad.clone() for n, p in
                                                                     m.named_parameters() if p.grad is not None}))
        return stats, grads

    course, course_grads = step(None)
    ours, our_grads = step(forward_rows)
    assert 0.0 < course["clip_fraction"] < 1.0
    for key in ("loss", "clip_fraction", "entropy", "grad_norm"):
        assert ours[key] == pytest.approx(course[key], rel=1e-5, abs=1e-7), key
    for name, grad in course_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-5, atol=1e-6)
