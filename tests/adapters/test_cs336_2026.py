"""CS336 Spring 2026 (handout v26) through hw3lib.adapters_cs336_2026: hand-worked numbers, float64 gradient
checks, edge cases, and train steps checked against a whole-batch reference.

Test names starting `test_<public name>` mirror the course's public tests (its tests/test_grpo.py,
test_data.py, test_dpo.py, test_metrics.py); theirs compare against snapshot files we do not have, so
ours check hand-worked values and properties instead. The public tests' calling conventions (keyword
arguments, fixtures' shapes, a one-line tests/adapters.py) are exercised by
`test_a_one_line_adapters_file_serves_the_course_test_layout`.
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import math
import random
import re
from pathlib import Path

import pytest
import torch

from hw3lib import adapters_cs336_2026 as course
from hw3lib.maths import grpo_2026

F64 = torch.float64
STUB = Path(__file__).resolve().parents[3] / "shared" / "course_apis" / "cs336_2026" / "adapters_stub.py"

# The stub's functions: positional-or-keyword parameters in order, and their defaults.
STUB_PARAMETERS = {
    "run_tokenize_prompt_and_output": ["prompt_strs", "output_strs", "tokenizer"],
    "run_get_response_log_probs": ["model", "input_ids", "labels", "return_token_entropy"],
    "run_compute_rollout_rewards": ["reward_fn", "rollout_responses", "repeated_ground_truths"],
    "run_compute_group_normalized_rewards": ["raw_rewards", "group_size", "baseline", "advantage_eps",
                                             "advantage_normalizer"],
    "run_compute_policy_gradient_loss": ["raw_rewards_or_advantages", "policy_log_probs",
                                         "importance_reweighting_method", "old_log_probs", "cliprange",
                                         "response_mask"],
    "run_aggregate_loss_across_microbatch": ["per_token_policy_gradient_loss", "mask", "loss_normalization",
                                             "normalization_constant"],
    "run_grpo_train_step": ["model", "tokenizer", "optimizer", "gradient_accumulation_steps", "max_grad_norm",
                            "reward_fn", "repeated_prompts", "rollout_responses", "repeated_ground_truths",
                            "group_size", "baseline", "advantage_eps", "advantage_normalizer",
                            "importance_reweighting_method", "old_log_probs", "cliprange", "loss_normalization",
                            "normalization_constant"],
    "get_packed_sft_dataset": ["tokenizer", "dataset_path", "seq_length", "shuffle"],
    "run_iterate_batches": ["dataset", "batch_size", "shuffle"],
    "run_parse_mmlu_response": ["mmlu_example", "model_output"],
    "run_parse_gsm8k_response": ["model_output"],
    "run_compute_per_instance_dpo_loss": ["lm", "lm_ref", "tokenizer", "beta", "prompt", "response_chosen",
                                          "response_rejected"],
}
STUB_DEFAULTS = {
    "run_compute_group_normalized_rewards": {"baseline": "mean", "advantage_eps": 1e-6, "advantage_normalizer": "std"},
    "run_compute_policy_gradient_loss": {"importance_reweighting_method": "none", "old_log_probs": None,
                                         "cliprange": None, "response_mask": None},
    "run_aggregate_loss_across_microbatch": {"loss_normalization": "sequence", "normalization_constant": None},
    "run_grpo_train_step": {"baseline": "mean", "advantage_eps": 1e-6, "advantage_normalizer": "std",
                            "importance_reweighting_method": "none", "old_log_probs": None, "cliprange": None,
                            "loss_normalization": "sequence", "normalization_constant": None},
}


def _signature(function) -> tuple[list[str], dict]:
    parameters = inspect.signature(function).parameters.values()
    names = [p.name for p in parameters]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters), function.__name__
    return names, {p.name: p.default for p in parameters if p.default is not p.empty}


def test_every_stub_function_is_served_with_the_stubs_signature():
    assert sorted(course.__all__) == sorted(STUB_PARAMETERS)
    for name, expected in STUB_PARAMETERS.items():
        names, defaults = _signature(getattr(course, name))
        assert names == expected, name
        assert defaults == STUB_DEFAULTS.get(name, {}), name


def test_the_table_above_is_the_course_stub():
    """The stub file itself (../shared/course_apis) names the same functions, arguments and defaults."""
    tree = ast.parse(STUB.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            args = node.args.args
            defaults = dict(zip([a.arg for a in args[len(args) - len(node.args.defaults):]],
                                [ast.literal_eval(d) for d in node.args.defaults]))
            found[node.name] = ([a.arg for a in args], defaults)
    assert {name: params for name, (params, _) in found.items()} == STUB_PARAMETERS
    assert {name: d for name, (_, d) in found.items() if d} == STUB_DEFAULTS


# --- rewards and advantages ---------------------------------------------------------------------

def _graded(response: str, ground_truth: str) -> dict[str, float]:
    answer = float(response.endswith(ground_truth))
    return {"reward": answer * 0.75 + 0.25 * response.startswith("<think>"), "format_reward":
            float(response.startswith("<think>")), "answer_reward": answer}


def test_compute_rollout_rewards():
    responses = ["<think> 42", "<think> 41", "42", "x"]
    rewards, meta = course.run_compute_rollout_rewards(reward_fn=_graded, rollout_responses=responses,
                                                       repeated_ground_truths=["42"] * 4)
    # rewards: 0.75 + 0.25, 0 + 0.25, 0.75 + 0, 0 -> [1, 0.25, 0.75, 0]
    assert rewards.dtype == torch.float32 and rewards.tolist() == [1.0, 0.25, 0.75, 0.0]
    assert meta["reward_mean"] == 0.5 and meta["format_reward_mean"] == 0.5 and meta["answer_reward_mean"] == 0.5
    assert (meta["reward_min"], meta["reward_max"]) == (0.0, 1.0)
    assert meta["reward_std"] == pytest.approx(math.sqrt((0.25 + 0.0625 + 0.0625 + 0.25) / 3))
    with pytest.raises(ValueError, match="repeated_ground_truths has 3"):
        course.run_compute_rollout_rewards(_graded, responses, ["42"] * 3)


def test_compute_group_normalized_rewards_grpo():
    advantages, meta = course.run_compute_group_normalized_rewards(
        raw_rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, baseline="mean", advantage_eps=1e-6,
        advantage_normalizer="std")
    # each group: mean 0.5, unbiased std sqrt(0.5) = 0.70710678; 0.5 / (0.70710678 + 1e-6) = 0.70710578
    torch.testing.assert_close(advantages, torch.tensor([0.70710578, -0.70710578, -0.70710578, 0.70710578]))
    assert meta["reward_mean"] == 0.5 and meta["frac_groups_all_equal"] == 0.0


def test_compute_group_normalized_rewards_drgrpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    centred, _ = course.run_compute_group_normalized_rewards(raw_rewards=rewards, group_size=2, baseline="mean",
                                                             advantage_normalizer="none")
    raw, _ = course.run_compute_group_normalized_rewards(raw_rewards=rewards, group_size=2, baseline="none",
                                                         advantage_normalizer="none")
    assert centred.tolist() == [0.5, -0.5, -0.5, 0.5]  # Dr. GRPO: r - mean
    assert raw.tolist() == [1.0, 0.0, 0.0, 1.0]  # RFT: the reward itself


def test_compute_group_normalized_rewards_maxrl():
    advantages, _ = course.run_compute_group_normalized_rewards(
        raw_rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, baseline="mean", advantage_normalizer="mean")
    # (1 - 0.5) / (0.5 + 1e-6) = 0.999998
    torch.testing.assert_close(advantages, torch.tensor([0.999998, -0.999998, -0.999998, 0.999998]))
    # one success in four: p = 0.25; (1 - p) / p = 3, (0 - p) / p = -1 (eps 0: exact); a hard question's
    # success weighs 3 where GRPO's std scaling gives sqrt(3) = 1.732 (0.75 / 0.433)
    advantages, _ = course.run_compute_group_normalized_rewards(torch.tensor([0.0, 1.0, 0.0, 0.0]), 4, "mean", 0.0,
                                                                "mean")
    assert advantages.tolist() == [-1.0, 3.0, -1.0, -1.0]
    # no baseline, divided by the mean: r / p
    advantages, _ = course.run_compute_group_normalized_rewards(torch.tensor([0.0, 1.0, 0.0, 0.0]), 4, "none", 0.0,
                                                                "mean")
    assert advantages.tolist() == [0.0, 4.0, 0.0, 0.0]


@pytest.mark.parametrize("normalizer", ["std", "none", "mean"])
@pytest.mark.parametrize("value", [0.0, 0.3, 1.0])
def test_a_group_of_identical_rewards_gets_exactly_zero_advantages(normalizer, value):
    rewards = torch.tensor([value] * 3 + [1.0, 0.0, 1.0])
    advantages, meta = course.run_compute_group_normalized_rewards(rewards, 3, "mean", 1e-6, normalizer)
    assert torch.equal(advantages[:3], torch.zeros(3))
    assert meta["frac_groups_all_equal"] == 0.5


def test_advantage_eps_behaviour():
    equal = torch.tensor([1.0, 1.0])
    # eps keeps the all-equal group finite: 0 / (0 + eps) = 0; without it the formula's 0 / 0 is NaN
    assert course.run_compute_group_normalized_rewards(equal, 2, "mean", 1e-6, "std")[0].tolist() == [0.0, 0.0]
    assert course.run_compute_group_normalized_rewards(equal, 2, "mean", 0.0, "std")[0].isnan().all()
    assert course.run_compute_group_normalized_rewards(torch.zeros(2), 2, "mean", 0.0, "mean")[0].isnan().all()
    assert course.run_compute_group_normalized_rewards(torch.zeros(2), 2, "mean", 1e-6, "mean")[0].tolist() == [0, 0]
    # eps is added to the std, not to the variance: [1, 0] -> 0.5 / (0.70710678 + 0.5) = 0.41421356
    advantages, _ = course.run_compute_group_normalized_rewards(torch.tensor([1.0, 0.0]), 2, "mean", 0.5, "std")
    torch.testing.assert_close(advantages, torch.tensor([0.41421356, -0.41421356]))
    # and to the mean for MaxRL: rewards [1, 0], mean 0.5 -> 0.5 / (0.5 + 0.5) = 0.5
    advantages, _ = course.run_compute_group_normalized_rewards(torch.tensor([1.0, 0.0]), 2, "mean", 0.5, "mean")
    assert advantages.tolist() == [0.5, -0.5]


def test_group_normalization_errors():
    with pytest.raises(ValueError, match=r"baseline='median'.*'mean', 'none'"):
        course.run_compute_group_normalized_rewards(torch.ones(4), 2, baseline="median")
    with pytest.raises(ValueError, match=r"advantage_normalizer='max'.*'std', 'none', 'mean'"):
        course.run_compute_group_normalized_rewards(torch.ones(4), 2, advantage_normalizer="max")
    with pytest.raises(ValueError, match="group_size=3"):
        course.run_compute_group_normalized_rewards(torch.ones(4), 3)
    with pytest.raises(ValueError, match="group_size >= 2"):
        course.run_compute_group_normalized_rewards(torch.ones(4), 1)
    # group_size 1 is fine without std scaling (RFT on single samples)
    assert course.run_compute_group_normalized_rewards(torch.ones(2), 1, "none", 1e-6, "none")[0].tolist() == [1, 1]


# --- per-token losses ---------------------------------------------------------------------------

def _log_probs_with_ratios(policy: list[list[float]], ratios: list[list[float]], dtype=torch.float32):
    """(policy log-probs, old log-probs) whose token ratios exp(new - old) are `ratios`."""
    new = torch.tensor(policy, dtype=dtype)
    return new, new - torch.tensor(ratios, dtype=dtype).log()


def test_compute_policy_gradient_loss_on_policy():
    adv = torch.tensor([[2.0], [-1.0]])
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    loss, meta = course.run_compute_policy_gradient_loss(raw_rewards_or_advantages=adv, policy_log_probs=log_probs,
                                                         importance_reweighting_method="none")
    torch.testing.assert_close(loss, torch.tensor([[2.0, 4.0], [-0.5, -0.0]]))  # -A log p
    torch.testing.assert_close(course.run_compute_policy_gradient_loss(adv.view(2), log_probs)[0], loss)
    assert meta["clip_fraction"] == 0 and meta["clipped"].shape == (2, 2)
    with pytest.raises(ValueError, match=r"raw_rewards_or_advantages has shape \(3, 1\)"):
        course.run_compute_policy_gradient_loss(torch.ones(3, 1), log_probs)


def test_compute_policy_gradient_loss_off_policy():
    adv = torch.tensor([1.0, -1.0, 1.0])
    new, old = _log_probs_with_ratios([[-1.0, -2.0], [-0.5, -1.5], [-3.0, -0.1]],
                                      [[1.5, 1.05], [0.5, 0.95], [0.5, 1.0]])
    noclip, meta = course.run_compute_policy_gradient_loss(raw_rewards_or_advantages=adv, policy_log_probs=new,
                                                           importance_reweighting_method="noclip",
                                                           old_log_probs=old)
    torch.testing.assert_close(noclip, torch.tensor([[-1.5, -1.05], [0.5, 0.95], [-0.5, -1.0]]))  # -r A
    assert meta["clip_fraction"] == 0
    clipped, meta = course.run_compute_policy_gradient_loss(raw_rewards_or_advantages=adv, policy_log_probs=new,
                                                            importance_reweighting_method="grpo", old_log_probs=old,
                                                            cliprange=0.1)
    # row 0, A = +1: min(1.5, 1.1) = 1.1 (clip binds, high), min(1.05, 1.05)
    # row 1, A = -1: min(-0.5, -0.9) = -0.9 (clip binds, low), min(-0.95, -0.95)
    # row 2, A = +1: ratio 0.5 below the region but min(0.5, 0.9) = 0.5: unclipped, the gradient flows
    torch.testing.assert_close(clipped, torch.tensor([[-1.1, -1.05], [0.9, 0.95], [-0.5, -1.0]]))
    assert meta["clipped"].tolist() == [[True, False], [True, False], [False, False]]
    torch.testing.assert_close(meta["clip_fraction"], torch.tensor(2 / 6))
    torch.testing.assert_close(meta["clip_fraction_low"], torch.tensor(1 / 6))
    torch.testing.assert_close(meta["clip_fraction_high"], torch.tensor(1 / 6))
    # approx KL (k3 = r - 1 - log r) over the six tokens
    ratios = torch.tensor([1.5, 1.05, 0.5, 0.95, 0.5, 1.0])
    torch.testing.assert_close(meta["approx_kl"], (ratios - 1 - ratios.log()).mean())


def test_compute_policy_gradient_loss_off_policy_gspo():
    adv = torch.tensor([1.0, -2.0, 1.0, 0.5])
    new, old = _log_probs_with_ratios([[-1.0, -2.0, -3.0]] * 4,
                                      [[2.0, 0.5, 7.0], [1.5, 9.0, 9.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]).bool()
    loss, meta = course.run_compute_policy_gradient_loss(raw_rewards_or_advantages=adv, policy_log_probs=new,
                                                         importance_reweighting_method="gspo", old_log_probs=old,
                                                         cliprange=0.1, response_mask=mask)
    # row 0: geometric mean of 2 and 0.5 over the response = 1 (the masked 7 is ignored); -1 * 1 = -1
    # row 1: s = 1.5, A = -2: min(-3, -2.2) = -3 (unclipped) -> 3
    # row 2: s = 2, A = 1: min(2, 1.1) = 1.1 (clip binds) -> -1.1
    # row 3: no response token: s = exp(0) = 1 -> -0.5
    expected = torch.tensor([[-1.0] * 3, [3.0] * 3, [-1.1] * 3, [-0.5] * 3])
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(meta["ratio_mean"], torch.tensor((1 + 1.5 + 2 + 1) / 4))
    # clip fraction over response tokens: row 2's three of six
    torch.testing.assert_close(meta["clip_fraction"], torch.tensor(0.5))
    torch.testing.assert_close(meta["clip_fraction_high"], torch.tensor(0.5))
    # without a mask GSPO averages over every position: row 0's s = (2 * 0.5 * 7) ** (1/3)
    unmasked, _ = course.run_compute_policy_gradient_loss(adv, new, "gspo", old, 10.0)
    torch.testing.assert_close(unmasked[0], torch.full((3,), -(7.0 ** (1 / 3))))


def test_compute_policy_gradient_loss_off_policy_cispo():
    adv = torch.tensor([2.0, -1.0])
    new, old = _log_probs_with_ratios([[-1.0, -2.0, -0.5], [-1.0, -2.0, -0.5]], [[1.5, 1.0, 0.5], [1.5, 1.0, 0.5]])
    new.requires_grad_(True)
    loss, meta = course.run_compute_policy_gradient_loss(adv, new, "cispo", old, 0.1)
    # weights clip(r, 0.9, 1.1) = [1.1, 1, 0.9]; loss = -w A log p
    torch.testing.assert_close(loss.detach(), torch.tensor([[2.2, 4.0, 0.9], [-1.1, -2.0, -0.45]]))
    assert meta["clipped"].tolist() == [[True, False, True]] * 2
    torch.testing.assert_close(meta["clip_fraction_low"], torch.tensor(1 / 3))
    # the weight is a constant: d loss / d log p = -w A, also for the clipped tokens (unlike GRPO)
    loss.sum().backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-2.2, -2.0, -1.8], [1.1, 1.0, 0.9]]))


def test_policy_gradient_loss_errors():
    lp = torch.zeros(2, 3)
    allowed = r"importance_reweighting_method='ppo'.*'none', 'noclip', 'grpo', 'gspo', 'cispo'"
    with pytest.raises(ValueError, match=allowed):
        course.run_compute_policy_gradient_loss(torch.ones(2), lp, "ppo")
    for method in ("noclip", "grpo", "gspo", "cispo"):
        with pytest.raises(ValueError, match="needs old_log_probs"):
            course.run_compute_policy_gradient_loss(torch.ones(2), lp, method, cliprange=0.2)
    for method in ("grpo", "gspo", "cispo"):
        with pytest.raises(ValueError, match="needs cliprange"):
            course.run_compute_policy_gradient_loss(torch.ones(2), lp, method, lp)
    with pytest.raises(ValueError, match=r"old_log_probs has shape \(2, 2\)"):
        course.run_compute_policy_gradient_loss(torch.ones(2), lp, "noclip", torch.zeros(2, 2))
    # "none" ignores old_log_probs and cliprange
    assert course.run_compute_policy_gradient_loss(torch.ones(2), lp, "none", torch.zeros(9), -1.0)[0].shape == (2, 3)


@pytest.mark.parametrize("method", ["grpo", "gspo", "cispo"])
def test_cliprange_boundary_keeps_the_unclipped_gradient(method):
    """Ratio exactly on the trust region's edge (r = 1, cliprange = 0): not clipped, gradient of the unclipped term."""
    adv = torch.tensor([1.5, -2.0], dtype=F64)
    new = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]], dtype=F64, requires_grad=True)
    loss, meta = course.run_compute_policy_gradient_loss(adv, new, method, new.detach().clone(), 0.0)
    assert not meta["clipped"].any()
    if method == "cispo":  # weight 1: REINFORCE, -A log p
        torch.testing.assert_close(loss, -adv[:, None] * new)
    else:
        torch.testing.assert_close(loss, -adv[:, None].expand(2, 2))  # -r A with r = 1
    loss.sum().backward()
    # grpo: d(-r A)/d log p = -r A; gspo: d(-s A)/d log p_t = -A s / T, summed over the T tokens carrying it;
    # cispo: -w A with w = 1. With r = s = w = 1 all three are -A per token.
    torch.testing.assert_close(new.grad, -adv[:, None].expand(2, 2))
    # just outside the edge the clip binds and the token's gradient is 0 (GRPO), its weight is cut (CISPO)
    nudged = new.detach() + torch.tensor([[1e-3, 0.0], [0.0, 0.0]], dtype=F64)
    nudged.requires_grad_(True)
    loss, meta = course.run_compute_policy_gradient_loss(adv, nudged, method, new.detach(), 0.0)
    assert meta["clipped"][0].tolist() == ([True, True] if method == "gspo" else [True, False])
    loss.sum().backward()
    if method == "grpo":
        assert nudged.grad[0, 0] == 0 and nudged.grad[0, 1] == -1.5
    elif method == "gspo":
        assert nudged.grad[0].tolist() == [0.0, 0.0]
    else:
        assert nudged.grad[0, 0] == -1.5  # w = 1 (cut from e^0.001), the gradient stays


