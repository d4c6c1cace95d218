"""hw3lib.maths.grpo beyond the handouts: DAPO clip-higher and token-level mean, GSPO, CISPO and
masked importance sampling (MIS) -- hand-worked numbers, float64 gradient checks and edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from hw3lib.maths.grpo import (CLIP_LOSSES, LENGTH_NORMALIZATIONS, LOSS_INPUTS, MIS_LEVELS, RATIO_LOSSES,
                               compute_cispo_loss, compute_dapo_clip_loss, compute_grpo_clip_loss, compute_gspo_loss,
                               compute_naive_policy_gradient_loss, compute_policy_gradient_loss,
                               grpo_microbatch_train_step, mismatch_keep_mask, token_mean_loss)
from hw3lib.maths.sft import masked_mean, masked_mean_or_zero, masked_normalize

F64 = torch.float64


def clip_example():
    """Ratios 0.5, 1, 1.5 for a positive and a negative advantage (as tests/test_grpo.py's)."""
    adv = torch.tensor([[1.0], [-1.0]], dtype=F64)
    old = torch.tensor([[-1.0, -2.0, -0.7]] * 2, dtype=F64)
    log_probs = (old + torch.log(torch.tensor([0.5, 1.0, 1.5], dtype=F64))).requires_grad_()
    return adv, log_probs, old


def test_the_loss_table_has_the_variants():
    assert {"dapo_clip", "gspo", "cispo"} <= set(LOSS_INPUTS)
    assert {"dapo_clip", "gspo", "cispo"} <= set(RATIO_LOSSES)  # all need the sampling policy's log-probs
    assert set(CLIP_LOSSES) == {"grpo_clip", "dapo_clip", "gspo", "cispo"}
    assert "token_mean" in LENGTH_NORMALIZATIONS and MIS_LEVELS == ("token", "sequence")
    # the handouts' rows are unchanged
    assert LOSS_INPUTS["grpo_clip"] == ("advantages", "old_log_probs", "cliprange")
    assert LOSS_INPUTS["no_baseline"] == ("raw_rewards",)


# --- DAPO: clip-higher ------------------------------------------------------------------------------------

def test_dapo_clip_higher_hand_worked_and_gradients():
    adv, log_probs, old = clip_example()
    loss, stats = compute_dapo_clip_loss(adv, log_probs, old, clip_low=0.2, clip_high=0.6)
    # trust region [0.8, 1.6]. A=+1: min(r, clip(r)) = [.5, 1, 1.5] -- the ratio 1.5 is no longer cut
    # (grpo_clip at 0.2 clips it to 1.2); A=-1: min(-r, -clip(r)) = [-.8, -1, -1.5]
    torch.testing.assert_close(loss, torch.tensor([[-0.5, -1.0, -1.5], [0.8, 1.0, 1.5]], dtype=F64))
    assert stats["clipped"].tolist() == [[False, False, False], [True, False, False]]
    torch.testing.assert_close(stats["clip_fraction"], torch.tensor(1 / 6))
    loss.sum().backward()
    # d(-r A)/d logp = -A r where unclipped: the good, unlikely-before token (A=+1, r=1.5) still learns
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.5, -1.0, -1.5], [0.0, 1.0, 1.5]], dtype=F64))


def test_dapo_clip_with_equal_widths_is_grpo_clip():
    adv, log_probs, old = clip_example()
    for width in (0.1, 0.2, 0.6):
        dapo, dapo_stats = compute_dapo_clip_loss(adv, log_probs, old, width, width)
        grpo, grpo_stats = compute_grpo_clip_loss(adv, log_probs, old, width)
        torch.testing.assert_close(dapo, grpo)
        assert torch.equal(dapo_stats["clipped"], grpo_stats["clipped"])


# --- DAPO: token-level mean over the optimizer step --------------------------------------------------------

def test_token_mean_loss_hand_worked():
    per_token = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # this microbatch holds 3 of the step's 5 response tokens: (1 + 2 + 3) / 5
    loss = token_mean_loss(per_token, mask, 5)
    torch.testing.assert_close(loss, torch.tensor(1.2, dtype=F64))
    loss.backward()
    torch.testing.assert_close(per_token.grad, mask.to(F64) / 5)  # every token weighs 1/5, padding 0
    assert torch.autograd.gradcheck(lambda x: token_mean_loss(x, mask, 5.0), (per_token.detach().requires_grad_(),))


