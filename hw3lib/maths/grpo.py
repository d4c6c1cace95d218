"""GRPO maths as pure tensor functions: group-normalized advantages and policy-gradient losses.

Variants implemented (choose them by argument, nothing is hidden in a trainer):

- **No KL term.** The loss has no KL penalty to a reference policy (as in the course and Dr. GRPO).
- **Advantages:** reward minus its group mean (a per-prompt baseline), optionally divided by the
  group's standard deviation + `advantage_eps` (`normalize_by_std`, torch's unbiased std as in the
  course). A group whose rewards are all equal gets advantages of exactly 0.
- **Losses** (`loss_type`), all per token, `[B, T]`:
  `no_baseline` (-R * log p), `reinforce_with_baseline` (-A * log p),
  `grpo_clip` (PPO-style clipped importance ratio, -min(r A, clip(r, 1-eps, 1+eps) A)) and
  `grpo_no_clip` (unclipped importance ratio, -r A), where r = p / p_old per token.
- **Length normalization** (`length_normalization`): `masked_mean` divides each sequence's summed
  token loss by its own response length (the course's default, GRPO); `constant` divides by a
  fixed `normalize_constant` such as the generation budget (Dr. GRPO), so every token of every
  response weighs the same.

Sequences are then averaged over the batch and divided by `gradient_accumulation_steps`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from hw3lib.maths.sft import _check_accumulation, masked_mean, masked_mean_or_zero, masked_normalize

# The one table of loss types: the arguments of `compute_policy_gradient_loss` each one needs
# (beyond policy_log_probs). Everything else (config validation, the training loop) derives from it.
LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "no_baseline": ("raw_rewards",),
    "reinforce_with_baseline": ("advantages",),
    "grpo_clip": ("advantages", "old_log_probs", "cliprange"),
    "grpo_no_clip": ("advantages", "old_log_probs"),
}
LOSS_TYPES: tuple[str, ...] = tuple(LOSS_INPUTS)
# Loss types whose importance ratio needs the log-probs of the policy that sampled the rollouts.
RATIO_LOSSES: tuple[str, ...] = tuple(name for name, inputs in LOSS_INPUTS.items() if "old_log_probs" in inputs)
LENGTH_NORMALIZATIONS: tuple[str, ...] = ("masked_mean", "constant")


def compute_group_normalized_rewards(reward_fn: Callable[[str, str], dict], rollout_responses: Sequence[str],
                                     repeated_ground_truths: Sequence[str], group_size: int, advantage_eps: float,
                                     normalize_by_std: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Score rollouts and turn rewards into group-normalized advantages.

    Consecutive blocks of `group_size` responses answer the same prompt. Returns
    `(advantages [N], raw_rewards [N], stats)` (float32), where
    `advantage = (r - mean_group) / (std_group + advantage_eps)` if `normalize_by_std`, else
    `r - mean_group`. Stats: reward mean/std/min/max, format/answer reward means (when `reward_fn`
    reports them) and the fraction of groups whose rewards are all equal (no learning signal).
    """
    n = len(rollout_responses)
    if n != len(repeated_ground_truths):
        raise ValueError(f"rollout_responses has {n} entries but repeated_ground_truths has "
                         f"{len(repeated_ground_truths)}: repeat each ground truth once per response")
    if group_size < 1 or n == 0 or n % group_size:
        raise ValueError(f"{n} rollout responses do not split into groups of group_size={group_size}: "
                         "pass group_size responses per prompt, consecutively")
    if normalize_by_std and group_size < 2:
        raise ValueError("normalize_by_std needs group_size >= 2 (the unbiased std of one reward is undefined)")
    scores = [reward_fn(response, truth) for response, truth in zip(rollout_responses, repeated_ground_truths)]
    if any("reward" not in s for s in scores):
        raise ValueError(f"reward_fn returned {scores[0]!r}: it must return a dict with a 'reward' key")
    raw_rewards = torch.tensor([float(s["reward"]) for s in scores])  # [N]
    grouped = raw_rewards.view(-1, group_size)  # [G, group_size]
    advantages = grouped - grouped.mean(dim=1, keepdim=True)  # [G, group_size]
    if normalize_by_std:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + advantage_eps)  # [G, group_size]
    all_equal = (grouped == grouped[:, :1]).all(dim=1)  # [G]
    # Exactly 0 for such groups (rounding in the mean could leave a tiny nonzero value).
    advantages = torch.where(all_equal.unsqueeze(1), 0.0, advantages)  # [G, group_size]
    stats = {
        "reward_mean": raw_rewards.mean().item(),
        "reward_std": raw_rewards.std().item() if n > 1 else 0.0,
        "reward_min": raw_rewards.min().item(),
        "reward_max": raw_rewards.max().item(),
        "frac_groups_zero_std": all_equal.float().mean().item(),
    }
    for key in ("format_reward", "answer_reward"):
        if all(key in s for s in scores):
            stats[f"{key}_mean"] = sum(float(s[key]) for s in scores) / n
    return advantages.reshape(-1), raw_rewards, stats  # [N], [N]


def _per_sequence(values: torch.Tensor, policy_log_probs: torch.Tensor, name: str) -> torch.Tensor:
    """A reward/advantage per sequence as a column `[B, 1]` (accepts `[B]` or `[B, 1]`)."""
    batch = policy_log_probs.shape[0]
    if values.shape not in ((batch,), (batch, 1)):
        raise ValueError(f"{name} has shape {tuple(values.shape)}; expected ({batch}, 1) or ({batch},), "
                         "one value per sequence of policy_log_probs")
    return values.reshape(batch, 1)  # [B, 1]