def _aggregate_gradcheck(method: str, normalization: str) -> None:
    torch.manual_seed(0)
    adv = torch.randn(3, dtype=F64)
    new = (torch.randn(3, 4, dtype=F64) - 1).requires_grad_(True)
    old = new.detach() + 0.3 * torch.randn(3, 4, dtype=F64)  # ratios in ~[0.4, 2.5], none within 1e-3 of 1 +- 0.2
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 1, 1, 1]]).bool()  # ragged, no empty row (that is NaN)

    def objective(log_probs):
        per_token, _ = grpo_2026.policy_gradient_loss(adv, log_probs, method, old, 0.2, mask)
        return grpo_2026.aggregate_loss(per_token, mask, normalization, 7)

    assert torch.autograd.gradcheck(objective, (new,))
    objective(new).backward()
    assert torch.equal(new.grad[~mask], torch.zeros(int((~mask).sum()), dtype=F64))  # padding gets nothing


@pytest.mark.parametrize("normalization", ["sequence", "constant"])
@pytest.mark.parametrize("method", ["none", "noclip", "grpo", "gspo"])
def test_losses_gradcheck_float64(method, normalization):
    _aggregate_gradcheck(method, normalization)


def test_cispo_gradcheck_float64_where_every_weight_is_clipped():
    """CISPO's gradient is that of its value only where the weights are constant: every ratio clipped."""
    adv = torch.tensor([1.0, -0.5], dtype=F64)
    new = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.0]], dtype=F64, requires_grad=True)
    old = new.detach() + torch.tensor([[0.7, -0.6, 0.5], [-0.4, 0.9, -0.8]], dtype=F64)  # |log r| >= 0.4
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    assert torch.autograd.gradcheck(
        lambda lp: grpo_2026.aggregate_loss(grpo_2026.policy_gradient_loss(adv, lp, "cispo", old, 0.2, mask)[0],
                                            mask), (new,))


