"""hw3lib.maths.grpo: hand-worked numbers, closed-form float64 gradients and edge cases."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from hw3lib import adapters
from hw3lib.maths.grpo import (LENGTH_NORMALIZATIONS, LOSS_INPUTS, LOSS_TYPES, RATIO_LOSSES, compute_grpo_clip_loss,
                         compute_grpo_no_clip_loss, compute_group_normalized_rewards,
                         compute_naive_policy_gradient_loss, compute_policy_gradient_loss, grpo_microbatch_train_step)
from hw3lib.maths.sft import masked_mean, masked_normalize

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
    # (the variants beyond the handouts: tests/maths/test_grpo_variants.py)
    assert set(cases) == set(LOSS_TYPES) - {"dapo_clip", "gspo", "cispo"}
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


def test_microbatch_reinforce_closed_form_gradient():
    """(An empty response makes this course function NaN, as the reference: see
    test_microbatch_all_responses_empty_follows_the_reference for the loop's guard.)"""
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 1, 0]])
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


def test_microbatch_gradcheck_float64_constant_normalization_and_empty_rows():
    raw = torch.randn(3, dtype=F64)
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 1, 1]])  # the second response is empty
    log_probs = torch.randn(3, 4, dtype=F64, requires_grad=True)

    def composed(lp, normalization):
        per_token = compute_naive_policy_gradient_loss(raw, lp)
        if normalization == "constant":
            return masked_normalize(per_token, mask, dim=-1, normalize_constant=6.0).mean() / 2
        per_sequence = masked_mean(per_token, mask, dim=-1)  # NaN on the empty row...
        return torch.where(mask.bool().any(-1), per_sequence, 0.0).mean() / 2  # ...which the step guards

    for normalization in ("masked_mean", "constant"):  # the handouts'; token_mean: tests/maths/test_grpo_variants.py
        assert torch.autograd.gradcheck(lambda lp: composed(lp, normalization), (log_probs,))
        probe = log_probs.detach().clone().requires_grad_()
        if normalization == "masked_mean":  # the course function itself: NaN, as the reference's 0/0
            loss, _ = grpo_microbatch_train_step(probe, mask, 2, "no_baseline", raw_rewards=raw)
            assert math.isnan(loss.item())
            continue
        loss, stats = grpo_microbatch_train_step(probe, mask, 2, "no_baseline", raw_rewards=raw,
                                                 length_normalization=normalization, normalize_constant=6.0)
        torch.testing.assert_close(loss, composed(log_probs, normalization).detach())
        torch.testing.assert_close(probe.grad, torch.autograd.grad(composed(log_probs, normalization), log_probs)[0])
        assert torch.isfinite(probe.grad).all() and not probe.grad[1].any()


def test_microbatch_all_responses_empty_follows_the_reference():
    """The course function gives the reference's NaN; the loop's own assembly gives 0 and no gradient."""
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.grpo.step import microbatch_loss

    adv, log_probs, old = clip_example()
    mask = torch.zeros(2, 3, dtype=torch.bool)
    loss, stats = grpo_microbatch_train_step(log_probs, mask, 1, "grpo_clip", advantages=adv,
                                             old_log_probs=old, cliprange=0.2)
    assert math.isnan(loss.item()) and stats["clip_fraction"].item() == 0.0
    probe = log_probs.detach().clone().requires_grad_()
    cfg = GRPOConfig(rollout_batch_size=2, group_size=2, train_batch_size=2, gradient_accumulation_steps=1,
                     loss_type="grpo_clip")
    guarded = microbatch_loss(probe, mask, cfg, raw_rewards=adv, advantages=adv, old_log_probs=old, tis_weights=None)
    guarded.backward()
    assert guarded.item() == 0.0 and torch.equal(probe.grad, torch.zeros_like(probe))


