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

Beyond the handouts (each one row of `LOSS_INPUTS` or one length normalization; off unless chosen):

- **Dr. GRPO** (Liu et al., 2025) is no new function: `length_normalization="constant"` with the
  generation budget and advantages without std scaling (`normalize_by_std=False`), which removes
  GRPO's bias towards long wrong answers and towards low-variance questions
  (`hw3lib.grpo.config.ALGORITHMS["dr_grpo"]`).
- `dapo_clip` (DAPO, Yu et al., 2025): the clipped loss with an asymmetric trust region
  `[1 - clip_low, 1 + clip_high]`; "clip-higher" (`clip_high` > `clip_low`) lets unlikely tokens
  with a positive advantage grow further, against entropy collapse.
- `token_mean` length normalization (DAPO): the sum of all response tokens' losses divided by the
  number of response tokens of the whole optimizer step (`total_response_tokens`, one count
  across all its microbatches), so every token weighs the same whatever its response's length and
  however the step is split into microbatches.
- `gspo` (GSPO, Zheng et al., 2025): one importance ratio per sequence, the geometric mean of its
  token ratios `exp(mean_t(log p - log p_old))`, clipped per sequence to `[1 - clip_low, 1 + clip_high]`;
  each response token carries its sequence's loss, so `masked_mean` gives the paper's objective.
- `cispo` (CISPO, MiniMax-M1, 2025): REINFORCE weighted per token by the clipped, stop-gradient
  ratio `sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * log p`: a clipped token still gets a
  gradient (only its weight is bounded), unlike PPO-style clipping, which zeroes it.
- `mismatch_keep_mask` (masked importance sampling, MIS): which tokens, or whole sequences, to
  keep in the loss given the engine/trainer ratio `pi_trainer / pi_engine` of the sampled tokens:
  those outside `[low, high]` are dropped (hw3lib.grpo.step applies it).
"""

from __future__ import annotations

import math
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
    # beyond the handouts: asymmetric trust regions [1 - clip_low, 1 + clip_high]
    "dapo_clip": ("advantages", "old_log_probs", "clip_low", "clip_high"),
    "gspo": ("advantages", "old_log_probs", "clip_low", "clip_high", "response_mask"),
    "cispo": ("advantages", "old_log_probs", "clip_low", "clip_high"),
}
LOSS_TYPES: tuple[str, ...] = tuple(LOSS_INPUTS)
# Loss types whose importance ratio needs the log-probs of the policy that sampled the rollouts.
RATIO_LOSSES: tuple[str, ...] = tuple(name for name, inputs in LOSS_INPUTS.items() if "old_log_probs" in inputs)
# Loss types that clip their ratio (and report which tokens were clipped, `stats["clipped"]`).
CLIP_LOSSES: tuple[str, ...] = tuple(name for name, inputs in LOSS_INPUTS.items()
                                     if "cliprange" in inputs or "clip_high" in inputs)
LENGTH_NORMALIZATIONS: tuple[str, ...] = ("masked_mean", "constant", "token_mean")
# Masked importance sampling levels (`mismatch_keep_mask`): per token, or whole sequences.
MIS_LEVELS: tuple[str, ...] = ("token", "sequence")


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
    # the symmetric case of DAPO's clip-higher loss: one trust region [1 - cliprange, 1 + cliprange]
    return compute_dapo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange, cliprange)


def compute_grpo_no_clip_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor,
                              old_log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Unclipped importance-weighted loss `-r A` per token, `r = exp(log p - log p_old)`."""
    adv = _per_sequence(advantages, policy_log_probs, "advantages")  # [B, 1]
    ratio = torch.exp(policy_log_probs - old_log_probs)  # [B, T]
    return -ratio * adv, {"ratio_mean": ratio.detach().mean()}  # [B, T]