def test_gspo_gradient_hand_worked():
    """d/d log p_t of -A s with s = exp(mean_t log r_t) is -A s / |y| per response token."""
    new = torch.tensor([[-1.0, -2.0, -5.0]], dtype=F64, requires_grad=True)
    old = new.detach() - torch.tensor([[math.log(2.0), math.log(0.5), 3.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0]]).bool()
    loss, _ = course.run_compute_policy_gradient_loss(torch.tensor([3.0], dtype=F64), new, "gspo", old, 10.0, mask)
    course.run_aggregate_loss_across_microbatch(loss, mask).backward()
    # s = 1, |y| = 2: -3 * 1 / 2 per response token, 0 for padding
    torch.testing.assert_close(new.grad, torch.tensor([[-1.5, -1.5, 0.0]], dtype=F64))


# --- aggregation --------------------------------------------------------------------------------

def test_aggregate_loss_across_microbatch_sequence():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 1]]).bool()
    value = course.run_aggregate_loss_across_microbatch(per_token_policy_gradient_loss=loss, mask=mask,
                                                        loss_normalization="sequence")
    assert value.item() == pytest.approx(3.75)  # (1.5 + 6) / 2


def test_aggregate_loss_across_microbatch_constant():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 1]])  # 0/1 integers work as well as bools
    value = course.run_aggregate_loss_across_microbatch(per_token_policy_gradient_loss=loss, mask=mask,
                                                        loss_normalization="constant", normalization_constant=42)
    assert value.item() == pytest.approx(9 / 42)  # (1 + 2 + 6) / 42


