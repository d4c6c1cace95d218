"""The maths CS336 Spring 2026 (Assignment 5, handout v26) adds, as pure tensor functions.

The 2026 handout splits the GRPO loss into three independent switches (and the 2025 maths of
`hw3lib.maths.grpo` stays as it is for the other courses). Variants implemented:

- **No KL term**, as in the handout: no penalty to a reference policy.
- **Advantages** (`group_normalized_advantages`), per group of `group_size` consecutive rollouts:
  `baseline` "mean" subtracts the group's mean reward, "none" subtracts nothing; then
  `advantage_normalizer` "std" divides by the group's standard deviation + `advantage_eps`
  (torch's unbiased std, as the course's reference), "none" divides by nothing, and "mean" divides
  by the group's mean reward + `advantage_eps` (MaxRL: with 0/1 rewards and p the group's success
  rate, weighting grad log pi by (r - p) / p follows grad log p, the log-likelihood of success,
  rather than grad p). Named presets: GRPO = mean/std,
  Dr. GRPO = mean/none, RFT (reward-weighted REINFORCE) = none/none, MaxRL = mean/mean. A group of
  identical rewards gets advantages of exactly 0 under every baseline="mean" variant.
- **Importance reweighting** (`policy_gradient_loss`), all per token `[B, T]`, r = exp(log p - log p_old):
  "none" -A log p (on-policy REINFORCE); "noclip" -r A (unclipped token ratio); "grpo"
  -min(r A, clip(r, 1 - eps, 1 + eps) A) (PPO/GRPO token-level clipping); "gspo" the same with one
  ratio per sequence, s = exp(mean over the response of (log p - log p_old)) (GSPO, Zheng et al.
  2025), each token carrying its sequence's value; "cispo" -sg(clip(r, 1 - eps, 1 + eps)) A log p
  (CISPO, MiniMax-M1 2025: the clipped ratio is a stop-gradient weight, so no token loses its
  gradient; symmetric here because the handout's API has one `cliprange`).
- **Aggregation** (`aggregate_loss`): "sequence" averages each sequence over its masked tokens,
  then over sequences (GRPO); "constant" sums all masked tokens and divides by a fixed constant
  (Dr. GRPO: every token weighs the same, whatever its response's length).

Where the handout is silent (documented where they occur): a sequence with no masked token has the mean
0/0 = NaN in "sequence" aggregation, as the course's formula (and `hw3lib.maths.sft.masked_mean`) gives;
a caller whose responses may be empty guards it where it assembles its loss; GSPO without a response mask
averages over every position.

Also here: `rollout_rewards` (the grader's scores as a tensor; the one function that calls out, to
`reward_fn`) and, for the handout's optional supplement, the DPO loss of preference pairs from summed
sequence log-probs (`dpo_loss`).

Advantages and the per-token loss come with detached statistics beside them; invalid option strings
raise a ValueError that names the argument and its allowed values.
"""

from __future__ import annotations

import torch

BASELINES: tuple[str, ...] = ("mean", "none")
ADVANTAGE_NORMALIZERS: tuple[str, ...] = ("std", "none", "mean")
IMPORTANCE_METHODS: tuple[str, ...] = ("none", "noclip", "grpo", "gspo", "cispo")
LOSS_NORMALIZATIONS: tuple[str, ...] = ("sequence", "constant")
# Which importance-reweighting methods need the sampling policy's log-probs, and which a clip range.
NEEDS_OLD_LOG_PROBS: tuple[str, ...] = ("noclip", "grpo", "gspo", "cispo")
NEEDS_CLIPRANGE: tuple[str, ...] = ("grpo", "gspo", "cispo")


def check_option(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise a ValueError naming the argument and its allowed values unless `value` is one of them."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported: choose one of {', '.join(map(repr, allowed))}")