def test_token_mean_differs_from_masked_mean_by_weighing_tokens_not_sequences():
    """Sequences of 1 and 3 tokens with per-token losses 4 and 0: masked_mean gives (4 + 0) / 2 = 2,
    token_mean (4 + 0 + 0 + 0) / 4 = 1 -- long responses count by their tokens."""
    per_token = torch.tensor([[4.0, 0, 0], [0.0, 0, 0]], dtype=F64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    assert masked_mean(per_token, mask, dim=-1).mean().item() == 2.0
    assert token_mean_loss(per_token, mask, mask.sum()).item() == 1.0


def test_course_step_token_mean_split_into_microbatches_sums_to_the_full_batch():
    """grpo_microbatch_train_step with token_mean and the step's token count: the gradients of 1, 2
    and 4 microbatches of one batch of 4 responses of lengths 1..4 agree (float64, within 1e-12)."""
    adv = torch.tensor([1.0, -2.0, 0.5, 1.5], dtype=F64)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    old = torch.randn(4, 4, dtype=F64)
    log_probs = old + 0.1 * torch.randn(4, 4, dtype=F64)
    total = int(mask.sum())
    grads = []
    for n_micro in (1, 2, 4):
        probe = log_probs.clone().requires_grad_()
        size = 4 // n_micro
        for start in range(0, 4, size):
            rows = slice(start, start + size)
            grpo_microbatch_train_step(probe[rows], mask[rows], n_micro, "dapo_clip", advantages=adv[rows],
                                       old_log_probs=old[rows], length_normalization="token_mean",
                                       clip_low=0.2, clip_high=0.28, total_response_tokens=total)
        grads.append(probe.grad)
    for grad in grads[1:]:
        torch.testing.assert_close(grad, grads[0], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="needs total_response_tokens"):
        grpo_microbatch_train_step(log_probs.clone().requires_grad_(), mask, 1, "reinforce_with_baseline",
                                   advantages=adv, length_normalization="token_mean")


# --- GSPO --------------------------------------------------------------------------------------------------

def gspo_example():
    """Three responses: token ratios (2, 1) -> s = sqrt(2); (0.6, 0.6) + padding -> s = 0.6; (4, 1) -> s = 2."""
    adv = torch.tensor([[1.0], [-1.0], [1.0]], dtype=F64)
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.0], [-2.0, -0.1, -1.0]], dtype=F64)
    ratios = torch.tensor([[2.0, 1.0, 1.0], [0.6, 0.6, 7.0], [4.0, 1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0]])
    log_probs = (old + ratios.log()).requires_grad_()
    return adv, log_probs, old, mask