def test_aggregate_all_masked_rows_and_non_finite_padding():
    loss = torch.tensor([[1.0, float("nan")], [float("inf"), -float("inf")]], requires_grad=True)
    mask = torch.tensor([[1, 0], [0, 0]]).bool()
    # an empty response is the course's 0/0 = NaN (its formula; guards belong in the caller, as for masked_mean)
    assert course.run_aggregate_loss_across_microbatch(loss, mask).isnan()
    # the non-finite padding never reaches the value or the gradient (masked entries are dropped, not times 0)
    value = course.run_aggregate_loss_across_microbatch(loss[:1], mask[:1])
    assert value.item() == 1.0
    value.backward()
    assert loss.grad.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert course.run_aggregate_loss_across_microbatch(loss, mask, "constant", 4).item() == 0.25
    assert course.run_aggregate_loss_across_microbatch(loss, torch.zeros(2, 2).bool()).isnan()


def test_aggregate_errors():
    with pytest.raises(ValueError, match=r"loss_normalization='token'.*'sequence', 'constant'"):
        course.run_aggregate_loss_across_microbatch(torch.zeros(1, 2), torch.ones(1, 2), "token")
    with pytest.raises(ValueError, match="needs normalization_constant"):
        course.run_aggregate_loss_across_microbatch(torch.zeros(1, 2), torch.ones(1, 2), "constant")
    with pytest.raises(ValueError, match=r"mask has shape \(1, 3\)"):
        course.run_aggregate_loss_across_microbatch(torch.zeros(1, 2), torch.ones(1, 3))