def group_normalized_advantages(raw_rewards: torch.Tensor, group_size: int, baseline: str = "mean",
                                advantage_eps: float = 1e-6, advantage_normalizer: str = "std",
                                ) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages of `raw_rewards` `[N]`, normalized within consecutive groups of `group_size`: `[N] -> [N]`.

    `baseline` in ("mean", "none"), `advantage_normalizer` in ("std", "none", "mean"); see the module
    docstring. Stats: reward mean/std/min/max, advantage mean/std, and the fraction of groups whose
    rewards are all equal (they teach nothing under a mean baseline).
    """
    check_option("baseline", baseline, BASELINES)
    check_option("advantage_normalizer", advantage_normalizer, ADVANTAGE_NORMALIZERS)
    if raw_rewards.dim() != 1:
        raise ValueError(f"raw_rewards has shape {tuple(raw_rewards.shape)}: pass one reward per rollout, shape (N,)")
    n = raw_rewards.shape[0]
    if not isinstance(group_size, int) or group_size < 1 or n == 0 or n % group_size:
        raise ValueError(f"{n} rewards do not split into groups of group_size={group_size!r}: "
                         "pass group_size rewards per prompt, consecutively")
    if advantage_normalizer == "std" and group_size < 2:
        raise ValueError("advantage_normalizer='std' needs group_size >= 2 "
                         "(the unbiased std of one reward is undefined)")
    rewards = raw_rewards if raw_rewards.is_floating_point() else raw_rewards.float()
    grouped = rewards.reshape(-1, group_size)  # [G, group_size]
    mean = grouped.mean(dim=1, keepdim=True)  # [G, 1]
    centred = grouped - mean if baseline == "mean" else grouped  # [G, group_size]
    if advantage_normalizer == "std":
        advantages = centred / (grouped.std(dim=1, keepdim=True) + advantage_eps)  # [G, group_size]
    elif advantage_normalizer == "mean":
        advantages = centred / (mean + advantage_eps)  # [G, group_size]; MaxRL
    else:
        advantages = centred  # [G, group_size]
    advantages = advantages.reshape(n)  # [N]
    all_equal = (grouped == grouped[:, :1]).all(dim=1)  # [G]
    stats = {
        "reward_mean": rewards.mean().item(),
        "reward_std": rewards.std().item() if n > 1 else 0.0,
        "reward_min": rewards.min().item(),
        "reward_max": rewards.max().item(),
        "advantage_mean": advantages.mean().item(),
        "advantage_std": advantages.std().item() if n > 1 else 0.0,
        "frac_groups_all_equal": all_equal.float().mean().item(),
    }
    return advantages.detach(), stats


def _per_sequence(values: torch.Tensor, policy_log_probs: torch.Tensor) -> torch.Tensor:
    """A reward/advantage per sequence as a column `[B, 1]` (accepts `[B]` or `[B, 1]`)."""
    batch = policy_log_probs.shape[0]
    if values.shape not in ((batch,), (batch, 1)):
        raise ValueError(f"raw_rewards_or_advantages has shape {tuple(values.shape)}; expected ({batch},) or "
                         f"({batch}, 1), one value per sequence of policy_log_probs")
    return values.reshape(batch, 1).to(policy_log_probs.dtype)  # [B, 1]


def _fraction(flags: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Share of the kept entries where `flags` holds (0 when nothing is kept): `[B, T] x 2 -> []`."""
    kept = keep.sum()
    return torch.where(kept > 0, (flags & keep).sum() / kept.clamp(min=1), 0.0)  # []