def test_loss_table_is_the_one_source():
    import hw3lib.grpo.config as train_config

    # the handouts' four, then the variants beyond them (DAPO, GSPO, CISPO)
    assert LOSS_TYPES == tuple(LOSS_INPUTS) == ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip",
                                                "dapo_clip", "gspo", "cispo")
    assert RATIO_LOSSES == ("grpo_clip", "grpo_no_clip", "dapo_clip", "gspo", "cispo")
    assert LENGTH_NORMALIZATIONS == ("masked_mean", "constant", "token_mean")
    # the config re-exports the very same objects instead of defining its own
    assert train_config.LOSS_TYPES is LOSS_TYPES and train_config.RATIO_LOSSES is RATIO_LOSSES
    assert train_config.LENGTH_NORMALIZATIONS is LENGTH_NORMALIZATIONS
    # every loss type accepts exactly the inputs its table row names, and needs each of them
    full = {"raw_rewards": torch.ones(2, 1), "advantages": torch.ones(2, 1), "old_log_probs": torch.zeros(2, 3),
            "cliprange": 0.2, "clip_low": 0.2, "clip_high": 0.28, "response_mask": torch.ones(2, 3)}
    for loss_type, inputs in LOSS_INPUTS.items():
        compute_policy_gradient_loss(torch.zeros(2, 3), loss_type, **{k: full[k] for k in inputs})
        for name in inputs:
            with pytest.raises(ValueError, match=f"needs {name}"):
                compute_policy_gradient_loss(torch.zeros(2, 3), loss_type,
                                             **{k: full[k] for k in inputs if k != name})


# --- the course's public tests (stanford-cs336/assignment5-alignment tests/test_grpo.py) --------------
# Same fixtures as the course's conftest.py and the same calls; the course compares against stored
# snapshots (np.testing.assert_allclose, NaN == NaN, rtol 1e-4 / atol 1e-2), not available offline,
# so each test compares against a straightforward reference written from the handout's definitions.

@pytest.fixture
def course_reward_fn():
    def dummy_reward_fn(response, ground_truth):
        reward = (int(hashlib.sha256(response.encode()).hexdigest(), 16) % 10) / 10.0
        return {"reward": reward, "format_reward": reward, "answer_reward": reward}

    return dummy_reward_fn


COURSE_RESPONSES = [f"hmm I think ths answer is {i}" for i in range(8)]
COURSE_TRUTHS = ["42"] * 8


@pytest.fixture
def course_raw_rewards():  # the course's raw_rewards_or_advantages / raw_rewards
    torch.manual_seed(42)
    return torch.rand(size=(2, 1))


@pytest.fixture
def course_advantages(course_raw_rewards):
    return course_raw_rewards - torch.mean(course_raw_rewards, dim=0)


@pytest.fixture
def course_policy_log_probs():
    torch.manual_seed(42)
    return torch.randn(size=(2, 10))


@pytest.fixture
def course_old_log_probs(course_policy_log_probs):
    torch.manual_seed(42)
    return course_policy_log_probs + torch.randn_like(course_policy_log_probs)


@pytest.fixture
def course_tensor_and_mask():
    torch.manual_seed(42)
    tensor = torch.randn(size=(2, 10, 100))
    torch.manual_seed(42)
    return tensor, torch.rand_like(tensor) > 0.5


@pytest.fixture
def course_response_mask(course_policy_log_probs):
    torch.manual_seed(42)
    return torch.rand_like(course_policy_log_probs) > 0.5


def reference_group_normalized(rewards, group_size, advantage_eps, normalize_by_std):
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / group_size
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (group_size - 1))  # unbiased, as torch.std
        out += [(r - mean) / (std + advantage_eps) if normalize_by_std else r - mean for r in group]
    return torch.tensor(out)


def reference_masked_mean(tensor, mask, dim=None):
    return torch.sum(tensor * mask, dim=dim) / torch.sum(mask, dim=dim)  # 0/0 = NaN on an empty slice


def reference_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange):
    ratio = torch.exp(policy_log_probs - old_log_probs)
    return -torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * advantages)


def reference_grpo_step_loss(policy_log_probs, response_mask, gradient_accumulation_steps, advantages, old_log_probs,
                             cliprange):
    per_token = reference_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    return reference_masked_mean(per_token, response_mask, dim=-1).mean() / gradient_accumulation_steps


def check_group_normalized_rewards(reward_fn, normalize_by_std):
    normalized, raw, metadata = adapters.run_compute_group_normalized_rewards(
        reward_fn=reward_fn, rollout_responses=COURSE_RESPONSES, repeated_ground_truths=COURSE_TRUTHS,
        group_size=4, advantage_eps=1e-6, normalize_by_std=normalize_by_std)
    # hand-worked: the sha256 rewards, group means 0.275 and 0.45
    assert raw.tolist() == pytest.approx([0.2, 0.5, 0.0, 0.4, 0.9, 0.7, 0.2, 0.0])
    centred = [-0.075, 0.225, -0.275, 0.125, 0.45, 0.25, -0.25, -0.45]
    stds = [math.sqrt(0.1475 / 3)] * 4 + [math.sqrt(0.53 / 3)] * 4  # unbiased group stds
    hand = [c / (s + 1e-6) if normalize_by_std else c for c, s in zip(centred, stds)]
    assert normalized.tolist() == pytest.approx(hand, rel=1e-5, abs=1e-6)
    expected = reference_group_normalized([reward_fn(r, t)["reward"] for r, t in
                                           zip(COURSE_RESPONSES, COURSE_TRUTHS)], 4, 1e-6, normalize_by_std)
    torch.testing.assert_close(normalized, expected)
    assert normalized.shape == raw.shape == (8,) and normalized.dtype == raw.dtype == torch.float32
    assert isinstance(metadata, dict)


