"""hw3lib.grpo: hand-worked numbers, closed-form float64 gradients and edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from hw3lib.grpo import (LOSS_TYPES, compute_grpo_clip_loss, compute_grpo_no_clip_loss,
                         compute_group_normalized_rewards, compute_naive_policy_gradient_loss,
                         compute_policy_gradient_loss, grpo_microbatch_train_step)
from hw3lib.sft import masked_mean

F64 = torch.float64


def exact_match_reward(response: str, ground_truth: str) -> dict[str, float]:
    correct = float(response == ground_truth)
    return {"reward": correct, "format_reward": 1.0, "answer_reward": correct}


def constant_reward(value: float):
    return lambda response, ground_truth: {"reward": value}


# --- compute_group_normalized_rewards ----------------------------------------------------------

def test_group_normalized_rewards_hand_worked():
    responses = ["4", "5", "4", "4", "x", "y", "z", "w"]
    truths = ["4"] * 4 + ["7"] * 4
    # group 1 rewards [1, 0, 1, 1]: mean 0.75, centred [.25, -.75, .25, .25], unbiased std 0.5
    # group 2 rewards [0, 0, 0, 0]: all equal -> advantages 0
    adv, raw, stats = compute_group_normalized_rewards(exact_match_reward, responses, truths, 4, 0.0, True)
    torch.testing.assert_close(raw, torch.tensor([1.0, 0, 1, 1, 0, 0, 0, 0]))
    torch.testing.assert_close(adv, torch.tensor([0.5, -1.5, 0.5, 0.5, 0, 0, 0, 0]))
    assert stats == pytest.approx({"reward_mean": 0.375, "reward_std": math.sqrt(1.875 / 7), "reward_min": 0.0,
                                   "reward_max": 1.0, "frac_groups_zero_std": 0.5,
                                   "format_reward_mean": 1.0, "answer_reward_mean": 0.375})
    adv, _, _ = compute_group_normalized_rewards(exact_match_reward, responses, truths, 4, 0.5, True)
    torch.testing.assert_close(adv[:4], torch.tensor([0.25, -0.75, 0.25, 0.25]) / 1.0)  # / (0.5 + 0.5)
    adv, _, _ = compute_group_normalized_rewards(exact_match_reward, responses, truths, 4, 1e-6, False)
    torch.testing.assert_close(adv, torch.tensor([0.25, -0.75, 0.25, 0.25, 0, 0, 0, 0]))
    adv, _, _ = compute_group_normalized_rewards(exact_match_reward, responses, truths, 2, 1e-6, False)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0, 0, 0, 0, 0, 0]))


@pytest.mark.parametrize("value", [0.0, 0.1, 1.0 / 3.0, 7.3])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_identical_rewards_give_exactly_zero_advantages(value, eps):
    adv, raw, stats = compute_group_normalized_rewards(constant_reward(value), ["a"] * 6, ["b"] * 6, 3, eps, True)
    assert torch.equal(adv, torch.zeros(6)) and not adv.isnan().any()
    assert stats["frac_groups_zero_std"] == 1.0 and "format_reward_mean" not in stats


def test_group_normalized_rewards_errors():
    with pytest.raises(ValueError, match="repeated_ground_truths has 3"):
        compute_group_normalized_rewards(exact_match_reward, ["a"] * 4, ["a"] * 3, 2, 1e-6, True)
    with pytest.raises(ValueError, match="group_size=3"):
        compute_group_normalized_rewards(exact_match_reward, ["a"] * 4, ["a"] * 4, 3, 1e-6, True)
    with pytest.raises(ValueError, match="group_size >= 2"):
        compute_group_normalized_rewards(exact_match_reward, ["a"] * 4, ["a"] * 4, 1, 1e-6, True)
    with pytest.raises(ValueError, match="'reward' key"):
        compute_group_normalized_rewards(lambda r, g: {"score": 1.0}, ["a"] * 4, ["a"] * 4, 2, 1e-6, True)


# --- per-token losses ---------------------------------------------------------------------------

def test_naive_policy_gradient_loss_hand_worked():
    adv = torch.tensor([[2.0], [-1.0]])
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    expected = torch.tensor([[2.0, 4.0], [-0.5, -3.0]])
    torch.testing.assert_close(compute_naive_policy_gradient_loss(adv, log_probs), expected)
    torch.testing.assert_close(compute_naive_policy_gradient_loss(adv.view(2), log_probs), expected)
    with pytest.raises(ValueError, match=r"raw_rewards_or_advantages has shape \(3, 1\)"):
        compute_naive_policy_gradient_loss(torch.ones(3, 1), log_probs)


def clip_example():
    """Ratios 0.5, 1, 1.5 for a positive and a negative advantage, cliprange 0.2."""
    adv = torch.tensor([[1.0], [-1.0]], dtype=F64)
    old = torch.tensor([[-1.0, -2.0, -0.7]] * 2, dtype=F64)
    log_probs = (old + torch.log(torch.tensor([0.5, 1.0, 1.5], dtype=F64))).requires_grad_()
    return adv, log_probs, old


def test_grpo_clip_loss_hand_worked_and_gradients():
    adv, log_probs, old = clip_example()
    loss, stats = compute_grpo_clip_loss(adv, log_probs, old, cliprange=0.2)
    # A=+1: min(r, clip(r)) = [.5, 1, 1.2]; A=-1: min(-r, -clip(r)) = [-.8, -1, -1.5]
    torch.testing.assert_close(loss, torch.tensor([[-0.5, -1.0, -1.2], [0.8, 1.0, 1.5]], dtype=F64))
    assert stats["clipped"].tolist() == [[False, False, True], [True, False, False]]
    torch.testing.assert_close(stats["clip_fraction"], torch.tensor(2 / 6))
    loss.sum().backward()
    # d(-r A)/d logp = -A r where the unclipped term is active, 0 where clipped
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.5, -1.0, 0.0], [0.0, 1.0, 1.5]], dtype=F64))


def test_grpo_no_clip_loss_hand_worked_and_gradients():
    adv, log_probs, old = clip_example()
    loss, stats = compute_grpo_no_clip_loss(adv, log_probs, old)
    r = torch.tensor([0.5, 1.0, 1.5], dtype=F64)
    torch.testing.assert_close(loss, torch.stack([-r, r]))
    torch.testing.assert_close(stats["ratio_mean"], torch.tensor(1.0, dtype=F64))
    loss.sum().backward()
    torch.testing.assert_close(log_probs.grad, torch.stack([-r, r]))


def test_losses_gradcheck_float64():
    adv = torch.randn(3, 1, dtype=F64)
    old = torch.randn(3, 4, dtype=F64)
    # ratios in [0.55, 0.75] or [1.3, 1.5]: well away from the clip boundaries 0.8 / 1.2 (kinks)
    offsets = torch.rand(3, 4, dtype=F64) * 0.2 + 0.55 + (torch.rand(3, 4) > 0.5) * 0.75
    log_probs = (old + offsets.log()).requires_grad_()
    assert torch.autograd.gradcheck(lambda lp: compute_grpo_clip_loss(adv, lp, old, 0.2)[0], (log_probs,))
    assert torch.autograd.gradcheck(lambda lp: compute_grpo_no_clip_loss(adv, lp, old)[0], (log_probs,))
    assert torch.autograd.gradcheck(lambda lp: compute_naive_policy_gradient_loss(adv, lp), (log_probs,))


def test_ratio_one_clip_matches_reinforce_gradient():
    adv = torch.tensor([[1.5], [-0.5]], dtype=F64)
    log_probs = torch.randn(2, 5, dtype=F64, requires_grad=True)
    clip_loss, stats = compute_grpo_clip_loss(adv, log_probs, log_probs.detach(), cliprange=0.2)
    clip_loss.sum().backward()
    clip_grad, log_probs.grad = log_probs.grad.clone(), None
    compute_naive_policy_gradient_loss(adv, log_probs).sum().backward()
    torch.testing.assert_close(clip_grad, log_probs.grad)  # both -A per token
    # Values differ by construction: ratio 1 gives -A, REINFORCE gives -A * log p.
    torch.testing.assert_close(clip_loss, -adv.expand(2, 5))
    assert not stats["clipped"].any()


def test_losses_keep_dtype_and_device():
    for device in ("cpu", "meta"):
        for dtype in (torch.bfloat16, torch.float32, F64):
            lp = torch.zeros(2, 3, dtype=dtype, device=device)
            adv = torch.ones(2, 1, dtype=dtype, device=device)
            outputs = [compute_naive_policy_gradient_loss(adv, lp), compute_grpo_clip_loss(adv, lp, lp, 0.2)[0],
                       compute_grpo_no_clip_loss(adv, lp, lp)[0]]
            assert all(o.dtype == dtype and o.device.type == device and o.shape == (2, 3) for o in outputs)


# --- compute_policy_gradient_loss --------------------------------------------------------------

def test_policy_gradient_loss_dispatch_and_errors():
    adv, log_probs, old = clip_example()
    raw = torch.tensor([[3.0], [0.0]], dtype=F64)
    cases = {
        "no_baseline": compute_naive_policy_gradient_loss(raw, log_probs),
        "reinforce_with_baseline": compute_naive_policy_gradient_loss(adv, log_probs),
        "grpo_clip": compute_grpo_clip_loss(adv, log_probs, old, 0.2)[0],
        "grpo_no_clip": compute_grpo_no_clip_loss(adv, log_probs, old)[0],
    }
    assert set(cases) == set(LOSS_TYPES)
    for loss_type, expected in cases.items():
        loss, _ = compute_policy_gradient_loss(log_probs, loss_type, raw_rewards=raw, advantages=adv,
                                               old_log_probs=old, cliprange=0.2)
        torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match="'no_baseline' needs raw_rewards"):
        compute_policy_gradient_loss(log_probs, "no_baseline", advantages=adv)
    with pytest.raises(ValueError, match="'grpo_clip' needs old_log_probs, cliprange"):
        compute_policy_gradient_loss(log_probs, "grpo_clip", advantages=adv)
    with pytest.raises(ValueError, match="choose one of no_baseline, reinforce_with_baseline, grpo_clip, grpo_no_clip"):
        compute_policy_gradient_loss(log_probs, "ppo", advantages=adv)


# --- grpo_microbatch_train_step ----------------------------------------------------------------

def test_microbatch_length_normalization_example():
    # Per-token loss 2 everywhere (reward 1, log p = -2), responses of 4 and 7 tokens.
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1] * 7])
    rewards = torch.ones(2, 1, dtype=F64)
    lp = torch.full((2, 7), -2.0, dtype=F64, requires_grad=True)
    loss, stats = grpo_microbatch_train_step(lp, mask, 1, "no_baseline", raw_rewards=rewards)
    torch.testing.assert_close(loss, torch.tensor(2.0, dtype=F64))  # mean of [2, 2]
    # d/dlogp = -R / (|o| * batch): -0.25 / 2 and -(1/7) / 2 per response token
    torch.testing.assert_close(lp.grad, -mask / torch.tensor([[4.0], [7.0]], dtype=F64) / 2)

    lp = torch.full((2, 7), -2.0, dtype=F64, requires_grad=True)
    loss, _ = grpo_microbatch_train_step(lp, mask, 1, "no_baseline", raw_rewards=rewards,
                                         length_normalization="constant", normalize_constant=7)
    torch.testing.assert_close(loss, torch.tensor((8 / 7 + 2.0) / 2, dtype=F64))  # mean of [1.1429, 2.0]
    torch.testing.assert_close(lp.grad, -mask.to(F64) / 7 / 2)


def test_microbatch_reinforce_closed_form_gradient_and_empty_row():
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])  # last response is empty
    lp = torch.randn(3, 4, dtype=F64, requires_grad=True)
    loss, stats = grpo_microbatch_train_step(lp, mask, 4, "reinforce_with_baseline", advantages=adv)
    lengths = mask.sum(-1, keepdim=True).clamp(min=1)
    per_seq = -(adv.view(3, 1) * lp.detach() * mask).sum(-1, keepdim=True) / lengths
    torch.testing.assert_close(loss, per_seq.mean() / 4)
    torch.testing.assert_close(stats["loss_unscaled"], per_seq.mean())
    # d loss / d logp = -A / (|o| * batch * accumulation steps) on response tokens, 0 elsewhere
    torch.testing.assert_close(lp.grad, -adv.view(3, 1) * mask / lengths / (3 * 4))
    assert torch.isfinite(loss) and not loss.requires_grad


def test_microbatch_grpo_clip_fraction_counts_response_tokens_only():
    adv, log_probs, old = clip_example()
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])  # the clipped token of row 2 is padding
    loss, stats = grpo_microbatch_train_step(log_probs, mask, 1, "grpo_clip", advantages=adv,
                                             old_log_probs=old, cliprange=0.2)
    torch.testing.assert_close(stats["clip_fraction"], torch.tensor(1 / 5))
    torch.testing.assert_close(loss, torch.tensor(((-0.5 - 1.0 - 1.2) / 3 + (1.0 + 1.5) / 2) / 2, dtype=F64))
    assert all(not v.requires_grad for v in stats.values())
    # gradient: -A r / (|o| * batch) on unclipped response tokens
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.5 / 6, -1.0 / 6, 0.0], [0.0, 0.25, 0.375]], dtype=F64))


def test_microbatch_gradcheck_float64_clip_with_masked_mean():
    adv = torch.randn(3, dtype=F64)
    old = torch.randn(3, 4, dtype=F64)
    log_probs = (old + torch.rand(3, 4, dtype=F64) * 0.3 - 0.15).requires_grad_()  # ratios inside (0.86, 1.16)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]])

    def step_gradient(lp):
        probe = lp.detach().clone().requires_grad_()
        grpo_microbatch_train_step(probe, mask, 2, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.3)
        return probe.grad

    # The step's own backward gives the same gradient as autograd on the composed loss.
    composed = lambda lp: masked_mean(compute_grpo_clip_loss(adv, lp, old, 0.3)[0], mask, dim=-1).mean() / 2
    assert torch.autograd.gradcheck(composed, (log_probs,))
    torch.testing.assert_close(step_gradient(log_probs), torch.autograd.grad(composed(log_probs), log_probs)[0])


def test_microbatch_errors():
    lp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.ones(2, 3)
    adv = torch.ones(2, 1)
    with pytest.raises(ValueError, match="needs normalize_constant"):
        grpo_microbatch_train_step(lp, mask, 1, "reinforce_with_baseline", advantages=adv,
                                   length_normalization="constant")
    with pytest.raises(ValueError, match="choose one of masked_mean, constant"):
        grpo_microbatch_train_step(lp, mask, 1, "reinforce_with_baseline", advantages=adv, length_normalization="seq")
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        grpo_microbatch_train_step(lp, mask, 0, "reinforce_with_baseline", advantages=adv)