def policy_gradient_loss(raw_rewards_or_advantages: torch.Tensor, policy_log_probs: torch.Tensor,
                         importance_reweighting_method: str = "none", old_log_probs: torch.Tensor | None = None,
                         cliprange: float | None = None, response_mask: torch.Tensor | None = None,
                         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token policy-gradient loss `[B, T]` for one of `IMPORTANCE_METHODS`, and detached stats.

    `raw_rewards_or_advantages` `[B]` or `[B, 1]`; `policy_log_probs`, `old_log_probs`,
    `response_mask` `[B, T]`. The formulas are in the module docstring. `old_log_probs` are the
    sampling policy's (a constant: no gradient reaches them). `response_mask` only changes GSPO's
    value (its mean log-ratio runs over the response) and says which tokens the statistics count
    (all when None).

    Stats (all detached): `clipped` `[B, T]` bool, the tokens whose clip binds (grpo/gspo: the
    clipped term is the smaller one, so the token gets no gradient; cispo: the weight was cut);
    `clip_fraction` and its components `clip_fraction_low` (ratio below 1 - eps) and
    `clip_fraction_high` (above 1 + eps), over the response tokens; `ratio_mean` (per token, or per
    sequence for gspo); `approx_kl`, the k3 estimate of KL(old || new) over the response, whenever
    `old_log_probs` is used.
    """
    check_option("importance_reweighting_method", importance_reweighting_method, IMPORTANCE_METHODS)
    method = importance_reweighting_method
    if method in NEEDS_OLD_LOG_PROBS and old_log_probs is None:
        raise ValueError(f"importance_reweighting_method={method!r} needs old_log_probs (the sampling policy's)")
    if method in NEEDS_CLIPRANGE and (cliprange is None or cliprange < 0):
        raise ValueError(f"importance_reweighting_method={method!r} needs cliprange >= 0, got {cliprange!r}")
    for name, other in (("old_log_probs", old_log_probs if method != "none" else None),
                        ("response_mask", response_mask)):
        if other is not None and other.shape != policy_log_probs.shape:
            raise ValueError(f"{name} has shape {tuple(other.shape)} but policy_log_probs has "
                             f"{tuple(policy_log_probs.shape)}: pass one entry per token")
    adv = _per_sequence(raw_rewards_or_advantages, policy_log_probs)  # [B, 1]
    keep = (torch.ones_like(policy_log_probs, dtype=torch.bool) if response_mask is None
            else response_mask.bool())  # [B, T]
    never = torch.zeros_like(keep)  # [B, T]
    if method == "none":
        loss = -adv * policy_log_probs  # [B, T]
        return loss, {"clipped": never, "clip_fraction": _fraction(never, keep),
                      "clip_fraction_low": _fraction(never, keep), "clip_fraction_high": _fraction(never, keep),
                      "ratio_mean": torch.ones((), dtype=policy_log_probs.dtype)}

    old = old_log_probs.detach().to(policy_log_probs.dtype)  # [B, T]
    # Padding may hold anything (even -inf): log-ratios outside the response are taken as 0 (ratio 1).
    log_ratio = torch.where(keep, policy_log_probs - old, 0.0)  # [B, T]
    if method == "gspo":
        length = keep.sum(dim=-1, keepdim=True).clamp(min=1)  # [B, 1]; an empty response: s = exp(0) = 1
        ratio = torch.exp(log_ratio.sum(dim=-1, keepdim=True) / length)  # [B, 1], geometric mean of token ratios
    else:
        ratio = torch.exp(log_ratio)  # [B, T]
    low, high = (1 - cliprange, 1 + cliprange) if cliprange is not None else (0.0, float("inf"))

    if method == "cispo":
        weight = torch.clamp(ratio.detach(), low, high)  # [B, T], stop-gradient weight
        loss = -weight * adv * policy_log_probs  # [B, T]
        below, above = ratio.detach() < low, ratio.detach() > high  # [B, T]
        clipped = below | above  # [B, T]
    else:
        unclipped = ratio * adv  # [B, T] or [B, 1]
        if method == "noclip":
            objective = unclipped  # [B, T]
            below = above = never
        else:
            clipped_term = torch.clamp(ratio, low, high) * adv  # [B, T] or [B, 1]
            objective = torch.minimum(unclipped, clipped_term)  # [B, T] or [B, 1]
            binds = (clipped_term < unclipped).detach()  # [B, T] or [B, 1]; then the token gets no gradient
            below = (binds & (adv < 0)).expand_as(keep)  # [B, T]: ratio < 1 - eps with A < 0
            above = (binds & (adv > 0)).expand_as(keep)  # [B, T]: ratio > 1 + eps with A > 0
        loss = -objective.expand_as(policy_log_probs)  # [B, T]; gspo: each token carries its sequence's loss
        clipped = below | above  # [B, T]
    token_ratio = torch.exp(log_ratio.detach())  # [B, T]
    stats = {
        "clipped": clipped,
        "clip_fraction": _fraction(clipped, keep),
        "clip_fraction_low": _fraction(below, keep),
        "clip_fraction_high": _fraction(above, keep),
        "ratio_mean": ratio.detach().mean(),
        # k3 = r - 1 - log r >= 0 per token (Schulman): KL(pi_old || pi) estimated on old's samples
        "approx_kl": masked_token_mean(token_ratio - 1 - log_ratio.detach(), keep),
    }
    return loss, stats


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over the entries `mask` keeps, 0 when it keeps none: `[B, T] x 2 -> []`."""
    keep = mask.bool()
    total = torch.where(keep, values, 0.0).sum()  # []
    return total / keep.sum().clamp(min=1)  # []


def aggregate_loss(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_normalization: str = "sequence",
                   normalization_constant: float | None = None) -> torch.Tensor:
    """One scalar from a per-token loss `[B, T]` and the mask `[B, T]` of the tokens it counts: `-> []`.

    "sequence": per sequence, the mean over its masked tokens; then the mean over the B sequences
    (a sequence without a masked token has the course's 0/0 = NaN: guard empty responses in the caller).
    "constant": the sum over all masked tokens divided by `normalization_constant`. Masked-out
    entries are dropped with `torch.where`, so NaN or inf there never reaches the value or gradient.
    """
    check_option("loss_normalization", loss_normalization, LOSS_NORMALIZATIONS)
    if mask.shape != per_token_loss.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but the loss has {tuple(per_token_loss.shape)}: "
                         "pass one mask entry per token")
    keep = mask.bool()  # [B, T]
    kept = torch.where(keep, per_token_loss, 0.0)  # [B, T]
    if loss_normalization == "constant":
        if normalization_constant is None or not normalization_constant > 0:
            raise ValueError(f"loss_normalization='constant' needs normalization_constant > 0, "
                             f"got {normalization_constant!r}")
        return kept.sum() / normalization_constant  # []
    per_sequence = kept.sum(dim=-1) / keep.sum(dim=-1)  # [B]; an empty sequence: 0 / 0 = NaN, as in the course
    return per_sequence.mean()  # []