def test_compute_group_normalized_rewards_normalize_by_std(course_reward_fn):
    check_group_normalized_rewards(course_reward_fn, normalize_by_std=True)


def test_compute_group_normalized_rewards_no_normalize_by_std(course_reward_fn):
    check_group_normalized_rewards(course_reward_fn, normalize_by_std=False)


def test_compute_naive_policy_gradient_loss(course_raw_rewards, course_policy_log_probs):
    output = adapters.run_compute_naive_policy_gradient_loss(raw_rewards_or_advantages=course_raw_rewards,
                                                             policy_log_probs=course_policy_log_probs)
    torch.testing.assert_close(output, -course_raw_rewards * course_policy_log_probs)


def check_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange):
    output, metadata = adapters.run_compute_grpo_clip_loss(advantages=advantages, policy_log_probs=policy_log_probs,
                                                           old_log_probs=old_log_probs, cliprange=cliprange)
    torch.testing.assert_close(output, reference_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange))
    assert isinstance(metadata, dict)
    return output, metadata


def test_compute_grpo_clip_loss_large_cliprange(course_advantages, course_policy_log_probs, course_old_log_probs):
    output, metadata = check_grpo_clip_loss(course_advantages, course_policy_log_probs, course_old_log_probs, 10.0)
    ratio = torch.exp(course_policy_log_probs - course_old_log_probs)  # never clipped: the plain -r A
    torch.testing.assert_close(output, -ratio * course_advantages)
    assert not metadata["clipped"].any()


def test_compute_grpo_clip_loss_small_cliprange(course_advantages, course_policy_log_probs, course_old_log_probs):
    _, metadata = check_grpo_clip_loss(course_advantages, course_policy_log_probs, course_old_log_probs, 0.1)
    assert metadata["clipped"].any()  # ratios of e^N(0,1) leave [0.9, 1.1] for most tokens


def check_policy_gradient_loss(loss_type, raw_rewards, advantages, policy_log_probs, old_log_probs):
    output, metadata = adapters.run_compute_policy_gradient_loss(
        policy_log_probs=policy_log_probs, loss_type=loss_type, raw_rewards=raw_rewards,
        advantages=advantages, old_log_probs=old_log_probs, cliprange=0.5)
    expected = {
        "no_baseline": lambda: -raw_rewards * policy_log_probs,
        "reinforce_with_baseline": lambda: -advantages * policy_log_probs,
        "grpo_clip": lambda: reference_clip_loss(advantages, policy_log_probs, old_log_probs, 0.5),
    }[loss_type]()
    torch.testing.assert_close(output, expected)
    assert isinstance(metadata, dict)


def test_compute_policy_gradient_loss_no_baseline(course_raw_rewards, course_advantages, course_policy_log_probs,
                                                  course_old_log_probs):
    check_policy_gradient_loss("no_baseline", course_raw_rewards, course_advantages, course_policy_log_probs,
                               course_old_log_probs)


def test_compute_policy_gradient_loss_reinforce_with_baseline(course_raw_rewards, course_advantages,
                                                              course_policy_log_probs, course_old_log_probs):
    check_policy_gradient_loss("reinforce_with_baseline", course_raw_rewards, course_advantages,
                               course_policy_log_probs, course_old_log_probs)


def test_compute_policy_gradient_loss_grpo_clip(course_raw_rewards, course_advantages, course_policy_log_probs,
                                                course_old_log_probs):
    check_policy_gradient_loss("grpo_clip", course_raw_rewards, course_advantages, course_policy_log_probs,
                               course_old_log_probs)


def check_masked_mean(tensor, mask, dim):
    output = adapters.run_masked_mean(tensor=tensor, mask=mask) if dim == "none" else adapters.run_masked_mean(
        tensor=tensor, mask=mask, dim=dim)
    expected = reference_masked_mean(tensor, mask, None if dim == "none" else dim)
    assert output.shape == expected.shape
    torch.testing.assert_close(output, expected, equal_nan=True)
    # dim 0 averages pairs, and 260 of the 1000 pairs are both masked: NaN there, as in the course's snapshot
    assert int(output.isnan().sum()) == (260 if dim == 0 else 0)