def compute_dapo_clip_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                           clip_low: float, clip_high: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DAPO's clip-higher loss `-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)` per token: `[B, T]`.

    `compute_grpo_clip_loss` with its trust region split in two: with `clip_high > clip_low` a token
    the policy found unlikely (small p_old) and that turned out good (A > 0) may grow its ratio
    further before its gradient is cut. Equal widths give `compute_grpo_clip_loss` exactly.
    Stats as `compute_grpo_clip_loss`'s.
    """
    adv = _per_sequence(advantages, policy_log_probs, "advantages")  # [B, 1]
    ratio = torch.exp(policy_log_probs - old_log_probs)  # [B, T]
    unclipped = ratio * adv  # [B, T]
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv  # [B, T]
    loss = -torch.minimum(unclipped, clipped)  # [B, T]
    was_clipped = (clipped < unclipped).detach()  # [B, T]
    stats = {"clipped": was_clipped, "clip_fraction": was_clipped.float().mean(), "ratio_mean": ratio.detach().mean()}
    return loss, stats


def compute_gspo_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                      response_mask: torch.Tensor, clip_low: float, clip_high: float,
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO's sequence-level clipped loss, each response token carrying its sequence's value: `[B, T]`.

    `s = exp(mean over the response of (log p - log p_old))` (the geometric mean of the token
    ratios, so a long response's ratio does not explode or vanish with its length), and the
    sequence loss `-min(s A, clip(s, 1 - clip_low, 1 + clip_high) A)`, which clips whole responses:
    a sequence whose ratio left the trust region gives no gradient to any of its tokens. With
    `masked_mean` length normalization the per-token values average back to the sequence loss.
    An empty response has `s = 1`. `stats["clipped"]` ([B, T]) marks every token of a clipped sequence.
    """
    adv = _per_sequence(advantages, policy_log_probs, "advantages")  # [B, 1]
    keep = response_mask.bool()  # [B, T]
    log_ratio = torch.where(keep, policy_log_probs - old_log_probs, 0.0)  # [B, T]; padding never reaches a NaN
    length = keep.sum(dim=-1, keepdim=True).clamp(min=1)  # [B, 1]
    seq_ratio = torch.exp(log_ratio.sum(dim=-1, keepdim=True) / length)  # [B, 1]
    unclipped = seq_ratio * adv  # [B, 1]
    clipped = torch.clamp(seq_ratio, 1 - clip_low, 1 + clip_high) * adv  # [B, 1]
    loss = -torch.minimum(unclipped, clipped).expand_as(policy_log_probs)  # [B, T]
    was_clipped = (clipped < unclipped).detach().expand_as(keep)  # [B, T]
    stats = {"clipped": was_clipped, "clip_fraction": was_clipped.float().mean(),
             "ratio_mean": seq_ratio.detach().mean(), "sequence_ratio": seq_ratio.detach().squeeze(1)}
    return loss, stats


def compute_cispo_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                       clip_low: float, clip_high: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO's loss `-sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * log p` per token: `[B, T]`.

    The clipped ratio is only a weight (stop-gradient), so every token keeps the REINFORCE
    gradient `-w A` on its log-prob: the rare tokens PPO-style clipping silences (often the
    "reflective" ones, such as "wait") still learn, with a bounded weight. `stats["clipped"]` marks
    the tokens whose weight was truncated.
    """
    adv = _per_sequence(advantages, policy_log_probs, "advantages")  # [B, 1]
    ratio = torch.exp(policy_log_probs - old_log_probs).detach()  # [B, T], a constant
    weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)  # [B, T]
    loss = -weight * adv * policy_log_probs  # [B, T]
    was_clipped = weight != ratio  # [B, T]
    stats = {"clipped": was_clipped, "clip_fraction": was_clipped.float().mean(), "ratio_mean": ratio.mean()}
    return loss, stats


def token_mean_loss(per_token_loss: torch.Tensor, response_mask: torch.Tensor,
                    total_response_tokens: float | torch.Tensor) -> torch.Tensor:
    """DAPO's token-level mean: `[B, T], [B, T], [] -> []`, the sum of the response tokens' losses /
    `total_response_tokens`.

    `total_response_tokens` is the number of response tokens of the whole optimizer step, all its
    microbatches together: summing this over the microbatches gives the mean over every token of
    the step, whatever the split. (A count per microbatch would weigh the tokens of a microbatch
    of short responses more than those of a microbatch of long ones.)
    """
    return masked_normalize(per_token_loss, response_mask, normalize_constant=1.0) / total_response_tokens  # []


def mismatch_keep_mask(trainer_log_probs: torch.Tensor, engine_log_probs: torch.Tensor, response_mask: torch.Tensor,
                       level: str, low: float, high: float) -> torch.Tensor:
    """Masked importance sampling (MIS): which response tokens stay in the loss, `[B, T] x 3 -> [B, T]` bool.

    The ratio `pi_trainer / pi_engine` of a sampled token measures how differently the rollout
    engine (its kernels, its bf16 weights) and the trainer score it. `level="token"`: a token whose
    ratio lies outside `[low, high]` is dropped. `level="sequence"`: a response whose sequence
    ratio (the product of its token ratios, `exp(sum of log-ratio)`) lies outside `[low, high]` is
    dropped whole. Padding is never kept.
    """
    if level not in MIS_LEVELS:
        raise ValueError(f"unknown MIS level {level!r}: choose one of {', '.join(MIS_LEVELS)}")
    keep = response_mask.bool()  # [B, T]
    log_ratio = torch.where(keep, trainer_log_probs - engine_log_probs, 0.0)  # [B, T]
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True)  # [B, 1]
    lower = math.log(low) if low > 0 else -math.inf  # low = 0: no lower bound
    inside = (log_ratio >= lower) & (log_ratio <= math.log(high))  # [B, T] or [B, 1]
    return keep & inside  # [B, T]


def compute_policy_gradient_loss(policy_log_probs: torch.Tensor, loss_type: str,
                                 raw_rewards: torch.Tensor | None = None,
                                 advantages: torch.Tensor | None = None, old_log_probs: torch.Tensor | None = None,
                                 cliprange: float | None = None, *, clip_low: float | None = None,
                                 clip_high: float | None = None, response_mask: torch.Tensor | None = None,
                                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss `[B, T]` and stats for `loss_type` (one of `LOSS_TYPES`).

    The keyword-only `clip_low`, `clip_high` and `response_mask` serve the loss types beyond the
    handouts (`dapo_clip`, `gspo`, `cispo`); `LOSS_INPUTS` says which inputs each type needs.
    """
    if loss_type not in LOSS_INPUTS:
        raise ValueError(f"unknown loss_type {loss_type!r}: choose one of {', '.join(LOSS_TYPES)}")
    given = {"raw_rewards": raw_rewards, "advantages": advantages, "old_log_probs": old_log_probs,
             "cliprange": cliprange, "clip_low": clip_low, "clip_high": clip_high, "response_mask": response_mask}
    missing = [name for name in LOSS_INPUTS[loss_type] if given[name] is None]
    if missing:
        raise ValueError(f"loss_type={loss_type!r} needs {', '.join(missing)}: pass it to compute the loss")
    if loss_type == "no_baseline":
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    if loss_type == "dapo_clip":
        return compute_dapo_clip_loss(advantages, policy_log_probs, old_log_probs, clip_low, clip_high)
    if loss_type == "gspo":
        return compute_gspo_loss(advantages, policy_log_probs, old_log_probs, response_mask, clip_low, clip_high)
    if loss_type == "cispo":
        return compute_cispo_loss(advantages, policy_log_probs, old_log_probs, clip_low, clip_high)
    return compute_grpo_no_clip_loss(advantages, policy_log_probs, old_log_probs)