def dpo_loss(chosen_log_prob: torch.Tensor, rejected_log_prob: torch.Tensor, ref_chosen_log_prob: torch.Tensor,
             ref_rejected_log_prob: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's loss of preference pairs from sequence log-probs (Rafailov et al., 2023): `[...] x 4 -> [...]`.

    `-log sigmoid(beta * ((log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))))`;
    log-probs of whole sequences (summed over tokens). Prompt terms, identical in both responses,
    cancel in the difference.
    """
    margin = (chosen_log_prob - ref_chosen_log_prob) - (rejected_log_prob - ref_rejected_log_prob)  # [...]
    return -torch.nn.functional.logsigmoid(beta * margin)  # [...]


def rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths) -> tuple[torch.Tensor, dict[str, float]]:
    """Score each rollout: `reward_fn(response, ground_truth)["reward"]` as a float32 tensor `[N]`, and stats.

    `reward_fn` returns a dict with "reward", "format_reward" and "answer_reward" (the course's
    graders). Stats: the mean of each of those keys the grader reports (`reward_mean`,
    `format_reward_mean`, `answer_reward_mean`), and the reward's std/min/max.
    """
    n = len(rollout_responses)
    if n != len(repeated_ground_truths):
        raise ValueError(f"rollout_responses has {n} entries but repeated_ground_truths has "
                         f"{len(repeated_ground_truths)}: repeat each ground truth once per response")
    if n == 0:
        raise ValueError("no rollout responses to score")
    scores = [reward_fn(response, truth) for response, truth in zip(rollout_responses, repeated_ground_truths)]
    raw_rewards = torch.tensor([float(score["reward"]) for score in scores], dtype=torch.float32)  # [N]
    stats = {"reward_std": raw_rewards.std().item() if n > 1 else 0.0,
             "reward_min": raw_rewards.min().item(), "reward_max": raw_rewards.max().item()}
    for key in ("reward", "format_reward", "answer_reward"):
        if all(key in score for score in scores):
            stats[f"{key}_mean"] = sum(float(score[key]) for score in scores) / n
    return raw_rewards, stats