def test_masked_mean_dim0(course_tensor_and_mask):
    check_masked_mean(*course_tensor_and_mask, dim=0)


def test_masked_mean_dim1(course_tensor_and_mask):
    check_masked_mean(*course_tensor_and_mask, dim=1)


def test_masked_mean_dimlast(course_tensor_and_mask):
    check_masked_mean(*course_tensor_and_mask, dim=-1)


def test_masked_mean_dimNone(course_tensor_and_mask):
    check_masked_mean(*course_tensor_and_mask, dim="none")


def course_grpo_step(policy_log_probs, response_mask, raw_rewards, advantages, old_log_probs):
    return adapters.run_grpo_microbatch_train_step(
        policy_log_probs=policy_log_probs, response_mask=response_mask, gradient_accumulation_steps=2,
        loss_type="grpo_clip", raw_rewards=raw_rewards, advantages=advantages, old_log_probs=old_log_probs,
        cliprange=0.1)


def test_grpo_microbatch_train_step_grpo_clip(course_policy_log_probs, course_response_mask, course_raw_rewards,
                                              course_advantages, course_old_log_probs):
    policy_log_probs = course_policy_log_probs.clone().requires_grad_()
    loss, metadata = course_grpo_step(policy_log_probs, course_response_mask, course_raw_rewards, course_advantages,
                                      course_old_log_probs)
    expected_lp = course_policy_log_probs.clone().requires_grad_()
    expected = reference_grpo_step_loss(expected_lp, course_response_mask, 2, course_advantages,
                                        course_old_log_probs, 0.1)
    expected.backward()
    torch.testing.assert_close(loss, expected.detach())  # the scaled loss is returned
    torch.testing.assert_close(policy_log_probs.grad, expected_lp.grad)
    # the response lengths differ (6 and 8), so a token-level mean over the batch would differ
    assert course_response_mask.sum(-1).tolist() == [6, 8]
    token_mean = reference_masked_mean(reference_clip_loss(course_advantages, course_policy_log_probs,
                                                           course_old_log_probs, 0.1), course_response_mask) / 2
    assert not torch.allclose(loss, token_mean)
    assert isinstance(metadata, dict)


def test_grpo_microbatch_train_step_grpo_clip_10_steps(course_policy_log_probs, course_response_mask,
                                                       course_raw_rewards, course_advantages, course_old_log_probs):
    policy_log_probs = course_policy_log_probs.clone().requires_grad_()
    losses, grads = [], []
    for _ in range(10):  # as the course: .grad accumulates in place, so every entry is the final sum
        loss, _ = course_grpo_step(policy_log_probs, course_response_mask, course_raw_rewards, course_advantages,
                                   course_old_log_probs)
        losses.append(loss)
        grads.append(policy_log_probs.grad)
    expected_lp = course_policy_log_probs.clone().requires_grad_()
    expected = reference_grpo_step_loss(expected_lp, course_response_mask, 2, course_advantages,
                                        course_old_log_probs, 0.1)
    for _ in range(10):
        expected.backward(retain_graph=True)
    torch.testing.assert_close(torch.stack(losses), expected.detach().expand(10))
    torch.testing.assert_close(torch.stack(grads), expected_lp.grad.expand(10, 2, 10))


def test_grpo_adapter_constant_normalizer_spellings(course_policy_log_probs, course_response_mask, course_advantages):
    """Dr. GRPO through the adapter: the masked sum / the constant, under either of the handouts' names."""
    results = []
    for keyword in ("constant_normalize_factor", "constant_normalizer"):
        lp = course_policy_log_probs.clone().requires_grad_()
        loss, _ = adapters.run_grpo_microbatch_train_step(lp, course_response_mask, 2, "reinforce_with_baseline",
                                                          advantages=course_advantages, **{keyword: 10.0})
        results.append((loss, lp.grad))
    # hand-worked gradient: -A_i * mask / (10 * batch 2 * accumulation 2)
    expected_grad = -course_advantages * course_response_mask.float() / 40
    for loss, grad in results:
        torch.testing.assert_close(grad, expected_grad)
        torch.testing.assert_close(loss, (-course_advantages * course_policy_log_probs * course_response_mask)
                                   .sum(-1).mean() / 20)
    with pytest.raises(TypeError, match="once"):
        adapters.run_grpo_microbatch_train_step(course_policy_log_probs.clone().requires_grad_(),
                                                course_response_mask, 1, "reinforce_with_baseline",
                                                advantages=course_advantages, constant_normalize_factor=1.0,
                                                constant_normalizer=2.0)