def test_gspo_hand_worked_and_gradients():
    adv, log_probs, old, mask = gspo_example()
    loss, stats = compute_gspo_loss(adv, log_probs, old, mask, clip_low=0.5, clip_high=0.5)
    torch.testing.assert_close(stats["sequence_ratio"], torch.tensor([math.sqrt(2), 0.6, 2.0], dtype=F64))
    # trust region [0.5, 1.5]: A=+1, s=1.414 -> -1.414; A=-1, s=0.6 -> +0.6; A=+1, s=2 -> clipped, -1.5.
    # (A padded token's ratio of 7 does not count.) Every token carries its sequence's value.
    per_sequence = masked_mean(loss, mask, dim=-1)
    torch.testing.assert_close(per_sequence, torch.tensor([-math.sqrt(2), 0.6, -1.5], dtype=F64))
    assert stats["clipped"].tolist() == [[False] * 3, [False] * 3, [True] * 3]
    per_sequence.sum().backward()
    # d(-s A)/d logp_t = -A s / |o| on each response token; the clipped sequence gets nothing at all
    expected = torch.tensor([[-math.sqrt(2) / 2] * 2 + [0.0], [0.3, 0.3, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(log_probs.grad, expected)


def test_gspo_clips_whole_sequences_where_token_clipping_would_not():
    """Response 3's tokens have ratios 4 and 1: grpo_clip cuts only the first token's gradient, GSPO
    (sequence ratio 2, outside [0.5, 1.5]) both."""
    adv, log_probs, old, mask = gspo_example()
    _, token_stats = compute_grpo_clip_loss(adv, log_probs, old, 0.5)
    _, seq_stats = compute_gspo_loss(adv, log_probs, old, mask, 0.5, 0.5)
    assert token_stats["clipped"][2, :2].tolist() == [True, False]
    assert seq_stats["clipped"][2, :2].tolist() == [True, True]


def test_gspo_empty_response_has_ratio_one_and_no_gradient():
    adv = torch.tensor([[2.0]], dtype=F64)
    log_probs = torch.tensor([[-1.0, -3.0]], dtype=F64, requires_grad=True)
    loss, stats = compute_gspo_loss(adv, log_probs, torch.zeros(1, 2, dtype=F64), torch.zeros(1, 2), 0.2, 0.2)
    assert stats["sequence_ratio"].item() == 1.0 and torch.isfinite(loss).all()
    summed = masked_normalize(loss, torch.zeros(1, 2), dim=-1)  # what the loop sums for a response
    summed.sum().backward()
    assert summed.item() == 0.0 and torch.equal(log_probs.grad, torch.zeros_like(log_probs))


# --- CISPO -------------------------------------------------------------------------------------------------

def test_cispo_hand_worked_and_gradients():
    adv, log_probs, old = clip_example()
    loss, stats = compute_cispo_loss(adv, log_probs, old, clip_low=0.2, clip_high=0.2)
    # weights clip(r, 0.8, 1.2) = [0.8, 1, 1.2], constants; loss -w A log p
    w = torch.tensor([0.8, 1.0, 1.2], dtype=F64)
    lp = log_probs.detach()
    torch.testing.assert_close(loss, torch.stack([-w * lp[0], w * lp[1]]))
    assert stats["clipped"].tolist() == [[True, False, True]] * 2
    loss.sum().backward()
    # gradient -w A on EVERY token, the clipped ones included (grpo_clip gives 0 on [0, 2] and [1, 0])
    torch.testing.assert_close(log_probs.grad, torch.stack([-w, w]))


def test_cispo_without_lower_bound_keeps_small_ratios():
    adv, log_probs, old = clip_example()
    _, stats = compute_cispo_loss(adv, log_probs, old, clip_low=1.0, clip_high=0.28)  # weights clip(r, 0, 1.28)
    assert stats["clipped"].tolist() == [[False, False, True]] * 2


# --- float64 gradient checks --------------------------------------------------------------------------------

def ratios_away_from(boundaries, shape, seed=0):
    """Log-ratios whose ratios stay >= 0.05 away from each boundary (the kinks of the clipped losses)."""
    gen = torch.Generator().manual_seed(seed)
    ratio = torch.rand(shape, generator=gen, dtype=F64) * 1.2 + 0.4  # (0.4, 1.6)
    for b in boundaries:
        near = (ratio - b).abs() < 0.05
        ratio = torch.where(near, ratio + 0.1, ratio)
    return ratio.log()


def test_variants_gradcheck_float64():
    gen = torch.Generator().manual_seed(1)
    adv = torch.randn(3, 1, generator=gen, dtype=F64)
    old = torch.randn(3, 4, generator=gen, dtype=F64)
    log_probs = (old + ratios_away_from((0.8, 1.28), (3, 4))).requires_grad_()
    assert torch.autograd.gradcheck(lambda lp: compute_dapo_clip_loss(adv, lp, old, 0.2, 0.28)[0], (log_probs,))
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])  # padding and an empty response
    target = torch.tensor([[0.6], [1.4], [1.0]], dtype=F64)  # sequence ratios well inside / outside [0.8, 1.2]
    noise = torch.randn(3, 4, generator=gen, dtype=F64) * 0.1 * mask
    noise = noise - noise.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1) * mask  # zero mean
    gspo_lp = (old + target.log() + noise).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda lp: masked_mean_or_zero(compute_gspo_loss(adv, lp, old, mask, 0.2, 0.2)[0], mask, dim=-1), (gspo_lp,))
    # CISPO: the weight is a constant of the step. Holding the ratio fixed under perturbation (old moves
    # with log p) makes the numerical gradient the stop-gradient one: -w A. A weight that leaked a
    # gradient would fail this check.
    offsets = ratios_away_from((0.8, 1.2), (3, 4), seed=2)
    assert torch.autograd.gradcheck(
        lambda lp: compute_cispo_loss(adv, lp, lp.detach() - offsets, 0.2, 0.2)[0], (log_probs,))
    per_token = torch.randn(3, 4, generator=gen, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: token_mean_loss(x, mask, 11.0), (per_token,))