# --- the train step -----------------------------------------------------------------------------

def _word_tokenizer(words: str):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(["<pad>", "<eos>", "<unk>", *words.split()])}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


@pytest.fixture(scope="module")
def tokenizer():
    return _word_tokenizer("Hello world This is a test another Question Answer Instruction Response ### : The quick "
                           "brown fox jumps over the lazy dog . their crazy frog")


def _tiny_gpt2(tokenizer, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=8, n_layer=1, n_head=2, n_inner=16,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    return GPT2LMHeadModel(config).train()


PROMPTS = ["Hello", "Hello", "This is", "This is"]
RESPONSES = ["world", "test", "a test", "another test"]
REWARDS = {"world": 1.0, "test": 0.0, "a test": 0.5, "another test": 0.0}


def _reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    return {"reward": REWARDS[response], "format_reward": float(REWARDS[response] > 0),
            "answer_reward": REWARDS[response]}


def _reference_step(model, tokenizer, kwargs: dict, lr: float, max_grad_norm: float | None):
    """The same step written out on the whole batch at once: the value every microbatch split must give."""
    batch = course.run_tokenize_prompt_and_output(PROMPTS, RESPONSES, tokenizer)
    rewards, _ = course.run_compute_rollout_rewards(_reward_fn, RESPONSES, ["42"] * 4)
    advantages, _ = course.run_compute_group_normalized_rewards(
        rewards, 2, kwargs.get("baseline", "mean"), 1e-6, kwargs.get("advantage_normalizer", "std"))
    log_probs = course.run_get_response_log_probs(model, batch["input_ids"], batch["labels"], False)["log_probs"]
    per_token, _ = course.run_compute_policy_gradient_loss(
        advantages, log_probs, kwargs.get("importance_reweighting_method", "none"), kwargs.get("old_log_probs"),
        kwargs.get("cliprange"), batch["response_mask"])
    loss = course.run_aggregate_loss_across_microbatch(per_token, batch["response_mask"],
                                                       kwargs.get("loss_normalization", "sequence"),
                                                       kwargs.get("normalization_constant"))
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or math.inf)
    with torch.no_grad():
        for param in model.parameters():
            param -= lr * param.grad
    return loss.detach(), float(norm)


def _old_log_probs(tokenizer) -> torch.Tensor:
    width = max(len(tokenizer.encode(p)) + len(tokenizer.encode(r)) for p, r in zip(PROMPTS, RESPONSES)) - 1
    return torch.linspace(-1.5, 0.5, steps=4 * width).reshape(4, width)