def compute_naive_policy_gradient_loss(raw_rewards_or_advantages: torch.Tensor,
                                       policy_log_probs: torch.Tensor) -> torch.Tensor:
    """REINFORCE per-token loss `-A * log p`: `[B, 1], [B, T] -> [B, T]`."""
    scores = _per_sequence(raw_rewards_or_advantages, policy_log_probs, "raw_rewards_or_advantages")  # [B, 1]
    return -scores * policy_log_probs  # [B, T]


def compute_grpo_clip_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                           cliprange: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-style clipped loss `-min(r A, clip(r, 1 - cliprange, 1 + cliprange) A)` per token.

    Returns `(loss [B, T], stats)`; `stats["clipped"]` ([B, T] bool) marks tokens where the clipped
    term is the smaller one, i.e. the ratio left the trust region in the direction the advantage
    favours -- those tokens get zero gradient. `stats["clip_fraction"]` is its mean over all tokens.
    """
    adv = _per_sequence(advantages, policy_log_probs, "advantages")  # [B, 1]
    ratio = torch.exp(policy_log_probs - old_log_probs)  # [B, T]
    unclipped = ratio * adv  # [B, T]
    clipped = torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * adv  # [B, T]
    loss = -torch.minimum(unclipped, clipped)  # [B, T]
    was_clipped = (clipped < unclipped).detach()  # [B, T]
    stats = {"clipped": was_clipped, "clip_fraction": was_clipped.float().mean(), "ratio_mean": ratio.detach().mean()}
    return loss, stats


def compute_grpo_no_clip_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor,
                              old_log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Unclipped importance-weighted loss `-r A` per token, `r = exp(log p - log p_old)`."""
    adv = _per_sequence(advantages, policy_log_probs, "advantages")  # [B, 1]
    ratio = torch.exp(policy_log_probs - old_log_probs)  # [B, T]
    return -ratio * adv, {"ratio_mean": ratio.detach().mean()}  # [B, T]


def compute_policy_gradient_loss(policy_log_probs: torch.Tensor, loss_type: str,
                                 raw_rewards: torch.Tensor | None = None,
                                 advantages: torch.Tensor | None = None, old_log_probs: torch.Tensor | None = None,
                                 cliprange: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss `[B, T]` and stats for `loss_type` (one of `LOSS_TYPES`)."""
    if loss_type not in LOSS_INPUTS:
        raise ValueError(f"unknown loss_type {loss_type!r}: choose one of {', '.join(LOSS_TYPES)}")
    given = {"raw_rewards": raw_rewards, "advantages": advantages,
             "old_log_probs": old_log_probs, "cliprange": cliprange}
    missing = [name for name in LOSS_INPUTS[loss_type] if given[name] is None]
    if missing:
        raise ValueError(f"loss_type={loss_type!r} needs {', '.join(missing)}: pass it to compute the loss")
    if loss_type == "no_baseline":
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    return compute_grpo_no_clip_loss(advantages, policy_log_probs, old_log_probs)


def grpo_microbatch_train_step(policy_log_probs: torch.Tensor, response_mask: torch.Tensor,
                               gradient_accumulation_steps: int, loss_type: str,
                               raw_rewards: torch.Tensor | None = None, advantages: torch.Tensor | None = None,
                               old_log_probs: torch.Tensor | None = None, cliprange: float | None = None,
                               length_normalization: str = "masked_mean", normalize_constant: float | None = None,
                               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy-gradient loss of one microbatch, backpropagated; returns (detached scaled loss, detached stats).

    Per-token loss -> per sequence (`masked_mean` over the response, or `constant`: masked sum /
    `normalize_constant`) -> mean over the batch -> / `gradient_accumulation_steps` -> backward.
    The returned loss is the scaled one (as in the course). As in the course's reference, a
    sequence with an empty response makes the `masked_mean` loss NaN (0/0): callers that may meet
    one guard it where they assemble their loss -- the training loop does so in
    `hw3lib.grpo.step.microbatch_loss`. For `grpo_clip`, `stats["clip_fraction"]` is the fraction
    of response tokens clipped (0 if there are none).
    """
    _check_accumulation(gradient_accumulation_steps)
    if length_normalization not in LENGTH_NORMALIZATIONS:
        raise ValueError(f"unknown length_normalization {length_normalization!r}: "
                         f"choose one of {', '.join(LENGTH_NORMALIZATIONS)}")
    if length_normalization == "constant" and normalize_constant is None:
        raise ValueError("length_normalization='constant' needs normalize_constant (e.g. the generation budget)")
    per_token, loss_stats = compute_policy_gradient_loss(policy_log_probs, loss_type, raw_rewards, advantages,
                                                         old_log_probs, cliprange)  # [B, T]
    if length_normalization == "masked_mean":
        per_sequence = masked_mean(per_token, response_mask, dim=-1)  # [B]; NaN for an empty response, as the course
    else:
        per_sequence = masked_normalize(per_token, response_mask, dim=-1, normalize_constant=normalize_constant)  # [B]
    loss = per_sequence.mean() / gradient_accumulation_steps  # []
    loss.backward()
    stats = {key: value.detach() for key, value in loss_stats.items()}
    stats["loss_unscaled"] = per_sequence.mean().detach()
    if "clipped" in stats:
        stats["clip_fraction"] = masked_mean_or_zero(stats["clipped"].float(), response_mask)
    return loss.detach(), stats