def grpo_microbatch_train_step(policy_log_probs: torch.Tensor, response_mask: torch.Tensor,
                               gradient_accumulation_steps: int, loss_type: str,
                               raw_rewards: torch.Tensor | None = None, advantages: torch.Tensor | None = None,
                               old_log_probs: torch.Tensor | None = None, cliprange: float | None = None,
                               length_normalization: str = "masked_mean", normalize_constant: float | None = None,
                               *, clip_low: float | None = None, clip_high: float | None = None,
                               total_response_tokens: float | torch.Tensor | None = None,
                               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy-gradient loss of one microbatch, backpropagated; returns (detached scaled loss, detached stats).

    Per-token loss -> per sequence (`masked_mean` over the response, or `constant`: masked sum /
    `normalize_constant`) -> mean over the batch -> / `gradient_accumulation_steps` -> backward.
    The returned loss is the scaled one (as in the course). As in the course's reference, a
    sequence with an empty response makes the `masked_mean` loss NaN (0/0): callers that may meet
    one guard it where they assemble their loss -- the training loop does so in
    `hw3lib.grpo.step.microbatch_loss`. For the clipping losses, `stats["clip_fraction"]` is the
    fraction of response tokens clipped (0 if there are none).

    Beyond the handouts (keyword-only): `clip_low`/`clip_high` for `dapo_clip`, `gspo` and `cispo`;
    `length_normalization="token_mean"` (DAPO) skips the per-sequence step: the masked sum over
    the microbatch / `total_response_tokens`, the response tokens of the whole optimizer step,
    which already spreads the step over its microbatches (no further / gradient_accumulation_steps).
    """
    _check_accumulation(gradient_accumulation_steps)
    if length_normalization not in LENGTH_NORMALIZATIONS:
        raise ValueError(f"unknown length_normalization {length_normalization!r}: "
                         f"choose one of {', '.join(LENGTH_NORMALIZATIONS)}")
    if length_normalization == "constant" and normalize_constant is None:
        raise ValueError("length_normalization='constant' needs normalize_constant (e.g. the generation budget)")
    if length_normalization == "token_mean" and total_response_tokens is None:
        raise ValueError("length_normalization='token_mean' needs total_response_tokens (the response tokens "
                         "of the whole optimizer step, all its microbatches)")
    per_token, loss_stats = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange, clip_low=clip_low,
        clip_high=clip_high, response_mask=response_mask)  # [B, T]
    if length_normalization == "token_mean":
        loss = token_mean_loss(per_token, response_mask, total_response_tokens)  # []
        unscaled = masked_mean_or_zero(per_token, response_mask)  # [] this microbatch's own token mean
    else:
        if length_normalization == "masked_mean":
            per_sequence = masked_mean(per_token, response_mask, dim=-1)  # [B]; empty response: NaN, as the course
        else:
            per_sequence = masked_normalize(per_token, response_mask, dim=-1,
                                            normalize_constant=normalize_constant)  # [B]
        unscaled = per_sequence.mean()  # []
        loss = unscaled / gradient_accumulation_steps  # []
    loss.backward()
    stats = {key: value.detach() for key, value in loss_stats.items()}
    stats["loss_unscaled"] = unscaled.detach()
    if "clipped" in stats:
        stats["clip_fraction"] = masked_mean_or_zero(stats["clipped"].float(), response_mask)
    return loss.detach(), stats