VARIANTS = {
    "standard": {},
    "grpo_constant": {"loss_normalization": "constant", "normalization_constant": 32},
    "dr_grpo": {"advantage_normalizer": "none", "loss_normalization": "constant", "normalization_constant": 32},
    "rft": {"baseline": "none", "advantage_normalizer": "none", "loss_normalization": "constant",
            "normalization_constant": 32},
    "maxrl": {"advantage_normalizer": "mean", "loss_normalization": "constant", "normalization_constant": 32},
    "noclip": {"importance_reweighting_method": "noclip"},
    "grpo": {"importance_reweighting_method": "grpo", "cliprange": 0.1},
    "gspo": {"importance_reweighting_method": "gspo", "cliprange": 0.1},
    "cispo": {"importance_reweighting_method": "cispo", "cliprange": 0.1},
}


@pytest.mark.parametrize("accumulation", [1, 2, 3])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_grpo_train_step_matches_the_whole_batch_step(tokenizer, variant, accumulation):
    """The public tests' train-step cases (standard on-policy, the four on-policy variants, the off-policy
    methods) against the step written out on the whole batch: loss and updated weights agree whatever the split."""
    kwargs = dict(VARIANTS[variant])
    if "importance_reweighting_method" in kwargs:
        kwargs["old_log_probs"] = _old_log_probs(tokenizer)
    model, reference = _tiny_gpt2(tokenizer), _tiny_gpt2(tokenizer)
    expected_loss, expected_norm = _reference_step(reference, tokenizer, kwargs, lr=1e-3, max_grad_norm=1.0)
    loss, meta = course.run_grpo_train_step(
        model=model, tokenizer=tokenizer, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3),
        gradient_accumulation_steps=accumulation, max_grad_norm=1.0, reward_fn=_reward_fn, repeated_prompts=PROMPTS,
        rollout_responses=RESPONSES, repeated_ground_truths=["42"] * 4, group_size=2, **kwargs)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-7)
    assert meta["grad_norm"] == pytest.approx(expected_norm, rel=1e-5)
    for (name, param), ref in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(param, ref, rtol=1e-5, atol=1e-7, msg=name)
    assert all(param.grad is None for param in model.parameters())
    assert meta["response_tokens"] == 6.0 and meta["reward_mean"] == 0.375 and meta["format_reward_mean"] == 0.5
    assert ("approx_kl" in meta) == ("old_log_probs" in kwargs)


def test_grpo_train_step_clips_the_gradient_norm(tokenizer):
    model, before = _tiny_gpt2(tokenizer), _tiny_gpt2(tokenizer)
    _, meta = course.run_grpo_train_step(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), 2, 1e-3,
                                         _reward_fn, PROMPTS, RESPONSES, ["42"] * 4, 2)
    step = torch.cat([(p - q).flatten() for p, q in zip(model.parameters(), before.parameters())])
    assert meta["grad_norm"] > 1e-2  # reported before clipping
    assert step.norm().item() == pytest.approx(1e-3, rel=1e-4)  # SGD at lr 1 moves by the clipped norm
    model = _tiny_gpt2(tokenizer)
    _, unclipped = course.run_grpo_train_step(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), 2, None,
                                              _reward_fn, PROMPTS, RESPONSES, ["42"] * 4, 2)
    step = torch.cat([(p - q).flatten() for p, q in zip(model.parameters(), before.parameters())])
    assert step.norm().item() == pytest.approx(unclipped["grad_norm"], rel=1e-4) == pytest.approx(meta["grad_norm"])


def test_grpo_train_step_learns_the_rewarded_response(tokenizer):
    """Ten on-policy steps raise log p(world | Hello) (reward 1) over log p(test | Hello) (reward 0)."""
    model = _tiny_gpt2(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)

    def preference() -> float:
        batch = course.run_tokenize_prompt_and_output(["Hello", "Hello"], ["world", "test"], tokenizer)
        with torch.no_grad():
            lp = course.run_get_response_log_probs(model, batch["input_ids"], batch["labels"], False)["log_probs"]
        return float(lp[0, -1] - lp[1, -1])

    start = preference()
    for _ in range(10):
        course.run_grpo_train_step(model, tokenizer, optimizer, 2, 1.0, _reward_fn, PROMPTS, RESPONSES,
                                   ["42"] * 4, 2)
    assert preference() > start + 1.0