def test_cispo_gradient_is_the_weighted_reinforce_gradient():
    adv, log_probs, old = clip_example()
    loss, _ = compute_cispo_loss(adv, log_probs, old, 0.2, 0.2)
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    weights = torch.exp(log_probs.detach() - old).clamp(0.8, 1.2)
    (reinforce,) = torch.autograd.grad((compute_naive_policy_gradient_loss(adv, log_probs) * weights).sum(), log_probs)
    torch.testing.assert_close(grad, reinforce)


# --- the dispatcher -----------------------------------------------------------------------------------------

def test_policy_gradient_loss_dispatches_the_variants_and_names_missing_inputs():
    adv, log_probs, old = clip_example()
    mask = torch.ones(2, 3)
    cases = {
        "dapo_clip": compute_dapo_clip_loss(adv, log_probs, old, 0.2, 0.28)[0],
        "gspo": compute_gspo_loss(adv, log_probs, old, mask, 0.2, 0.28)[0],
        "cispo": compute_cispo_loss(adv, log_probs, old, 0.2, 0.28)[0],
    }
    for loss_type, expected in cases.items():
        loss, stats = compute_policy_gradient_loss(log_probs, loss_type, advantages=adv, old_log_probs=old,
                                                   clip_low=0.2, clip_high=0.28, response_mask=mask)
        torch.testing.assert_close(loss, expected)
        assert "clipped" in stats
    with pytest.raises(ValueError, match="'dapo_clip' needs clip_low, clip_high"):
        compute_policy_gradient_loss(log_probs, "dapo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    with pytest.raises(ValueError, match="'gspo' needs response_mask"):
        compute_policy_gradient_loss(log_probs, "gspo", advantages=adv, old_log_probs=old, clip_low=0.2,
                                     clip_high=0.2)
    # the course's positional call is unchanged
    loss, _ = compute_policy_gradient_loss(log_probs, "grpo_clip", None, adv, old, 0.2)
    torch.testing.assert_close(loss, compute_grpo_clip_loss(adv, log_probs, old, 0.2)[0])


# --- masked importance sampling -----------------------------------------------------------------------------

def test_mismatch_keep_mask_hand_worked():
    engine = torch.zeros(2, 4, dtype=F64)
    # trainer/engine ratios: row 1 (1, 3, 0.4, 1.9); row 2 (1.5, 1.5, 1.5, padding 100)
    ratios = torch.tensor([[1.0, 3.0, 0.4, 1.9], [1.5, 1.5, 1.5, 100.0]], dtype=F64)
    trainer = ratios.log()
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    token = mismatch_keep_mask(trainer, engine, mask, "token", 0.5, 2.0)
    assert token.tolist() == [[True, False, False, True], [True, True, True, False]]
    # sequence ratios: row 1: 1 * 3 * 0.4 * 1.9 = 2.28 > 2 -> dropped whole; row 2: 1.5^3 = 3.375 -> dropped
    sequence = mismatch_keep_mask(trainer, engine, mask, "sequence", 0.5, 2.0)
    assert not sequence.any()
    sequence = mismatch_keep_mask(trainer, engine, mask, "sequence", 0.5, 3.0)
    assert sequence.tolist() == [[True] * 4, [False] * 4]  # 2.28 kept (its padding excepted), 3.375 not
    assert mismatch_keep_mask(trainer, engine, mask, "token", 0.0, 200.0).tolist() == mask.bool().tolist()
    with pytest.raises(ValueError, match="choose one of token, sequence"):
        mismatch_keep_mask(trainer, engine, mask, "geometric", 0.5, 2.0)