def test_grpo_train_step_checks_arguments_before_touching_the_model(tokenizer):
    model, before = _tiny_gpt2(tokenizer), _tiny_gpt2(tokenizer)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    args = (model, tokenizer, optimizer, 2, 1.0, _reward_fn, PROMPTS, RESPONSES, ["42"] * 4, 2)
    cases = [({"baseline": "max"}, "baseline='max'"), ({"advantage_normalizer": "iqr"}, "advantage_normalizer='iqr'"),
             ({"importance_reweighting_method": "ppo"}, "importance_reweighting_method='ppo'"),
             ({"loss_normalization": "token"}, "loss_normalization='token'"),
             ({"loss_normalization": "constant"}, "needs normalization_constant"),
             ({"importance_reweighting_method": "grpo", "cliprange": 0.2}, "needs old_log_probs"),
             ({"importance_reweighting_method": "gspo", "old_log_probs": torch.zeros(4, 3)}, "needs cliprange"),
             ({"importance_reweighting_method": "noclip", "old_log_probs": torch.zeros(4, 7)},
              "old_log_probs has shape")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            course.run_grpo_train_step(*args, **kwargs)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=5"):
        course.run_grpo_train_step(model, tokenizer, optimizer, 5, 1.0, _reward_fn, PROMPTS, RESPONSES, ["42"] * 4, 2)
    for param, ref in zip(model.parameters(), before.parameters()):
        assert torch.equal(param, ref) and param.grad is None


# --- the supplement: packing, batches, parsing, DPO ----------------------------------------------

def _write_sft_records(path: Path, count: int) -> list[dict]:
    records = [{"prompt": f"Question {i}", "response": "Answer " + "test " * (i % 3)} for i in range(count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_packed_sft_dataset(tmp_path, tokenizer):
    records = _write_sft_records(tmp_path / "sft.jsonl", 5)
    dataset = course.get_packed_sft_dataset(tokenizer=tokenizer, dataset_path=tmp_path / "sft.jsonl", seq_length=8,
                                            shuffle=False)
    # each document: the template's words (unknown ones -> <unk>), then EOS; all concatenated
    stream = []
    for record in records:
        stream += tokenizer.encode(course.ALPACA_TEMPLATE.format(instruction=record["prompt"],
                                                                 response=record["response"]))
        stream.append(tokenizer.eos_token_id)
    assert len(dataset) == (len(stream) - 1) // 8
    for i in range(len(dataset)):
        example = dataset[i]
        assert example["input_ids"].dtype == torch.long and example["input_ids"].shape == (8,)
        assert example["input_ids"].tolist() == stream[8 * i: 8 * i + 8]
        assert example["labels"].tolist() == stream[8 * i + 1: 8 * i + 9]
    random.seed(0)
    shuffled = course.get_packed_sft_dataset(tokenizer, tmp_path / "sft.jsonl", 8, shuffle=True)
    assert len(shuffled) == len(dataset)
    assert [shuffled[i]["input_ids"].tolist() for i in range(len(dataset))] != \
        [dataset[i]["input_ids"].tolist() for i in range(len(dataset))]


def test_iterate_batches(tmp_path, tokenizer):
    _write_sft_records(tmp_path / "sft.jsonl", 12)
    dataset = course.get_packed_sft_dataset(tokenizer, tmp_path / "sft.jsonl", seq_length=4, shuffle=True)
    batches = course.run_iterate_batches(dataset=dataset, batch_size=5, shuffle=True)
    assert len(batches) == math.ceil(len(dataset) / 5)
    seen = []
    for index, batch in enumerate(batches):
        rows = 5 if index < len(batches) - 1 else len(dataset) - 5 * (len(batches) - 1)
        assert batch["input_ids"].shape == batch["labels"].shape == (rows, 4)
        assert batch["input_ids"].dtype == torch.long
        seen += [tuple(row) for row in batch["input_ids"].tolist()]
    assert sorted(seen) == sorted(tuple(dataset[i]["input_ids"].tolist()) for i in range(len(dataset)))  # one epoch


MMLU_EXAMPLE = {"subject": "virology", "question": "How many human polyomaviruses are known at present?",
                "options": ["100", "1", "10", "unknown"], "answer": "A"}


def test_parse_mmlu_response():
    output = "The correct answer is B. There is only one human polyomavirus known at present, the BK virus."
    assert course.run_parse_mmlu_response(mmlu_example=MMLU_EXAMPLE, model_output=output) == "B"
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "Answer: (C) 10") == "C"
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "So the answer is: option D") == "D"
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "I would pick (D).") == "D"
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "A. 100") == "A"


def test_parse_mmlu_response_unknown():
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "The correct answer is 10000 polyomaviruses.") is None
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "A virus can be many things.") is None
    assert course.run_parse_mmlu_response(MMLU_EXAMPLE, "The answer is Both.") is None


def test_parse_gsm8k_response():
    output = "Natalia sold 48/2 = 24 clips in May. Natalia sold 48+24 = 72 clips altogether in April and May."
    assert course.run_parse_gsm8k_response(model_output=output) == "72"


def test_parse_gsm8k_response_unknown():
    assert course.run_parse_gsm8k_response("Natalia sold seventy-two clips altogether in April and May.") is None


def test_dpo_loss_hand_worked():
    # margin = (-1 - -2) - (-3 - -2.5) = 1.5; beta 2: -log sigmoid(3) = log(1 + e^-3) = 0.04858735
    value = grpo_2026.dpo_loss(torch.tensor(-1.0), torch.tensor(-3.0), torch.tensor(-2.0), torch.tensor(-2.5), 2.0)
    assert value.item() == pytest.approx(math.log1p(math.exp(-3.0)))


def test_per_instance_dpo_loss(tokenizer):
    lm, lm_ref = _tiny_gpt2(tokenizer, seed=1), _tiny_gpt2(tokenizer, seed=2)
    kwargs = dict(tokenizer=tokenizer, beta=0.5, prompt="The quick brown fox jumps over",
                  response_chosen="the lazy dog .", response_rejected="their crazy frog .")
    # the same model as policy and reference: margin 0, loss log 2
    same = course.run_compute_per_instance_dpo_loss(lm=lm, lm_ref=copy.deepcopy(lm), **kwargs)
    assert same.item() == pytest.approx(math.log(2.0), abs=1e-6)
    loss = course.run_compute_per_instance_dpo_loss(lm=lm, lm_ref=lm_ref, **kwargs)

    def naive_log_prob(model, response):  # the template + EOS scored with a plain log_softmax
        ids = tokenizer.encode(course.ALPACA_TEMPLATE.format(instruction=kwargs["prompt"], response=response))
        ids = torch.tensor([ids + [tokenizer.eos_token_id]])
        with torch.no_grad():
            log_p = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)
        return log_p.gather(1, ids[0, 1:, None]).sum()

    margin = ((naive_log_prob(lm, "the lazy dog .") - naive_log_prob(lm_ref, "the lazy dog ."))
              - (naive_log_prob(lm, "their crazy frog .") - naive_log_prob(lm_ref, "their crazy frog .")))
    assert loss.item() == pytest.approx(-torch.nn.functional.logsigmoid(0.5 * margin).item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is not None for p in lm.parameters()) and all(p.grad is None for p in lm_ref.parameters())


# --- the course's test layout ---------------------------------------------------------------------

COURSE_STYLE_TESTS = '''
import torch
from .adapters import (run_aggregate_loss_across_microbatch as aggregate, run_compute_group_normalized_rewards as
                       normalize, run_compute_policy_gradient_loss as pg_loss, run_compute_rollout_rewards as
                       rollout_rewards, run_grpo_train_step as train_step)


def _inputs():
    torch.manual_seed(42)
    rewards = torch.rand(2, 1)
    torch.manual_seed(42)
    policy = torch.randn(2, 10)
    torch.manual_seed(42)
    old = policy + torch.randn_like(policy)
    torch.manual_seed(42)
    mask = torch.rand_like(policy) > 0.5
    return rewards, policy, old, mask


def test_compute_rollout_rewards():
    raw, meta = rollout_rewards(reward_fn=lambda r, g: {"reward": len(r) / 8, "format_reward": 1.0,
                                                        "answer_reward": 0.0},
                                rollout_responses=["ab", "abcd"], repeated_ground_truths=["1", "1"])
    assert raw.tolist() == [0.25, 0.5] and meta["format_reward_mean"] == 1.0


def test_compute_group_normalized_rewards_grpo():
    adv, _ = normalize(raw_rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, baseline="mean",
                       advantage_eps=1e-6, advantage_normalizer="std")
    assert abs(adv[0].item() - 0.70710578) < 1e-6


def test_compute_group_normalized_rewards_drgrpo():
    adv, _ = normalize(raw_rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, baseline="none",
                       advantage_normalizer="none")
    assert adv.tolist() == [1.0, 0.0, 0.0, 1.0]


def test_compute_group_normalized_rewards_maxrl():
    adv, _ = normalize(raw_rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, baseline="mean",
                       advantage_normalizer="mean")
    assert abs(adv[0].item() - 0.999998) < 1e-6


def test_compute_policy_gradient_loss_on_policy():
    rewards, policy, _, _ = _inputs()
    loss, _ = pg_loss(raw_rewards_or_advantages=rewards, policy_log_probs=policy, importance_reweighting_method="none")
    assert torch.equal(loss, -rewards * policy)


def test_compute_policy_gradient_loss_off_policy():
    rewards, policy, old, _ = _inputs()
    noclip, _ = pg_loss(raw_rewards_or_advantages=rewards, policy_log_probs=policy,
                        importance_reweighting_method="noclip", old_log_probs=old)
    clipped, _ = pg_loss(raw_rewards_or_advantages=rewards, policy_log_probs=policy,
                         importance_reweighting_method="grpo", old_log_probs=old, cliprange=0.1)
    assert (clipped >= noclip - 1e-6).all() and noclip.shape == (2, 10)


def test_compute_policy_gradient_loss_off_policy_gspo():
    rewards, policy, old, mask = _inputs()
    loss, _ = pg_loss(raw_rewards_or_advantages=rewards, policy_log_probs=policy, importance_reweighting_method="gspo",
                      old_log_probs=old, cliprange=0.1, response_mask=mask)
    assert loss.shape == (2, 10) and (loss == loss[:, :1]).all()


def test_aggregate_loss_across_microbatch_sequence():
    _, policy, _, mask = _inputs()
    value = aggregate(per_token_policy_gradient_loss=policy, mask=mask, loss_normalization="sequence")
    expected = torch.stack([policy[i][mask[i]].mean() for i in range(2)]).mean()
    assert torch.allclose(value, expected)


def test_aggregate_loss_across_microbatch_constant():
    _, policy, _, mask = _inputs()
    value = aggregate(per_token_policy_gradient_loss=policy, mask=mask, loss_normalization="constant",
                      normalization_constant=42)
    assert torch.allclose(value, policy[mask].sum() / 42)


def test_grpo_train_step_off_policy():
    from transformers import GPT2Config, GPT2LMHeadModel
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel(vocab={w: i for i, w in enumerate("<pad> <eos> <unk> Hello world This is a test "
                                                                    "another".split())}, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=16, n_embd=8, n_layer=1, n_head=2,
                                       n_inner=16))
    prompts, responses = ["Hello", "Hello", "This is", "This is"], ["world", "test", "a test", "another test"]
    width = max(len(tokenizer.encode(p)) + len(tokenizer.encode(r)) for p, r in zip(prompts, responses)) - 1
    for method in ("noclip", "grpo", "gspo"):
        loss, metadata = train_step(
            model=model, tokenizer=tokenizer, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3),
            gradient_accumulation_steps=2, max_grad_norm=1.0,
            reward_fn=lambda r, g: {"reward": float(r == "world"), "format_reward": 1.0, "answer_reward": 0.0},
            repeated_prompts=prompts, rollout_responses=responses, repeated_ground_truths=["42"] * 4, group_size=2,
            importance_reweighting_method=method,
            old_log_probs=torch.linspace(-1.5, 0.5, steps=4 * width).reshape(4, width), cliprange=0.1)
        assert loss.dim() == 0 and torch.isfinite(loss) and "grad_norm" in metadata
        assert all(param.grad is None for param in model.parameters())
'''


def test_a_one_line_adapters_file_serves_the_course_test_layout(tmp_path):
    """A course checkout's layout (tests/ a package, tests/adapters.py the one import line), its public
    tests' names and keyword calls, run by pytest in a fresh process."""
    import subprocess
    import sys

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "adapters.py").write_text("from hw3lib.adapters_cs336_2026 import *  # noqa: F401,F403\n")
    (tests / "test_grpo.py").write_text(COURSE_STYLE_TESTS)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_grpo.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "10 passed" in result.stdout
